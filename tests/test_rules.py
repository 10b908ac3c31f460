"""The transition rules (jobctl/transitions.py) as pure functions: no database, no clock, no
randomness, so each is a plain call, and calling one twice gives the same answer."""

import pytest

from jobctl import transitions as t
from jobctl.errors import InvalidState, StaleToken
from jobctl.models import Job

NOW = 1_900_000_000_000


def job(status="running", attempts=1, max_attempts=3, **kw):
    fields = dict(id=7, queue="q", type="t", payload="{}", priority=10, status=status, attempts=attempts,
                  max_attempts=max_attempts, backoff="exponential", timeout_ms=60_000, run_at=NOW - 10_000,
                  created_at=NOW - 20_000, updated_at=NOW - 10_000)
    if status in t.HELD:
        fields.update(worker="w1", claimed_at=NOW - 5_000, heartbeat_at=NOW - 5_000, lease_ms=30_000,
                      lease_expires_at=NOW + 25_000, token="tok")
    fields.update(kw)
    return Job(**fields)


def test_complete():
    c = t.complete(job(), NOW, token="tok", result_text='{"a":1}')
    assert c.to_status == "completed" and c.fields["result"] == '{"a":1}' and c.fields["token"] is None
    assert c.run == "completed"
    assert t.complete(job("cancel_requested"), NOW, token=None, result_text=None).to_status == "completed"
    with pytest.raises(StaleToken):
        t.complete(job(), NOW, token="old", result_text=None)
    with pytest.raises(InvalidState, match="job 7 is pending"):
        t.complete(job("pending"), NOW, token=None, result_text=None)


def test_fail_retries_with_backoff_then_buries():
    c = t.fail(job(attempts=1), NOW, token="tok", error="boom")
    assert c.to_status == "pending" and c.fields["run_at"] == NOW + 60_000 and "retry in 1m" in c.message
    c = t.fail(job(attempts=2), NOW, token=None, error="boom", jitter=1.5)
    assert c.fields["run_at"] == NOW + 180_000  # 120 s scaled by the caller's jitter draw
    c = t.fail(job(attempts=1), NOW, token=None, error="boom", retry_in=5)
    assert c.fields["run_at"] == NOW + 5_000
    c = t.fail(job(attempts=3), NOW, token=None, error="boom")
    assert c.to_status == "buried" and "no runs left (3 of 3)" in c.message
    c = t.fail(job(), NOW, token=None, error="bad", bury=True, bury_reason="exit code 65 is listed in bury_exit_codes")
    assert c.to_status == "buried" and c.message.endswith("buried: exit code 65 is listed in bury_exit_codes")
    assert t.fail(job(), NOW, token=None, error="x", bury=True).message.endswith("buried: --bury")
    assert t.fail(job("cancel_requested"), NOW, token=None, error="x").to_status == "buried"
    with pytest.raises(InvalidState):
        t.fail(job("completed"), NOW, token=None, error="x")


def test_backoff_strategies():
    assert [t.backoff_delay("exponential", n) for n in (1, 2, 3, 7, 99)] == [60, 120, 240, 3600, 3600]
    assert [t.backoff_delay("linear", n) for n in (1, 2, 3)] == [60, 120, 180]
    assert t.backoff_delay("fixed", 9) == 60
    assert [t.backoff_delay("10,30", n) for n in (1, 2, 3)] == [10, 30, 30]


def test_heartbeat_and_progress():
    c = t.heartbeat(job(), NOW, token="tok", extend_ms=None)
    assert c.to_status == "running" and c.fields["lease_expires_at"] == NOW + 30_000
    assert c.fields["heartbeat_at"] == NOW and c.message is None  # a beat writes no event
    assert t.heartbeat(job(), NOW, token=None, extend_ms=1_000).fields["lease_expires_at"] == NOW + 1_000
    with pytest.raises(InvalidState):
        t.heartbeat(job("pending"), NOW, token=None, extend_ms=None)
    # progress_at: when the progress last changed; the same report again leaves it as it was
    assert t.progress(job(), NOW, token="tok", progress_text="{}").fields == {"progress": "{}", "progress_at": NOW}
    same = job(progress="{}", progress_at=NOW - 60_000)
    assert t.progress(same, NOW, token="tok", progress_text="{}").fields == {"progress": "{}"}
    assert t.complete(same, NOW, token="tok", result_text=None).fields["progress_at"] is None


def test_every_requeue_clears_the_claim_and_its_start():
    """A pending job was not claimed: no worker, no claim time, no lease (fail with runs left,
    recover, release, retry)."""
    ended = {"worker": None, "claimed_at": None, "lease_expires_at": None, "token": None, "lease_boot_ms": None}
    changes = [t.fail(job(), NOW, token="tok", error="boom"),
               t.recover(job(lease_expires_at=NOW - 1), NOW, expired=True),
               t.release(job(), NOW, token="tok", reason="shutting down"),
               t.retry(job("buried", claimed_at=NOW - 9_000), NOW, reset_attempts=False)]
    for c in changes:
        assert c.to_status == "pending"
        assert {k: c.fields[k] for k in ended if k in c.fields} == {k: None for k in ended if k in c.fields}
        assert "claimed_at" in c.fields


def test_release_does_not_count_the_run():
    c = t.release(job(attempts=2), NOW, token="tok", reason="shutting down")
    assert c.to_status == "pending" and c.fields["attempts"] == 1 and c.fields["run_at"] == NOW
    assert c.run == "released"
    assert t.release(job("cancel_requested"), NOW, token="tok", reason="x").to_status == "cancelled"


def test_cancel():
    assert t.cancel(job("pending"), NOW, token=None, reason=None).to_status == "cancelled"
    assert t.cancel(job("buried"), NOW, token=None, reason="old").message == "cancelled: old"
    assert t.cancel(job(), NOW, token=None, reason=None).to_status == "cancel_requested"
    assert t.cancel(job(), NOW, token="tok", reason=None).to_status == "cancelled"
    assert t.cancel(job("cancel_requested"), NOW, token=None, reason=None) is None
    with pytest.raises(InvalidState):
        t.cancel(job("completed"), NOW, token=None, reason=None)


def test_retry():
    assert t.retry(job("buried", attempts=3), NOW, reset_attempts=False).fields == {"run_at": NOW, "claimed_at": None,
                                                                                    "max_attempts": 4}
    assert t.retry(job("buried", attempts=1, max_attempts=3), NOW, reset_attempts=False).fields == {
        "run_at": NOW, "claimed_at": None}
    assert t.retry(job("buried"), NOW, reset_attempts=True).fields["attempts"] == 0
    with pytest.raises(InvalidState):
        t.retry(job("pending"), NOW, reset_attempts=False)


def test_recover_acts_on_what_the_engine_judged_expired():
    """One sweep decides: the engine says whether the lease expired (on the clock that times it),
    the rule does what the states say."""
    expired = job(lease_expires_at=NOW - 1)
    lost = t.recover(expired, NOW, expired=True)
    assert lost.to_status == "pending" and lost.run == "lost" and "lost" in lost.fields["error"]
    assert t.recover(job(attempts=3), NOW, expired=True).to_status == "buried"
    assert t.recover(job("cancel_requested"), NOW, expired=True).to_status == "cancelled"
    # the wall clock says expired, the engine's clock says not: nothing is done
    assert t.recover(expired, NOW, expired=False) is None
    assert t.recover(job(), NOW, expired=False, silent=True).message.startswith("worker w1 silent")
    assert t.recover(job("pending"), NOW, expired=True) is None


def test_rules_are_pure():
    """The same inputs give the same Change: an engine may call a rule again after a retry."""
    cases = [
        lambda: t.fail(job(), NOW, token="tok", error="e"),
        lambda: t.recover(job(lease_expires_at=NOW - 1), NOW, expired=True),
        lambda: t.release(job(), NOW, token="tok", reason="r"),
        lambda: t.heartbeat(job(), NOW, token=None, extend_ms=None),
    ]
    for make in cases:
        assert make() == make()
