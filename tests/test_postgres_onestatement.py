"""The worker's hot path on PostgreSQL in one statement per step (jobctl/engines/pg_onestatement.py):
a claim, and a completion of a job this connection claimed, each one round trip that commits as
it runs; the same rows as the general path; and every case where the row no longer holds the
claim the completion was decided on goes the general way, changing nothing first.

Each test works in a schema of its own (the pg_url fixture), dropped afterwards."""

from __future__ import annotations

import pytest

from conftest import pg_sql
from jobctl.errors import StaleToken
from jobctl.queue import Queue


class CountingRaw:
    """A psycopg2 connection that counts the round trips (execute calls) made through it."""

    def __init__(self, raw):
        self.raw = raw
        self.sent: list[bytes] = []

    def cursor(self):
        outer, cur = self, self.raw.cursor()

        class Counted:
            def execute(self, query, params=None):
                outer.sent.append(query if isinstance(query, bytes) else str(query).encode())
                return cur.execute(query, params)

            def __getattr__(self, name):
                return getattr(cur, name)

        return Counted()

    def __getattr__(self, name):
        return getattr(self.raw, name)


@pytest.fixture
def pq(pg_url):
    queue = Queue.open(pg_url, create=True)
    yield queue
    queue.close()


def counting(q) -> CountingRaw:
    raw = CountingRaw(q.engine.conn.raw)
    q.engine.conn.raw = raw
    return raw


def history(url: str, job_id: int) -> list[tuple]:
    return pg_sql(url.split("?")[0], "SELECT from_status, to_status, actor, message FROM {s}.events "
                  "WHERE job_id = %s ORDER BY id".format(s=schema_of(url)), (job_id,))


def schema_of(url: str) -> str:
    from urllib.parse import unquote

    return unquote(url.split("search_path%3D")[1]).split("&")[0]


def rows(url: str, query: str, params=()) -> list[tuple]:
    return pg_sql(url.split("?")[0], query.format(s=schema_of(url)), params)


def test_the_workers_step_is_one_round_trip_once_warm(pq, pg_url):
    for i in range(4):
        pq.enqueue("t", {"i": i})
    job = pq.claim(worker="w")
    job = pq.complete_and_claim(job.id, token=job.token, worker="w")[1]  # the statement's first use, then its PREPARE
    job = pq.complete_and_claim(job.id, token=job.token, worker="w")[1]
    raw = counting(pq)
    done, nxt = pq.complete_and_claim(job.id, token=job.token, worker="w")
    assert len(raw.sent) == 1, raw.sent
    assert raw.sent[0].startswith(b"EXECUTE")
    assert done.status == "completed" and nxt is not None and nxt.status == "running"


def test_a_step_prepared_while_the_handler_ran_is_the_same_one_round_trip(pq):
    for i in range(4):
        pq.enqueue("t", {"i": i})
    job = pq.claim(worker="w")
    for _ in range(2):  # warm: the statement's first use, then its PREPARE
        job = pq.complete_and_claim(job.id, token=job.token, worker="w")[1]
    step = pq.prepare_complete_and_claim(job, actor="w", worker="w")
    raw = counting(pq)
    assert raw.sent == []  # nothing sent until it is called
    done, claimed = step()
    assert len(raw.sent) == 1 and raw.sent[0].startswith(b"EXECUTE"), raw.sent
    assert done[0].status == "completed" and claimed[0].status == "running"


def test_a_claim_alone_is_one_round_trip(pq):
    pq.enqueue("t", {})
    raw = counting(pq)
    job = pq.claim(worker="w")
    assert len(raw.sent) == 1, raw.sent
    assert job is not None and job.status == "running" and job.attempts == 1 and job.worker == "w"


def test_the_one_statement_path_writes_what_the_general_path_writes(pq, pg_url):
    """The same jobs through both paths (the general one forced by forgetting the claims): the
    same job rows, events, runs and counts, but for times and tokens."""
    ids = [pq.enqueue("t", {"i": i}).id for i in range(4)]
    a = pq.claim(worker="w")
    a_done, b = pq.complete_and_claim(a.id, token=a.token, worker="w", result={"r": 1})  # one statement
    pq.engine._claims.clear()
    b_done, c = pq.complete_and_claim(b.id, token=b.token, worker="w", result={"r": 1})  # the general path
    assert [a.id, b.id, c.id] == ids[:3]
    assert a_done.status == b_done.status == "completed" and a_done.result == b_done.result == '{"r":1}'
    assert a_done.finished_at is not None and a_done.updated_at == a_done.finished_at and a_done.token is None
    cols = ("status, attempts, worker, token IS NULL, lease_expires_at IS NULL, heartbeat_at IS NULL, result, "
            "progress, finished_at = updated_at, error")
    (ra,), (rb,) = (rows(pg_url, f"SELECT {cols} FROM {{s}}.jobs WHERE id = %s", (i,)) for i in (a.id, b.id))
    assert ra == rb
    assert [h[:3] for h in history(pg_url, a.id)] == [h[:3] for h in history(pg_url, b.id)]
    assert history(pg_url, a.id)[1:] == [("pending", "running", "w", "run 1 of 3"),
                                          ("running", "completed", "w", "completed")]
    assert history(pg_url, b.id) == history(pg_url, a.id)
    assert history(pg_url, c.id)[-1] == ("pending", "running", "w", "run 1 of 3")
    runs = rows(pg_url, "SELECT job_id, queue, type, worker, outcome, ended_at >= started_at FROM {s}.runs "
                        "ORDER BY job_id")
    assert runs == [(a.id, "default", "t", "w", "completed", True), (b.id, "default", "t", "w", "completed", True)]
    # c is running under its token, and the counts that stats reads match the rows
    assert pq.engine.get_job(c.id).token == c.token
    states = dict(rows(pg_url, "SELECT status, count(*) FROM {s}.jobs GROUP BY status"))
    assert states == {"completed": 2, "running": 1, "pending": 1}
    counted = dict(rows(pg_url, "SELECT state, sum(n)::int FROM (SELECT state, n FROM {s}.job_counts UNION ALL "
                                "SELECT state, n FROM {s}.job_count_changes) c GROUP BY state HAVING sum(n) <> 0"))
    assert counted == states


def test_a_stale_claim_is_refused_and_claims_nothing(pq, pg_url):
    """The lease was recovered and the job claimed again by another worker: the old token's
    completion is refused (exit 3), and nothing else happens in that step, the claim included."""
    pq.enqueue("t", {})
    spare = pq.enqueue("t", {"spare": 1})
    a = pq.claim(worker="w")
    rows(pg_url, "UPDATE {s}.jobs SET status = 'pending', token = NULL, worker = NULL WHERE id = %s RETURNING id",
         (a.id,))
    with Queue.open(pg_url) as other:
        again = other.claim(worker="other")
        assert again.id == a.id and again.token != a.token
        with pytest.raises(StaleToken):
            pq.complete_and_claim(a.id, token=a.token, worker="w")
        assert other.engine.get_job(spare.id).status == "pending"  # the step claimed nothing
        assert other.engine.get_job(a.id).token == again.token


def test_a_job_enqueued_after_the_running_one_is_released_by_its_completion(pq, pg_url):
    """Waiting on the running job (enqueued after its claim) takes the general path, which
    unblocks the dependent in the same transaction."""
    first = pq.enqueue("t", {})
    a = pq.claim(worker="w")
    assert a.id == first.id
    child = pq.enqueue("t", {"child": 1}, after=[a.id])
    assert pq.engine.get_job(child.id).waiting_on == 1
    done, nxt = pq.complete_and_claim(a.id, token=a.token, worker="w")
    assert done.status == "completed" and nxt is not None and nxt.id == child.id


def test_a_claim_returns_the_jobs_it_waits_on(pq):
    parent = pq.enqueue("t", {})
    p = pq.claim(worker="w")
    child = pq.enqueue("t", {}, after=[parent.id])
    _, c = pq.complete_and_claim(p.id, token=p.token, worker="w")
    assert c.id == child.id and c.after == [parent.id]


def test_a_damaged_job_is_buried_and_the_next_one_claimed(pq, pg_url):
    bad = pq.enqueue("t", {"x": 1})
    good = pq.enqueue("t", {"x": 2})
    rows(pg_url, "UPDATE {s}.jobs SET payload = '{{\"x\": 3}}' WHERE id = %s RETURNING id", (bad.id,))
    job = pq.claim(worker="w")
    assert job is not None and job.id == good.id
    buried = pq.engine.get_job(bad.id)
    assert buried.status == "buried" and buried.attempts == 0 and "payload" in buried.error


def test_a_claim_under_limits_or_by_queues_in_order_takes_the_general_path(pg_url):
    from conftest import types_settings

    settings = types_settings(t={"concurrency_limit": 1})
    with Queue.open(pg_url, create=True, settings=settings) as q:
        q.enqueue("t", {})
        q.enqueue("t", {}, queue="b")
        raw = counting(q)
        job = q.claim(worker="w")
        assert job is not None and len(raw.sent) > 1  # the admission's turn and count
        assert q.claim(worker="w") is None  # the limit holds
    with Queue.open(pg_url) as q:
        raw = counting(q)
        job = q.claim(worker="w", queues=["a", "b"])
        assert job is not None and job.queue == "b" and len(raw.sent) > 1


def test_a_step_interrupted_by_a_lost_connection_is_not_lost(pq, pg_url, pg_base):
    """The server ends the worker's session while its handler runs: the next step meets a dead
    connection, reconnects, and completes the job once (and claims the next one)."""
    pq.enqueue("t", {})
    nxt_id = pq.enqueue("t", {}).id
    a = pq.claim(worker="w")
    pid = pq.engine.conn.raw.get_backend_pid()
    pg_sql(pg_base, "SELECT pg_terminate_backend(%s)", (pid,))
    reconnected = []
    pq.engine.on_reconnect = reconnected.append
    done, nxt = pq.complete_and_claim(a.id, token=a.token, worker="w")  # looked, found not made: made anew
    assert reconnected and done.status == "completed" and nxt is not None and nxt.id == nxt_id
    assert [h[1] for h in history(pg_url, a.id)] == ["pending", "running", "completed"]


def test_a_claim_interrupted_by_a_lost_connection_is_made_once(pq, pg_url, pg_base):
    job_id = pq.enqueue("t", {}).id
    pg_sql(pg_base, "SELECT pg_terminate_backend(%s)", (pq.engine.conn.raw.get_backend_pid(),))
    job = pq.claim(worker="w")
    assert job is not None and job.id == job_id and job.attempts == 1
    assert [h[1] for h in history(pg_url, job_id)] == ["pending", "running"]


def test_a_step_made_just_before_its_connection_was_lost_is_not_made_twice(pq, pg_url, pg_base, monkeypatch):
    """The statement commits, then the answer is lost with the connection: the engine looks on a
    new connection, finds the step made (the new claim's token is there), and says "may or may
    not" (exit 8) rather than making it again; the job is completed once, the next one claimed once."""
    import psycopg2

    from jobctl.engines import pg_driver
    from jobctl.errors import ConnectionLost

    pq.enqueue("t", {})
    nxt_id = pq.enqueue("t", {}).id
    a = pq.claim(worker="w")
    real = pg_driver.Connection.run_alone

    def committed_then_lost(self, sql, params):
        real(self, sql, params)  # made and committed on the server
        pg_sql(pg_base, "SELECT pg_terminate_backend(%s)", (self.raw.get_backend_pid(),))
        self.raw.close()
        raise psycopg2.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(pg_driver.Connection, "run_alone", committed_then_lost)
    with pytest.raises(ConnectionLost, match="may or may not"):
        pq.complete_and_claim(a.id, token=a.token, worker="w")
    monkeypatch.setattr(pg_driver.Connection, "run_alone", real)
    assert [h[1] for h in history(pg_url, a.id)] == ["pending", "running", "completed"]
    assert [h[1] for h in history(pg_url, nxt_id)] == ["pending", "running"]
    assert rows(pg_url, "SELECT count(*) FROM {s}.runs") == [(1,)]


def test_an_injected_clock_runs_the_same_one_statement_step_at_its_time(pg_url):
    """A test's clock is a parameter of the statements production runs (COALESCE(?, the server's
    clock)), not a path of its own: the step is still one round trip, at the clock's time."""
    from conftest import Clock

    t0 = 1_900_000_000.0
    clock = Clock(t0)
    q = Queue.open(pg_url, create=True, clock=clock)
    try:
        for i in range(4):
            q.enqueue("t", {"i": i})
        raw = counting(q)
        job = q.claim(worker="w")
        assert len(raw.sent) == 1 and job.claimed_at == int(t0 * 1000)
        clock.t = t0 + 5
        raw.sent.clear()
        done, nxt = q.complete_and_claim(job.id, token=job.token, worker="w")
        assert len(raw.sent) == 1, raw.sent
        assert done.finished_at == nxt.claimed_at == int((t0 + 5) * 1000)
        assert rows(pg_url, "SELECT finished_at, updated_at FROM {s}.jobs WHERE id = %s", (job.id,)) == [
            (int((t0 + 5) * 1000),) * 2]
        assert rows(pg_url, "SELECT started_at, ended_at FROM {s}.runs WHERE job_id = %s", (job.id,)) == [
            (int(t0 * 1000), int((t0 + 5) * 1000))]
        clock.t = t0 + 9
        raw.sent.clear()
        assert q.engine.now() == int((t0 + 9) * 1000)  # (the views' clock: the same one)
    finally:
        q.close()
