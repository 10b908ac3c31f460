"""A hypothesis state machine over the queue (issue 6, item 15) and the clock jumping (item 17).

The queue runs against a real file with an injected clock. After every step the whole table is
checked: no job lost, counts add up, a held job has a lease and a token, attempts stay within
what max_attempts and explicit operator retries allow, and finished jobs never change."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from jobctl.config import Settings
from jobctl.errors import InvalidInput, InvalidState, StaleToken
from jobctl.queue import Queue

from .util import connect_ro
from conftest import Clock, file_history

# Outcomes only, with no time bound: these run beside the other tests (see tests/conftest.py).
pytestmark = pytest.mark.shared

T0 = 1_800_000_000.0  # an arbitrary fixed start: runs are reproducible


class QueueMachine(RuleBasedStateMachine):
    @initialize()
    def open(self):
        self.tmp = tempfile.mkdtemp(prefix="jobctl-sm-")
        self.db = Path(self.tmp) / "jobs.db"
        self.clock = Clock(T0)
        # synchronous=normal: no crash here, so FULL's sync per commit proves nothing more (~1.3 s)
        self.q = Queue.open(self.db, Settings(synchronous="normal"), create=True, clock=self.clock)
        self.enqueued: set[int] = set()
        self.tokens: dict[int, list[str]] = {}  # every token ever handed out, per job
        self.retries: dict[int, int] = {}  # operator retries without --reset-attempts
        self.terminal: dict[int, dict] = {}  # the row of a job when first seen completed/cancelled

    def teardown(self):
        if hasattr(self, "q"):
            self.q.close()
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _ids(self):
        return sorted(self.enqueued)

    # -- rules ------------------------------------------------------------------------------

    @rule(max_attempts=st.integers(1, 3), delay=st.sampled_from([None, 0, 30, 3600]),
          priority=st.integers(-2, 2), timeout=st.sampled_from([10, 60, 600]))
    def enqueue(self, max_attempts, delay, priority, timeout):
        job_id = self.q.enqueue("t", {"n": len(self.enqueued)}, max_attempts=max_attempts, delay=delay,
                                priority=priority, timeout=timeout).id
        assert job_id not in self.enqueued
        self.enqueued.add(job_id)

    @rule(lease=st.sampled_from([None, 1, 30, 120]))
    def claim(self, lease):
        job = self.q.claim(worker="w", lease=lease)
        if job is not None:
            assert job.status == "running" and job.token and job.lease_expires_at > self.q.now() - 1
            assert job.token not in {t for ts in self.tokens.values() for t in ts}
            self.tokens.setdefault(job.id, []).append(job.token)

    def _held_or_any(self, data):
        ids = self._ids()
        return data.draw(st.sampled_from(ids)) if ids else None

    def _token(self, data, job_id):
        """The current token, an old one, none at all, or a forged one."""
        known = self.tokens.get(job_id, [])
        choices = [None, "forged"] + known
        return data.draw(st.sampled_from(choices))

    def _try(self, fn, *args, **kwargs):
        """A refusal must change nothing."""
        before = self._table()
        try:
            return fn(*args, **kwargs)
        except (InvalidState, StaleToken):
            assert self._table() == before
            return None

    @precondition(lambda self: self.enqueued)
    @rule(data=st.data(), with_result=st.booleans())
    def complete(self, data, with_result):
        job_id = self._held_or_any(data)
        token = self._token(data, job_id)
        job = self._try(self.q.complete, job_id, token=token, result={"ok": 1} if with_result else None)
        if job is not None:
            assert job.status == "completed"
            assert token is None or token == self.tokens[job_id][-1]

    @precondition(lambda self: self.enqueued)
    @rule(data=st.data(), bury=st.booleans(), retry_in=st.sampled_from([None, 0, 5]))
    def fail(self, data, bury, retry_in):
        job_id = self._held_or_any(data)
        token = self._token(data, job_id)
        if bury and retry_in is not None:  # a usage error: a buried job is not retried
            before = self._table()
            with pytest.raises(InvalidInput):
                self.q.fail(job_id, token=token, error="boom", bury=bury, retry_in=retry_in)
            assert self._table() == before
            return
        job = self._try(self.q.fail, job_id, token=token, error="boom", bury=bury, retry_in=retry_in)
        if job is not None:
            assert job.status in ("pending", "buried")
            assert token is None or token == self.tokens[job_id][-1]

    @precondition(lambda self: self.enqueued)
    @rule(data=st.data(), with_token=st.booleans())
    def cancel(self, data, with_token):
        job_id = self._held_or_any(data)
        token = self._token(data, job_id) if with_token else None
        self._try(self.q.cancel, job_id, token=token, reason="test")

    @precondition(lambda self: self.enqueued)
    @rule(data=st.data(), reset=st.booleans())
    def retry(self, data, reset):
        job_id = self._held_or_any(data)
        job = self._try(self.q.retry, job_id, reset_attempts=reset)
        if job is not None:
            assert job.status == "pending"
            if reset:
                self.retries[job_id] = 0
                assert job.attempts == 0
            else:
                self.retries[job_id] = self.retries.get(job_id, 0) + 1

    @rule(reset=st.booleans())
    def retry_buried(self, reset):
        for job in self.q.retry_buried(reset_attempts=reset):
            self.retries[job.id] = 0 if reset else self.retries.get(job.id, 0) + 1

    @precondition(lambda self: self.enqueued)
    @rule(data=st.data())
    def heartbeat(self, data):
        job_id = self._held_or_any(data)
        token = self._token(data, job_id)
        try:
            self._try(self.q.heartbeat, job_id, token=token)
        except Exception as e:  # CancelRequested: the lease was still extended
            assert type(e).__name__ == "CancelRequested"

    @precondition(lambda self: self.enqueued)
    @rule(data=st.data())
    def release(self, data):
        job_id = self._held_or_any(data)
        known = self.tokens.get(job_id)
        if known:
            self._try(self.q.release, job_id, token=data.draw(st.sampled_from(known)))

    @rule(older_than=st.sampled_from([None, None, 60]))
    def recover(self, older_than):
        before = self._table()
        done = self.q.recover(older_than=older_than)
        for job, action in done:
            assert before[job.id]["status"] in ("running", "cancel_requested")
            assert action in ("requeued", "buried", "cancelled")

    @rule(seconds=st.sampled_from([-3600, -60, 1, 10, 59, 61, 300, 3600]))
    def move_clock(self, seconds):
        self.clock.t += seconds

    # -- invariants -------------------------------------------------------------------------

    def _table(self) -> dict[int, dict]:
        conn = connect_ro(self.db)
        try:
            return {r["id"]: dict(r) for r in conn.execute("SELECT * FROM jobs")}
        finally:
            conn.close()

    @invariant()
    def nothing_lost_counts_add_up_leases_and_attempts_hold(self):
        if not hasattr(self, "q"):
            return
        table = self._table()
        assert set(table) == self.enqueued, "a job was lost or appeared"
        file_history(self.db)  # (history written ahead, filed as jobctl does it in batches)
        conn = connect_ro(self.db)
        try:
            counts = dict(conn.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall())
            events = dict(conn.execute("SELECT job_id, count(*) FROM events GROUP BY job_id").fetchall())
            last = {r[0]: r[1] for r in conn.execute(
                "SELECT job_id, to_status FROM events WHERE id IN (SELECT max(id) FROM events GROUP BY job_id)")}
        finally:
            conn.close()
        assert sum(counts.values()) == len(self.enqueued)
        assert set(counts) <= {"pending", "running", "cancel_requested", "completed", "buried", "cancelled"}
        for job_id, j in table.items():
            assert events.get(job_id, 0) >= 1 and last[job_id] == j["status"], (j, last.get(job_id))
            held = j["status"] in ("running", "cancel_requested")
            assert (j["token"] is not None) == held and (j["lease_expires_at"] is not None) == held, j
            assert (j["worker"] is not None) == held, j
            if held:
                assert j["token"] == self.tokens[job_id][-1]
            # SPEC §3: a retry keeps attempts, so each operator retry allows exactly one more run.
            assert 0 <= j["attempts"] <= j["max_attempts"] + self.retries.get(job_id, 0), j
            assert (j["finished_at"] is not None) == (j["status"] in ("completed", "buried", "cancelled")), j
            if j["status"] in ("completed", "cancelled"):
                if job_id in self.terminal:
                    assert j == self.terminal[job_id], "a finished job changed"
                else:
                    self.terminal[job_id] = j
        held_tokens = [j["token"] for j in table.values() if j["token"]]
        assert len(held_tokens) == len(set(held_tokens))


QueueMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
test_queue_state_machine = pytest.mark.slow(QueueMachine.TestCase)  # 60 runs of 40 steps, each on a new file


# -- 17. the clock jumps ------------------------------------------------------------------------

def test_clock_jumps_forward_and_back(tmp_path):
    """The wall clock steps; the boot clock that times leases (on SQLite) only moves as time passes."""
    clock, boot = Clock(T0), Clock(1000.0)
    q = Queue.open(tmp_path / "jobs.db", Settings(), create=True, clock=clock)
    q.engine.boot_clock = boot
    try:
        running = q.enqueue("t", {"n": "running"}, max_attempts=3).id
        last_run = q.enqueue("t", {"n": "last"}, max_attempts=1).id
        scheduled = q.enqueue("t", {"n": "scheduled"}, delay="30m").id
        claimed = {q.claim(worker="w1", lease="10m").id for _ in range(2)}
        assert claimed == {running, last_run}
        assert q.claim(worker="w1") is None  # the scheduled job is not due

        clock.t += 3600  # forward an hour: the wall clock says every lease expired, the boot clock does not
        assert q.recover() == []
        assert q.engine.count_expired() == 0
        clock.t += 601  # ten minutes pass (both clocks) with no heartbeat: the workers are lost
        boot.t += 601
        done = {job.id: action for job, action in q.recover()}  # one sweep acts
        assert done == {running: "requeued", last_run: "buried"}
        assert q.get(running).attempts == 1 and q.get(running).status == "pending"
        ready = [q.claim(worker="w2", lease="10m") for _ in range(3)]
        assert sorted(j.id for j in ready if j) == sorted([running, scheduled])
        rerun = next(j for j in ready if j and j.id == running)
        assert rerun.attempts == 2  # the lost run counted
        q.complete(rerun.id, token=rerun.token)

        clock.t -= 3600  # back an hour: the clock is now earlier than every lease and run_at set above
        later = q.enqueue("t", {"n": "later"}, delay="30m").id
        assert q.recover() == []  # a held lease does not expire because time went backwards
        assert q.claim(worker="w3") is None  # nothing runs early
        held = q.get(scheduled)
        assert held.status == "running" and held.worker == "w2"
        clock.t += 1800 + 1
        boot.t += 1800 + 1
        assert q.claim(worker="w3").id == later
        statuses = {j.id: j.status for j in q.list_jobs(limit=100)}
        assert statuses == {running: "completed", last_run: "buried", scheduled: "running", later: "running"}
    finally:
        q.close()
