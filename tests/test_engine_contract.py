"""The Engine contract (jobctl/engines/base.py), exercised directly, for every engine. Today only
SQLite; a PostgreSQL engine joins the `engine` fixture's params and must pass the same tests."""

import hashlib

import pytest

from jobctl.engines.base import Change, ClaimRequest, NewJob
from jobctl.errors import InvalidState, NoSuchJob

NOW = 1_900_000_000_000  # ms


def new(type="t", queue="default", payload="{}", priority=10, run_at=NOW, **kw):
    return NewJob(queue=queue, type=type, payload=payload, payload_hash=hashlib.sha256(payload.encode()).hexdigest(),
                  priority=priority, max_attempts=kw.pop("max_attempts", 3), backoff="exponential",
                  timeout_ms=kw.pop("timeout_ms", 60_000), run_at=run_at, **kw)


def req(worker="w", token=None, **kw):
    return ClaimRequest(worker=worker, token=token or f"tok-{worker}-{id(kw)}", **kw)


def _sqlite(tmp_path):
    from jobctl.engines.sqlite import SQLiteEngine

    return SQLiteEngine.open(tmp_path / "contract.db", create=True, busy_timeout=2.0)


ENGINES = {"sqlite": _sqlite}


@pytest.fixture(params=sorted(ENGINES))
def engine(request, tmp_path):
    e = ENGINES[request.param](tmp_path)
    yield e
    e.close()


def statuses(engine):
    return {j.id: j.status for j in engine.list_jobs(limit=1000)}


# -- insert_jobs --------------------------------------------------------------------------------


def test_insert_returns_ids_in_order_and_writes_the_enqueue_event(engine):
    done = engine.insert_jobs([new(payload='{"i":1}'), new(queue="q2"), new(type="u")], NOW, "alice")
    assert done == [(1, True), (2, True), (3, True)]
    job = engine.get_job(1)
    assert (job.status, job.attempts, job.payload, job.created_at, job.run_at) == ("pending", 0, '{"i":1}', NOW, NOW)
    events = engine.events(1)
    assert [(e.from_status, e.to_status, e.actor, e.at) for e in events] == [(None, "pending", "alice", NOW)]


def test_insert_key_returns_the_existing_job_or_refuses(engine):
    assert engine.insert_jobs([new(idempotency_key="k", payload="[1]")], NOW, "a") == [(1, True)]
    assert engine.insert_jobs([new(idempotency_key="k", payload="[1]")], NOW, "a") == [(1, False)]
    with pytest.raises(InvalidState, match="job 1"):
        engine.insert_jobs([new(), new(idempotency_key="k", payload="[2]")], NOW, "a")
    with pytest.raises(InvalidState):
        engine.insert_jobs([new(type="other", idempotency_key="k", payload="[1]")], NOW, "a")
    assert list(statuses(engine)) == [1]  # the batch with a conflict inserted nothing


def test_insert_unique_returns_a_live_twin(engine):
    assert engine.insert_jobs([new(unique=True)], NOW, "a") == [(1, True)]
    assert engine.insert_jobs([new(unique=True)], NOW, "a") == [(1, False)]
    assert engine.insert_jobs([new(unique=True, queue="other")], NOW, "a") == [(2, True)]
    job = engine.claim(req(queues=["default"]), NOW)
    assert engine.insert_jobs([new(unique=True)], NOW, "a") == [(1, False)]
    engine.update_job(1, lambda j: Change("completed", {"token": None}), NOW, "w")
    assert engine.insert_jobs([new(unique=True)], NOW, "a") == [(3, True)]
    assert job.id == 1


def test_insert_after_missing_raises_and_inserts_nothing(engine):
    engine.insert_jobs([new()], NOW, "a")
    with pytest.raises(NoSuchJob):
        engine.insert_jobs([new(), new(after=[1, 42])], NOW, "a")
    assert list(statuses(engine)) == [1]
    assert engine.insert_jobs([new(after=[1])], NOW, "a") == [(2, True)]
    assert engine.get_job(2).after == [1] and engine.get_job(2).waiting_on == 1


# -- claim --------------------------------------------------------------------------------------


def test_claim_takes_the_best_ready_job(engine):
    engine.insert_jobs([new(priority=0), new(priority=20), new(priority=20, run_at=NOW - 5), new(run_at=NOW + 1)],
                       NOW, "a")
    order = []
    while (job := engine.claim(req(token=f"t{len(order)}"), NOW)) is not None:
        order.append(job.id)
        assert job.status == "running" and job.attempts == 1 and job.worker == "w"
        assert job.token == f"t{len(order) - 1}" and job.claimed_at == NOW
        assert job.lease_expires_at == NOW + 60_000  # the job's timeout when no lease is asked
    assert order == [3, 2, 1]
    assert engine.claim(req(), NOW + 1).id == 4  # ready at its run_at
    assert [(e.from_status, e.to_status, e.actor) for e in engine.events(4)][-1] == ("pending", "running", "w")


def test_claim_lease_queues_types_and_pause(engine):
    engine.insert_jobs([new(queue="a", type="x"), new(queue="b", type="y", priority=30), new(queue="a", type="y")],
                       NOW, "a")
    job = engine.claim(req(queues=["a", "b"], types=["y"], lease_ms=5_000), NOW)
    assert job.id == 3 and job.lease_expires_at == NOW + 5_000 and job.lease_ms == 5_000
    engine.set_paused("b", True, NOW)
    assert engine.paused_queues() == {"b"}
    assert engine.claim(req(queues=["b"]), NOW) is None
    assert engine.claim(req(), NOW).id == 1
    engine.set_paused("b", False, NOW)
    assert engine.paused_queues() == set()
    assert engine.claim(req(), NOW).id == 2
    assert engine.claim(req(), NOW) is None


def test_completing_a_dependency_unblocks(engine):
    engine.insert_jobs([new(), new()], NOW, "a")
    engine.insert_jobs([new(after=[1, 2], priority=99)], NOW, "a")
    a = engine.claim(req(), NOW)
    b = engine.claim(req(), NOW)
    assert engine.claim(req(), NOW) is None
    engine.update_job(a.id, lambda j: Change("completed", {}), NOW, "w")
    assert engine.claim(req(), NOW) is None
    engine.update_job(b.id, lambda j: Change("completed", {}), NOW, "w")
    assert engine.claim(req(), NOW).id == 3


# -- update_job ---------------------------------------------------------------------------------


def test_update_job_applies_the_decision_in_one_step(engine):
    engine.insert_jobs([new()], NOW, "a")
    claimed = engine.claim(req(), NOW)
    seen = []

    def decide(job):
        seen.append(job)
        return Change("completed", {"token": None, "result": '{"ok":true}'}, message="done", run="completed",
                      details={"exit": 0})

    job = engine.update_job(1, decide, NOW + 10, "w")
    assert seen[0].status == "running" and seen[0].token == claimed.token
    assert (job.status, job.result, job.token, job.finished_at, job.updated_at) == \
        ("completed", '{"ok":true}', None, NOW + 10, NOW + 10)
    last = engine.events(1)[-1]
    assert (last.from_status, last.to_status, last.actor, last.message) == ("running", "completed", "w", "done")
    assert '"exit"' in last.details


def test_update_job_refusal_changes_nothing(engine):
    engine.insert_jobs([new()], NOW, "a")
    before = (engine.get_job(1), engine.events(1))

    def refuse(job):
        raise InvalidState("no")

    with pytest.raises(InvalidState):
        engine.update_job(1, refuse, NOW, "x")
    assert (engine.get_job(1), engine.events(1)) == before
    assert engine.update_job(1, lambda j: None, NOW + 5, "x") == before[0]  # None: nothing to do
    assert (engine.get_job(1), engine.events(1)) == before
    with pytest.raises(NoSuchJob):
        engine.update_job(99, lambda j: Change("completed", {}), NOW, "x")


def test_update_job_leaving_a_finished_state_clears_finished_at(engine):
    engine.insert_jobs([new()], NOW, "a")
    engine.claim(req(), NOW)
    assert engine.update_job(1, lambda j: Change("buried", {}), NOW, "w").finished_at == NOW
    assert engine.update_job(1, lambda j: Change("pending", {}), NOW + 1, "op").finished_at is None


# -- update_expired, update_buried --------------------------------------------------------------


def test_update_expired(engine):
    engine.insert_jobs([new(), new(), new(), new()], NOW, "a")
    engine.claim(req(lease_ms=1_000), NOW)            # 1: expires NOW+1000
    engine.claim(req(lease_ms=100_000), NOW)          # 2: live, but silent since NOW
    engine.claim(req(lease_ms=1_000), NOW)            # 3: expired, then cancel requested
    engine.update_job(3, lambda j: Change("cancel_requested", {}), NOW, "op")
    later = NOW + 2_000

    def decide(job):
        return Change("cancelled" if job.status == "cancel_requested" else "pending", {"token": None}, run="lost")

    dry = engine.update_expired(decide, later, "sweeper", dry_run=True)
    assert [(j.id, c.to_status) for j, c in dry] == [(1, "pending"), (3, "cancelled")]
    assert statuses(engine) == {4: "pending", 3: "cancel_requested", 2: "running", 1: "running"}
    done = engine.update_expired(decide, later, "sweeper")
    assert [(j.id, j.status) for j, _ in done] == [(1, "pending"), (3, "cancelled")]
    assert engine.update_expired(decide, later, "sweeper") == []  # each acted on once
    done = engine.update_expired(decide, later, "sweeper", heartbeat_before=NOW + 1)
    assert [j.id for j, _ in done] == [2]


def test_update_buried(engine):
    engine.insert_jobs([new(queue="a"), new(queue="b"), new(queue="a", type="u"), new()], NOW, "a")
    for _ in range(3):
        job = engine.claim(req(), NOW)
        engine.update_job(job.id, lambda j: Change("buried", {}), NOW, "w")
    retry = lambda j: Change("pending", {"attempts": 0})  # noqa: E731
    assert [j.id for j, _ in engine.update_buried(retry, NOW, "op", queue="a", type="t", dry_run=True)] == [1]
    assert engine.get_job(1).status == "buried"
    assert [j.id for j, _ in engine.update_buried(retry, NOW, "op", queue="a")] == [1, 3]
    assert statuses(engine) == {4: "pending", 3: "pending", 2: "buried", 1: "pending"}
    assert engine.get_job(1).attempts == 0


# -- purge --------------------------------------------------------------------------------------


def test_purge_deletes_finished_jobs_with_their_history(engine):
    engine.insert_jobs([new() for _ in range(7)], NOW, "a")
    for i in range(1, 6):
        engine.claim(req(), NOW)
        engine.update_job(i, lambda j: Change("completed", {}, run="completed"), NOW + i, "w")
    engine.insert_jobs([new(after=[1])], NOW, "a")  # 8 depends on 1
    assert engine.purge("completed", NOW + 4, dry_run=True) == 3
    assert len(statuses(engine)) == 8
    assert engine.purge("completed", NOW + 4, batch=2) == 3  # several small batches
    assert sorted(statuses(engine)) == [4, 5, 6, 7, 8]
    assert engine.events(1) == []
    assert engine.purge("cancelled", NOW + 100) == 0
    assert engine.get_job(4).status == "completed"
    # ids are never reused, even after the newest rows are gone
    engine.purge("completed", NOW + 100)
    assert engine.insert_jobs([new()], NOW, "a") == [(9, True)]


def test_reads(engine):
    engine.insert_jobs([new(queue="a"), new(type="u"), new(queue="a")], NOW, "a")
    engine.claim(req(queues=["a"]), NOW)
    assert [j.id for j in engine.list_jobs()] == [3, 2, 1]  # newest first
    assert [j.id for j in engine.list_jobs(statuses=["pending"], queue="a")] == [3]
    assert [j.id for j in engine.list_jobs(type="u")] == [2]
    assert [j.id for j in engine.list_jobs(limit=1)] == [3]
    with pytest.raises(NoSuchJob):
        engine.get_job(42)


def test_list_filters_and_orders(engine):
    engine.insert_jobs([new(priority=0), new(priority=20)], NOW, "a")
    engine.insert_jobs([new(priority=10, run_at=NOW + 5_000)], NOW + 1_000, "a")
    held = engine.claim(req(lease_ms=1_000), NOW + 1_000)  # job 2 (priority 20), lease until NOW + 2 s
    assert held.id == 2
    ids = lambda **kw: [j.id for j in engine.list_jobs(**kw)]  # noqa: E731
    assert ids(sort="oldest") == [1, 2, 3]
    assert ids(sort="priority") == [2, 3, 1]
    assert ids(sort="run-at") == [1, 2, 3]
    assert ids(created_before=NOW + 1_000) == [2, 1]
    assert ids(stuck_at=NOW + 1_500) == []  # lease still good
    assert ids(stuck_at=NOW + 2_500) == [2]  # lease expired
