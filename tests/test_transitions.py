"""SPEC §3: every allowed transition, a refusal from every state (exit 4, nothing changed), and
fencing tokens: a report carrying the token of an older claim is refused.

States are reached through the queue core (fast, in-process); the transitions under test go
through the real CLI, as scripts meet them.
"""

import itertools
import json
import time

import pytest

from jobctl.errors import InvalidState, StaleToken
from jobctl.queue import Queue
from conftest import Clock, snapshot


@pytest.fixture
def q(db):
    queue = Queue.open(db, create=True)
    yield queue
    queue.close()


_types = itertools.count()


def job_in(q, status, **enqueue_options):
    """A fresh job brought to `status`; returns (job id, token of its latest claim)."""
    type = f"t{next(_types)}"
    job_id = q.enqueue(type, {"n": status}, **enqueue_options).id
    if status == "pending":
        return job_id, None
    job = q.claim(worker="w1", types=[type])
    assert job.id == job_id
    if status == "running":
        return job_id, job.token
    if status == "cancel_requested":
        q.cancel(job_id)
    elif status == "completed":
        q.complete(job_id, token=job.token)
    elif status == "buried":
        q.fail(job_id, token=job.token, bury=True)
    elif status == "cancelled":
        q.cancel(job_id, token=job.token)
    assert q.get(job_id).status == status
    return job_id, job.token


def show(cli, job_id):
    r = cli("show", job_id, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def ok(r):
    assert r.exit_code == 0, r.output
    return r


# -- allowed transitions ------------------------------------------------------------------------


def test_enqueue_makes_a_pending_job(cli):
    job_id = int(ok(cli("enqueue", "t")).stdout)
    job = show(cli, job_id)
    assert job["status"] == "pending" and job["attempts"] == 0
    assert [(e["from"], e["to"]) for e in job["events"]] == [(None, "pending")]


def test_pending_to_running_by_claim(cli, q):
    job_id, _ = job_in(q, "pending")
    before = time.time()
    job = json.loads(ok(cli("claim", "--worker", "w9", "--lease", "90s")).stdout)
    assert job["id"] == job_id and job["status"] == "running"
    assert job["attempts"] == 1 and job["attempt"] == 1 and job["worker"] == "w9" and job["token"]
    shown = show(cli, job_id)
    assert shown["token"] == job["token"] and shown["lease_expires_at"] is not None
    lease = q.get(job_id).lease_expires_at / 1000
    assert before + 89 <= lease <= time.time() + 91
    # a second claim hands out a new token
    q.release(job_id, token=job["token"])
    again = json.loads(ok(cli("claim")).stdout)
    assert again["id"] == job_id and again["token"] != job["token"]


def test_pending_to_cancelled(cli, q):
    job_id, _ = job_in(q, "pending")
    assert ok(cli("cancel", job_id, "--reason", "not needed")).stdout == f"{job_id} cancelled\n"
    job = show(cli, job_id)
    assert job["status"] == "cancelled" and job["finished_at"] is not None
    assert "not needed" in job["events"][-1]["message"]


def test_running_to_completed(cli, q):
    job_id, token = job_in(q, "running")
    ok(cli("complete", job_id, "--token", token, "--result", '{"sent": 3}'))
    job = show(cli, job_id)
    assert job["status"] == "completed" and job["result"] == {"sent": 3}
    assert job["token"] is None and job["worker"] is None and job["finished_at"] is not None


def test_running_to_completed_without_token(cli, q):
    """An operator may complete by hand; the token is only checked when given."""
    job_id, _ = job_in(q, "running")
    ok(cli("complete", job_id))
    assert show(cli, job_id)["status"] == "completed"


def test_running_to_pending_by_fail_with_runs_left(cli, q):
    job_id, token = job_in(q, "running")
    before = time.time()
    r = ok(cli("fail", job_id, "--token", token, "--error", "smtp timeout"))
    assert r.stdout.startswith("pending, retry at ")
    job = q.get(job_id)
    assert job.status == "pending" and job.error == "smtp timeout" and job.attempts == 1
    assert before + 60 - 1 <= job.run_at / 1000 <= time.time() + 60  # exponential after run 1: 60 s
    assert job.token is None and job.worker is None and job.finished_at is None


def test_running_to_pending_by_recover(cli, db):
    clock = Clock(time.time() - 3600)
    with Queue.open(db, create=True, clock=clock) as old:
        job_id = old.enqueue("t").id
        old.claim(worker="w1", lease="1m")  # an hour ago: long expired
    before = time.time()
    r = ok(cli("recover", "--json"))
    assert json.loads(r.stdout) == {"id": job_id, "action": "requeued"}
    with Queue.open(db) as q:
        job = q.get(job_id)
    assert job.status == "pending" and job.attempts == 1 and before - 1 <= job.run_at / 1000 <= time.time()
    assert job.token is None and "lost" in job.error


def test_running_to_pending_by_release_does_not_count_the_run(q):
    job_id, token = job_in(q, "running")
    job = q.release(job_id, token=token)
    assert job.status == "pending" and job.attempts == 0 and job.token is None
    assert q.events(job_id)[-1].message.startswith("released")


@pytest.mark.parametrize("how", ["no runs left", "--bury"])
def test_running_to_buried_by_fail(cli, q, how):
    if how == "--bury":
        job_id, token = job_in(q, "running")
        r = ok(cli("fail", job_id, "--token", token, "--bury", "--error", "bad input"))
    else:
        job_id, token = job_in(q, "running", max_attempts=1)
        r = ok(cli("fail", job_id, "--token", token, "--error", "bad input"))
    assert r.stdout == "buried\n"
    job = show(cli, job_id)
    assert job["status"] == "buried" and job["error"] == "bad input" and job["finished_at"] is not None


def test_fail_with_bury_and_retry_in_is_refused_and_changes_nothing(cli, q):
    """--retry-in has no meaning for a job that is buried: the two together are a usage error,
    not --retry-in silently dropped."""
    job_id, token = job_in(q, "running")
    r = cli("fail", job_id, "--token", token, "--bury", "--retry-in", "5m")
    assert r.exit_code == 2 and "--bury and --retry-in" in r.one_error_line(), r.output
    assert show(cli, job_id)["status"] == "running"


def test_running_to_buried_by_recover_with_no_runs_left(cli, db):
    with Queue.open(db, create=True, clock=Clock(time.time() - 3600)) as old:
        job_id = old.enqueue("t", max_attempts=1).id
        old.claim(worker="w1", lease="1m")
    r = ok(cli("recover", "--json"))
    assert json.loads(r.stdout) == {"id": job_id, "action": "buried"}
    job = show(cli, job_id)
    assert job["status"] == "buried" and "lost" in job["events"][-1]["message"]


def test_running_to_cancel_requested_and_again(cli, q):
    job_id, _ = job_in(q, "running")
    assert ok(cli("cancel", job_id)).stdout == f"{job_id} cancel_requested\n"
    before = snapshot(q.engine.url)
    # asked again: exit 0, nothing changes
    assert ok(cli("cancel", job_id)).stdout == f"{job_id} cancel_requested\n"
    assert snapshot(q.engine.url) == before


@pytest.mark.parametrize("start", ["running", "cancel_requested"])
def test_holder_confirms_cancellation(cli, q, start):
    job_id, token = job_in(q, start)
    assert ok(cli("cancel", job_id, "--token", token)).stdout == f"{job_id} cancelled\n"
    job = show(cli, job_id)
    assert job["status"] == "cancelled" and job["token"] is None and job["finished_at"] is not None


@pytest.mark.parametrize("status", ["completed", "cancelled"])
def test_holder_confirming_a_cancel_after_its_job_finished_is_told_it_finished(cli, q, db, status):
    """The claim's own token, after the run ended: refused (exit 4) for what is true, that the
    job has finished, not as a token of an older claim "recovered or claimed again"."""
    job_id, token = job_in(q, status)
    before = snapshot(db)
    r = cli("cancel", job_id, "--token", token)
    assert r.exit_code == 4, r.output
    line = r.one_error_line()
    assert f"job {job_id} is {status}" in line and "recovered" not in line, line
    assert snapshot(db) == before


def test_cancel_requested_to_completed(cli, q):
    job_id, token = job_in(q, "cancel_requested")
    ok(cli("complete", job_id, "--token", token))
    assert show(cli, job_id)["status"] == "completed"


def test_cancel_requested_to_buried_by_fail_even_with_runs_left(cli, q):
    job_id, token = job_in(q, "cancel_requested", max_attempts=5)
    assert ok(cli("fail", job_id, "--token", token, "--error", "stopped")).stdout == "buried\n"
    assert show(cli, job_id)["status"] == "buried"


def test_cancel_requested_to_cancelled_by_recover(cli, db):
    with Queue.open(db, create=True, clock=Clock(time.time() - 3600)) as old:
        job_id = old.enqueue("t", max_attempts=5).id
        old.claim(worker="w1", lease="1m")
        old.cancel(job_id)
    r = ok(cli("recover", "--json"))
    assert json.loads(r.stdout) == {"id": job_id, "action": "cancelled"}
    assert show(cli, job_id)["status"] == "cancelled"


@pytest.mark.parametrize("reset", [False, True])
def test_buried_to_pending_by_retry(cli, q, reset):
    job_id, _ = job_in(q, "buried")
    r = ok(cli("retry", job_id, *(["--reset-attempts"] if reset else [])))
    assert r.stdout == f"{job_id} pending\n"
    job = show(cli, job_id)
    assert job["status"] == "pending" and job["finished_at"] is None
    assert job["attempts"] == (0 if reset else 1)


def test_buried_to_pending_by_retry_buried(cli, q):
    ids = [job_in(q, "buried")[0] for _ in range(3)]
    other, _ = job_in(q, "pending")
    assert ok(cli("retry-buried", "--dry-run")).stdout == "3\n"
    assert all(q.get(i).status == "buried" for i in ids)
    assert ok(cli("retry-buried")).stdout == "3\n"
    assert all(q.get(i).status == "pending" for i in ids) and q.get(other).status == "pending"
    assert ok(cli("retry-buried")).stdout == "0\n"


def test_buried_to_cancelled(cli, q):
    job_id, _ = job_in(q, "buried")
    assert ok(cli("cancel", job_id)).stdout == f"{job_id} cancelled\n"
    job = show(cli, job_id)
    assert job["status"] == "cancelled" and job["error"] is not None  # the reason it was buried stays


def test_every_change_is_in_the_history(cli, q):
    job_id, token = job_in(q, "running", max_attempts=1)
    ok(cli("fail", job_id, "--token", token, "--error", "e"))
    ok(cli("retry", job_id, "--reset-attempts"))
    ok(cli("cancel", job_id, "--reason", "r"))
    events = show(cli, job_id)["events"]
    assert [(e["from"], e["to"]) for e in events] == [
        (None, "pending"), ("pending", "running"), ("running", "buried"), ("buried", "pending"),
        ("pending", "cancelled"),
    ]
    assert events[1]["actor"] == "w1"
    assert all(e["at"].endswith("Z") for e in events)


# -- refusals: exit 4, a message naming the state, nothing changed -----------------------------

REFUSED = {
    "pending": ["complete", "fail", "heartbeat", "progress", "retry"],
    "running": ["retry"],
    "cancel_requested": ["retry"],
    "completed": ["complete", "fail", "heartbeat", "progress", "cancel", "retry"],
    "buried": ["complete", "fail", "heartbeat", "progress", "retry-bury-twice"],
    "cancelled": ["complete", "fail", "heartbeat", "progress", "cancel", "retry"],
}


def _refusal_args(action, job_id, token):
    with_token = ["--token", token] if token else []
    return {
        "complete": ["complete", job_id, *with_token],
        "fail": ["fail", job_id, *with_token, "--error", "x"],
        "heartbeat": ["heartbeat", job_id, *with_token],
        "progress": ["progress", job_id, *with_token, "-m", "half", "--percent", "50"],
        "cancel": ["cancel", job_id],
        "retry": ["retry", job_id],
        "retry-bury-twice": ["fail", job_id, "--bury"],
    }[action]


@pytest.mark.parametrize("status,action", [(s, a) for s, actions in REFUSED.items() for a in actions])
def test_refused_from_every_state(cli, q, status, action):
    job_id, token = job_in(q, status)
    before = snapshot(q.engine.url)
    r = cli(*_refusal_args(action, job_id, token))
    assert r.exit_code == 4, r.output
    assert r.stdout == ""
    assert r.stderr.startswith("jobctl: error: ") and len(r.stderr.splitlines()) == 1, r.stderr
    assert f"is {status}" in r.stderr
    assert snapshot(q.engine.url) == before


def test_refused_through_the_core_too(q):
    job_id, token = job_in(q, "completed")
    for call in (lambda: q.complete(job_id), lambda: q.fail(job_id), lambda: q.cancel(job_id),
                 lambda: q.retry(job_id), lambda: q.heartbeat(job_id), lambda: q.progress(job_id, message="m")):
        with pytest.raises(InvalidState, match="is completed"):
            call()


def test_no_such_job_is_exit_3(cli, q):
    for args in (["complete", 999], ["fail", 999], ["cancel", 999], ["retry", 999], ["show", 999],
                 ["heartbeat", 999], ["progress", 999]):
        r = cli(*args)
        assert r.exit_code == 3, r.output
        assert len(r.stderr.splitlines()) == 1


def test_cancel_of_several_reports_each_and_acts_on_the_others(cli, q):
    a, _ = job_in(q, "pending")
    b, _ = job_in(q, "completed")
    c, _ = job_in(q, "pending")
    r = cli("cancel", a, b, c)
    assert r.exit_code == 4, r.output
    assert r.stdout == f"{a} cancelled\n{c} cancelled\n"
    assert f"job {b} is completed" in r.stderr


# -- fencing tokens -----------------------------------------------------------------------------


@pytest.fixture
def reclaimed(db):
    """A job claimed by w-old, lost (lease expired), recovered and claimed again by w-new."""
    clock = Clock(time.time() - 3600)
    with Queue.open(db, create=True, clock=clock) as old:
        job_id = old.enqueue("t").id
        stale = old.claim(worker="w-old", lease="1m").token
    with Queue.open(db) as q:
        assert [a for _, a in q.recover()] == ["requeued"]
        fresh = q.claim(worker="w-new").token
    return job_id, stale, fresh


@pytest.mark.parametrize("action", ["complete", "fail", "heartbeat", "progress", "cancel"])
def test_stale_token_is_refused(cli, db, reclaimed, action):
    job_id, stale, fresh = reclaimed
    before = snapshot(db)
    args = {
        "complete": ["complete", job_id, "--token", stale],
        "fail": ["fail", job_id, "--token", stale, "--error", "late"],
        "heartbeat": ["heartbeat", job_id, "--token", stale],
        "progress": ["progress", job_id, "--token", stale, "-m", "late"],
        "cancel": ["cancel", job_id, "--token", stale],
    }[action]
    r = cli(*args)
    assert r.exit_code == 4, r.output
    assert "token" in r.stderr and len(r.stderr.splitlines()) == 1
    assert snapshot(db) == before
    # the run that replaced it is untouched and its holder still reports fine
    ok(cli("heartbeat", job_id, "--token", fresh))
    ok(cli("complete", job_id, "--token", fresh))


def test_stale_token_refused_in_the_core(db, reclaimed):
    job_id, stale, _ = reclaimed
    with Queue.open(db) as q:
        with pytest.raises(StaleToken):
            q.complete(job_id, token=stale)
        with pytest.raises(StaleToken):
            q.release(job_id, token=stale)


def test_token_of_a_finished_claim_is_refused_after_retry(cli, q):
    """A job buried, retried and claimed again: the first claim's token is stale."""
    job_id, old = job_in(q, "buried")
    q.retry(job_id)
    new = q.claim(worker="w2").token
    assert new != old
    r = cli("complete", job_id, "--token", old)
    assert r.exit_code == 4, r.output
    assert q.get(job_id).status == "running"


def test_heartbeat_extends_the_lease(cli, q):
    job_id = q.enqueue("t").id
    token = q.claim(worker="w", lease="10s").token
    first = q.get(job_id).lease_expires_at
    before = time.time()
    ok(cli("heartbeat", job_id, "--token", token, "--extend", "5m"))
    lease = q.get(job_id).lease_expires_at / 1000
    assert lease > first / 1000 and before + 299 <= lease <= time.time() + 300
    ok(cli("heartbeat", job_id, "--token", token))  # default: the claim's lease length (10 s)
    assert q.get(job_id).lease_expires_at / 1000 <= time.time() + 10


def test_heartbeat_on_cancel_requested_exits_7_and_still_extends(cli, q):
    job_id, token = job_in(q, "cancel_requested")
    before = q.get(job_id).lease_expires_at
    time.sleep(0.01)
    r = cli("heartbeat", job_id, "--token", token)
    assert r.exit_code == 7, r.output
    assert len(r.stderr.splitlines()) == 1
    job = q.get(job_id)
    assert job.status == "cancel_requested" and job.lease_expires_at > before


def test_progress_replaces_both_fields(cli, q):
    job_id, token = job_in(q, "running")
    ok(cli("progress", job_id, "--token", token, "-m", "page 3", "--percent", "30"))
    assert show(cli, job_id)["progress"] == {"message": "page 3", "percent": 30}
    ok(cli("progress", job_id, "--token", token, "-m", "page 4"))
    assert show(cli, job_id)["progress"] == {"message": "page 4", "percent": None}
    r = cli("progress", job_id, "--token", token, "--percent", "101")
    assert r.exit_code == 2, r.output


def test_actor_is_the_worker_for_a_report_with_its_token_and_the_user_otherwise(cli, q):
    """SPEC §2: the actor is the worker id for a worker's change, the OS user for an operator's."""
    from jobctl.queue import operator_name

    a = q.enqueue("t").id
    token = json.loads(ok(cli("claim", "--worker", "box:42")).stdout)["token"]
    ok(cli("fail", a, "--token", token, "--retry-in", "0"))
    token = json.loads(ok(cli("claim", "--worker", "box:43")).stdout)["token"]
    ok(cli("complete", a, "--token", token))
    b = q.enqueue("t").id
    token = json.loads(ok(cli("claim", "--worker", "box:44")).stdout)["token"]
    ok(cli("cancel", b))
    ok(cli("cancel", b, "--token", token))
    c = q.enqueue("t").id
    ok(cli("claim", "--worker", "box:45"))
    ok(cli("complete", c))  # by hand, without the token: an operator's change
    actors = lambda job_id: [(e["to"], e["actor"]) for e in show(cli, job_id)["events"]]  # noqa: E731
    me = operator_name()
    assert actors(a) == [("pending", me), ("running", "box:42"), ("pending", "box:42"), ("running", "box:43"),
                         ("completed", "box:43")]
    assert actors(b) == [("pending", me), ("running", "box:44"), ("cancel_requested", me), ("cancelled", "box:44")]
    assert actors(c)[-1] == ("completed", me)
