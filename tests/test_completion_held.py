"""A completion of a job that this engine claimed, on SQLite (SQLEngine._complete_held): decided on
the job as it was claimed, written by one UPDATE that holds only where the row still holds that
claim (same id, running, same token, nobody waiting on it), without reading the row first; the
same rows as the general path; and every case where the row no longer holds that claim goes the
general way in the same transaction, which decides on the row as it is.

(PostgreSQL's one-statement step, built on the same decision, is tested in
test_postgres_onestatement.py.)"""

from __future__ import annotations

import sqlite3

import pytest

from conftest import count_rows, file_history
from jobctl.errors import StaleToken
from jobctl.queue import Queue


@pytest.fixture
def sq(tmp_path):
    queue = Queue.open(tmp_path / "jobs.db", create=True)
    yield queue
    queue.close()


def statements(q) -> list[str]:
    """The statements the queue's connection runs from now on (appended as they run)."""
    seen: list[str] = []
    q.engine.conn.set_trace_callback(lambda s: seen.append(" ".join(s.split())))
    return seen


def reads_the_job_row(seen: list[str]) -> bool:
    return any(s.startswith("SELECT * FROM jobs WHERE id") for s in seen)


def table(db, query: str, params=()) -> list[tuple]:
    file_history(db)
    conn = sqlite3.connect(db)
    try:
        found = conn.execute(query, params).fetchall()
        conn.commit()
        return found
    finally:
        conn.close()


def history(db, job_id: int) -> list[tuple]:
    return table(db, "SELECT from_status, to_status, actor, message FROM events WHERE job_id = ? ORDER BY id", (job_id,))


def test_the_completion_of_a_held_job_reads_no_row_and_writes_what_the_general_path_writes(sq):
    db = sq.engine.path
    ids = [sq.enqueue("t", {"i": i}).id for i in range(4)]
    a = sq.claim(worker="w")
    seen = statements(sq)
    a_done, b = sq.complete_and_claim(a.id, token=a.token, worker="w", result={"r": 1})
    assert not reads_the_job_row(seen), seen
    sq.engine._claims.clear()  # forgotten: the general path reads the row and decides on it
    del seen[:]
    b_done, c = sq.complete_and_claim(b.id, token=b.token, worker="w", result={"r": 1})
    assert reads_the_job_row(seen), seen
    assert [a.id, b.id, c.id] == ids[:3]
    assert a_done.status == b_done.status == "completed" and a_done.result == b_done.result == '{"r":1}'
    assert a_done.finished_at is not None and a_done.updated_at == a_done.finished_at and a_done.token is None
    cols = ("status, attempts, worker, token IS NULL, lease_expires_at IS NULL, heartbeat_at IS NULL, lease_ms, "
            "result, progress, finished_at = updated_at, error, lease_boot_ms, progress_at")
    ra, rb = (table(db, f"SELECT {cols} FROM jobs WHERE id = ?", (i,))[0] for i in (a.id, b.id))
    assert ra == rb
    times = dict.fromkeys(("id", "payload", "run_at", "created_at", "claimed_at", "updated_at", "finished_at"))
    assert a_done.to_dict() | times == b_done.to_dict() | times
    assert history(db, a.id)[1:] == [("pending", "running", "w", "run 1 of 3"), ("running", "completed", "w", "completed")]
    assert history(db, b.id) == history(db, a.id)
    runs = table(db, "SELECT job_id, queue, type, worker, outcome, ended_at >= started_at FROM runs ORDER BY job_id")
    assert runs == [(a.id, "default", "t", "w", "completed", 1), (b.id, "default", "t", "w", "completed", 1)]
    counted = dict(table(db, "SELECT state, n FROM job_counts WHERE n <> 0"))
    assert counted == dict(table(db, "SELECT status, count(*) FROM jobs GROUP BY status")) == \
        {"completed": 2, "running": 1, "pending": 1}


def test_a_completion_alone_of_a_held_job_reads_no_row(sq):
    sq.enqueue("t", {})
    a = sq.claim(worker="w")
    seen = statements(sq)
    done = sq.complete(a.id, token=a.token, actor="w")
    assert done.status == "completed" and not reads_the_job_row(seen)
    assert sq.get(a.id).status == "completed"


def test_only_a_decision_that_is_time_free_is_decided_ahead(sq):
    """The engine decides ahead, on the job as it claimed it, only a Decision whose time_free is
    set (Queue's completions); a plain decide, or a Decision without it, is decided in the
    transaction, on the row. The Decision is a value: it cannot be changed once made."""
    from jobctl.engines.base import Change, ClaimRequest, Decision

    sq.enqueue("t", {})
    a = sq.claim(worker="w")
    nows = []

    def complete(job, now):
        nows.append(now)
        return Change("completed", {"token": None}, message="completed", run="completed")

    complete.time_free = True  # (an attribute on a function is not a declaration: ignored)
    for decide, ahead in ((complete, []), (Decision(complete), []), (Decision(complete, time_free=True), [None])):
        nows.clear()
        sq.engine.prepare_update_and_claim(a.id, decide, ClaimRequest("w", "next"), "w")
        assert nows == ahead, decide  # (None: decided before any transaction read the time)
    with pytest.raises(AttributeError):
        Decision(complete).time_free = True  # type: ignore[misc]
    assert sq.get(a.id).status == "running"  # preparing touched nothing

@pytest.fixture(params=["sqlite", "postgres"])
def either(request, tmp_path):
    """A queue on each engine: the completion without a read is SQLite's, the one statement
    PostgreSQL's (test_postgres_onestatement.py); both keep what the general path keeps."""
    db = tmp_path / "jobs.db" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    queue = Queue.open(db, create=True)
    yield queue
    queue.close()


def test_a_completion_keeps_the_runs_output(either):
    from jobctl.engines.base import RunOutput

    either.enqueue("t", {})
    either.enqueue("t", {})
    a = either.claim(worker="w")
    either.complete_and_claim(a.id, token=a.token, worker="w", output=RunOutput(b"first\x00bytes", b"last", 3))
    log = either.engine.run_output(a.id)
    assert log is not None and bytes(log.head) == b"first\x00bytes" and bytes(log.tail) == b"last" and log.dropped == 3
    assert log.ended_at is not None


def test_a_cancellation_requested_meanwhile_is_decided_on_the_row_as_it_is(either):
    """The row no longer holds the claim as it was seen (cancel_requested): the guarded UPDATE (the
    one statement on PostgreSQL) changes nothing, and the general path completes it from
    cancel_requested, as it always did, writing its run once."""
    db = either.engine.url
    either.enqueue("t", {})
    second = either.enqueue("t", {})
    a = either.claim(worker="w")
    with Queue.open(db) as other:
        assert other.cancel(a.id).status == "cancel_requested"
    done, nxt = either.complete_and_claim(a.id, token=a.token, worker="w")
    assert done.status == "completed" and nxt is not None and nxt.id == second.id
    assert [(e.from_status, e.to_status) for e in either.events(a.id)][-2:] == [
        ("running", "cancel_requested"), ("cancel_requested", "completed")]
    assert count_rows(db, "runs") == 1


def test_a_stale_claim_is_refused_and_claims_nothing(sq):
    """The lease was recovered and the job claimed again by another worker: the old token's
    completion is refused (exit 3), and nothing else is written in that step, the claim included."""
    db = sq.engine.path
    sq.enqueue("t", {})
    spare = sq.enqueue("t", {"spare": 1})
    a = sq.claim(worker="w")
    table(db, "UPDATE jobs SET status = 'pending', token = NULL, worker = NULL WHERE id = ? RETURNING id", (a.id,))
    with Queue.open(db) as other:
        again = other.claim(worker="other")
        assert again.id == a.id and again.token != a.token
        with pytest.raises(StaleToken):
            sq.complete_and_claim(a.id, token=a.token, worker="w")
        assert other.get(spare.id).status == "pending"  # the step claimed nothing
        assert other.get(a.id).token == again.token and other.get(a.id).status == "running"
    assert table(db, "SELECT count(*) FROM runs") == [(0,)]


def test_a_job_enqueued_after_the_running_one_is_released_by_its_completion(sq):
    """Waiting on the running job (enqueued after its claim): the guarded UPDATE does not hold
    (somebody waits on it), and the general path unblocks the dependent in the same transaction."""
    first = sq.enqueue("t", {})
    a = sq.claim(worker="w")
    assert a.id == first.id
    child = sq.enqueue("t", {"child": 1}, after=[a.id])
    assert sq.get(child.id).waiting_on == 1
    done, nxt = sq.complete_and_claim(a.id, token=a.token, worker="w")
    assert done.status == "completed" and nxt is not None and nxt.id == child.id and nxt.after == [a.id]


def test_a_heartbeat_between_claim_and_completion_changes_nothing_of_the_decision(sq):
    """A heartbeat moves the lease of the row, not the claim: the completion still holds, and the
    job ends with no lease."""
    sq.enqueue("t", {})
    a = sq.claim(worker="w")
    sq.heartbeat(a.id, token=a.token, actor="w", extend="10m")
    seen = statements(sq)
    done = sq.complete(a.id, token=a.token, actor="w")
    assert not reads_the_job_row(seen)
    job = sq.get(done.id)
    assert job.status == "completed" and job.lease_expires_at is None and job.token is None
