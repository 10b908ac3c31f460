"""One sweep of `recover` acts, whatever the wall clock does. On SQLite a lease is timed on the
host's boot clock (with the boot it was taken in) besides the wall-clock lease_expires_at that
people see, so a step of the wall clock (NTP, a resumed VM, `date -s`) neither expires a live
lease nor delays a dead one. Here the wall clock is injected and steps; the boot clock is a second
injected clock that only moves as time passes, or the real one (boot_seconds)."""

import os
import shutil
import sqlite3
import subprocess
import time

import pytest

from conftest import JOBCTL, Clock
from jobctl.queue import Queue
from jobctl.engines.sqlite import boot_id, boot_seconds

pytestmark = pytest.mark.skipif(boot_id() is None, reason="no boot clock here (Linux only)")


@pytest.fixture
def boot(q):
    """The clock that times q's leases: it moves only when the test lets time pass."""
    clock = Clock(1000.0)
    q.engine.boot_clock = clock
    return clock


def passes(seconds, *clocks):
    for c in clocks:
        c.t += seconds


@pytest.mark.parametrize("step", [3600, -3600], ids=["forward", "back"])
def test_a_wall_clock_step_neither_expires_a_live_lease_nor_delays_a_dead_one(q, clock, boot, step):
    live = q.enqueue("t").id
    dead = q.enqueue("t").id
    a = q.claim(worker="alive", lease="60s")
    q.claim(worker="dead", lease="60s")
    clock.t += step  # the wall clock steps an hour; no time passes
    assert q.recover() == []
    assert q.engine.count_expired() == 0  # (doctor's "expired leases")
    passes(40, clock, boot)
    q.heartbeat(live, token=a.token)  # the live worker renews; the dead one does not
    passes(21, clock, boot)  # the dead lease ran out 1 s ago
    acted = [(j.id, action) for j, action in q.recover()]
    assert acted == [(dead, "requeued")]  # one sweep, at once
    assert q.get(live).status == "running" and q.get(dead).status == "pending"


def test_one_sweep_requeues_buries_and_cancels(q, clock, boot):
    requeue = q.enqueue("t", max_attempts=3).id
    bury = q.enqueue("t", max_attempts=1).id
    cancel = q.enqueue("t", max_attempts=3).id
    for _ in range(3):
        q.claim(worker="gone", lease="1s")
    q.cancel(cancel)
    passes(2, clock, boot)
    assert [(j.id, a) for j, a in q.recover(dry_run=True)] == [(requeue, "requeued"), (bury, "buried"),
                                                               (cancel, "cancelled")]
    assert {j.status for j in q.list_jobs()} == {"running", "cancel_requested"}  # the dry run changed nothing
    assert [(j.id, a) for j, a in q.recover()] == [(requeue, "requeued"), (bury, "buried"), (cancel, "cancelled")]
    assert [q.get(i).status for i in (requeue, bury, cancel)] == ["pending", "buried", "cancelled"]
    assert q.recover() == []


def test_a_heartbeat_extends_the_lease_on_the_boot_clock(q, clock, boot):
    job = q.enqueue("t").id
    claim = q.claim(worker="w", lease="10s")
    passes(8, clock, boot)
    q.heartbeat(job, token=claim.token)  # until 18 s after the claim
    clock.t -= 3600  # the wall clock steps back: no effect on the lease
    passes(8, clock, boot)
    assert q.recover() == []
    q.heartbeat(job, token=claim.token, extend="5s")  # until 21 s after the claim
    clock.t += 7200
    passes(4, clock, boot)
    assert q.recover() == []
    passes(2, clock, boot)
    assert [a for _, a in q.recover()] == ["requeued"]


def test_a_lease_taken_in_an_earlier_boot_has_expired(q, db, clock, boot):
    job = q.enqueue("t").id
    q.claim(worker="w", lease="1h")
    assert q.recover() == []
    raw = sqlite3.connect(db)
    raw.execute("UPDATE jobs SET lease_boot_id = lease_boot_id + 1")  # the host rebooted since
    raw.commit()
    raw.close()
    assert [(j.id, a) for j, a in q.recover()] == [(job, "requeued")]


def test_the_real_boot_clock_beside_a_stepping_wall_clock(q, clock):
    q.engine.boot_clock = boot_seconds
    live = q.enqueue("t").id
    dead = q.enqueue("t").id
    q.claim(worker="alive", lease="1h")
    q.claim(worker="dead", lease="1s")
    clock.t += 7200  # two hours forward on the wall clock: nothing expired on the boot clock
    assert q.recover() == []
    time.sleep(1.2)
    clock.t -= 3 * 3600  # now an hour behind the claims: the dead lease is found at once all the same
    assert [(j.id, a) for j, a in q.recover()] == [(dead, "requeued")]
    assert q.get(live).status == "running"


def test_without_a_boot_clock_a_lease_is_judged_on_the_wall_clock(q, clock):
    """A lease taken before the schema had boot-clock columns (or copied from PostgreSQL)."""
    job = q.enqueue("t").id
    q.claim(worker="w", lease="1s")
    assert q.get(job).lease_boot_ms is None  # (an injected clock alone: no boot clock)
    clock.t += 2
    assert [a for _, a in q.recover()] == ["requeued"]


@pytest.mark.parametrize("step", [3600, -3600], ids=["forward", "back"])
def test_older_than_judges_silence_on_the_boot_clock_too(q, clock, boot, step):
    """`recover --older-than`: a job neither claimed nor heartbeated for that long is lost, however
    long its lease; a step of the wall clock makes no job silent, and hides none."""
    chatty = q.enqueue("t").id
    silent = q.enqueue("t").id
    a = q.claim(worker="chatty", lease="1h")
    q.claim(worker="silent", lease="1h")
    clock.t += step
    assert q.recover(older_than="30m") == []
    passes(20 * 60, clock, boot)
    q.heartbeat(chatty, token=a.token, extend="1h")
    passes(10 * 60 + 1, clock, boot)
    assert [(j.id, a) for j, a in q.recover(older_than="30m")] == [(silent, "requeued")]
    assert "silent since" in q.events(silent)[-1].message
    assert q.get(chatty).status == "running"


def test_a_worker_never_recovers_its_own_live_claims(q, clock, boot):
    job = q.enqueue("t").id
    mine = q.claim(worker="me", lease="1s")
    for _ in range(3):
        passes(60, clock, boot)
        assert q.recover(exclude_tokens={mine.token}) == []
    assert q.get(job).status == "running"


def test_the_sweep_reads_only_held_jobs_through_an_index(q, boot):
    for _ in range(50):
        q.enqueue("t")
    q.claim(worker="w")
    expired, args = q.engine._expired_where(q.now())
    over, over_args = q.engine._over_timeout_where(q.now())
    assert "lease_boot_ms" in expired and "claimed_boot_ms" in over
    stuck = f"({expired} OR {over})"  # (stats and list --stuck)
    for sql, args in ((f"SELECT * FROM jobs WHERE status IN ('running', 'cancel_requested') AND ({expired})", args),
                      (f"SELECT count(*) FROM jobs WHERE status IN ('running', 'cancel_requested') AND ({expired})", args),
                      (f"SELECT type, count(*) FROM jobs WHERE status IN ('running', 'cancel_requested') AND {stuck} "
                       "GROUP BY type", [*args, *over_args])):
        plan = " ".join(r[3] for r in q.engine.conn.execute("EXPLAIN QUERY PLAN " + sql, args))
        assert "USING" in plan and "INDEX" in plan and "SCAN jobs" not in plan.replace("SCAN jobs USING", ""), plan


@pytest.mark.parametrize("step", [3600, -3600], ids=["forward", "back"])
def test_a_wall_clock_step_puts_no_run_past_its_timeout(q, clock, boot, step):
    """"Ran past its timeout" (stats and its --check, list --stuck, show) is judged on the clock
    that times the lease, from the claim's time on it: a step of the wall clock, before or after
    the leases were renewed, makes no run stuck and hides none."""
    from jobctl.stats import check, explain

    slow = q.enqueue("t", timeout="10m").id
    quick = q.enqueue("t", timeout="1m").id
    claims = [q.claim(worker="w", lease="1h") for _ in (slow, quick)]
    passes(30, clock, boot)
    clock.t += step  # the wall clock steps; the workers renew their leases after it
    for c in claims:
        q.heartbeat(c.id, token=c.token)

    def stuck() -> tuple[list, dict]:
        figures, now = q.stats()
        listed = [j.id for j in q.list_jobs(stuck=True)]
        assert figures["totals"]["stuck"] == len(figures["stuck"]) == len(listed), figures["stuck"]
        return listed, figures

    listed, figures = stuck()
    assert listed == [] and check(figures, max_stuck=0)[0]
    assert explain(q.get(slow), q.now(), running_ms=q.engine.running_ms(q.get(slow), q.now())) is None
    passes(31, clock, boot)  # 61 s since the claims on the clock of the leases: past the quick one's minute
    listed, figures = stuck()
    assert listed == [quick] and not check(figures, max_stuck=0)[0]
    assert [(j["id"], j["stuck_reason"], j["running_for"]) for j in figures["stuck"]] == [
        (quick, "over its timeout", 61.0)]
    job = q.get(quick)
    why = explain(job, q.now(), lease_expired=q.engine.lease_expired(job, q.now()),
                  running_ms=q.engine.running_ms(job, q.now()))
    assert why == "running for 1m1s, past its timeout of 1m", why


@pytest.mark.skipif(shutil.which("faketime") is None, reason="libfaketime is not installed")
@pytest.mark.parametrize("step", ["+1h", "-1h"])
def test_stats_check_under_a_real_step_of_the_clock(any_db, step):
    """The same through the command line, its whole wall clock stepped by libfaketime (the boot
    clock left alone, as a real step leaves it). On PostgreSQL the server's clock judges: a step of
    the client's changes nothing."""
    with Queue.open(any_db, create=True) as q:
        q.enqueue("t", timeout="10m")
        q.claim(worker="w", lease="1h")
    env = {**os.environ, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    r = subprocess.run(["faketime", "-f", step, *JOBCTL, "--db", str(any_db), "stats", "--check", "--max-stuck", "0"],
                       capture_output=True, text=True, timeout=60, env=env)
    assert (r.returncode, r.stdout) == (0, "OK: 0 stuck (max 0)\n"), r.stdout + r.stderr


@pytest.mark.parametrize("step", [3600, -3600], ids=["forward", "back"])
def test_the_times_shown_of_a_held_job_leave_a_step_out(q, clock, boot, step):
    """`show` ("lease expired 1s ago", "lease until … (in 9m)"), `list` (WHEN "for 1m1s") and
    `recover` (LEASE EXPIRED) measure a held job's times against lease_now: the wall clock less the
    step since its lease was timed, never "expired 1h ago" for a lease that ran out a second ago."""
    from jobctl import output
    from jobctl.stats import explain

    live = q.enqueue("t").id
    dead = q.enqueue("t").id
    q.claim(worker="alive", lease="10m")
    q.claim(worker="dead", lease="60s")
    passes(61, clock, boot)
    clock.t += step
    now = q.now()
    gone, alive = q.get(dead), q.get(live)
    assert q.engine.lease_now(gone, now) == now - step * 1000
    why = explain(gone, q.engine.lease_now(gone, now), lease_expired=q.engine.lease_expired(gone, now))
    assert why is not None and why.startswith("lease expired 1s ago: worker dead looks lost"), why
    assert output.when_text(alive, q.engine.lease_now(alive, now)) == "for 1m1s"
    assert output.ago(alive.lease_expires_at, q.engine.lease_now(alive, now)) == "in 8m59s"
    from jobctl.top.widgets import tab_row  # (top's running tab: RUNNING FOR)

    _, cells = tab_row("running", alive, now, True, nows={alive.id: q.engine.lease_now(alive, now)})
    assert "1m1s" in [c.plain for c in cells], cells
    [(job, _)] = q.recover(dry_run=True)
    assert output.ago(job.lease_expires_at, q.engine.lease_now(job, now)) == "1s ago"


def test_a_run_claimed_without_the_boot_clock_is_timed_on_it_from_its_next_heartbeat(q, clock):
    """A run claimed before the schema had claimed_boot_ms (or in an earlier boot) is judged on
    the wall clock until a heartbeat times its lease on this boot's clock: from then on, from the
    claim as the wall clock placed it then."""
    job = q.enqueue("t", timeout="1m").id
    claim = q.claim(worker="w", lease="1h")  # (an injected clock alone: no boot clock)
    assert q.get(job).claimed_boot_ms is None
    boot = q.engine.boot_clock = Clock(5000.0)
    passes(20, clock, boot)
    q.heartbeat(job, token=claim.token)
    assert q.engine.running_ms(q.get(job), q.now()) == 20_000
    clock.t += 3600
    assert q.list_jobs(stuck=True) == []
    passes(41, clock, boot)
    assert [j.id for j in q.list_jobs(stuck=True)] == [job]
