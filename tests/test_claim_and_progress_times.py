"""A requeue ends a claim: a pending job shows no claim time and no worker, whichever way it went
back (fail with runs left, recover, release on shutdown, retry). And `show` says when a job's
progress last changed (`progress_at` in --json): a report that repeats the last one does not count
as a change, one that goes backwards does (it stays allowed). Both engines."""

import json
import time

from conftest import run_inproc
from jobctl.queue import Queue


def show(db, job_id) -> dict:
    r = run_inproc("show", job_id, "--json", db=db)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def assert_unclaimed(db, job_id):
    job = show(db, job_id)
    assert job["status"] == "pending"
    assert (job["claimed_at"], job["worker"], job["lease_expires_at"], job["token"]) == (None, None, None, None), job
    human = run_inproc("show", job_id, db=db).stdout
    fields = [line.strip("│ ") for line in human.splitlines()]
    assert not [f for f in fields if f.startswith(("claimed ", "lease until ", "worker "))], human


def test_every_requeue_clears_the_claims_worker_and_time(any_db):
    db = any_db
    with Queue.open(db, create=True) as q:
        failed, recovered, released, retried = (q.enqueue("t", max_attempts=5).id for _ in range(4))
        job = q.claim(worker="w1", types=["t"])
        assert job.id == failed and q.get(failed).claimed_at is not None
        q.fail(failed, token=job.token, error="boom", retry_in=3600)  # runs left: pending again
        q.claim(worker="w2", lease="1s")
        job = q.claim(worker="w3")
        q.release(released, token=job.token)
        job = q.claim(worker="w4")
        assert job.id == retried
        q.fail(retried, token=job.token, error="boom", bury=True)
        assert q.get(retried).claimed_at is not None  # buried: its last run's start is kept
        q.retry(retried)
        time.sleep(1.2)
        assert [(j.id, a) for j, a in q.recover()] == [(recovered, "requeued")]
    for job_id in (failed, recovered, released, retried):
        assert_unclaimed(db, job_id)


def test_show_says_when_progress_last_changed(any_db):
    db = any_db
    with Queue.open(db, create=True) as q:
        job_id = q.enqueue("t").id
        claim = q.claim(worker="w")
        assert q.get(job_id).progress_at is None
        q.progress(job_id, token=claim.token, message="page 4", percent=40)
        first = show(db, job_id)
        assert first["progress"] == {"message": "page 4", "percent": 40} and first["progress_at"] is not None
        time.sleep(0.05)
        q.progress(job_id, token=claim.token, message="page 4", percent=40)  # the same report again
        assert show(db, job_id)["progress_at"] == first["progress_at"]  # no change since
        q.progress(job_id, token=claim.token, message="page 3", percent=30)  # backwards: accepted, a change
        moved = show(db, job_id)
        assert moved["progress"]["percent"] == 30 and moved["progress_at"] > first["progress_at"]
        human = run_inproc("show", job_id, db=db).stdout
        assert "30% page 3 · changed " in human and " ago" in human
        q.release(job_id, token=claim.token)
        q.claim(worker="w")  # a new run starts without progress
        again = show(db, job_id)
        assert again["progress"] is None and again["progress_at"] is None
