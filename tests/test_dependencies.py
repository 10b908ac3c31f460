"""`after` dependencies: blocked until every dependency completed, then ready from that moment."""

from jobctl.config import Settings
from jobctl.queue import Queue
from conftest import Clock


def test_a_job_becomes_ready_when_its_last_dependency_completes(tmp_path):
    clock = Clock()
    q = Queue.open(tmp_path / "q.db", Settings(), create=True, clock=clock)
    first = q.enqueue("build").id
    second = q.enqueue("build").id
    deploy = q.enqueue("deploy", after=[first, second]).id
    clock.t += 60
    later = q.enqueue("deploy").id  # enqueued after `deploy`, but ready before it

    for _ in range(2):
        job = q.claim(worker="w", types=["build"])
        clock.t += 10
        q.complete(job.id, token=job.token)
        if job.id == first:
            assert q.get(deploy).waiting_on == 1
            assert q.claim(worker="w", types=["deploy"]).id == later  # deploy still blocked
    ready = q.get(deploy)
    assert ready.waiting_on == 0
    assert ready.run_at == q.now()  # ready (and aging) from the moment the last one completed
    assert q.claim(worker="w", types=["deploy"]).id == deploy


def test_a_dependency_that_is_not_completed_keeps_the_job_blocked(tmp_path):
    q = Queue.open(tmp_path / "q.db", Settings(), create=True)
    dep = q.enqueue("build").id
    job = q.enqueue("deploy", after=[dep]).id
    q.cancel(dep)
    assert q.claim(worker="w") is None
    assert q.get(job).waiting_on == 1
