"""The Engine contract: the mechanism under the queue's policy.

Every method that changes jobs is one atomic step (on SQLite: one short BEGIN IMMEDIATE
transaction; on a server engine: one transaction that takes its row locks up front). The engine
never decides policy — how long a backoff is, whether a failure buries a job, which transitions
are allowed. The rules live in jobctl/transitions.py as pure functions; where a decision needs the
job's current row, the engine reads the row and calls `decide(job, now)` *inside* the transaction,
then applies the Change it returns (or nothing, for None). A decide function may be called more
than once for one job (a server engine retrying a serialization failure) and must not do I/O.

Time is the database's: each transaction reads "now" once (SQLite: this host's clock; a server
engine: the server's), as integer milliseconds since the epoch, and passes it to decide. So leases
stay right when the hosts of several workers disagree about the time. `now()` outside a transaction
gives the same clock's reading, for views that show ages.

Errors are raised by cause (jobctl.errors): DatabaseBusy only for lock contention (nothing changed,
safe to retry); DatabaseUnusable for a database that cannot be used (missing, read-only, full,
damaged, not jobctl's, too old an SQLite); NoSuchJob; InvalidState/StaleToken from decide.

Capabilities are declared by every engine (attributes of the Engine protocol, as huey's
`storage.blocking`), never probed with getattr/hasattr:
- `files` (FileStore or None): the database is a local file that jobctl can back up and checkpoint;
- `wakes`: has_changed() / wait_for_change(timeout) tell of other processes' commits cheaply, so
  an idle worker's step may skip its claim while nothing changed, and wait loops sleep on them;
- `reconnects`: a lost connection is made again by a later call, and `on_reconnect` told why;
- `STORES_NUL`: payload and result text may hold NUL (else such text is refused, never changed).
The contract suite in tests/test_engine_contract.py runs against every engine.

The SQL engines (SQLite, PostgreSQL) implement this contract once, in jobctl/engines/sql.py
(SQLEngine): each engine adds only what is its own (connections, transactions and locks, its
clock, schema and files, wake-ups, health checks) through the hooks that module names.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, Iterator, Protocol

from jobctl.models import Event, Job, Record
from jobctl.payloads import sha256  # (CPython's own: hashlib would load OpenSSL)


# The key that finds a job's live twins (`--unique`): every job has one, written at insert and
# kept in step by an edit of its payload or queue and by a retry (sql.py); an index finds a live
# job by it (SQLite: jobs_pending_key, the keys of pending jobs, and the few running ones through
# jobs_status; PostgreSQL: jobs_unique, the keys of live jobs). 16 hex digits: the first 8 of the sha256 of its
# queue, NUL, type (one hash per queue and type, not one per job), then the first 8 of its payload
# hash. A lookup compares queue, type and payload_hash as well, so two jobs with one key (rare,
# and harmless but for a row read) are never taken for each other. Measured (docs/performance.md,
# "Every job's unique key"): 100,000 jobs inserted at once cost about 0.2 CPU s more than without
# keys, 0.35 s with 16 digits of a sha256 per job, 0.6 s with all 64 (and a 3× larger index).
UNIQUE_KEY_DIGITS = 8  # of each of the two hashes


@lru_cache(maxsize=1024)
def _queue_and_type_key(queue: str, type: str) -> str:
    return sha256(f"{queue}\0{type}".encode()).hexdigest()[:UNIQUE_KEY_DIGITS]


def unique_key(queue: str, type: str, payload_hash: str) -> str:
    return _queue_and_type_key(queue, type) + payload_hash[:UNIQUE_KEY_DIGITS]


class NewJob(Record):
    """A validated job to insert. Its earliest start is now + delay_ms, or not_before if later
    (`--at`); the engine reads "now" inside the insert's transaction."""

    __slots__ = ("queue", "type", "payload", "payload_hash", "priority", "max_attempts", "backoff", "timeout_ms",
                 "delay_ms", "not_before", "idempotency_key", "unique", "after", "source", "cost_units",
                 "concurrency_group", "on_buried", "on_completed", "on_cancelled", "after_previous")

    def __init__(self, queue: str, type: str, payload: str, payload_hash: str, priority: int, max_attempts: int,
                 backoff: str, timeout_ms: int, delay_ms: int = 0, not_before: int | None = None,
                 idempotency_key: str | None = None, unique: bool = False,
                 after: list[int] | None = None,  # None: a new empty list
                 source: str | None = None,  # where it came from, for errors ("line 7" of a batch)
                 cost_units: int = 0,  # 0 and None: not set, the claimer's config decides (limits.Limits.resolve)
                 concurrency_group: str | None = None,
                 on_buried: str | None = None, on_completed: str | None = None, on_cancelled: str | None = None,
                 after_previous: bool = False):  # also wait for the job before it in the same insert (a chain)
        self.queue = queue
        self.type = type
        self.payload = payload
        self.payload_hash = payload_hash
        self.priority = priority
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.timeout_ms = timeout_ms
        self.delay_ms = delay_ms
        self.not_before = not_before
        self.idempotency_key = idempotency_key
        self.unique = unique
        self.after = [] if after is None else after
        self.source = source
        self.cost_units = cost_units
        self.concurrency_group = concurrency_group
        self.on_buried = on_buried  # reaction types (Job.reaction_type)
        self.on_completed = on_completed
        self.on_cancelled = on_cancelled
        self.after_previous = after_previous

    def run_at(self, now: int) -> int:
        return max(now + self.delay_ms, self.not_before or 0)

    @property
    def unique_key(self) -> str:
        return unique_key(self.queue, self.type, self.payload_hash)


class Inserted:
    """(id, created) of each job of one insert, in order, kept small however many there are: runs
    of consecutive ids with the same `created`, three integers a run, so a batch of a million jobs
    under consecutive ids takes a few bytes, not a list of a million tuples."""

    __slots__ = ("_runs", "_n")

    def __init__(self, pairs: Iterable[tuple[int, bool]] = ()):
        from array import array

        self._runs = array("q")  # start, count, created (0 or 1) of each run
        self._n = 0
        for job_id, created in pairs:
            self.append(job_id, created)

    def append(self, job_id: int, created: bool) -> None:
        runs = self._runs
        if runs and runs[-1] == created and runs[-3] + runs[-2] == job_id:
            runs[-2] += 1
        else:
            runs.extend((job_id, 1, 1 if created else 0))
        self._n += 1

    def append_run(self, first: int, count: int, created: bool) -> None:
        """`count` jobs under the consecutive ids first, first + 1, ..."""
        runs = self._runs
        if runs and runs[-1] == created and runs[-3] + runs[-2] == first:
            runs[-2] += count
        else:
            runs.extend((first, count, 1 if created else 0))
        self._n += count

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[tuple[int, bool]]:
        runs = self._runs
        for i in range(0, len(runs), 3):
            created = bool(runs[i + 2])
            for job_id in range(runs[i], runs[i] + runs[i + 1]):
                yield job_id, created

    def ids(self) -> Iterator[int]:
        runs = self._runs
        for i in range(0, len(runs), 3):
            yield from range(runs[i], runs[i] + runs[i + 1])

    @property
    def last_id(self) -> int:
        return self._runs[-3] + self._runs[-2] - 1

    def id_runs(self) -> list[tuple[int, int]]:
        """(first, last) of each run of consecutive ids."""
        runs = self._runs
        out: list[tuple[int, int]] = []
        for i in range(0, len(runs), 3):
            first, last = runs[i], runs[i] + runs[i + 1] - 1
            if out and out[-1][1] + 1 == first:
                out[-1] = (out[-1][0], last)
            else:
                out.append((first, last))
        return out


class Change(Record):
    """What a decision does to one job: new column values and the event that records it.

    `run` ends the current run with that outcome in the run log (completed, failed, lost,
    cancelled, released), which feeds throughput and duration figures. A Change that keeps the
    status and has no message writes no event (a heartbeat, a progress report).

    `reaction` (transitions.with_reaction): a job to insert in the same transaction, after the
    change is applied. Its payload is filled in by the engine: {"event": the new status, "job": the
    changed job's to_dict(), as it is after the change}; its enqueue event names the job it reacts
    to. The engine refuses (InvalidState) a change that makes a job buried, completed or cancelled
    when the job has a reaction type for that state and the Change carries no reaction: a
    reaction is never lost silently."""

    __slots__ = ("to_status", "fields", "message", "details", "run", "actor", "reaction", "log", "frees")

    def __init__(self, to_status: str, fields: dict, message: str | None = None, details: dict | None = None,
                 run: str | None = None,
                 actor: str | None = None,  # who made it, when not the caller's actor: the claim's holder
                 reaction: NewJob | None = None):  # a job to enqueue with this change (see below)
        self.to_status = to_status
        self.fields = fields
        self.message = message
        self.details = details
        self.run = run
        self.actor = actor
        self.reaction = reaction
        self.log: RunOutput | None = None  # the run's output so far, stored with this change (see below)
        # The job leaves a concurrency limit's count: claims that the limit held back may now
        # succeed, so waiting workers are woken as for a job that became ready (set by the queue).
        self.frees = False


class RunOutput(Record):
    """A handler's output as the worker keeps it: the first bytes, the last bytes, and how many
    were dropped between them. Set on the Change of a heartbeat or of a run's outcome (Change.log),
    the engine stores it in the same transaction, for the run that the job's claimed_at names;
    when the change ends the run (the job leaves running/cancel_requested), the run's ended_at is
    now. Read back with run_output."""

    __slots__ = ("head", "tail", "dropped")

    def __init__(self, head: bytes, tail: bytes, dropped: int = 0):
        self.head = head
        self.tail = tail
        self.dropped = dropped


class RunLog(Record):
    """One run's output: run is its number, the attempt the claim counted ("run 3 of 5" in the
    history, JOBCTL_ATTEMPT); runs is the number of the job's latest run; ended_at and outcome
    come from the run's end (None while it runs). kept=False: a run that started and kept no
    output (it printed nothing)."""

    __slots__ = ("job_id", "run", "runs", "started_at", "ended_at", "head", "tail", "dropped", "outcome", "kept")

    def __init__(self, job_id: int, run: int, runs: int, started_at: int, ended_at: int | None, head: bytes,
                 tail: bytes, dropped: int,
                 outcome: str | None = None,  # how the run ended (the runs table's outcome); None: running
                 kept: bool = True):
        self.outcome = outcome
        self.kept = kept
        self.job_id = job_id
        self.run = run
        self.runs = runs  # the number of the job's latest run
        self.started_at = started_at
        self.ended_at = ended_at
        self.head = head
        self.tail = tail
        self.dropped = dropped

    @property
    def size(self) -> int:
        """Every byte the run wrote, kept or not."""
        return len(self.head) + self.dropped + len(self.tail)


Decide = Callable[[Job, int], "Change | None"]


class Decision:
    """A decide(job, now) with what an engine may rely on about it, as a typed value (frozen).

    time_free: it never reads `now` (a completion's: Queue makes it so). An engine may then call it
    before its transaction, on the job as that engine last saw it (a job it claimed), and write the
    change only where the row still matches what the decision rests on (SQLite's held completion,
    PostgreSQL's one-statement step); elsewhere, and for any other decide, it decides on the row."""

    __slots__ = ("decide", "time_free")
    decide: Decide
    time_free: bool

    def __init__(self, decide: Decide, *, time_free: bool = False):
        object.__setattr__(self, "decide", decide)
        object.__setattr__(self, "time_free", time_free)

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"a Decision is not changed once made ({name})")

    def __call__(self, job: Job, now: int) -> "Change | None":
        return self.decide(job, now)

    def __repr__(self) -> str:
        return f"Decision({self.decide!r}, time_free={self.time_free})"


class ClaimRequest(Record):
    __slots__ = ("worker", "token", "queues", "types", "lease_ms", "limits")

    def __init__(self, worker: str, token: str,
                 queues: list[str] | None = None,  # in order of preference; None = every queue
                 types: list[str] | None = None,
                 lease_ms: int | None = None,  # None = the job's timeout
                 limits=None):  # limits.Limits the claim must respect (None or empty: none)
        self.worker = worker
        self.token = token
        self.queues = queues
        self.types = types
        self.lease_ms = lease_ms
        self.limits = limits


class Check(Record):
    """One line of `jobctl doctor`: what was checked, whether it is fine, and the detail."""

    __slots__ = ("name", "ok", "detail", "data")

    def __init__(self, name: str, ok: bool, detail: str,
                 data: dict | None = None):  # extra keys for `doctor --json` (e.g. damaged_jobs)
        self.name = name
        self.ok = ok
        self.detail = detail
        self.data = data


class FileStore(Protocol):
    """The capability of an engine whose database is one local file."""

    path: str

    def backup(self, dest: Path, *, on_progress: Callable[[int, int], None] | None = None) -> None:
        """A consistent copy of the live file at `dest` (mode 0600), safe while workers run."""

    def checkpoint(self, *, wait: float | None = None) -> tuple[int, int, int]:
        """Fold the write-ahead log back into the file and truncate it (waiting at most `wait`
        seconds for other connections, default the busy timeout)."""


class Engine(Protocol):
    @property
    def url(self) -> str:
        """What reopens this database from another process (a handler's JOBCTL_DB)."""
    @property
    def location(self) -> str:
        """The database, fit to print: never a password."""
    @property
    def identity(self) -> str:
        """Stable across processes and hosts, e.g. for a registry of running handlers."""
    @property
    def files(self) -> FileStore | None:
        """The file capability (backup, checkpoint), or None for a server database."""

    # -- capabilities, declared by each engine (see the module docstring) -------------------
    wakes: bool
    """has_changed() is cheap and tells of other processes' commits, and wait_for_change() sleeps
    until one: idle loops watch instead of claiming. False: they would say "changed" every time
    (the caller polls)."""
    reconnects: bool
    """A lost connection is made again by a later call (a server engine); the engine then calls
    on_reconnect (when set) with why the old one was lost."""
    on_reconnect: Callable[[str], None] | None
    STORES_NUL: bool
    """A payload or result text may hold NUL; False: such text is refused (exit 2), never changed."""
    created: bool
    """Opening this engine created the database (a SQLite file; jobctl's schema on PostgreSQL):
    `enqueue` warns of it, since a misspelled path must not pass for an empty queue."""

    def has_changed(self) -> bool:
        """Whether a job may have become ready since the last call (a commit by anyone)."""
    def wait_for_change(self, timeout: float) -> bool:
        """Block until another process commits or `timeout` seconds pass; True if one did."""

    def orders_changed(self) -> bool:
        """As has_changed, remembered apart, for orders to workers (`jobctl workers drain|stop`):
        whether one may have been written since the last call (SQLite: any commit; PostgreSQL: a
        NOTIFY that carries one). A worker reads its registry row only then."""

    def now(self) -> int:
        """The database's clock, ms since the epoch."""

    # -- the workers' registry (`jobctl workers`): each a short transaction or read --------
    def register_worker(self, instance: str, info: dict, started_at: int | None = None) -> int:
        """Add the row of a worker process (forgetting rows stopped or not seen for a day); its started_at."""
    def renew_worker(self, instance: str, state: str, done: int, failed: int) -> tuple[bool, str | None]:
        """last_seen = now, with the worker's state and counts: (the row exists, the operator's request)."""
    def worker_stopped(self, instance: str, done: int, failed: int) -> None:
        """The worker left cleanly: its row says stopped."""
    def worker_request(self, instance: str) -> tuple[bool, str | None]:
        """(the row exists, the operator's request: drain, stop or None)."""
    def order_workers(self, request: str, *, workers: list[str] | None = None, host: str | None = None,
                      actor: str) -> tuple[list[dict], list[str]]:
        """Ask the workers named, on a host, or all to drain or stop: (rows ordered, names with no row)."""
    def worker_rows(self, *, jobs: bool = True) -> tuple[int, list[dict], list[tuple[int, str, str | None]]]:
        """(now, every registry row, the held jobs as (id, type, worker)) from one read."""

    # -- writes: one transaction each ------------------------------------------------------
    def insert_jobs(self, jobs: list[NewJob], actor: str, *,
                    on_progress: Callable[[int, int], None] | None = None) -> list[tuple[int, bool]]:
        """Insert all jobs or none; return (id, created) per job, in order. A job whose idempotency
        key exists returns the existing job (created=False) when type and payload hash match, else
        raises InvalidState naming it; a `unique` job returns a pending/running twin with the same
        queue, type and payload. An `after` id that does not exist raises NoSuchJob. A job with
        `after_previous` also waits for the job listed before it (its id, or the existing job that
        it returned), so a list of such jobs is a chain.
        on_progress(done, total) is called between chunks, inside the one transaction."""

    def insert_stream(self, jobs: Iterable[NewJob], total: int, actor: str, *,
                      on_progress: Callable[[int, int], None] | None = None) -> Inserted:
        """insert_jobs for more jobs than fit in memory: `jobs` is iterated once in chunks inside
        the one transaction (it may be iterated again from the start, when a server engine runs
        the transaction again), `total` is only for on_progress. Returns the ids compactly."""

    def claim(self, request: ClaimRequest) -> Job | None:
        """Atomically move the best ready job to running and return it. Ready: pending, run_at
        <= now, every `after` job completed, neither its queue nor its type in that queue paused by a
        pause that has not ended (see set_paused); best: of the first listed queue that
        has one, highest priority, then earliest run_at, then lowest id. With request.limits, only
        jobs that the limits admit, counted inside the claim's transaction (limits.admission)."""

    def limit_figures(self, limits, *, held_ready: bool = True) -> dict:
        """For views and for a worker deciding how long to sleep, from one consistent read: now;
        starts {type: [start ms, newest first]} in each rate window; held {key: units running}
        (key: limits.key_of); admission (limits.Admission); held_ready {key: ready jobs that the
        limit of that key holds back} (empty with held_ready=False: counting them reads every
        ready job that a limit holds back, which a worker deciding how long to sleep needs not)."""

    def update_job(self, job_id: int, decide: Decide, actor: str) -> Job:
        """Read the job, call decide(job, now) -> Change (which may raise to refuse), apply it,
        write the event; all in one transaction. Raises NoSuchJob."""

    def update_jobs_and_claim(self, updates: list[tuple[int, Decide]], requests: list[ClaimRequest],
                              actor: str) -> tuple[list[Job], list[Job]]:
        """update_job for each (job id, decide), then a claim per request (stopping at the first
        that finds nothing), in one transaction: a worker finishing jobs and taking the next ones
        pays for one commit. If any decide refuses, nothing changes and nothing is claimed."""

    def prepare_update_and_claim(self, job_id: int, decide: Decide, request: ClaimRequest,
                                 actor: str) -> Callable[[], tuple[list[Job], list[Job]]]:
        """update_jobs_and_claim([(job_id, decide)], [request], actor), to be called later: the
        worker prepares it while a handler runs, and calls what this returns when the handler
        exited. Touches no database now; whatever can be worked out ahead (a Decision that is
        time_free, on the job as this engine claimed it) is, and the call does the rest, with the
        same result as update_jobs_and_claim at that moment."""

    def lease_expired(self, job: Job, now: int) -> bool:
        """Whether a held job's lease has expired, judged on the clock that times leases: one that a
        step of the wall clock does not move (SQLite: the host's boot clock; PostgreSQL: the
        server's clock), so that one sweep can act on what it finds."""

    def lease_silent(self, job: Job, now: int, silent_for_ms: int) -> bool:
        """Whether a held job was neither claimed nor heartbeated in the last silent_for_ms, on the
        same clock as lease_expired."""

    def lease_now(self, job: Job, now: int) -> int:
        """`now` (a wall-clock time) less any step of the wall clock since the held job's lease was
        last timed, on the same clock as lease_expired: what the relative times of its claim, lease
        and last change ("lease expired 2s ago", "for 5m") are measured against; `now` itself
        where no step can be seen (PostgreSQL: the server's clock has none to correct)."""
        return now

    def running_ms(self, job: Job, now: int) -> int | None:
        """How long a held job's run has lasted, on the same clock as lease_expired (None: not
        claimed): what `stats`, `list --stuck` and `show` compare with its timeout."""

    def update_expired(self, decide: Decide, actor: str, *, silent_for_ms: int | None = None,
                       dry_run: bool = False) -> list[tuple[Job, Change]]:
        """Call decide on every running or cancel_requested job whose lease expired as lease_expired
        judges it (or, with
        silent_for_ms, that was claimed or heartbeated longer ago), one transaction; apply what it
        returns. Concurrent sweeps act on each job exactly once."""

    def update_dependents(self, job_id: int, decide: Decide, actor: str) -> list[Job]:
        """Apply decide to the job, then to every job that waits on it (`after`), directly or
        through others, oldest first, in ONE transaction; return the job and each dependent that
        changed. Raises NoSuchJob; if any decide refuses, nothing changes."""

    def select_ids(self, selection, *, admission=None) -> list[int]:
        """The ids of the jobs a selection.Selection matches now (one read), in id order. admission
        (a limits.Admission): what its --status held counts as held by a limit (None: pauses only)."""

    def update_selection(self, ids: list[int], selection, decide: Decide, actor: str, *, limits=None,
                         dry_run: bool = False, batch: int = 1000, budget_ms: float | None = None,
                         on_progress: Callable[[int, int], None] | None = None) -> Iterator[tuple[int, str, str | None]]:
        """Apply decide to each of `ids` that the selection still matches, in transactions of at
        most `batch` jobs and about `budget_ms` each (None: the engine's own), so workers keep running; yields (id, outcome,
        detail): "changed" (the new status), "unchanged", "skipped" (it changed meanwhile, or is
        gone), "refused" (the rule's reason). on_progress(done, total) after each transaction.
        limits (a limits.Limits; for a selection of held jobs): what a limit holds back is judged
        again in each transaction, so a job a limit let go meanwhile is skipped like any other."""

    def purge(self, status: str, older_than_ms: int, *, dry_run: bool = False, batch: int = 500,
              on_progress: Callable[[int], None] | None = None, keep_ms: dict[str, int] | None = None,
              selection=None) -> int:
        """(selection: only the jobs it matches too.) Delete jobs of a finished `status` that finished more than older_than_ms ago, with their
        history and stored output, in short transactions of `batch` jobs so workers are never held up long;
        on_progress(deleted so far) after each batch. Returns how many (would be, with dry_run).
        keep_ms: {type: ms}: a job of such a type is kept at least that long after it finished (a
        rate limit's window, which counts its runs' starts)."""

    def set_paused(self, queue: str, paused: bool, *, type: str | None = None, until: int | None = None) -> None:
        """Pause (or resume) claims from a queue, or with `type` of that type in that queue only;
        `until` (ms since the epoch; None: until resumed) ends the pause by itself: a pause whose
        end has passed is ignored by claims and views, with no process needed to lift it. Pausing
        again replaces the end. Resuming a queue without `type` also ends its types' pauses. One
        transaction; the queue becomes known (queue_names) either way."""

    # -- reads: one consistent snapshot each ----------------------------------------------
    def get_job(self, job_id: int) -> Job: ...
    def get_jobs(self, job_ids: list[int]) -> list[Job]:
        """The jobs that exist among job_ids, in that order."""
    def events(self, job_id: int) -> list[Event]: ...
    def run_output(self, job_id: int, run: int | None = None) -> RunLog | None:
        """A run's stored output. run: the attempt number (as the claim's "run N of M" event
        says; when several starts share it, a released run's or after a reset, the latest); a run
        that started and kept no output comes back with kept=False. None: the latest run that
        kept output. None when there is no such run (or, for None, no output at all). Raises NoSuchJob."""
    def dependencies(self, job_id: int) -> list[tuple[int, str | None]]:
        """The `after` ids of a job with their states (None when that job was purged)."""
    def queue_names(self) -> list[str]:
        """Queues that hold jobs or were ever paused (for shell completion)."""
    def list_jobs(self, *, statuses: Iterable[str] = (), queue: str | None = None, type: str | None = None,
                  limit: int = 50, stuck: bool = False, created_older_than_ms: int | None = None,
                  sort: str = "newest", held_by=None, damaged: list | None = None, selection=None,
                  admission=None) -> list[Job]:
        """Jobs matching every filter, in a models.LIST_SORTS order. stuck: only held jobs whose
        lease expired or that ran past their timeout. created_older_than_ms: created longer ago.
        held_by (a limits.Admission): only ready jobs that a pause or it holds back (held_where).
        selection (a selection.Selection, and the admission its --status held needs): only the
        jobs it matches too. limit 0: every matching job.
        damaged: None, and a row that cannot be decoded raises DamagedJob; a list, and such a row
        is left out and its DamagedJob appended to the list."""
    def count_jobs(self, *, statuses: Iterable[str] = (), queue: str | None = None, type: str | None = None,
                   stuck: bool = False, created_older_than_ms: int | None = None, held_by=None,
                   selection=None, admission=None, at_most: int | None = None,
                   within_s: float | None = None) -> int | None:
        """How many jobs list_jobs would return without a limit; with at_most, counting stops past
        it (at most at_most + 1 comes back: "more than at_most"); with within_s, an engine that can
        stop a statement cheaply gives up after that long and returns None."""
    def paused_queues(self) -> set[str]:
        """Queues whose whole-queue pause has not ended."""
    def pauses(self) -> list[tuple[str, str | None, int | None]]:
        """Every pause in force now, as (queue, type or None for the whole queue, until ms or None),
        by queue, the whole-queue pause first, then types by name."""

    def stats_snapshot(self, *, limit: int = 10, sample: int = 10_000, queues: list[str] | None = None,
                       limits=None, type_ages: list[str] | None = None) -> dict:
        """The raw figures of `jobctl stats`, all from ONE consistent read, as a dict:
        now (the snapshot's time, ms); counts {queue: {state: n}} (a pending job waiting on
        `after` jobs counts as "blocked", not "pending"); paused {queue: bool} (every row of the
        queues table; true while a whole-queue pause is in force); paused_until {queue: ms or None}
        (the queues paused now, and when that ends); paused_types {queue: {type: ms or None}} (type
        pauses in force); scheduled {queue: n} (pending, not blocked, run_at > now); held {queue: n}
        and oldest_held {queue: run_at ms}: the ready jobs that a pause, or a limit of `limits` (the
        config's limits.Limits), holds back (SQLEngine.held_back defines them); oldest_ready
        {queue: run_at ms} (of the oldest ready job, pending, unblocked, run_at <= now, that is not
        held); aging [Job] (those jobs, oldest run_at first, at most `limit`); stuck [Job] (running or
        cancel_requested whose lease expired or that ran past claimed_at + timeout; oldest claim
        first, at most `limit`); stuck_total; buried [Job] (latest finished_at first, at most
        `limit`); buried_groups [(queue, type, error, count, latest finished_at, latest id)] (the
        buried jobs grouped by queue, type and error, the latest group first, at most `limit`); damaged
        [(job id, why)] (rows of those lists that cannot be decoded: left out of them); runs_by_minute [(minute, outcome, n)] for runs that ended in (now - 60 min,
        now], minute 0 being the last 60 s; run_ms and wait_ms (ended - started of
        completed/failed runs, started - ready_at of all runs) of the latest `sample` runs of that
        hour; known [queue names] (every queue with a row in the counts or a pause, even with no
        jobs left). Per type: ready_by_type {type: ready}; held_by_type {(queue, type): (held,
        oldest held run_at)}; oldest_by_type {type of `type_ages`: run_at of its oldest ready job
        that is not held, or None}; states_by_type [(type, "running" or "buried", n)];
        stuck_by_type {type: n}; runs_by_type_minute [(minute, outcome, type, n)]; run_ms_by_type
        [(type, run ms)] (the runs of run_ms); limit_figures: limit_figures(limits) read in the same
        snapshot (None without `limits`; every queue's, even with `queues`). With `queues`, every
        other figure is of those queues only. Cost must not grow with the number of finished jobs."""

    def count_expired(self) -> int:
        """Held jobs whose lease has expired."""
    def pending_types(self) -> dict[str, int]: ...

    def own_limits(self, types: list[str]) -> list[tuple[str, str | None, int, int, int]]:
        """Unfinished jobs (pending or held) of these types that set a group or cost of their own:
        (type, group, cost units (0: not set), how many, the first id) per distinct pair."""
        ...

    def pending_costs(self) -> list[tuple[str, str | None, int, int, int]]:
        """Pending jobs per distinct (type, group, cost units (0: not set)): how many, the first id."""
        ...

    def health_checks(self) -> list[Check]:
        """The engine's own checks for `doctor`: integrity, schema version, file modes, WAL size
        (SQLite); connection, vacuum, dead rows (a server engine)."""

    def close(self) -> None: ...
