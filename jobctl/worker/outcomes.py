"""Writing what a handler's run came to into the queue, and getting it there through outages.

The policy (retry or bury, backoff, what a release means) stays in queue.py; this module only
turns outcomes into queue calls. Every call goes through `Recorder.db`, which tells errors apart by
cause: a lock (DatabaseBusy), a full disk or a lost server connection is waited out with a jittered, growing delay, logged
once; any other unusable database (read-only, I/O error, damaged schema) propagates, and the work
loop stops. An outcome that cannot be written is kept and retried, and if the worker has to leave
without writing it, it is logged (job, what it was) so that nothing disappears silently.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable

from jobctl import handlers
from jobctl.durations import format_duration, to_rfc3339
from jobctl.engines.base import RunOutput
from jobctl.errors import (ConnectionLost, DatabaseBusy, DatabaseUnusable, DiskFull, InvalidState, JobctlError, NoSuchJob,
                           StatementCancelled)
from jobctl.models import Job, Record

if TYPE_CHECKING:
    from jobctl.worker.supervisor import Running

MAX_DB_DELAY = 5.0


def _jitter() -> float:
    """A factor from 0.5 to 1.5 (os.urandom: no import of random at start-up)."""
    return 0.5 + int.from_bytes(os.urandom(2), "big") / 65535


class Retry(Exception):
    """A database call hit a lock or a full disk; try again later."""


class Outcome(Record):
    """A finished handler's result, waiting to be written (kept while the database is busy)."""

    __slots__ = ("run", "kind", "returncode", "duration", "result", "error", "details", "next_try", "output", "lost")

    def __init__(self, run: Running,
                 kind: str,  # complete | fail | bury | cancel | release
                 returncode: int, duration: float, result: object = None, error: str | None = None,
                 details: dict | None = None, next_try: float = 0.0,
                 output: RunOutput | None = None,  # what is kept of the run's output, stored with the outcome
                 lost: bool = False):  # refused: the claim was no longer ours (logged as `lost`, not done)
        self.run = run
        self.kind = kind
        self.returncode = returncode
        self.duration = duration
        self.result = result
        self.error = error
        self.details = details
        self.next_try = next_try
        self.output = output
        self.lost = lost

    def describe(self) -> str:
        """What this outcome was, for a log line."""
        if self.kind == "complete":
            return "completed"
        if self.kind in ("fail", "bury"):
            return f"{'buried' if self.kind == 'bury' else 'failed'}: {self.error}"
        if self.kind == "cancel":
            return "cancelled"
        return "released (this run does not count)"


class Recorder:
    """The worker's writes: outcomes, and every other queue call through `db`."""

    def __init__(self, queue, log, worker_id: str, clock: Callable[[], float]):
        self.q = queue
        self.log = log
        self.worker_id = worker_id
        self.clock = clock
        self.unrecorded: list[Outcome] = []
        self.delay = 0.0
        self.busy_logged = False
        self.checkpoint_tried = False
        self.cause: type[JobctlError] = DatabaseBusy  # what the last outage was
        self.done = 0  # outcomes written since the worker started (for its registry row)
        self.failed = 0

    def cause_exit_code(self) -> int:
        """The exit code of a worker that leaves outcomes unwritten: 6 for a lock, 8 otherwise."""
        return self.cause.exit_code

    # -- the database --------------------------------------------------------------------------

    def db(self, fn, *args, **kwargs):
        """Call the queue; a lock, a full disk or a lost connection becomes Retry (logged once), with a jittered,
        growing delay. Any other unusable database (exit 8) propagates and stops the worker."""
        try:
            result = fn(*args, **kwargs)
        except DatabaseBusy:
            self.cause = DatabaseBusy
            self._wait_out("locked by another process")
            raise Retry() from None
        except StatementCancelled:  # (an administrator's pg_cancel_backend: nothing was done; as before, not fatal)
            self.cause = StatementCancelled
            self._wait_out("cancelling this worker's statements (pg_cancel_backend?)")
            raise Retry() from None
        except ConnectionLost:
            # A server restart or a terminated backend: the engine reconnects on a later call.
            # A write whose COMMIT was cut off may have been made: retrying it then meets the
            # job's new state, which is refused by its token (logged as lost), never applied twice.
            self.cause = ConnectionLost
            self._wait_out("unreachable (connection lost)")
            raise Retry() from None
        except DiskFull:
            self.cause = DiskFull
            # A full disk is waited out like a lock (space is usually freed soon): dying would drop
            # the finished handlers' results, and their jobs would run again. Our own WAL may be
            # what fills it: a checkpoint that truncates it can give the space back.
            if not self.checkpoint_tried:
                self.checkpoint_tried = True
                files = self.q.engine.files
                if files is not None:
                    try:
                        files.checkpoint()
                    except JobctlError:
                        pass
            self._wait_out("on a full disk")
            raise Retry() from None
        if self.busy_logged:
            self.busy_logged = False
            self.checkpoint_tried = False
            self.log("db-ok", "the database answers again")
            for o in self.unrecorded:
                o.next_try = 0.0  # write what waited first
        self.delay = 0.0
        return result

    def reconnected(self, why: str) -> None:
        """The engine replaced a lost connection (a server restart, a session ended by an
        administrator). Within an outage already logged (db-busy), db-ok says it; otherwise the
        engine found the loss before any call of ours failed (at the start of a transaction, or
        in a clock reading), so no write was cut off, but the operator should know: one line."""
        if not self.busy_logged:
            self.log("db-reconnected", f"the connection to the database was found closed ({why}); reconnected, "
                                       "no write was cut off")

    def _wait_out(self, why: str) -> None:
        self.delay = min(max(self.delay * 2, 0.1), MAX_DB_DELAY) * _jitter()
        if not self.busy_logged:
            self.busy_logged = True
            self.log("db-busy", f"the database is {why}; waiting and retrying (logged once)")

    # -- outcomes ------------------------------------------------------------------------------

    def _keep(self, o: Outcome) -> None:
        o.next_try = self.clock() + self.delay
        if o not in self.unrecorded:
            self.unrecorded.append(o)

    def complete_many(self, done: list[Outcome], claim: int, claim_options: dict):
        """Several handlers finished at once: complete them all and claim up to `claim` next jobs
        in one transaction (one commit instead of one per job). Returns the claimed jobs, or None
        when one of the claims is no longer ours (the caller then writes them one by one) or the
        database is busy (they are kept for later)."""
        try:
            _, claimed = self.db(self.q.complete_many_and_claim,
                                 [(o.run.job.id, o.run.job.token, o.result, o.output) for o in done],
                                 claim=max(claim, 0), actor=self.worker_id, **claim_options)
        except Retry:
            for o in done:
                self._keep(o)
            return []
        except DatabaseUnusable:
            for o in done:
                self._keep(o)
            raise
        except (InvalidState, NoSuchJob):
            return None
        self.done += len(done)
        return claimed

    def log_done(self, o: Outcome) -> None:
        self.log("done", f"in {format_duration(o.duration)}", o.run.job, duration=round(o.duration, 3))

    def record(self, o: Outcome, claim_options: dict | None = None,
               step: Callable[[], tuple[list[Job], list[Job]]] | None = None) -> tuple[bool, Job | None]:
        """Write one outcome; for a completion with claim_options, also claim the next job in the
        same transaction (by `step`, when the caller prepared it: Queue.prepare_complete_and_claim).
        Returns (written, the next job or None). Not written: kept for a retry. Refused because
        the claim is no longer ours: written, with o.lost set (logged here). The caller logs a
        completion (log_done) once it has started the next job."""
        job, token, actor = o.run.job, o.run.job.token, self.worker_id
        nxt = None
        try:
            if o.kind == "complete":
                if step is not None:
                    _, claimed = self.db(step)
                    nxt = claimed[0] if claimed else None
                elif claim_options is not None:
                    _, nxt = self.db(self.q.complete_and_claim, job.id, token=token, result=o.result,
                                     actor=actor, output=o.output, **claim_options)
                else:
                    self.db(self.q.complete, job.id, token=token, result=o.result, actor=actor, output=o.output)
            elif o.kind in ("fail", "bury"):
                dur = format_duration(o.duration)
                bury_reason = None
                if o.kind == "bury":
                    bury_reason = f"exit code {o.returncode} is listed in bury_exit_codes"
                done = self.db(self.q.fail, job.id, token=token, error=o.error, bury=o.kind == "bury",
                               actor=actor, details=o.details, bury_reason=bury_reason, output=o.output)
                if done.status == "pending":
                    wait = max(done.run_at - self.q.now(), 0) / 1000
                    self.log("failed", f"{o.error} (after {dur}); retry in {format_duration(wait)} "
                                       f"at {to_rfc3339(done.run_at)}", job, error=o.error,
                             retry_at=to_rfc3339(done.run_at), duration=round(o.duration, 3))
                else:
                    if o.kind == "bury":
                        why = f"exit code {o.returncode} is in bury_exit_codes"
                    elif job.attempts < job.max_attempts:
                        why = "cancellation was requested"
                    else:
                        why = "no runs left"
                    self.log("buried", f"{o.error} (after {dur}); {why}", job, error=o.error,
                             duration=round(o.duration, 3))
            elif o.kind == "cancel":
                dur, how = format_duration(o.duration), handlers.describe_exit(o.returncode)
                self.db(self.q.cancel, job.id, token=token, actor=actor, reason="stopped by the worker",
                        output=o.output)
                self.log("cancelled", f"handler stopped after {dur} ({how})", job)
            elif o.kind == "release":
                dur, how = format_duration(o.duration), handlers.describe_exit(o.returncode)
                done = self.db(self.q.release, job.id, token=token, actor=actor, output=o.output)
                if done.status == "cancelled":
                    self.log("cancelled", f"handler stopped ({how}); cancellation completed", job)
                else:
                    self.log("released", f"handler stopped after {dur} ({how}); back to pending, "
                                         "this run does not count", job)
        except Retry:
            self._keep(o)
            return False, None
        except DatabaseUnusable:
            self.cause = DatabaseUnusable
            self._keep(o)  # logged as unrecorded when the worker leaves
            raise
        except (InvalidState, NoSuchJob) as e:
            # The claim is no longer ours (recovered after a long database outage, or deleted).
            o.lost = True
            self.log("lost", f"result not recorded: {e}", job)
        if not o.lost:
            if o.kind == "complete":
                self.done += 1
            elif o.kind in ("fail", "bury"):
                self.failed += 1
        if o in self.unrecorded:
            self.unrecorded.remove(o)
        return True, nxt

    def due(self, now: float) -> list[Outcome]:
        return [o for o in self.unrecorded if now >= o.next_try]

    def log_unrecorded(self, why: str) -> None:
        for o in self.unrecorded:
            self.log("unrecorded", f"could not record this job's outcome ({o.describe()}) {why}; the job is "
                                   "recovered when its lease expires", o.run.job)
