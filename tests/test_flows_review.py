"""A review of flows and reactions for jobs lost, doubled or stuck without a word: each test here
failed before the fix it names."""

from __future__ import annotations

import pytest

from jobctl.config import Settings, apply_config
from jobctl.errors import ConfigError


def _types(**reactions: dict) -> dict:
    return {"types": {name: dict(keys) for name, keys in reactions.items()}}


@pytest.mark.parametrize("graph", [
    {"a": {"on_completed": "b"}, "b": {"on_completed": "a"}},
    {"a": {"on_buried": "b"}, "b": {"on_completed": "c"}, "c": {"on_cancelled": "a"}},
])
def test_types_that_react_to_each_other_in_a_loop_are_refused(graph):
    # a completes -> b is enqueued -> b completes -> a is enqueued -> ... for ever, each payload
    # holding the one before it: the loop the rule "a type may not react to itself" is there to stop.
    with pytest.raises(ConfigError, match=r"react to each other in a loop: a -> b -> .*a"):
        apply_config(Settings(), _types(**graph), "test")


def test_reactions_that_branch_and_meet_again_are_not_a_loop():
    settings = Settings()
    apply_config(settings, _types(a={"on_buried": "alert", "on_completed": "b"}, b={"on_buried": "alert"},
                                  alert={"on_buried": "page"}), "test")
    assert settings.types["a"].on_completed == "b"


def test_a_reaction_loop_is_exit_2_in_one_line(cli, tmp_path):
    (tmp_path / "jobctl.toml").write_text('[types.a]\non_completed = "b"\n[types.b]\non_completed = "a"\n')
    r = cli("enqueue", "a")
    assert r.exit_code == 2, r.output
    r.one_error_line()
    assert "a -> b -> a" in r.stderr and r.stdout == ""


# -- waiting for a job that can never finish ------------------------------------------------------


@pytest.fixture
def on_any(any_db):
    from conftest import on_db, run_inproc

    return on_db(run_inproc, any_db)


def _enq(cli, *args) -> int:
    r = cli("enqueue", *args)
    assert r.exit_code == 0, r.output
    return int(r.stdout.split()[0])


@pytest.mark.parametrize("gone", ["cancelled", "cancelled upstream"])
def test_wait_on_a_job_blocked_by_a_cancelled_one_says_so_at_once(on_any, gone):
    # `wait` (and `enqueue --after ... --wait`) without --timeout waited for ever, without a word,
    # on a job that waits on a cancelled job: it can never run.
    parent = _enq(on_any, "step")
    middle = _enq(on_any, "step", "--after", parent) if gone == "cancelled upstream" else parent
    child = _enq(on_any, "step", "--after", middle)
    assert on_any("cancel", parent).exit_code == 0
    r = on_any("wait", child, "--timeout", "20s")
    assert r.exit_code == 4, r.output
    r.one_error_line()
    assert f"job {child}" in r.stderr and f"job {parent}" in r.stderr and "never" in r.stderr
    assert r.stdout == f"{child} pending\n", "a job that can never run is printed as it is, like the others"
    r = on_any("enqueue", "step", "--after", middle, "--wait", "--wait-timeout", "20s")
    assert r.exit_code == 4, r.output
    r.one_error_line()


def test_wait_on_a_job_blocked_by_a_buried_one_keeps_waiting(on_any):
    # a buried dependency may be retried: the wait goes on (here until its timeout, exit 5)
    parent = _enq(on_any, "step", "--max-attempts", "1")
    child = _enq(on_any, "step", "--after", parent)
    r = on_any("claim", "--json")
    assert r.exit_code == 0, r.output
    import json

    assert on_any("fail", parent, "--token", json.loads(r.stdout)["token"], "--error", "x").exit_code == 0
    r = on_any("wait", child, "--timeout", "0.3s")
    assert r.exit_code == 5, r.output


def test_wait_on_a_job_whose_dependency_was_purged_before_it_completed_says_so(any_db):
    import time

    from jobctl.queue import Queue
    from jobctl.waiting import wait_finished
    from jobctl.errors import WaitTimedOut

    with Queue.open(any_db, create=True) as q:
        done, other, dropped = (q.enqueue("step").id for _ in range(3))
        child = q.enqueue("step", after=[done, other]).id
        job = q.claim(types=["step"])
        assert job is not None and job.id == done
        q.complete(done, token=job.token)
        time.sleep(0.01)
        q.purge(completed_older_than="0s")  # a completed dependency purged: not a reason to give up
        with pytest.raises(WaitTimedOut):
            wait_finished(q, [child], timeout=0.2)
        lone = q.enqueue("step", after=[dropped]).id
        q.cancel(dropped)
        time.sleep(0.01)
        q.purge(cancelled_older_than="0s")
        jobs, stuck = wait_finished(q, [lone], timeout=5)
        assert [j.status for j in jobs] == ["pending"]
        assert stuck[lone].startswith(f"job {lone} can never run: it waits on job {dropped}, which was deleted "
                                      "before it completed")


# -- enqueue after a job that will never complete ---------------------------------------------------


def test_enqueue_after_a_cancelled_job_is_refused(on_any, tmp_path):
    # It was enqueued, exit 0, and stayed blocked for ever: nothing said so unless someone ran show.
    parent = _enq(on_any, "step")
    assert on_any("cancel", parent).exit_code == 0
    r = on_any("enqueue", "step", "--after", parent)
    assert r.exit_code == 4, r.output
    r.one_error_line()
    assert f"job {parent}" in r.stderr and "cancelled" in r.stderr and "nothing was enqueued" in r.stderr
    lines = tmp_path / "chain.ndjson"
    lines.write_text(f'{{"type": "step"}}\n{{"type": "step", "after": [{parent}]}}\n')
    r = on_any("enqueue", "--batch", str(lines))
    assert r.exit_code == 4, r.output
    assert "line 2" in r.stderr
    assert on_any("list", "--json", "--limit", "0").stdout.count("\n") == 1  # all or nothing


def test_cancel_with_dependents_takes_along_a_job_enqueued_after_a_dependent_meanwhile(pg_url):
    # PostgreSQL, READ COMMITTED: the dependents were read by one statement whose snapshot was taken
    # before an enqueue after one of them committed (that enqueue held the dependent's row): the new
    # job was left blocked for ever on a cancelled job.
    import threading
    import time

    from jobctl.queue import Queue

    with Queue.open(pg_url, create=True) as q, Queue.open(pg_url) as slow:
        root = q.enqueue("step").id
        dependent = q.enqueue("step", after=[root]).id
        plain_event = slow.engine._event

        def late_event(c, job_id, now, *args, **kw):
            plain_event(c, job_id, now, *args, **kw)
            time.sleep(1.0)  # inside the enqueue's transaction, the dependent's row locked

        slow.engine._event = late_event  # type: ignore[method-assign]
        added: list[int] = []
        t = threading.Thread(target=lambda: added.append(slow.enqueue("step", after=[dependent]).id))
        t.start()
        time.sleep(0.4)
        q.cancel_with_dependents(root)
        t.join()
        assert [j.status for j in q.get_many([root, dependent, *added])] == ["cancelled"] * 3


def test_reschedule_of_a_blocked_job_does_not_say_it_runs_now(tmp_path):
    from jobctl.queue import Queue

    with Queue.open(tmp_path / "q.db", create=True) as q:
        parent = q.enqueue("step").id
        child = q.enqueue("step", after=[parent]).id
        q.reschedule(child, now=True)
        message = q.events(child)[-1].message
        assert message == "rescheduled: run now, once the jobs it waits on complete", message
        assert q.claim(types=["step"]).id == parent  # still blocked


# -- doctor names the blocked jobs that can never run ----------------------------------------------


def test_doctor_names_blocked_jobs_that_can_never_run(on_any, tmp_path):
    """A job waits on one that was cancelled (without --with-dependents), another on a buried one
    that was then purged: nothing can make either run, and doctor says so (exit 9). A job waiting
    on one of those, or on a buried job (which may be retried), is not named."""
    import json

    (tmp_path / "jobctl.toml").write_text('[types.t]\ncommand = ["true"]\n')
    cancelled = _enq(on_any, "t")
    purged = _enq(on_any, "t")
    buried = _enq(on_any, "t")
    first = _enq(on_any, "t", "--after", str(cancelled))
    second = _enq(on_any, "t", "--after", str(purged))
    _enq(on_any, "t", "--after", str(buried))
    _enq(on_any, "t", "--after", str(first))  # waits on a stuck job: it runs once that one is dealt with
    r = on_any("doctor", "--json")
    assert r.exit_code == 0, r.output
    assert on_any("cancel", str(cancelled)).exit_code == 0
    def bury(job):
        claimed = json.loads(on_any("claim", "--json").stdout)
        assert claimed["id"] == job
        assert on_any("fail", str(job), "--token", claimed["token"], "--bury", "--error", "gone").exit_code == 0

    bury(purged)
    assert on_any("purge", "--buried-older-than", "0s").exit_code == 0
    bury(buried)  # still there: `retry` can make the job waiting on it run
    r = on_any("doctor", "--json")
    assert r.exit_code == 9, r.output
    report = json.loads(r.stdout)
    check = next(c for c in report["checks"] if c["check"] == "blocked jobs")
    assert not check["ok"]
    assert report["never_runnable"] == [{"id": first, "waits_on": cancelled, "why": "was cancelled"},
                                            {"id": second, "waits_on": purged, "why": "was deleted before it completed"}]
    assert f"job {first} waits on job {cancelled}, which was cancelled" in check["detail"]
    assert f"jobctl cancel {first} --with-dependents" in check["detail"]
