"""The Engine contract (jobctl/engines/base.py), exercised directly, method by method, for every
engine. A second engine joins by adding one factory to ENGINES: it then has to pass every test here.

Each engine runs on a clock the test moves (`clock.t`, seconds), standing in for the database's
clock; the engine reads it once per transaction."""

import hashlib
import threading
import time

import pytest

from conftest import Clock
from jobctl.engines.base import Change, Check, ClaimRequest, Decision, NewJob
from jobctl.errors import InvalidState, NoSuchJob

T0 = 1_900_000_000.0
NOW = int(T0 * 1000)  # ms


def new(type="t", queue="default", payload="{}", priority=10, **kw):
    return NewJob(queue=queue, type=type, payload=payload, payload_hash=hashlib.sha256(payload.encode()).hexdigest(),
                  priority=priority, max_attempts=kw.pop("max_attempts", 3), backoff="exponential",
                  timeout_ms=kw.pop("timeout_ms", 60_000), **kw)


_tokens = iter(range(10**9))


def req(worker="w", token=None, **kw):
    return ClaimRequest(worker=worker, token=token or f"tok-{worker}-{next(_tokens)}", **kw)


def _sqlite(request, tmp_path, clock):
    from jobctl.engines.sqlite import SQLiteEngine

    return SQLiteEngine.open(tmp_path / "contract.db", create=True, busy_timeout=5.0, clock=clock)


def _postgres(request, tmp_path, clock):
    from jobctl.engines.postgres import PostgresEngine

    return PostgresEngine.open(request.getfixturevalue("pg_url"), create=True, busy_timeout=5.0, clock=clock)


ENGINES = {"sqlite": _sqlite, "postgres": _postgres}


@pytest.fixture(params=sorted(ENGINES))
def make(request, tmp_path):
    """make(clock) -> a new connection to the one database of this test."""
    opened = []

    def _make(clock=None):
        e = ENGINES[request.param](request, tmp_path, clock)
        opened.append(e)
        return e

    yield _make
    for e in opened:
        e.close()


@pytest.fixture
def clock():
    return Clock(T0)


@pytest.fixture
def engine(make, clock):
    return make(clock)


def at(clock, ms):
    """Move the test's clock to `ms` since the epoch."""
    clock.t = ms / 1000


def statuses(engine):
    return {j.id: j.status for j in engine.list_jobs(limit=1000)}


def set_to(status, **fields):
    return lambda job, now: Change(status, fields, run="completed" if status == "completed" else None)


# -- the clock ----------------------------------------------------------------------------------


def test_now_is_the_engines_clock_and_stamps_every_write(engine, clock):
    assert engine.now() == NOW
    engine.insert_jobs([new()], "a")
    at(clock, NOW + 7)
    seen = []
    job = engine.update_job(1, lambda j, now: seen.append(now) or Change("pending", {"priority": 1}, message="m"), "x")
    assert seen == [NOW + 7] and job.updated_at == NOW + 7 and job.created_at == NOW


def test_identity_location_and_url(engine):
    assert engine.location and engine.identity and engine.url
    if "://" in engine.location and "@" in engine.location:  # a URL with a user: never its password
        user = engine.location.split("://", 1)[1].split("@", 1)[0]
        assert ":" not in user or user.endswith(":***")


# -- insert_jobs --------------------------------------------------------------------------------


def test_insert_returns_ids_in_order_and_writes_the_enqueue_event(engine):
    done = engine.insert_jobs([new(payload='{"i":1}'), new(queue="q2"), new(type="u")], "alice")
    assert done == [(1, True), (2, True), (3, True)]
    job = engine.get_job(1)
    assert (job.status, job.attempts, job.payload, job.created_at, job.run_at) == ("pending", 0, '{"i":1}', NOW, NOW)
    events = engine.events(1)
    assert [(e.from_status, e.to_status, e.actor, e.at) for e in events] == [(None, "pending", "alice", NOW)]


def test_insert_of_no_jobs_is_nothing(engine):
    assert engine.insert_jobs([], "a") == []
    assert engine.list_jobs(limit=5) == []


def test_insert_run_at_from_delay_or_not_before(engine):
    engine.insert_jobs([new(delay_ms=5_000), new(not_before=NOW + 9_000), new(not_before=NOW - 9_000),
                        new(delay_ms=1_000, not_before=NOW + 500)], "a")
    assert [j.run_at for j in engine.get_jobs([1, 2, 3, 4])] == [NOW + 5_000, NOW + 9_000, NOW, NOW + 1_000]


def test_insert_reports_progress_inside_one_transaction(engine):
    calls = []
    engine.insert_jobs([new() for _ in range(2500)], "a", on_progress=lambda done, total: calls.append((done, total)))
    assert calls[-1] == (2500, 2500) and len(calls) >= 2
    assert len(engine.list_jobs(limit=5000)) == 2500


def test_insert_key_returns_the_existing_job_or_refuses(engine):
    assert engine.insert_jobs([new(idempotency_key="k", payload="[1]")], "a") == [(1, True)]
    assert engine.insert_jobs([new(idempotency_key="k", payload="[1]")], "a") == [(1, False)]
    with pytest.raises(InvalidState, match="job 1"):
        engine.insert_jobs([new(), new(idempotency_key="k", payload="[2]")], "a")
    with pytest.raises(InvalidState):
        engine.insert_jobs([new(type="other", idempotency_key="k", payload="[1]")], "a")
    assert list(statuses(engine)) == [1]  # the batch with a conflict inserted nothing


def test_insert_unique_returns_a_live_job_inserted_without_it(engine):
    """Every job is found, whichever path inserted it (the bulk one here: no job of it is unique)."""
    assert engine.insert_jobs([new(), new(), new(queue="other")], "a") == [(1, True), (2, True), (3, True)]
    assert engine.insert_jobs([new(unique=True), new(unique=True, queue="other")], "a") == [(1, False), (3, False)]
    assert engine.insert_jobs([new()], "a") == [(4, True)]


def test_insert_unique_returns_a_live_twin(engine):
    assert engine.insert_jobs([new(unique=True)], "a") == [(1, True)]
    assert engine.insert_jobs([new(unique=True)], "a") == [(1, False)]
    assert engine.insert_jobs([new(unique=True, queue="other")], "a") == [(2, True)]
    job = engine.claim(req(queues=["default"]))
    assert engine.insert_jobs([new(unique=True)], "a") == [(1, False)]
    engine.update_job(1, set_to("completed", token=None), "w")
    assert engine.insert_jobs([new(unique=True)], "a") == [(3, True)]
    assert job.id == 1


def test_insert_after_missing_raises_and_inserts_nothing(engine):
    engine.insert_jobs([new()], "a")
    with pytest.raises(NoSuchJob):
        engine.insert_jobs([new(), new(after=[1, 42])], "a")
    assert list(statuses(engine)) == [1]
    # The next id: 2 on SQLite; a server's sequence may have skipped the ids the failed insert drew.
    [(child, created)] = engine.insert_jobs([new(after=[1])], "a")
    assert created and child > 1
    assert engine.get_job(child).after == [1] and engine.get_job(child).waiting_on == 1
    assert engine.dependencies(child) == [(1, "pending")]
    assert engine.dependencies(1) == []


# -- claim --------------------------------------------------------------------------------------


def test_claim_takes_the_best_ready_job(engine, clock):
    at(clock, NOW - 5)
    engine.insert_jobs([new(priority=20)], "a")  # 1: enqueued earlier, so earlier run_at
    at(clock, NOW)
    engine.insert_jobs([new(priority=0), new(priority=20), new(delay_ms=1)], "a")
    order = []
    while (job := engine.claim(req(token=f"t{len(order)}"))) is not None:
        order.append(job.id)
        assert job.status == "running" and job.attempts == 1 and job.worker == "w"
        assert job.token == f"t{len(order) - 1}" and job.claimed_at == NOW
        assert job.lease_expires_at == NOW + 60_000  # the job's timeout when no lease is asked
    assert order == [1, 3, 2]
    at(clock, NOW + 1)
    assert engine.claim(req()).id == 4  # ready at its run_at
    assert [(e.from_status, e.to_status, e.actor) for e in engine.events(4)][-1] == ("pending", "running", "w")


def test_claim_lease_queues_types_and_pause(engine):
    engine.insert_jobs([new(queue="a", type="x"), new(queue="b", type="y", priority=30), new(queue="a", type="y")], "a")
    job = engine.claim(req(queues=["a", "b"], types=["y"], lease_ms=5_000))
    assert job.id == 3 and job.lease_expires_at == NOW + 5_000 and job.lease_ms == 5_000
    engine.set_paused("b", True)
    assert engine.paused_queues() == {"b"}
    assert engine.claim(req(queues=["b"])) is None
    assert engine.claim(req()).id == 1
    engine.set_paused("b", False)
    assert engine.paused_queues() == set()
    assert engine.claim(req()).id == 2
    assert engine.claim(req()) is None


def test_completing_a_dependency_unblocks(engine):
    engine.insert_jobs([new(), new()], "a")
    engine.insert_jobs([new(after=[1, 2], priority=99)], "a")
    a = engine.claim(req())
    b = engine.claim(req())
    assert engine.claim(req()) is None
    engine.update_job(a.id, set_to("completed"), "w")
    assert engine.claim(req()) is None
    engine.update_job(b.id, set_to("completed"), "w")
    job = engine.claim(req())
    assert job.id == 3 and job.after == [1, 2]


def test_two_connections_claiming_at_the_same_moment_never_share_a_job(make):
    """Many rounds of two connections released by one barrier: each job goes to exactly one."""
    engines = [make(), make()]
    engines[0].insert_jobs([new() for _ in range(400)], "a")
    got: list[list[int]] = [[], []]
    barrier = threading.Barrier(2)

    def claimer(i):
        while True:
            barrier.wait()
            job = engines[i].claim(req(worker=f"w{i}"))
            if job is None:
                return
            got[i].append(job.id)

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    barrier.abort()
    both = got[0] + got[1]
    assert sorted(both) == list(range(1, 401)), "a job was handed out twice or lost"
    assert got[0] and got[1]
    assert all(j.attempts == 1 for j in engines[0].get_jobs(both))


# -- update_job and update_jobs_and_claim -------------------------------------------------------


def test_update_job_applies_the_decision_in_one_step(engine, clock):
    engine.insert_jobs([new()], "a")
    claimed = engine.claim(req())
    seen = []

    def decide(job, now):
        seen.append((job, now))
        return Change("completed", {"token": None, "result": '{"ok":true}'}, message="done", run="completed",
                      details={"exit": 0})

    at(clock, NOW + 10)
    job = engine.update_job(1, decide, "w")
    assert seen[0][0].status == "running" and seen[0][0].token == claimed.token and seen[0][1] == NOW + 10
    assert (job.status, job.result, job.token, job.finished_at, job.updated_at) == \
        ("completed", '{"ok":true}', None, NOW + 10, NOW + 10)
    last = engine.events(1)[-1]
    assert (last.from_status, last.to_status, last.actor, last.message) == ("running", "completed", "w", "done")
    assert '"exit"' in last.details


def test_update_job_refusal_changes_nothing(engine):
    engine.insert_jobs([new()], "a")
    before = (engine.get_job(1), engine.events(1))

    def refuse(job, now):
        raise InvalidState("no")

    with pytest.raises(InvalidState):
        engine.update_job(1, refuse, "x")
    assert (engine.get_job(1), engine.events(1)) == before
    assert engine.update_job(1, lambda j, now: None, "x") == before[0]  # None: nothing to do
    assert (engine.get_job(1), engine.events(1)) == before
    with pytest.raises(NoSuchJob):
        engine.update_job(99, set_to("completed"), "x")


def test_a_change_that_keeps_the_state_writes_no_event(engine):
    engine.insert_jobs([new()], "a")
    engine.claim(req())
    n = len(engine.events(1))
    job = engine.update_job(1, lambda j, now: Change("running", {"progress": '{"message":"x","percent":5}'}), "w")
    assert job.progress and len(engine.events(1)) == n


def test_update_job_leaving_a_finished_state_clears_finished_at(engine, clock):
    engine.insert_jobs([new()], "a")
    engine.claim(req())
    assert engine.update_job(1, set_to("buried"), "w").finished_at == NOW
    at(clock, NOW + 1)
    assert engine.update_job(1, set_to("pending"), "op").finished_at is None


def test_update_jobs_and_claim_is_one_step(engine, clock):
    engine.insert_jobs([new() for _ in range(5)], "a")
    first = [engine.claim(req()), engine.claim(req())]
    at(clock, NOW + 3)
    done, claimed = engine.update_jobs_and_claim(
        [(j.id, set_to("completed", token=None)) for j in first], [req(), req(), req(), req()], "w")
    assert [(j.id, j.status, j.finished_at) for j in done] == [(1, "completed", NOW + 3), (2, "completed", NOW + 3)]
    assert [j.id for j in claimed] == [3, 4, 5]  # stops at the first claim that finds nothing
    assert all(j.claimed_at == NOW + 3 and j.status == "running" for j in claimed)
    # a refusal anywhere changes nothing and claims nothing
    engine.insert_jobs([new()], "a")
    before = statuses(engine)

    def refuse(job, now):
        raise InvalidState("no")

    with pytest.raises(InvalidState):
        engine.update_jobs_and_claim([(3, set_to("completed")), (4, refuse)], [req()], "w")
    assert statuses(engine) == before


def test_a_prepared_update_and_claim_writes_nothing_until_called(engine, clock):
    """prepare_update_and_claim: what a worker prepares while a handler runs. Nothing is written
    until the call; the call is update_jobs_and_claim at that moment: stamped then, decided on the
    row as it is then when the row no longer holds the claim, refused then as a whole."""
    engine.insert_jobs([new() for _ in range(4)], "a")
    held = engine.claim(req())
    seen = []

    def complete(job, now):
        seen.append(job.status)
        return Change("completed", {"token": None}, message="completed", run="completed")

    complete = Decision(complete, time_free=True)  # (as Queue makes a completion's: the engine may decide it ahead)
    step = engine.prepare_update_and_claim(held.id, complete, req(), "w")
    assert statuses(engine) == {1: "running", 2: "pending", 3: "pending", 4: "pending"}
    at(clock, NOW + 7)
    done, claimed = step()
    assert [(j.id, j.status, j.finished_at) for j in done] == [(1, "completed", NOW + 7)]
    assert [(j.id, j.status, j.claimed_at) for j in claimed] == [(2, "running", NOW + 7)]
    assert engine.events(1)[-1].to_status == "completed"

    # the row changed between the prepare and the call: decided on the row as it is then
    step = engine.prepare_update_and_claim(2, complete, req(), "w")
    engine.update_job(2, lambda job, now: Change("cancel_requested", {}), "op")
    seen.clear()
    done, claimed = step()
    assert seen[-1] == "cancel_requested" and done[0].status == "completed" and claimed[0].id == 3

    # a refusal at the call changes nothing and claims nothing
    def refuse(job, now):
        raise InvalidState("no")

    step = engine.prepare_update_and_claim(3, Decision(refuse, time_free=True), req(), "w")
    before = statuses(engine)
    with pytest.raises(InvalidState):
        step()
    assert statuses(engine) == before


# -- update_expired, update_buried --------------------------------------------------------------


def test_update_expired(engine, clock):
    engine.insert_jobs([new(), new(), new(), new()], "a")
    engine.claim(req(lease_ms=1_000))            # 1: expires NOW+1000
    engine.claim(req(lease_ms=100_000))          # 2: live, but silent since NOW
    engine.claim(req(lease_ms=1_000))            # 3: expired, then cancel requested
    engine.update_job(3, set_to("cancel_requested"), "op")
    at(clock, NOW + 2_000)
    seen_now = []

    def decide(job, now):
        seen_now.append(now)
        return Change("cancelled" if job.status == "cancel_requested" else "pending", {"token": None}, run="lost")

    dry = engine.update_expired(decide, "sweeper", dry_run=True)
    assert [(j.id, c.to_status) for j, c in dry] == [(1, "pending"), (3, "cancelled")]
    assert set(seen_now) == {NOW + 2_000}
    assert statuses(engine) == {4: "pending", 3: "cancel_requested", 2: "running", 1: "running"}
    done = engine.update_expired(decide, "sweeper")
    assert [(j.id, j.status) for j, _ in done] == [(1, "pending"), (3, "cancelled")]
    assert engine.update_expired(decide, "sweeper") == []  # each acted on once
    done = engine.update_expired(decide, "sweeper", silent_for_ms=1_999)
    assert [j.id for j, _ in done] == [2]
    assert engine.get_job(1).error is None and engine.events(1)[-1].actor == "sweeper"


def test_count_expired(engine, clock):
    engine.insert_jobs([new(), new()], "a")
    engine.claim(req(lease_ms=1_000))
    engine.claim(req(lease_ms=5_000))
    assert engine.count_expired() == 0
    at(clock, NOW + 2_000)
    assert engine.count_expired() == 1


def test_purge_deletes_finished_jobs_with_their_history(engine, clock):
    engine.insert_jobs([new() for _ in range(7)], "a")
    for i in range(1, 6):
        engine.claim(req())
        at(clock, NOW + i)
        engine.update_job(i, set_to("completed"), "w")
    engine.insert_jobs([new(after=[1])], "a")  # 8 depends on 1
    at(clock, NOW + 10)
    assert engine.purge("completed", 6, dry_run=True) == 3  # finished before NOW + 4
    assert len(statuses(engine)) == 8
    deleted = []
    assert engine.purge("completed", 6, batch=2, on_progress=deleted.append) == 3  # several small batches
    assert deleted == [2, 3]
    assert sorted(statuses(engine)) == [4, 5, 6, 7, 8]
    assert engine.events(1) == []
    assert engine.purge("cancelled", 0) == 0
    assert engine.get_job(4).status == "completed"
    # ids are never reused, even after the newest rows are gone
    engine.purge("completed", 0)
    assert engine.insert_jobs([new()], "a") == [(9, True)]


# -- reads --------------------------------------------------------------------------------------


def test_reads(engine):
    engine.insert_jobs([new(queue="a"), new(type="u"), new(queue="a")], "a")
    engine.claim(req(queues=["a"]))
    assert [j.id for j in engine.list_jobs()] == [3, 2, 1]  # newest first
    assert [j.id for j in engine.list_jobs(statuses=["pending"], queue="a")] == [3]
    assert [j.id for j in engine.list_jobs(type="u")] == [2]
    assert [j.id for j in engine.list_jobs(limit=1)] == [3]
    assert [j.id for j in engine.get_jobs([3, 99, 1])] == [3, 1]
    assert engine.queue_names() == ["a", "default"]
    assert engine.pending_types() == {"t": 1, "u": 1}
    with pytest.raises(NoSuchJob):
        engine.get_job(42)


def test_list_filters_and_orders(engine, clock):
    engine.insert_jobs([new(priority=0), new(priority=20)], "a")
    at(clock, NOW + 1_000)
    engine.insert_jobs([new(priority=10, delay_ms=4_000)], "a")
    held = engine.claim(req(lease_ms=1_000))  # job 2 (priority 20), lease until NOW + 2 s
    assert held.id == 2
    ids = lambda **kw: [j.id for j in engine.list_jobs(**kw)]  # noqa: E731
    assert ids(sort="oldest") == [1, 2, 3]
    assert ids(sort="priority") == [2, 3, 1]
    assert ids(sort="run-at") == [1, 2, 3]
    assert ids(created_older_than_ms=1) == [2, 1]
    at(clock, NOW + 1_500)
    assert ids(stuck=True) == []  # lease still good
    at(clock, NOW + 2_500)
    assert ids(stuck=True) == [2]  # lease expired


def test_stats_snapshot(engine, clock):
    engine.insert_jobs([new(queue="a"), new(queue="a", delay_ms=60_000), new(queue="b")], "a")
    engine.insert_jobs([new(queue="a", after=[3])], "a")
    engine.claim(req(queues=["b"], lease_ms=1_000))  # 3 running in b
    at(clock, NOW + 500)
    engine.update_job(3, set_to("completed"), "w")
    engine.insert_jobs([new(queue="b")], "a")
    engine.claim(req(queues=["b"], lease_ms=1_000))  # 5 running, will be stuck
    engine.set_paused("c", True)
    at(clock, NOW + 5_000)
    snap = engine.stats_snapshot(limit=10)
    assert snap["now"] == NOW + 5_000
    assert snap["counts"]["a"] == {"pending": 3}  # 4 was unblocked when 3 completed
    assert snap["counts"]["b"] == {"completed": 1, "running": 1}
    assert snap["paused"] == {"c": True}
    assert snap["scheduled"] == {"a": 1}
    assert snap["oldest_ready"]["a"] == NOW
    assert [j.id for j in snap["aging"]] == [1, 4]
    assert [j.id for j in snap["stuck"]] == [5] and snap["stuck_total"] == 1
    assert snap["buried"] == []
    assert snap["runs_by_minute"] == [(0, "completed", 1)]
    assert snap["run_ms"] == [500] and snap["wait_ms"] == [0]


def test_health_checks(engine):
    checks = engine.health_checks()
    assert all(isinstance(c, Check) for c in checks)
    names = {c.name: c for c in checks}
    usable = names.get("integrity") or names["connection"]  # a file's integrity, or a server's connection
    assert usable.ok and names["schema"].ok and names["expired leases"].ok


# -- capabilities -------------------------------------------------------------------------------


def test_wake_ups_see_another_connections_commit(make):
    a, b = make(), make()
    if not a.wakes:
        pytest.skip("this engine has no wake-up capability")
    a.has_changed()
    assert a.has_changed() is False
    b.insert_jobs([new()], "x")
    deadline = time.monotonic() + 5  # a server's notification may arrive a moment after the commit returned
    while not a.has_changed():
        assert time.monotonic() < deadline
        time.sleep(0.005)
    assert a.wait_for_change(0.05) is False
    resume = threading.Timer(0.1, lambda: b.set_paused("q", False))  # a resume: jobs may be ready now
    resume.start()
    try:
        assert a.wait_for_change(5) is True
    finally:
        resume.join()  # never left running into the next test with b closed under it (a crash)


def test_capabilities_are_declared(engine):
    """What an engine can do is declared (engines/base.py), never probed: the worker, the wait
    loops and the queue read these."""
    assert {type(engine.wakes), type(engine.reconnects), type(engine.STORES_NUL)} == {bool}
    assert engine.on_reconnect is None  # until a worker asks to be told
    assert engine.has_changed() in (True, False) and engine.wait_for_change(0) in (True, False)
    assert engine.files is None or engine.files.path


def test_file_capability(engine, tmp_path):
    files = engine.files
    if files is None:
        pytest.skip("this engine's database is not a local file")
    engine.insert_jobs([new()], "a")
    dest = tmp_path / "copy.db"
    files.backup(dest)
    assert dest.stat().st_mode & 0o777 == 0o600
    assert len(files.checkpoint()) == 3


# -- counting and admission control -------------------------------------------------------------


def test_count_jobs_matches_list_jobs(engine):
    engine.insert_jobs([new(queue="a"), new(queue="a", type="u"), new(queue="b")], "x")
    engine.claim(req(queues=["b"]))
    for filters in ({}, {"queue": "a"}, {"statuses": ["pending"]}, {"type": "u"}, {"stuck": True}):
        assert engine.count_jobs(**filters) == len(engine.list_jobs(limit=0, **filters)), filters


def test_claims_under_limits_and_the_figures_behind_them(engine, clock):
    from jobctl.limits import Limits

    limits = Limits(rates={"api": (2, 10_000)}, groups={"gpu": 2}, types={"solo": 1})
    engine.insert_jobs([new(type="api"), new(type="api"), new(type="api"),
                        new(type="r", concurrency_group="gpu", cost_units=2), new(type="r", concurrency_group="gpu"),
                        new(type="solo"), new(type="solo"), new(type="free")], "x")
    got = []
    while (job := engine.claim(req(limits=limits))) is not None:
        got.append(job.type)
    assert sorted(got) == ["api", "api", "free", "r", "solo"]  # one api, one r and one solo held back
    figures = engine.limit_figures(limits)
    assert figures["now"] == NOW and len(figures["starts"]["api"]) == 2
    assert figures["held"] == {("group", "gpu"): 2, ("type", "solo"): 1, ("type", "api"): 2, ("type", "free"): 1}
    assert figures["admission"].shut_types == {"api"}
    assert figures["held_ready"] == {("type", "api"): 1, ("type", "solo"): 1, ("group", "gpu"): 1}
    held = engine.list_jobs(held_by=figures["admission"], limit=0)
    assert sorted(j.type for j in held) == ["api", "r", "solo"]
    assert engine.count_jobs(held_by=figures["admission"]) == 3
    at(clock, NOW + 10_001)  # the rate window has moved past both starts
    assert engine.claim(req(limits=limits)).type == "api"


# -- flows: reactions, chains, dependents, cancel by filter -------------------------------------


def test_a_change_carries_out_its_reaction_in_the_same_step(engine, clock):
    import json

    engine.insert_jobs([new(type="work", payload='{"a":1}', on_buried="alert")], "a")
    job = engine.claim(req())
    at(clock, NOW + 5)
    reaction = new(type="alert", queue="ops", priority=50, max_attempts=7)

    def bury(job, now):
        return Change("buried", {"error": "boom"}, message="boom", run="failed", reaction=reaction)

    buried = engine.update_job(job.id, bury, "w")
    assert buried.status == "buried" and buried.on_buried == "alert"
    (r,) = engine.list_jobs(type="alert")
    body = json.loads(r.payload)
    assert body["event"] == "buried"
    assert body["job"] == buried.to_dict()  # the job after the change, as `show --json` prints it
    assert (r.queue, r.priority, r.max_attempts, r.status, r.run_at) == ("ops", 50, 7, "pending", NOW + 5)
    assert [e.message for e in engine.events(r.id)] == [f"enqueued: reaction to job {job.id} (buried)"]
    assert f"reaction: job {r.id} (alert)" in engine.events(job.id)[-1].message
    assert reaction.payload == "{}"  # the template is not changed: a decide may run twice


def test_a_reaction_the_change_leaves_out_is_refused_and_nothing_changes(engine):
    engine.insert_jobs([new(on_completed="notify")], "a")
    job = engine.claim(req())
    with pytest.raises(InvalidState, match="reaction"):
        engine.update_job(job.id, set_to("completed"), "w")
    assert engine.get_job(job.id).status == "running"
    assert engine.count_jobs() == 1
    engine.update_job(job.id, set_to("pending"), "w")  # not a state it reacts to: fine
    assert engine.get_job(job.id).status == "pending"


def test_insert_after_previous_makes_a_chain(engine):
    ids = [i for i, _ in engine.insert_jobs([new(type="a"), new(type="b", after_previous=True),
                                             new(type="c", after_previous=True)], "a")]
    assert [engine.get_job(i).after for i in ids] == [[], [ids[0]], [ids[1]]]
    assert [j.type for j in [engine.claim(req())]] == ["a"]
    assert engine.claim(req()) is None
    with pytest.raises(NoSuchJob):  # all or nothing
        engine.insert_jobs([new(type="d"), new(type="e", after_previous=True, after=[999])], "a")
    assert engine.count_jobs() == 3


def test_update_dependents_reaches_every_job_waiting_directly_or_not(engine):
    engine.insert_jobs([new(), new(), new()], "a")  # 1, 2, 3
    engine.insert_jobs([new(after=[1])], "a")  # 4
    engine.insert_jobs([new(after=[4]), new(after=[2])], "a")  # 5 (through 4), 6 (not)
    engine.insert_jobs([new(after=[5, 3])], "a")  # 7
    seen = []

    def cancel(job, now):
        seen.append(job.id)
        return Change("cancelled", {}, message="cancelled")

    done = engine.update_dependents(1, cancel, "op")
    assert [j.id for j in done] == [1, 4, 5, 7] and seen == [1, 4, 5, 7]
    assert statuses(engine) == {1: "cancelled", 2: "pending", 3: "pending", 4: "cancelled", 5: "cancelled",
                                6: "pending", 7: "cancelled"}
    with pytest.raises(NoSuchJob):
        engine.update_dependents(99, cancel, "op")


def test_update_dependents_is_one_step(engine):
    engine.insert_jobs([new(), new()], "a")
    engine.insert_jobs([new(after=[1]), new(after=[1])], "a")

    def cancel_but_refuse_4(job, now):
        if job.id == 4:
            raise InvalidState("no")
        return Change("cancelled", {}, message="cancelled")

    with pytest.raises(InvalidState):
        engine.update_dependents(1, cancel_but_refuse_4, "op")
    assert set(statuses(engine).values()) == {"pending"}


def test_update_selection_in_short_steps_skips_what_changed_meanwhile(engine, clock):
    from jobctl.errors import InvalidState as Refused
    from jobctl.selection import parse

    engine.insert_jobs([new(queue="q"), new(queue="q", delay_ms=60_000), new(queue="q", type="u"),
                        new(queue="other")], "a")  # 1 ready, 2 scheduled, 3 ready (type u), 4 elsewhere
    engine.insert_jobs([new(queue="q", after=[1])], "a")  # 5 blocked
    engine.insert_jobs([new(queue="q"), new(queue="q")], "a")  # 6 (buried below), 7 ready
    assert [engine.claim(req(queues=["q"], types=["t"])).id for _ in range(2)] == [1, 6]
    engine.update_job(6, set_to("buried"), "w")
    sel = parse(queues=["q"], statuses=["pending", "buried"])
    ids = engine.select_ids(sel)
    assert ids == [2, 3, 5, 6, 7]
    assert engine.select_ids(parse(queues=["q"], statuses=["scheduled"])) == [2]
    assert engine.select_ids(parse(queues=["q"], statuses=["blocked", "scheduled"])) == [2, 5]
    cancel = set_to("cancelled")
    assert list(engine.update_selection(ids, sel, cancel, "op", dry_run=True))[0] == (2, "changed", "cancelled")
    assert engine.get_job(2).status == "pending"
    engine.update_job(7, set_to("running"), "w")  # changed meanwhile: no longer matches

    def cancel_but_not_3(job, now):
        if job.id == 3:
            raise Refused("job 3: no")
        return cancel(job, now)

    progress = []
    done = list(engine.update_selection(ids, sel, cancel_but_not_3, "op", batch=2,
                                        on_progress=lambda d, t: progress.append((d, t))))
    assert done == [(2, "changed", "cancelled"), (3, "refused", "job 3: no"), (5, "changed", "cancelled"),
                    (6, "changed", "cancelled"), (7, "skipped", None)]
    assert progress == [(2, 5), (4, 5), (5, 5)]  # three transactions of at most two jobs
    assert statuses(engine) == {1: "running", 2: "cancelled", 3: "pending", 4: "pending", 5: "cancelled",
                                6: "cancelled", 7: "running"}
    assert [e.to_status for e in engine.events(6)][-1] == "cancelled"


def test_an_action_on_held_jobs_judges_the_limits_again_in_each_transaction(engine, clock):
    """A bulk action on --status held: a job that a limit let go between two of its transactions
    (a rate window moved on) no longer matches, and is skipped like a job that changed state."""
    from jobctl.limits import Limits
    from jobctl.selection import parse

    limits = Limits(rates={"api": (1, 10_000)})
    engine.insert_jobs([new(type="api") for _ in range(4)], "x")
    assert engine.claim(req(limits=limits)).id == 1  # the window's one start: 2, 3 and 4 are held
    sel = parse(statuses=["held"])
    ids = engine.select_ids(sel, admission=engine.limit_figures(limits)["admission"])
    assert ids == [2, 3, 4]
    steps = engine.update_selection(ids, sel, set_to("cancelled"), "op", limits=limits, batch=1)
    assert next(steps) == (2, "changed", "cancelled")
    at(clock, NOW + 10_001)  # the window has moved past the start: 3 and 4 are free to run
    assert list(steps) == [(3, "skipped", None), (4, "skipped", None)]
    assert statuses(engine) == {1: "running", 2: "cancelled", 3: "pending", 4: "pending"}


def test_selection_filters_on_both_engines(engine, clock):
    from jobctl.selection import parse

    engine.insert_jobs([new(payload='{"user":{"id":42},"items":[{"sku":"A-1"}],"tenant":"b","ok":true}'),
                        new(payload='{"user":{"id":"42"},"tenant":"a","n":1.5}', type="u"),
                        new(payload='{"user":{"id":7},"tenant":"b","items":[1,2],"x":null}', queue="z"),
                        new(payload='{"tenant":"c"}', idempotency_key="k-1")], "a")
    for job_id, error in ((1, "SMTP Timeout after 30s"), (2, "refused: 100%_done")):
        job = engine.claim(req(worker=f"w-{job_id}"))
        assert job.id == job_id
        engine.update_job(job_id, set_to("buried", error=error, worker=None, token=None), "w")
    engine.claim(req(worker="w-3"))  # 3 running under w-3

    def ids(**options):
        return engine.select_ids(parse(**options))

    assert ids(payload=["tenant=b"]) == [1, 3]
    assert ids(payload=["user.id=42"]) == [1]  # the number, not the string "42"
    assert ids(payload=['user.id="42"']) == [2]
    assert ids(payload=["user.id=42", "user.id=7"]) == [1, 3]  # one path repeated: any of them
    assert ids(payload=["tenant=b", "user.id=7"]) == [3]  # different paths: all of them
    assert ids(payload=["items.0.sku=A-1"]) == [1]
    assert ids(payload=["items=[1,2]"]) == [3]
    assert ids(payload=["ok=true"]) == [1] and ids(payload=["x=null"]) == [3] and ids(payload=["n=1.5"]) == [2]
    assert ids(payload=["user={\"id\":7}"]) == [3]
    assert ids(payload=["nothing.here=1"]) == []
    assert ids(errors=["timeout"]) == [1] and ids(errors=["TIMEOUT", "refused"]) == [1, 2]
    assert ids(errors=["100%_"]) == [2] and ids(errors=["0%x"]) == []  # % and _ are plain text
    assert ids(keys=["k-1"]) == [4]
    assert ids(workers=["w-3"]) == [3]
    assert ids(min_attempts=1) == [1, 2, 3] and ids(min_attempts=1, queues=["z"]) == [3]
    assert ids(statuses=["buried"], types=["u"]) == [2]
    assert ids(since="1h") == [1, 2, 3, 4]
    assert ids(before="1h") == []
    assert ids(statuses=["held"]) == []
    engine.set_paused("default", True, type="t")  # held: ready, and a pause holds it back
    assert ids(statuses=["held"]) == [4] and ids(statuses=["held", "running"]) == [3, 4]


# -- pauses of one type, and pauses that end by themselves --------------------------------------


def test_a_type_pause_holds_only_that_type_in_that_queue(engine):
    from jobctl.limits import Limits

    engine.insert_jobs([new(queue="a", type="x", priority=30), new(queue="b", type="x", priority=20),
                        new(queue="a", type="y")], "a")
    engine.set_paused("a", True, type="x")
    assert engine.pauses() == [("a", "x", None)]
    assert engine.paused_queues() == set()  # the queue as a whole is not paused
    assert "a" in engine.queue_names()
    limits = Limits(types={"x": 5})
    # every claim path: any queue, the queue named, the types named, and under limits (both paths)
    assert engine.claim(req(queues=["a"], types=["x"])) is None
    assert engine.claim(req(queues=["a"], types=["x"], limits=limits)) is None
    assert engine.claim(req(queues=["a"], limits=limits)).id == 3
    assert engine.claim(req(types=["x"])).id == 2  # the same type in another queue still runs
    assert engine.claim(req(limits=limits)) is None
    engine.set_paused("a", False, type="x")
    assert engine.pauses() == []
    assert engine.claim(req(types=["x"], limits=limits)).id == 1


def test_a_pause_with_an_end_lifts_by_itself(engine, clock):
    engine.insert_jobs([new(queue="a", type="x"), new(queue="a", type="y")], "a")
    engine.set_paused("a", True, until=NOW + 60_000)
    engine.set_paused("a", True, type="y", until=NOW + 120_000)
    assert engine.pauses() == [("a", None, NOW + 60_000), ("a", "y", NOW + 120_000)]
    assert engine.paused_queues() == {"a"}
    snap = engine.stats_snapshot()
    assert snap["paused"]["a"] is True and snap["paused_until"] == {"a": NOW + 60_000}
    assert snap["paused_types"] == {"a": {"y": NOW + 120_000}}
    assert engine.claim(req()) is None
    at(clock, NOW + 60_000)  # the queue's pause ends at this very moment: nothing has to run to lift it
    assert engine.paused_queues() == set() and engine.stats_snapshot()["paused"]["a"] is False
    assert engine.claim(req()).id == 1
    assert engine.claim(req()) is None  # y is still paused
    at(clock, NOW + 120_001)
    assert engine.pauses() == [] and engine.stats_snapshot()["paused_types"] == {}
    assert engine.claim(req()).id == 2


def test_resuming_a_queue_ends_its_type_pauses_too(engine):
    engine.insert_jobs([new(queue="a", type="x")], "a")
    engine.set_paused("a", True)
    engine.set_paused("a", True, type="x")
    engine.set_paused("b", True, type="x")
    engine.set_paused("a", False)
    assert engine.pauses() == [("b", "x", None)]
    assert engine.claim(req()).id == 1


# -- a run's output (Change.log, run_output) ---------------------------------------------------


def _with_log(to_status, fields, head, tail=b"", dropped=0, run=None):
    from jobctl.engines.base import RunOutput

    def decide(job, now):
        change = Change(to_status, fields, run=run)
        change.log = RunOutput(head, tail, dropped)
        return change

    return decide


def test_run_output_is_stored_with_the_change_and_numbered_by_run(engine, clock):
    engine.insert_jobs([new()], "a")
    with pytest.raises(NoSuchJob):
        engine.run_output(99)
    assert engine.run_output(1) is None  # no run yet
    engine.claim(req())
    at(clock, NOW + 10)
    engine.update_job(1, _with_log("running", {"heartbeat_at": NOW + 10}, b"first\n"), "w")
    log = engine.run_output(1)
    assert (log.run, log.runs, log.started_at, log.ended_at, log.head, log.tail, log.dropped, log.outcome) == \
        (1, 1, NOW, None, b"first\n", b"", 0, None)
    at(clock, NOW + 20)
    engine.update_job(1, _with_log("pending", {"token": None, "worker": None, "run_at": NOW + 20},
                                   b"first\n", b"end\n", 7, run="failed"), "w")
    log = engine.run_output(1)
    assert (log.ended_at, log.tail, log.dropped, log.outcome, log.size) == (NOW + 20, b"end\n", 7, "failed", 17)
    at(clock, NOW + 30)
    engine.claim(req())
    engine.update_job(1, _with_log("running", {}, b"second\n"), "w")
    assert engine.run_output(1).run == 2 and engine.run_output(1).head == b"second\n"
    assert engine.run_output(1, 1).head == b"first\n" and engine.run_output(1, 1).runs == 2
    assert engine.run_output(1, 3) is None


def test_run_output_numbers_runs_as_their_claims_and_says_when_one_printed_nothing(engine, clock):
    engine.insert_jobs([new()], "a")
    engine.claim(req())
    at(clock, NOW + 10)
    engine.update_job(1, lambda job, now: Change("pending", {"token": None, "worker": None, "run_at": NOW + 10},
                                                  run="failed"), "w")
    at(clock, NOW + 20)
    engine.claim(req())
    engine.update_job(1, _with_log("running", {}, b"second\n"), "w")
    assert (engine.run_output(1).run, engine.run_output(1).runs) == (2, 2)  # the second run, not the first with output
    assert engine.run_output(1, 2).head == b"second\n"
    quiet = engine.run_output(1, 1)
    assert (quiet.run, quiet.kept, quiet.head, quiet.tail, quiet.outcome) == (1, False, b"", b"", "failed")
    assert engine.run_output(1, 3) is None


def test_a_refused_change_stores_no_output(engine):
    from jobctl.engines.base import RunOutput

    engine.insert_jobs([new()], "a")
    engine.claim(req())

    def refuse(job, now):
        change = Change("running", {})
        change.log = RunOutput(b"x", b"", 0)
        raise InvalidState("no")

    with pytest.raises(InvalidState):
        engine.update_job(1, refuse, "w")
    assert engine.run_output(1) is None


def test_purge_deletes_run_output_with_its_job(engine, clock):
    engine.insert_jobs([new()], "a")
    engine.claim(req())
    engine.update_job(1, _with_log("completed", {"token": None}, b"out\n", run="completed"), "w")
    assert engine.run_output(1) is not None
    at(clock, NOW + 10_000)
    assert engine.purge("completed", 1) == 1
    engine.insert_jobs([new()], "a")  # a new job never sees an old job's output
    assert engine.run_output(2) is None


def test_the_schemas_partial_indexes_say_ready_and_held_as_the_queries_do(tmp_path):
    """The state vocabulary is written once (engines/sql.py: READY, HELD_SQL) and the queries use
    it; the schemas' index texts are frozen in their migrations, so they are checked to say the
    same, word for word (a planner that matches a partial index by its text needs that)."""
    import inspect
    import re
    import sqlite3

    from jobctl.engines import pg_schema
    from jobctl.engines.sql import HELD_SQL, READY
    from jobctl.engines.sqlite import SQLiteEngine

    SQLiteEngine.open(tmp_path / "v.db", create=True).close()
    with sqlite3.connect(tmp_path / "v.db") as c:
        indexes = dict(c.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"))
    pg = dict(re.findall(r'"CREATE INDEX (\w+) ON ([^"]*(?:"\s*"[^"]*)*)"', inspect.getsource(pg_schema)))
    for name in ("jobs_ready", "jobs_ready_by_queue", "jobs_ready_by_type", "jobs_ready_costly",
                 "jobs_ready_by_group", "jobs_pending_age"):
        assert indexes[name].split(" WHERE ", 1)[1].startswith(READY), name
        assert re.sub(r'"\s*"', "", pg[name]).split(" WHERE ", 1)[1].startswith(READY), name
    assert indexes["jobs_held"].endswith("WHERE " + HELD_SQL)
    assert pg["jobs_held"].endswith("WHERE " + HELD_SQL)
