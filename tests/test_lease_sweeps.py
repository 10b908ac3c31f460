"""A lease is judged lost only when a second sweep, some seconds after the first saw it expired,
finds its heartbeat unchanged: a step of the wall clock (NTP) makes every lease look expired at
once, but a live worker renews within its heartbeat interval, so the step alone recovers nothing."""

from conftest import T0


def test_a_clock_step_alone_recovers_nothing(q, clock):
    live = q.enqueue("t").id
    dead = q.enqueue("t").id
    a = q.claim(worker="alive", lease="60s")
    q.claim(worker="dead", lease="60s")
    clock.t = T0 + 3600  # the wall clock steps forward an hour
    assert [(j.id, action) for j, action in q.recover()] == [(live, "watching"), (dead, "watching")]
    assert {q.get(live).status, q.get(dead).status} == {"running"}
    clock.t += 10
    q.heartbeat(live, token=a.token)  # the live worker renews within its interval
    assert q.recover() == []  # too soon after the first sighting to judge
    clock.t += 25
    acted = [(j.id, action) for j, action in q.recover()]
    assert acted == [(dead, "requeued")]  # the silent one is lost; the live one only looks expired
    assert q.get(live).status == "running" and q.get(dead).status == "pending"


def test_a_worker_never_recovers_its_own_live_claims(q, clock):
    job = q.enqueue("t").id
    mine = q.claim(worker="me", lease="1s")
    clock.t += 120
    for _ in range(3):
        assert q.recover(exclude_tokens={mine.token}) == []
        clock.t += 60
    assert q.get(job).status == "running"


def test_dry_run_notes_nothing(q, clock):
    q.enqueue("t")
    q.claim(worker="w", lease="1s")
    clock.t += 120
    assert [a for _, a in q.recover(dry_run=True)] == ["watching"]
    clock.t += 60
    assert [a for _, a in q.recover(dry_run=True)] == ["watching"]  # the dry run kept no sighting
    q.recover()
    clock.t += 60
    assert [a for _, a in q.recover(dry_run=True)] == ["requeued"]
    assert q.get(1).status == "running"


def test_a_new_claim_forgets_an_old_sighting(q, clock):
    q.enqueue("t", max_attempts=5)
    q.claim(worker="w", lease="1s")
    clock.t += 120
    q.recover()
    clock.t += 60
    assert [a for _, a in q.recover()] == ["requeued"]
    q.claim(worker="w2", lease="1s")
    clock.t += 120
    assert [a for _, a in q.recover()] == ["watching"]  # not judged on the old claim's sighting
