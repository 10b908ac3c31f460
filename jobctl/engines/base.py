"""The Engine contract: the mechanism under the queue's policy.

Every method that changes jobs is one atomic step (on SQLite: one short BEGIN IMMEDIATE
transaction). The engine never decides policy — how long a backoff is, whether a failure buries
a job, which transitions are allowed. The queue decides; where a decision needs the job's current
row, the engine reads the row and calls the queue's `decide` function *inside* the transaction,
then applies what it returns. A second engine (PostgreSQL: SELECT ... FOR UPDATE, and
FOR UPDATE SKIP LOCKED for the claim) implements the same methods; the contract tests in
tests/test_engine_contract.py run against every engine.

Times are integers, milliseconds since the epoch, supplied by the caller (so the clock is
the queue's, never the engine's).
"""

from __future__ import annotations

from typing import Callable, Iterable, Protocol

from jobctl.models import Event, Job, Record


class NewJob(Record):
    """A validated job to insert."""

    __slots__ = ("queue", "type", "payload", "payload_hash", "priority", "max_attempts", "backoff", "timeout_ms",
                 "run_at", "idempotency_key", "unique", "after", "source")

    def __init__(self, queue: str, type: str, payload: str, payload_hash: str, priority: int, max_attempts: int,
                 backoff: str, timeout_ms: int, run_at: int, idempotency_key: str | None = None,
                 unique: bool = False, after: list[int] | None = None,  # None: a new empty list
                 source: str | None = None):  # where it came from, for errors ("line 7" of a batch)
        self.queue = queue
        self.type = type
        self.payload = payload
        self.payload_hash = payload_hash
        self.priority = priority
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.timeout_ms = timeout_ms
        self.run_at = run_at
        self.idempotency_key = idempotency_key
        self.unique = unique
        self.after = [] if after is None else after
        self.source = source


class Change(Record):
    """What a decision does to one job: new column values and the event that records it.

    `run` ends the current run with that outcome in the run log (completed, failed, lost,
    cancelled, released), which feeds throughput and duration figures.
    """

    __slots__ = ("to_status", "fields", "message", "details", "run", "actor")

    def __init__(self, to_status: str, fields: dict, message: str | None = None, details: dict | None = None,
                 run: str | None = None,
                 actor: str | None = None):  # who made it, when not the caller's actor: the claim's holder (SPEC §2)
        self.to_status = to_status
        self.fields = fields
        self.message = message
        self.details = details
        self.run = run
        self.actor = actor


Decide = Callable[[Job], Change]


class ClaimRequest(Record):
    __slots__ = ("worker", "token", "queues", "types", "lease_ms")

    def __init__(self, worker: str, token: str,
                 queues: list[str] | None = None,  # in order of preference; None = every queue
                 types: list[str] | None = None,
                 lease_ms: int | None = None):  # None = the job's timeout
        self.worker = worker
        self.token = token
        self.queues = queues
        self.types = types
        self.lease_ms = lease_ms


class Engine(Protocol):
    path: str

    # -- writes: one transaction each ------------------------------------------------------
    def insert_jobs(self, jobs: list[NewJob], now: int, actor: str, *,
                    on_progress: Callable[[int, int], None] | None = None) -> list[tuple[int, bool]]:
        """Insert all jobs or none; return (id, created) per job, in order. A job whose idempotency
        key exists returns the existing job (created=False) when type and payload hash match, else
        raises InvalidState naming it; a `unique` job returns a pending/running twin with the same
        queue, type and payload. An `after` id that does not exist raises NoSuchJob.
        on_progress(done, total) is called between chunks, inside the one transaction."""

    def claim(self, request: ClaimRequest, now: int) -> Job | None:
        """Atomically move the best ready job (SPEC §4 claim order) to running and return it."""

    def update_job(self, job_id: int, decide: Decide, now: int, actor: str) -> Job:
        """Read the job, call decide(job) -> Change (which may raise to refuse), apply it,
        write the event; all in one transaction. Raises NoSuchJob."""

    def update_jobs_and_claim(self, updates: list[tuple[int, Decide]], requests: list[ClaimRequest], now: int,
                              actor: str) -> tuple[list[Job], list[Job]]:
        """update_job for each (job id, decide), then a claim per request (stopping at the first
        that finds nothing), in one transaction: a worker finishing jobs and taking the next ones
        pays for one commit. If any decide refuses, nothing changes and nothing is claimed."""

    def update_expired(self, decide: Callable[[Job], Change | None], now: int, actor: str, *, heartbeat_before: int | None = None,
                       dry_run: bool = False) -> list[tuple[Job, Change]]:
        """Apply decide to every running or cancel_requested job whose lease expired before `now`
        (or, with heartbeat_before, that was claimed or heartbeated before it), one transaction.
        Concurrent sweeps act on each job exactly once."""

    def update_buried(self, decide: Decide, now: int, actor: str, *, queue: str | None = None,
                      type: str | None = None, dry_run: bool = False,
                      on_progress: Callable[[int, int], None] | None = None) -> list[tuple[Job, Change]]:
        """Apply decide to every buried job (optionally of one queue and type), one transaction;
        on_progress(done, total) as it goes."""

    def purge(self, status: str, finished_before: int, *, dry_run: bool = False, batch: int = 500,
              on_progress: Callable[[int], None] | None = None) -> int:
        """Delete finished jobs of `status` that finished before the time, with their history, in
        short transactions of `batch` jobs so workers are never held up long; on_progress(deleted
        so far) after each batch. Returns how many (would be, with dry_run) deleted."""

    def set_paused(self, queue: str, paused: bool, now: int) -> None: ...

    # -- reads: one consistent snapshot each ----------------------------------------------
    def get_job(self, job_id: int) -> Job: ...
    def get_jobs(self, job_ids: list[int]) -> list[Job]: ...
    def events(self, job_id: int) -> list[Event]: ...
    def dependencies(self, job_id: int) -> list[tuple[int, str | None]]:
        """The `after` ids of a job with their states (None when that job was purged)."""
    def queue_names(self) -> list[str]:
        """Queues that hold jobs or were ever paused (for shell completion)."""
    def list_jobs(self, *, statuses: Iterable[str] = (), queue: str | None = None, type: str | None = None,
                  limit: int = 50, stuck_at: int | None = None, created_before: int | None = None,
                  sort: str = "newest") -> list[Job]:
        """Jobs matching every filter, in a models.LIST_SORTS order. stuck_at: only held jobs whose
        lease expired or that ran past their timeout at that time. created_before: created earlier."""
    def paused_queues(self) -> set[str]: ...

    def stats_snapshot(self, now: int, *, limit: int = 10, sample: int = 10_000) -> dict:
        """The raw figures of `jobctl stats`, all from ONE consistent read, as a dict:
        counts {queue: {state: n}} (states of SPEC §3, but a pending job waiting on `after` jobs
        counts as "blocked", not "pending"); paused {queue: bool} (every row of the queues table);
        scheduled {queue: n} (pending, not blocked, run_at > now); oldest_ready {queue: run_at ms}
        (of the oldest pending, unblocked job with run_at <= now); aging [Job] (those jobs, oldest
        run_at first, at most `limit`); stuck [Job] (running or cancel_requested whose lease expired
        or that ran past claimed_at + timeout; oldest claim first, at most `limit`); stuck_total;
        buried [Job] (latest finished_at first, at most `limit`); runs_by_minute [(minute, outcome,
        n)] for runs that ended in (now - 60 min, now], minute 0 being the last 60 s; run_ms and
        wait_ms (ended - started of completed/failed runs, started - ready_at of all runs) of the
        latest `sample` runs of that hour. Cost must not grow with the number of finished jobs."""

    # -- the file -------------------------------------------------------------------------
    def backup(self, dest, *, on_progress: Callable[[int, int], None] | None = None) -> None:
        """A consistent copy of the live store at `dest` (private mode), safe while workers run."""
    def file_report(self) -> dict:
        """For `doctor`: integrity, schema_version, journal_mode, modes {path: mode}, wal_bytes."""
    def count_expired(self, now: int) -> int: ...
    def pending_types(self) -> dict[str, int]: ...
    def close(self) -> None: ...
