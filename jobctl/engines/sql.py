"""The queue's SQL, shared by the SQL engines (SQLite, PostgreSQL): SQLEngine.

Everything the Engine contract (engines/base.py) asks of a SQL database is written here once:
enqueue, the claim with admission control, transitions and their reactions, dependents, the
sweeps, purge, pauses, reads and the stats snapshot. A subclass supplies what is its own: the
connection and its transactions, how it locks, its clock, its schema and files, its wake-ups,
its health checks. SQLiteEngine (engines/sqlite.py) is one.

The SQL runs unchanged on SQLite (3.35 or newer) and PostgreSQL (12 or newer), so here:
- parameters are positional `?` only (a PostgreSQL connection turns them into its own, and
  escapes `%`): never a `?` inside SQL text, `%` only as an operator;
- every subquery in FROM has an alias, and no function or syntax is one dialect's: where the
  dialects differ, the class attributes (NULL_EQ, GREATEST, NO_LIMIT, the lock clauses) and
  _indexed() say how;
- the connection `c` offers execute(sql, params) -> cursor (fetchone, fetchall, iteration) and
  executemany(sql, rows); a row is read as r["col"] or r[i], and also offers keys() and
  iteration over its values (models.row_damage reads it so);
- a new id comes from `INSERT ... RETURNING id`, never from cursor.lastrowid; a count is read as
  it comes, a SUM() only through int() (PostgreSQL's is numeric).

Hooks a subclass implements (see each one's docstring): now(), _errors(), _write(rollback=False)
yielding (c, now), _read() yielding c, close(), _indexed(name), _insert_many, _admission_now,
_lock_unique, _jobs_may_be_ready and _state_counts; _write_job (a write transaction that starts by
reading one job's row) has a default made of _write that an engine may improve on, and so has
_held_rows_now (the held jobs a claim under limits counts, with the time it goes by).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import lru_cache, partial

from jobctl.engines.base import Change, Check, ClaimRequest, Decide, Decision, Inserted, NewJob, RunLog, unique_key
from jobctl.errors import DamagedJob, InvalidState, JobctlError, KeyConflict, NoSuchJob
from jobctl.models import FINISHED, HELD, JOB_COLUMNS, REACTING, UNFINISHED, Event, Job, row_damage, states_in
from jobctl import payloads

# The states in SQL, as the partial indexes of both schemas spell them (schema.py, pg_schema.py,
# whose migrations keep their own frozen text: tests/test_engine_contract.py checks they agree).
# A query that means "ready" or "held" says it with these, so the planner matches the index.
READY = "status = 'pending' AND waiting_on = 0"  # ready, or scheduled for later (run_at): not blocked
HELD_SQL = states_in(HELD)
DEPENDS, DEPENDED_ON = 1, 2  # bits of jobs.dep_flags (schema.py)
WORKERS_FORGET_MS = 86_400_000  # a stopped or lost worker's row is forgotten a day after it was last seen
MAX_CLAIMS_KEPT = 4096  # jobs an engine remembers as it claimed them (a worker holds a few)

# A ready job is held while its queue is paused, or its type is paused in its queue, by a pause
# that has not ended (an ended pause is ignored: nothing has to wake up to resume it). Both are
# key lookups inside the claim's one statement. Its two parameters are both "now".
NOT_PAUSED = (" AND queue NOT IN (SELECT name FROM queues WHERE paused = 1 AND (paused_until IS NULL OR paused_until > ?))"
              " AND NOT EXISTS (SELECT 1 FROM paused_types p WHERE p.queue = jobs.queue AND p.type = jobs.type"
              " AND (p.until IS NULL OR p.until > ?))")
# The same pauses the other way round: a ready job that one of them holds back (held_where).
PAUSED = ("(queue IN (SELECT name FROM queues WHERE paused = 1 AND (paused_until IS NULL OR paused_until > ?))"
          " OR EXISTS (SELECT 1 FROM paused_types p WHERE p.queue = jobs.queue AND p.type = jobs.type"
          " AND (p.until IS NULL OR p.until > ?)))")


def payload_hint(value: object) -> str | None:
    """Text that a stored payload (compact JSON, as jobctl writes it) must contain to hold `value`
    anywhere, or None when there is no such sure text (a float, a big number, an empty list or object)."""
    from jobctl.selection import payload_json

    if value is None or isinstance(value, (bool, str)):
        return payload_json(value)
    if isinstance(value, int) and abs(value) < 10**15:  # (a float 42.0 is written "42.0": it holds "42")
        return str(value)
    if isinstance(value, dict) and value:  # (an object holds each of its keys, written "key":)
        return payload_json(next(iter(value))) + ":"
    if isinstance(value, list) and value:
        return payload_hint(value[0])
    return None


class HeldBack:
    """What holds ready jobs back at one moment (SQLEngine.held_back, the one definition of a held
    job): `sql` is true for a job that a pause or a limit holds back (with `params`), false for
    any other; `none` when nothing can hold a job now (no pause in force, no limit shut or full),
    so callers may skip the test. `where` is the whole condition of a held job (ready, and held
    back), `waiting` that of a ready job that waits only for a worker."""

    __slots__ = ("sql", "params", "now", "pauses", "admission", "none", "_parts_of")

    def __init__(self, terms: list[str], params: list, now: int, pauses: list, admission,
                 parts_of: Callable[..., list[tuple[str, list, str, str]]]):
        self.none = not terms
        # (a boolean on every engine: 0 is not one on PostgreSQL)
        self.sql = "(" + " OR ".join(terms) + ")" if terms else "1 = 0"
        self.params = params
        self.now = now
        self.pauses = pauses  # [(queue, type or None, until or None)] in force at `now`
        self.admission = admission  # limits.Admission at `now`
        self._parts_of = parts_of  # the engine's _held_parts(now, admission, ...)

    def of_types(self, types: Iterable[str]) -> list[tuple[str, list, str, str]]:
        """`sql` for the ready jobs of `types` (a query that says READY itself), each type tested
        against its own limits only, in disjoint parts that each name their types:
        [(SQL, parameters, the index that finds its jobs, kind)] (SQLEngine._held_parts); none
        when no job of them can be held."""
        return [] if self.none else self._parts_of(types)

    def where(self) -> tuple[str, list]:
        """SQL (and parameters) true for a held job: ready at `now`, and held back."""
        return f"{READY} AND run_at <= ? AND {self.sql}", [self.now, *self.params]

    def waiting(self) -> tuple[str, list]:
        """SQL (and parameters) true for a ready job that nothing holds back."""
        if self.none:
            return f"{READY} AND run_at <= ?", [self.now]
        return f"{READY} AND run_at <= ? AND NOT {self.sql}", [self.now, *self.params]


def sound_jobs(rows, damaged: list | None) -> list[Job]:
    """Jobs from rows. Without `damaged`, a row that cannot be decoded raises DamagedJob (exit 8);
    with it, that row is left out and its DamagedJob appended there, so that a view of many jobs
    shows the others and names the damaged one instead of failing for the whole database."""
    if damaged is None:
        return [Job.from_row(r) for r in rows]
    jobs = []
    for r in rows:
        try:
            jobs.append(Job.from_row(r))
        except DamagedJob as e:
            damaged.append(e)
    return jobs


def details_text(details: dict | None) -> str | None:
    """An event's details as stored: JSON text, or NULL for none."""
    return json.dumps(details, ensure_ascii=False) if details else None


# The rows a transition writes besides the job's, each written by one text: the general path
# appends VALUES, PostgreSQL's one statement a SELECT from the CTE that changed the job.
INTO_RUNS = "INSERT INTO runs (job_id, queue, type, worker, ready_at, started_at, ended_at, outcome) "
INTO_EVENTS = "INSERT INTO events (job_id, at, from_status, to_status, actor, message, details) "
INTO_LOGS = "INSERT INTO job_logs (job_id, started_at, ended_at, head, tail, dropped) "
LOGS_UPSERT = (" ON CONFLICT (job_id, started_at) DO UPDATE SET ended_at = excluded.ended_at, head = excluded.head, "
               "tail = excluded.tail, dropped = excluded.dropped")
INSERT_RUN = INTO_RUNS + "VALUES (?,?,?,?,?,?,?,?)"

# The claim's event says which run this is, in SQL where the claim is one statement (of the row
# the UPDATE returned) and in Python after the general claim's UPDATE: the same words.
CLAIM_MESSAGE_SQL = "'run ' || attempts || ' of ' || max_attempts"


def claim_message(job: Job) -> str:
    return f"run {job.attempts} of {job.max_attempts}"


# The completion's guard: the row still holds the claim it was decided on (same token, still
# running) and no job waits on it (its dependents are the general path's to unblock).
HOLDS_CLAIM = f"status = 'running' AND token = ? AND dep_flags & {DEPENDED_ON} = 0"


def completes_alone(job: Job, change: Change) -> bool:
    """Whether this change to a job as it was claimed is a plain completion, which _complete_held
    (and PostgreSQL's one statement) can write without reading the row first: no reaction, no
    concurrency units to free, no details, values stored as given."""
    return (job.status == "running" and change.to_status == "completed" and change.run is not None
            and change.reaction is None and not change.frees and change.details is None
            and job.claimed_at is not None and job.token is not None
            and all(k in JOB_COLUMNS and (v is None or type(v) is int or type(v) is str)
                    for k, v in change.fields.items()))


# The two writers of the worker's transitions, the claim and the completion of a held job, are
# built here once for every path: the general claim (SQLEngine._take), SQLite's held completion
# (_complete_held) and PostgreSQL's one statement (pg_onestatement.py). Their time is `now`: SQL
# text that is either a parameter ("?", the value the transaction read) or the statement's own
# reading of the clock; the other dialect hooks are the pick's index and row-lock clauses.
# (lru_cache: the same text object for the same shape: a worker's statement is looked up, not rebuilt.)

@lru_cache(maxsize=64)
def _pick_sql(indexed: str, by_queue: bool, types: int, skip_locked: str, paused: bool = True, now: str = "?") -> str:
    """The claim's pick: the best ready job of one queue (or of any) and of these types (or any);
    with `paused`, one that no pause holds (false: the engine knows there is no pause at all).
    Its parameters: pick_params."""
    queue_filter = " AND queue = ?" if by_queue else ""
    type_filter = f" AND type IN ({','.join('?' * types)})" if types else ""
    not_paused = NOT_PAUSED.replace("?", now) if paused else ""
    return (f"SELECT id FROM jobs{indexed} WHERE {READY} AND run_at <= {now}"
            f"{queue_filter}{type_filter}{not_paused} ORDER BY priority DESC, run_at, id "
            f"LIMIT 1{skip_locked}")


def pick_params(now: int | None, queue: str | None, types: list[str], paused: bool) -> list:
    """_pick_sql's parameters; `now` None where its time is the statement's own."""
    at = [] if now is None else [now]
    return [*at, *([] if queue is None else [queue]), *types, *(at * 2 if paused else ())]


@lru_cache(maxsize=64)
def _take_sql(pick: str, boot: bool, now: str = "?", gate: str = "") -> str:
    """The claim: the job that `pick` finds (and `gate` allows), moved to running; with `boot`,
    its lease also timed on the engine's boot clock (SQLEngine._boot). Its parameters: take_params,
    then the pick's."""
    lease_boot = ("lease_boot_ms = ? + COALESCE(?, timeout_ms), lease_boot_id = ?, claimed_boot_ms = ?" if boot else
                  "lease_boot_ms = NULL, lease_boot_id = NULL, claimed_boot_ms = NULL")
    return (f"UPDATE jobs SET status = 'running', attempts = attempts + 1, worker = ?, claimed_at = {now}, "
            f"heartbeat_at = {now}, lease_ms = COALESCE(?, timeout_ms), lease_expires_at = {now} + COALESCE(?, timeout_ms), "
            f"token = ?, progress = NULL, progress_at = NULL, updated_at = {now}, {lease_boot} "
            f"WHERE {gate}status = 'pending' AND id = ({pick}) RETURNING *")


def take_params(request: ClaimRequest, now: int | None, boot: tuple[int, int] | None = None) -> list:
    """_take_sql's own parameters; `now` None where its time is the statement's own."""
    if now is None:
        params = [request.worker, request.lease_ms, request.lease_ms, request.token]
    else:
        params = [request.worker, now, now, request.lease_ms, now, request.lease_ms, request.token, now]
    if boot is not None:
        params += [boot[0], request.lease_ms, boot[1], boot[0]]
    return params


@lru_cache(maxsize=64)
def _completion_sql(columns: tuple[str, ...], nulls: tuple[bool, ...], now: str = "?") -> str:
    """The completion of a held job, written where its row still holds the claim (HOLDS_CLAIM).
    A column set to None is written as NULL in the text: SQLite's module binds a None parameter
    through its adapter look-up, several times the cost of an int or a str, and a completion
    clears nine columns. Its parameters: completion_statement."""
    assignments = "".join(f", {k} = NULL" if null else f", {k} = ?" for k, null in zip(columns, nulls))
    return (f"UPDATE jobs SET status = 'completed', updated_at = {now}, finished_at = {now}{assignments} "
            f"WHERE id = ? AND {HOLDS_CLAIM}")


def completion_fields(change: Change) -> dict:
    """The columns a held completion sets besides those _completion_sql sets itself."""
    fields = change.fields
    if "status" in fields or "updated_at" in fields or "finished_at" in fields:
        fields = {k: v for k, v in fields.items() if k not in ("status", "updated_at", "finished_at")}
    return fields


def completion_statement(job: Job, fields: dict, now: int | None, now_sql: str = "?") -> tuple[str, list]:
    """_completion_sql of `fields` for `job` and its parameters; `now` None where its time is the
    statement's own (now_sql)."""
    values = fields.values()
    sql = _completion_sql(tuple(fields), tuple(v is None for v in values), now_sql)
    at = [] if now is None else [now, now]
    return sql, [*at, *(v for v in values if v is not None), job.id, job.token]


def completed(job: Job, change: Change, now: int) -> Job:
    """`job` as the held completion of `change` left it."""
    return job.updated({**completion_fields(change), "status": "completed", "updated_at": now, "finished_at": now})


def _key_conflict_of_a_line(e: KeyConflict, j: NewJob, keyed: dict[str, str]) -> InvalidState:
    """A key conflict met on a line of --batch/--chain, named by that line: against an earlier line
    of the same input (whose job is not kept, so no id is named), or against a job in the database."""
    if not j.source:
        return e
    if e.key in keyed:
        return InvalidState(f"{j.source}: idempotency key {e.key!r} is also on {keyed[e.key]} with a different type "
                            "or payload; give each job its own key; nothing was enqueued")
    return InvalidState(f"{j.source}: {e.message}; nothing was enqueued")


def _chunks(jobs: Iterable[NewJob], size: int) -> Iterator[list[NewJob]]:
    """Lists of at most `size` jobs, in order (a stream is never held whole)."""
    it = iter(jobs)
    while True:
        chunk = list(itertools.islice(it, size))
        if not chunk:
            return
        yield chunk


class SQLEngine:
    """The Engine contract (engines/base.py) in SQL that SQLite and PostgreSQL both run."""

    created = False  # whether opening it created the database (SQLite: the file; PostgreSQL: the schema)
    made_file = False  # SQLite: that file is new (not an empty file made a database)
    made_folders: list[str] = []  # SQLite: the folders made for that new file, deepest first
    created_schema = False  # PostgreSQL: the schema itself is new (not only jobctl's tables in it)

    # -- what differs between dialects (these values: SQLite's) -----------------------------
    NULL_EQ = "IS"  # compares two values that may be NULL (PostgreSQL: IS NOT DISTINCT FROM)
    GREATEST = "MAX"  # the scalar maximum of two values (PostgreSQL: GREATEST)
    NO_LIMIT: int | None = -1  # LIMIT ? for "no limit" (PostgreSQL: None, LIMIT NULL)
    SKIP_LOCKED = ""  # after the claim's pick (PostgreSQL: FOR UPDATE SKIP LOCKED)
    ROW_LOCK = ""  # after a SELECT of rows that a transaction then decides on (PostgreSQL: FOR UPDATE)
    # "id is one of the ids this subquery returns", evaluated once (PostgreSQL: as an array, or its
    # planner may run the subquery again for every row it scans)
    ID_AMONG = "id IN ({})"
    MAX_SEEKS = 100  # a claim under a full limit seeks at most this many (type, group) pairs, else walks
    PARENTS_LOCK = ""  # after the SELECT of `after` parents at enqueue, which it updates (PostgreSQL: FOR NO KEY UPDATE)
    # The oldest live twin of a `--unique` job, by its key, queue, type and payload hash (the
    # states written out, not as parameters: else no planner may use a partial index of them, and
    # the lookup read every live job). PostgreSQL finds it in jobs_unique, the keys of live jobs;
    # SQLite (sqlite.py) in two indexes.
    LIVE_TWIN = ("SELECT min(id) FROM jobs WHERE unique_key = ? AND (" + " OR ".join(f"status = '{s}'" for s in UNFINISHED)
                 + ") AND finished_at IS NULL AND queue = ? AND type = ? AND payload_hash = ?")

    # Between two transactions of one long action (update_selection), a pause in which waiting
    # workers take the write lock. SQLite's lock is not fair: a waiter sleeps between its tries
    # (1, 2, 5, 10, 15, 20, 25 ms... up to 100 ms), and a writer that begins again at once after
    # its commit takes the lock before the waiter wakes; measured over 1,000,000 jobs, a worker
    # beside a retry of 100,000 then waited up to 2.3 s. 25 ms is a sleep of the waiter's first
    # 130 ms, so it gets its turn within about one transaction. (PostgreSQL: rows are locked one by
    # one, and a worker's claim skips locked rows: no pause.)
    TURN_S = 0.025
    # The SQL function that lowers text in every alphabet, for `--error TEXT` beyond ASCII
    # (selection.where_sql): PostgreSQL's lower(); SQLite's folds ASCII only (SQLiteEngine's own).
    UNICODE_LOWER = "lower"
    # What one transaction of such an action may spend deciding and writing (its commit comes on
    # top): with TURN_S, a worker waits about one transaction for the write lock (measured beside a
    # retry of 100,000 jobs: 85 ms at most). PostgreSQL: no worker waits for it; larger steps.
    ACTION_BUDGET_MS = 60.0
    STORES_NUL = True  # a payload or result may hold NUL (\u0000); PostgreSQL: refused, never changed
    PROGRESS_STEP = 1000  # jobs between two on_progress calls (all inside the one transaction)

    _claims: dict[int, Job]  # jobs held through this engine, as last seen (_holding); each engine makes its own

    # -- hooks: what each engine supplies ------------------------------------------------------

    def now(self) -> int:
        """The database's clock, ms since the epoch."""
        raise NotImplementedError

    def _errors(self) -> AbstractContextManager[None]:
        """A context that turns the driver's errors into jobctl's (errors by cause)."""
        raise NotImplementedError

    # How leases are timed. Here: on now() (PostgreSQL: the server's clock, which every host shares).
    # An engine whose own clock a step of the wall clock moves (SQLite: this host's) times them on
    # a boot clock as well (lease_boot_ms, lease_boot_id) and judges them on that.

    def _boot(self) -> tuple[int, int] | None:
        """(now in ms, the boot it counts from) on the clock that times leases besides now(); None: none."""
        return None

    def _time_lease(self, fields: dict, now: int, job: Job) -> None:
        """Inside a write that sets fields["lease_expires_at"] (a heartbeat of `job`): time it on the boot clock too."""

    def _expired_where(self, now: int) -> tuple[str, list]:
        """SQL (and its parameters) true for a held job whose lease has expired."""
        return "lease_expires_at < ?", [now]

    def lease_expired(self, job: Job, now: int) -> bool:
        """Whether a held job's lease has expired (as _expired_where judges it)."""
        return job.lease_expires_at is not None and job.lease_expires_at < now

    def _silent_where(self, now: int, silent_for_ms: int) -> tuple[str, list]:
        """SQL (and its parameters) true for a held job not claimed or heartbeated in silent_for_ms."""
        return "COALESCE(heartbeat_at, claimed_at) < ?", [now - silent_for_ms]

    def lease_silent(self, job: Job, now: int, silent_for_ms: int) -> bool:
        """As _silent_where judges it."""
        beat = job.heartbeat_at if job.heartbeat_at is not None else job.claimed_at
        return beat is not None and beat < now - silent_for_ms

    def lease_now(self, job: Job, now: int) -> int:
        """As Engine.lease_now: here leases are timed on now() itself."""
        return now

    def _over_timeout_where(self, now: int) -> tuple[str, list]:
        """SQL (and its parameters) true for a held job that has run longer than its timeout, on
        the clock that times its lease (as running_ms measures it)."""
        return "claimed_at + timeout_ms < ?", [now]

    def running_ms(self, job: Job, now: int) -> int | None:
        """How long a held job's run has lasted, on the clock that times its lease; None: no claim."""
        return None if job.claimed_at is None else now - job.claimed_at

    def _write(self, *, rollback: bool = False) -> AbstractContextManager[tuple]:
        """One write transaction: yields (connection, now), "now" read once inside it; commits
        at the end (rolls back with rollback=True: a dry run), rolls back on an error."""
        raise NotImplementedError

    def _read(self) -> AbstractContextManager:
        """One consistent snapshot for several SELECTs; yields the connection."""
        raise NotImplementedError

    @contextmanager
    def _write_job(self, job_id: int | None) -> Iterator[tuple]:
        """A write transaction that starts by reading job `job_id`'s row with its lock (ROW_LOCK):
        yields (c, now, row), row None when there is no such job (or job_id is None). An engine
        whose round trips are dear overrides this to read its clock in the same one as the row."""
        with self._write() as (c, now):
            yield c, now, None if job_id is None else self._job_row(c, job_id)

    def close(self) -> None:
        raise NotImplementedError

    def _indexed(self, name: str) -> str:
        """SQL after a table name that pins the index `name` (SQLite: INDEXED BY), or ""."""
        raise NotImplementedError

    def _insert_many(self, c, jobs: list[NewJob], now: int, actor: str,
                     on_progress: Callable[[int, int], None] | None = None) -> list[tuple[int, bool]]:
        """Inside insert_jobs' transaction: insert jobs that have no keys and no `after`, with their
        enqueue events, as fast as the engine can; [(id, True)] in order. on_progress(done, total)
        every PROGRESS_STEP jobs."""
        raise NotImplementedError

    def _admission_now(self, c, now: int) -> int:
        """At the start of a claim under limits, before anything is counted: make the claims
        under limits take turns (if the transaction does not already) and return the "now" they
        use from there on."""
        raise NotImplementedError

    def _lock_unique(self, c, unique_key: str) -> None:
        """Before looking up a `unique` job's twin: make two enqueues of the same key take turns
        (if the transaction does not already)."""
        raise NotImplementedError

    def _jobs_may_be_ready(self, c) -> None:
        """Called in every transaction that may make a job claimable (an insert, a change to
        pending, dependents unblocked, a pause removed or shortened), to wake waiting workers."""
        raise NotImplementedError

    def _count_inserted_jobs(self, c, first: int, last: int) -> None:
        """Jobs with ids first..last were just inserted in this transaction, and nothing has
        changed them yet: count them by queue and state, where the engine's triggers do not."""
        raise NotImplementedError

    def _state_counts(self, c) -> list[tuple[str, str, int]]:
        """(queue, state, n) of every queue and state (a pending job waiting on `after` jobs:
        state "blocked"); rows with n = 0 may appear."""
        raise NotImplementedError

    # -- events ----------------------------------------------------------------------------

    def _event(self, c, job_id: int, now: int, from_status, to_status: str, actor: str, message=None, details=None,
               *, new_job: bool = False):
        """Record a transition in the job's history (new_job: the first event of a job just inserted)."""
        c.execute(
            INTO_EVENTS + "VALUES (?,?,?,?,?,?,?)",
            (job_id, now, from_status, to_status, actor, message, details_text(details)),
        )

    def _events(self, c, rows: list[tuple]) -> None:
        """Record many transitions at once: rows of (job_id, at, from, to, actor, message, details
        text), in order; a few statements, not one per event (a round trip each on a server)."""
        for start in range(0, len(rows), 500):
            part = rows[start:start + 500]
            c.execute(INTO_EVENTS + "VALUES " + ",".join(["(?,?,?,?,?,?,?)"] * len(part)),
                      [v for row in part for v in row])

    def _run_ended(self, c, job: Job, now: int, outcome: str) -> None:
        """Record a run of `job` (its claim, as the row held it) that ended now with `outcome`."""
        c.execute(INSERT_RUN, (job.id, job.queue, job.type, job.worker, job.run_at, job.claimed_at, now, outcome))

    def _file_history(self, c) -> None:
        """Inside a write transaction, before deleting events and runs or copying the tables as
        they are (purge, migrate): an engine that writes history ahead (SQLite) files it first.
        (Readers need not: they read EVENTS_READ and RUNS_READ.) Here there is nothing to file."""

    # What every reader of a job's history reads, never the tables by name (tests/test_history_ahead.py
    # checks): here the tables; an engine that writes history ahead (SQLite) reads a subquery with the
    # same columns that holds what is written ahead too. EVENTS_READ has the columns of `events`, its
    # ids in the order the events were written; RUNS_READ those of `runs` except id (order runs by
    # their times). Both end in their alias, so `events.at` and `runs.ended_at` work on both engines.
    EVENTS_READ = "events"
    RUNS_READ = "runs"

    def _event_rows(self, c, job_id: int) -> list:
        """A job's history, oldest first: rows with the columns of events."""
        return c.execute(f"SELECT * FROM {self.EVENTS_READ} WHERE job_id = ? ORDER BY id", (job_id,)).fetchall()

    def _run_end(self, c, job_id: int, started_at: int):
        """(ended_at, outcome) of the latest run of a job that started at `started_at`, or None."""
        return c.execute(f"SELECT ended_at, outcome FROM {self.RUNS_READ} WHERE job_id = ? AND started_at = ? "
                         "ORDER BY ended_at DESC LIMIT 1", (job_id, started_at)).fetchone()

    def _latest_runs(self, c, since: int, until: int, only: str, only_args: list, n: int) -> list:
        """(run time, wait, outcome, ended_at, type) of the latest `n` runs that ended in (since, until],
        newest first; `only`: SQL that narrows them to some queues (its parameters: only_args).
        (ended_at is returned too: ordered by a column it returns, a RUNS_READ that is a union is
        walked part by part in the order of an index and stops at n, not sorted whole.)"""
        return c.execute(
            f"SELECT ended_at - started_at, started_at - ready_at, outcome, ended_at, type FROM {self.RUNS_READ} "
            "WHERE ended_at > ? AND ended_at <= ?" + only + " ORDER BY ended_at DESC LIMIT ?",
            (since, until, *only_args, n)).fetchall()

    # -- enqueue ---------------------------------------------------------------------------

    _INSERT = (
        "INSERT INTO jobs (queue, type, payload, payload_hash, priority, status, max_attempts, backoff, "
        "timeout_ms, run_at, waiting_on, unique_key, idempotency_key, created_at, updated_at, cost_units, "
        "concurrency_group, on_buried, on_completed, on_cancelled) VALUES (?,?,?,?,?,'pending',?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
    )

    def insert_jobs(self, jobs: list[NewJob], actor: str, *,
                    on_progress: Callable[[int, int], None] | None = None) -> list[tuple[int, bool]]:
        return list(self.insert_stream(jobs, len(jobs), actor, on_progress=on_progress))

    BULK_STEP = 10_000  # jobs a chunk when nobody watches the progress (they are in memory at once)

    def insert_stream(self, jobs: Iterable[NewJob], total: int, actor: str, *,
                      on_progress: Callable[[int, int], None] | None = None) -> Inserted:
        done = Inserted()
        keyed: dict[str, str] = {}  # idempotency key -> the line of this input that created its job
        chunks = _chunks(jobs, self.PROGRESS_STEP if on_progress is not None else self.BULK_STEP)
        first = next(chunks, None)
        if first is None:
            return done  # (an empty batch: no transaction, and no multi-row INSERT without rows)
        with self._write() as (c, now):
            self._jobs_may_be_ready(c)
            for chunk in itertools.chain((first,), chunks):
                if all(not (j.idempotency_key or j.unique or j.after or j.after_previous) for j in chunk):
                    pairs = self._insert_many(c, chunk, now, actor)
                    if pairs[-1][0] - pairs[0][0] + 1 == len(pairs):  # ascending ids: consecutive (SQLite's are)
                        done.append_run(pairs[0][0], len(pairs), True)
                    else:
                        for job_id, created in pairs:
                            done.append(job_id, created)
                else:
                    for j in chunk:
                        if j.after_previous and done:
                            j = NewJob(**{k: getattr(j, k) for k in NewJob.__slots__})
                            j.after = [*j.after, done.last_id]
                        try:
                            job_id, created = self._insert_one(c, j, now, actor)
                        except KeyConflict as e:
                            raise _key_conflict_of_a_line(e, j, keyed) from None
                        done.append(job_id, created)
                        if created and j.idempotency_key is not None and j.source:
                            keyed[j.idempotency_key] = j.source
                if on_progress is not None:
                    on_progress(len(done), max(total, len(done)))
        return done

    def _insert_one(self, c, j: NewJob, now: int, actor: str, message: str = "enqueued") -> tuple[int, bool]:
        if j.idempotency_key is not None:
            row = c.execute(
                "SELECT id, type, payload_hash FROM jobs WHERE idempotency_key = ?", (j.idempotency_key,)
            ).fetchone()
            if row:
                if row["type"] != j.type or row["payload_hash"] != j.payload_hash:
                    raise KeyConflict(j.idempotency_key, row["id"])
                return row["id"], False
        key = j.unique_key  # (every job has one: a later --unique enqueue finds it)
        if j.unique:  # (a live twin: pending, or held by a run; a job asked to cancel runs until it stops)
            self._lock_unique(c, key)
            row = c.execute(self.LIVE_TWIN, (key, j.queue, j.type, j.payload_hash)).fetchone()
            if row[0] is not None:
                return row[0], False
        waiting = 0
        after = sorted(set(j.after))
        if after:
            # Locked (where the engine locks rows) so that no parent completes unseen meanwhile:
            # this job would wait for ever on a parent counted as not completed. Locked for the
            # update of their dep_flags below, in id order: enqueues after the same parents take turns.
            found = {r[0]: r[1] for r in c.execute(
                f"SELECT id, status FROM jobs WHERE id IN ({','.join('?' * len(after))}) ORDER BY id{self.PARENTS_LOCK}",
                after)}
            for a in after:
                if a not in found:
                    raise NoSuchJob(a)
                if found[a] == "cancelled":  # it will never complete: a job after it would never run
                    raise InvalidState(
                        (f"{j.source}: " if j.source else "") + f"job {a} was cancelled and will never complete, so a "
                        "job after it would never run; nothing was enqueued")
            waiting = sum(1 for a in after if found[a] != "completed")
        job_id = c.execute(
            self._INSERT + " RETURNING id",
            (j.queue, j.type, j.payload, j.payload_hash, j.priority, j.max_attempts, j.backoff, j.timeout_ms,
             j.run_at(now), waiting, key, j.idempotency_key, now, now, j.cost_units, j.concurrency_group,
             j.on_buried, j.on_completed, j.on_cancelled),
        ).fetchall()[0][0]  # fetch it all: an unfinished RETURNING statement blocks COMMIT
        self._count_inserted_jobs(c, job_id, job_id)
        if after:
            c.executemany("INSERT INTO job_deps (job_id, after_id) VALUES (?, ?)", [(job_id, a) for a in after])
            c.execute(
                f"UPDATE jobs SET dep_flags = dep_flags | CASE WHEN id = ? THEN {DEPENDS} ELSE {DEPENDED_ON} END "
                f"WHERE id IN (?,{','.join('?' * len(after))})", [job_id, job_id, *after])
        self._event(c, job_id, now, None, "pending", actor, message, new_job=True)
        return job_id, True

    # -- claim -----------------------------------------------------------------------------

    def claim(self, request: ClaimRequest) -> Job | None:
        with self._write() as (c, now):
            job = self._claim(c, request, now)
        return self._holding(job)

    def _claim(self, c, request: ClaimRequest, now: int) -> Job | None:
        if request.limits:
            return self._claim_admitted(c, request, now)
        types = request.types or []
        queues: list[str | None] = [*request.queues] if request.queues else [None]
        paused: bool | None = None
        for queue in queues:
            # Pin the partial index that matches the claim order, so the planner never falls back
            # to sorting every pending row (its choice on a fresh file without statistics).
            index = self._indexed("jobs_ready_by_queue" if queue is not None else "jobs_ready")
            if paused is None:
                paused = self._pauses_possible(c)
            pick = _pick_sql(index, queue is not None, len(types), self.SKIP_LOCKED, paused)
            job = self._take(c, request, now, pick, pick_params(now, queue, types, paused))
            if job is not None:
                return job
        return None

    def _take(self, c, request: ClaimRequest, now: int, pick: str, pick_params: list) -> Job | None:
        """Move the job that `pick` (a SELECT of one id) finds to running, with the claim's event.
        A damaged job is never handed out: it is buried in this transaction, and the pick runs again.

        One statement picks and takes the job, so no other claim can take it in between: on SQLite
        the transaction holds the write lock; where rows are locked, the pick locks its row and
        skips rows that other claims hold (SKIP_LOCKED)."""
        boot = self._boot()
        params = take_params(request, now, boot) + pick_params
        sql = _take_sql(pick, boot is not None)
        while True:
            rows = self._claimed_rows(c, sql, params, request.token)
            if not rows:
                return None
            damage = row_damage(rows[0], check_hash=True)
            if damage is None:
                break
            self._bury_damaged(c, rows[0]["id"], damage, now, request.worker)
        job = Job.from_checked_row(rows[0])
        if rows[0]["dep_flags"] & DEPENDS:
            job.after = [r[0] for r in c.execute(
                "SELECT after_id FROM job_deps WHERE job_id = ? ORDER BY after_id", (job.id,))]
        self._event(c, job.id, now, "pending", "running", request.worker, claim_message(job))
        return job

    def _pauses_possible(self, c) -> bool:
        """Inside a claim's transaction: whether a pause may hold jobs back, so that the pick must
        check every candidate against the pauses (NOT_PAUSED). True here; an engine that can tell
        cheaply that no pause exists at all says False."""
        return True

    def _claimed_rows(self, c, sql: str, params: list, token: str) -> list:
        """The rows (each a mapping of column to value) that the claim's UPDATE ... RETURNING *
        (`sql`) returns: the job it took, under `token`, or none."""
        return c.execute(sql, params).fetchall()  # fetch before COMMIT: an unfinished RETURNING cursor blocks it

    # -- admission control -------------------------------------------------------------------

    HELD_ROWS = ("SELECT type, concurrency_group, cost_units, claimed_at FROM jobs{} "
                 "WHERE " + HELD_SQL)  # literals: the partial index's own

    def _held_rows(self, c) -> list:
        """Every held job's type, group, cost and start: few rows (one per running handler)."""
        return c.execute(self.HELD_ROWS.format(self._indexed("jobs_held"))).fetchall()

    def _held_rows_now(self, c, now: int) -> tuple[list, int]:
        """The claim under limits' count of held jobs, and the "now" it goes by. An engine whose
        statements each see what was committed before them (PostgreSQL) reads the time in the
        counting statement: a completion it counts as ended then ended before the claim's start,
        as its times say (the claim's own is read after the count's snapshot)."""
        return self._held_rows(c), now

    def _recent_starts(self, c, held: list, type: str, n: int, window_ms: int, now: int) -> list[int]:
        """Start times of `type` in its window (newest first, at most n): ended runs and held jobs."""
        since = now - window_ms
        ended = [r[0] for r in c.execute(
            f"SELECT started_at FROM {self.RUNS_READ} WHERE type = ? AND started_at > ? "
            "ORDER BY started_at DESC LIMIT ?", (type, since, n))]
        running = [r["claimed_at"] for r in held if r["type"] == type and r["claimed_at"] is not None
                   and r["claimed_at"] > since]
        return sorted(ended + running, reverse=True)[:n]

    def _admission(self, c, limits, types, now: int, held: list):
        from jobctl import limits as policy

        units = policy.held_units(limits, held)
        rates = [(t, n, window) for t, (n, window) in limits.rates.items() if types is None or t in types]
        starts: dict[str, int] = {}
        if rates:
            # Every rate's count of ended runs in its window, in one statement (one index range
            # each, stopped at the limit): a claim under ten rates pays one round trip, not ten.
            one = (f"(SELECT count(*) FROM (SELECT 1 FROM {self.RUNS_READ} "
                   "WHERE type = ? AND started_at > ? LIMIT ?) AS recent)")
            row = c.execute("SELECT " + ", ".join([one] * len(rates)),
                            [p for t, n, window in rates for p in (t, now - window, n)]).fetchone()
            for i, (t, n, window) in enumerate(rates):
                ended = row[i]
                running = sum(1 for r in held if r["type"] == t and r["claimed_at"] is not None
                              and r["claimed_at"] > now - window)
                starts[t] = ended + running
        return policy.admission(limits, starts, units)

    # -- held: ready, but a pause or a limit holds it back -------------------------------------

    def held_back(self, c, now: int, limits=None) -> HeldBack:
        """THE definition of a held job, for every view that tells held jobs apart (stats, and
        list --status held): a job is held when it is ready (READY AND run_at <= now) and
        - its queue is paused, or its type is paused in its queue, by a pause in force at `now`, or
        - a limit of `limits` (the config's limits.Limits; None or empty: no limit) holds it back:
          its type reached its rate limit, or its concurrency limit (its group's, else its type's)
          has less room than the job's cost.
        That is exactly the ready jobs that a claim asking for any queue and type would skip now.
        Read inside the caller's read or write transaction `c` (pauses, running jobs, recent
        starts: a few short reads), so the answer belongs to the caller's snapshot. The result's
        `sql` (with `params`) is true for a held job and false, never NULL, for any other ready
        one: callers AND it with the ready condition (HeldBack.where gives both at once), and may
        negate it for the ready jobs that wait for a worker."""
        from jobctl.limits import Admission

        pauses = self._pauses(c, now)
        admission = (self._admission(c, limits, None, now, self._held_rows(c)) if limits
                     else Admission(set(), {}))
        terms, params = self._held_terms(now, admission, paused=bool(pauses))
        return HeldBack(terms, params, now, pauses, admission, partial(self._held_parts, now, admission, pauses))

    def _held_terms(self, now: int, admission, *, paused: bool = True) -> tuple[list[str], list]:
        """The terms (to OR) of "held back" for a ready job, and their parameters: a pause in force
        at `now` (PAUSED; `paused` False when the caller knows none is), a type its rate limit shut,
        a concurrency limit (its group's, else its type's) without room for the job's cost. The one
        SQL of a held job, for held_back (stats) and held_where (filters); _held_parts says the
        same for the jobs of given types, in parts that each type's own limits decide."""
        terms: list[str] = []
        params: list = []
        if paused:
            terms.append(PAUSED)
            params += [now, now]
        if admission is None:
            return terms, params
        if admission.shut_types:
            terms.append(f"type IN ({','.join('?' * len(admission.shut_types))})")
            params += sorted(admission.shut_types)
        # The concurrency limits, as _over_key says them, arranged so that a row is tested against
        # its own type's limit only (one CASE on the type, not a test per limit): a job that set no
        # group counts against its type's limit or its type's group's; one that set a group,
        # against that group's.
        cases, case_params, own, own_params = [], [], [], []
        limits_ = admission.limits
        for (kind, name), room in sorted(admission.room.items()):
            over, over_params = self._over_sql(room, limits_)
            members = [name] if kind == "type" else sorted(t for t, g in limits_.type_groups.items() if g == name)
            for member in members:
                cases.append(f"WHEN ? THEN {over}")
                case_params += [member, *over_params]
            if kind == "group":
                own.append(f"(concurrency_group = ? AND {over})")
                own_params += [name, *over_params]
        if cases:
            terms.append(f"(concurrency_group IS NULL AND CASE type {' '.join(cases)} ELSE 1 = 0 END)")
            params += case_params
        if own:
            terms.append(f"(concurrency_group IS NOT NULL AND ({' OR '.join(own)}))")
            params += own_params
        return terms, params

    def _held_parts(self, now: int, admission, pauses: list, types: Iterable[str]) -> list[tuple[str, list, str, str]]:
        """_held_terms for the ready jobs of `types` (for a query that says READY itself), in
        disjoint parts, each of which says which of these types it is about: [(SQL, parameters,
        the index that finds its jobs, kind)]; none when nothing can hold a job of these types. `pauses`
        are those in force at `now` (_pauses). A type that a pause in force may hold is tested with
        every term (_held_terms); every other type against its own rate and limit only: a shut
        type's jobs are all held (no test at all); a job that set no group counts against its
        type's limit or its type's group's, where a limit with room left holds only jobs that cost
        2 units or more (few: the index of costly ready jobs finds them); a job that set a group
        counts against that group's (any group may be full: seeks of every type's jobs in them).
        Types that the same test holds share one part. Kinds: "paused" (every term), "shut" (every
        job), "over" (jobs that set no group, over their type's limit or its group's: what that
        limit holds back of the type), "own" (jobs over the limit of the group they set)."""
        by_type = "jobs_ready_by_type"
        types = list(types)

        def among(some: list[str]) -> tuple[str, list]:
            return f"type IN ({','.join('?' * len(some))})", list(some)

        parts: list[tuple[str, list, str, str]] = []
        everywhere = any(t is None for _q, t, _u in pauses)  # a queue's pause: a type of any may be held
        paused = {t for _q, t, _u in pauses if t is not None}
        tested = [t for t in types if everywhere or t in paused]
        if tested:  # (every term: the pauses are tested per row)
            terms, params = self._held_terms(now, admission)
            sql, ps = among(tested)
            parts.append((f"{sql} AND (" + " OR ".join(terms) + ")", [*ps, *params], by_type, "paused"))
        rest = [t for t in types if not (everywhere or t in paused)]
        if admission is None or not rest:
            return parts
        shut = [t for t in rest if t in admission.shut_types]
        if shut:
            parts.append((*among(shut), by_type, "shut"))
        rest = [t for t in rest if t not in admission.shut_types]
        if not rest or not admission.room:
            return parts
        limits_ = admission.limits
        overs: dict[tuple[str, tuple, str], list[str]] = {}  # {(over, its parameters, index): types}
        for t in rest:
            room = admission.room.get(limits_.key(t, None))
            if room is None:
                continue
            over, over_params = self._over_sql(room, limits_, t)
            index = by_type
            if room >= 1 and limits_.type_costs.get(t, 1) <= room:  # over is "cost_units > room"
                over, index = f"cost_units > 1 AND {over}", "jobs_ready_costly"
            overs.setdefault((over, tuple(over_params), index), []).append(t)
        for (over, same_params, index), some in overs.items():
            sql, ps = among(some)
            parts.append((f"{sql} AND concurrency_group IS NULL AND {over}", [*ps, *same_params], index, "over"))
        groups = sorted(name for kind, name in admission.room if kind == "group")
        if groups:
            own, own_params = [], []
            for g in groups:
                over, over_params = self._over_sql(admission.room[("group", g)], limits_)
                own.append(f"(concurrency_group = ? AND {over})")
                own_params += [g, *over_params]
            sql, ps = among(rest)
            parts.append((f"{sql} AND concurrency_group IN ({','.join('?' * len(groups))}) AND ({' OR '.join(own)})",
                          [*ps, *groups, *own_params], by_type, "own"))
        return parts

    def held_filter(self, limits=None) -> tuple[str, list]:
        """held_back(...).where() read in a short transaction of its own: SQL (and parameters) true
        for a held job now, for a query that selects jobs (`list --status held`) to AND in."""
        with self._read() as c:
            return self.held_back(c, self.now(), limits).where()

    def _room_filter(self, admission) -> tuple[str, list]:
        """SQL that leaves out jobs whose concurrency key has no room for their cost."""
        sql, params = "", []
        for (kind, name), room in admission.room.items():
            over, over_params = self._over_key(kind, name, room, admission.limits)
            sql += f" AND NOT {over}"
            params += over_params
        return sql, params

    def _over_key(self, kind: str, name: str, room: int, limits) -> tuple[str, list]:
        """SQL true for a job that counts against the concurrency key (kind, name) and costs more
        than `room`. A job that set no group (NULL) counts against its type's group in `limits`,
        and one that set no cost (0) holds its type's cost: constants per type, so a few terms."""
        over, over_params = self._over_sql(room, limits)
        if kind == "type":
            return f"(concurrency_group IS NULL AND type = ? AND {over})", [name, *over_params]
        members = [t for t, g in limits.type_groups.items() if g == name]
        if not members:  # NULL_EQ, not "=": NOT (NULL AND ...) would leave out group-less jobs too
            return f"(concurrency_group {self.NULL_EQ} ? AND {over})", [name, *over_params]
        return (f"((concurrency_group {self.NULL_EQ} ? OR (concurrency_group IS NULL AND type IN "
                f"({','.join('?' * len(members))}))) AND {over})", [name, *members, *over_params])

    @staticmethod
    def _over_sql(room: int, limits, type_: str | None = None) -> tuple[str, list]:
        """SQL true for a job whose cost (its own, else its type's in `limits`) exceeds `room`;
        with `type_`, for a job of that type (its type's cost is then known here)."""
        if room < 1:  # no room: every cost is over it (a cost of its own is at least 1)
            return "(cost_units > ? OR cost_units = 0)", [room]
        if type_ is not None:
            if limits.type_costs.get(type_, 1) > room:
                return "(cost_units > ? OR cost_units = 0)", [room]
            return "cost_units > ?", [room]
        costly = [t for t, cost in limits.type_costs.items() if cost > room]
        if not costly:
            return "cost_units > ?", [room]
        return f"(cost_units > ? OR (cost_units = 0 AND type IN ({','.join('?' * len(costly))})))", [room, *costly]

    def _claim_admitted(self, c, request: ClaimRequest, now: int) -> Job | None:
        """The claim under limits: the best ready job that the limits admit, counted now, in this
        transaction. A shut type's jobs are skipped, never waited on (no head-of-line blocking)."""
        now = self._admission_now(c, now)  # from here on, no other claim under limits counts or takes
        held, now = self._held_rows_now(c, now)
        admission = self._admission(c, request.limits, request.types, now, held)
        room_sql, room_params = self._room_filter(admission)
        paused = NOT_PAUSED
        types = request.types
        if types is not None:
            types = [t for t in types if t not in admission.shut_types]
            if not types:
                return None
        # When something is shut or full, walking the claim order could pass over many rows that
        # a limit holds back: then seek the best job of each (type, group) that has room instead.
        # Otherwise the walk finds the first admitted row at once, with one seek where the union
        # would make one per pair.
        keys = None
        if admission.shut_types or any(room < 1 for room in admission.room.values()):
            seek_types = types
            if seek_types is None:  # every type: those that have ready jobs now (None: too many to seek)
                ready = self._ready_types(c)
                seek_types = None if ready is None else [t for t in ready if t not in admission.shut_types]
            keys = None if seek_types is None else self._admitted_keys(c, seek_types, admission)
            if keys == []:
                return None
        queues: list[str | None] = [*request.queues] if request.queues else [None]
        for queue in queues:
            queue_filter = " AND queue = ?" if queue is not None else ""
            queue_params = [queue] if queue is not None else []
            if keys is not None:
                # The best ready job of each (type, group) that the limits leave room for, each one
                # index seek, then the best of those (a few rows, by id): the ready rows of a shut
                # type or a full limit are never read. The best is chosen outside the union, where
                # a row lock (SKIP_LOCKED) is allowed. Its status is checked again for a row that
                # another claim took meanwhile (where rows are locked, that row is read anew and
                # skipped); `|| ''` keeps SQLite from walking every pending row through an index on
                # status instead of looking up these ids. Type and group lead each seek's ORDER BY,
                # fixed by its WHERE: only the index that starts with them gives that order without a
                # sort, so a planner takes it even without statistics.
                best = ("SELECT best.id FROM (SELECT id FROM jobs" + self._indexed("jobs_ready_by_type") +
                        f" WHERE {READY} AND type = ? AND concurrency_group {{}}"
                        f" AND run_at <= ?{queue_filter}{paused}{room_sql} ORDER BY type, concurrency_group, "
                        "priority DESC, run_at, id LIMIT 1) AS best")
                union = " UNION ALL ".join(best.format("IS NULL" if g is None else "= ?") for _, g in keys)
                pick = (f"SELECT id FROM jobs WHERE {self.ID_AMONG.format(union)} "
                        f"AND status || '' = 'pending' ORDER BY priority DESC, run_at, id LIMIT 1{self.SKIP_LOCKED}")
                params = [p for t, g in keys
                          for p in (t, *([] if g is None else [g]), now, *queue_params, now, now, *room_params)]
            else:
                shut = sorted(admission.shut_types)
                shut_sql = f" AND type NOT IN ({','.join('?' * len(shut))})" if shut else ""
                type_sql = f" AND type IN ({','.join('?' * len(types))})" if types is not None else ""
                index = "jobs_ready_by_queue" if queue is not None else "jobs_ready"
                pick = (f"SELECT id FROM jobs{self._indexed(index)} "
                        f"WHERE {READY} AND run_at <= ?{queue_filter}{paused}"
                        f"{type_sql}{shut_sql}{room_sql} ORDER BY priority DESC, run_at, id LIMIT 1{self.SKIP_LOCKED}")
                params = [now, *queue_params, now, now, *(types or ()), *shut, *room_params]
            job = self._take(c, request, now, pick, params)
            if job is not None:
                return job
        return None

    def _ready_types(self, c) -> list[str] | None:
        """The types that have ready jobs, found by skipping through the index (one seek per type);
        None when there are more than MAX_SEEKS."""
        # (each step is the first row of the index after the last type: ordered as that index
        # alone orders rows, so a planner without statistics still takes it)
        walk = ("SELECT type FROM jobs" + self._indexed("jobs_ready_by_type") +
                f" WHERE {READY}{{}} ORDER BY type, concurrency_group, priority DESC, "
                "run_at, id LIMIT 1")
        rows = c.execute(f"WITH RECURSIVE t(v, n) AS (SELECT ({walk.format('')}), 1 UNION ALL "
                         f"SELECT ({walk.format(' AND type > t.v')}), n + 1 FROM t WHERE t.v IS NOT NULL AND n <= ?) "
                         "SELECT v FROM t WHERE v IS NOT NULL", (self.MAX_SEEKS,)).fetchall()
        return None if len(rows) > self.MAX_SEEKS else [r[0] for r in rows]

    def _admitted_keys(self, c, types: list[str], admission) -> list[tuple[str, str | None]] | None:
        """The (type, concurrency group or None) pairs of ready jobs whose limit has room, for the
        claim's seeks. The groups a type's ready jobs have are found by skipping through the index
        (one seek per group, however many jobs each holds); a pair whose limit is full is left out,
        so its jobs are not read at all. None when there would be more than MAX_SEEKS (jobs spread
        over many groups that no limit names): the claim then walks the claim order instead."""
        if not types:
            return []
        if len(types) > self.MAX_SEEKS:
            return None
        room = admission.room
        walk = ("SELECT concurrency_group FROM jobs" + self._indexed("jobs_ready_by_type") +
                f" WHERE {READY} AND type = ? AND concurrency_group {{}} "
                "ORDER BY type, concurrency_group, priority DESC, run_at, id LIMIT 1")
        groups = ", ".join(f"g{i}(v, n) AS (SELECT ({walk.format('IS NOT NULL')}), 1 UNION ALL "
                           f"SELECT ({walk.format('> g' + str(i) + '.v')}), n + 1 FROM g{i} "
                           f"WHERE g{i}.v IS NOT NULL AND n <= {self.MAX_SEEKS})"
                           for i in range(len(types)))
        found = " UNION ALL ".join(f"SELECT {i}, v FROM g{i} WHERE v IS NOT NULL" for i in range(len(types)))
        rows = c.execute(f"WITH RECURSIVE {groups} {found}", [t for t in types for _ in (0, 1)]).fetchall()
        keys: list[tuple[str, str | None]] = [(t, None) for t in types if room.get(admission.limits.key(t, None), 1) >= 1]
        keys += [(types[i], g) for i, g in rows if room.get(("group", g), 1) >= 1]
        return keys if len(keys) <= self.MAX_SEEKS else None

    def limit_figures(self, limits, *, held_ready: bool = True) -> dict:
        with self._read() as c:
            return self._limit_figures(c, self.now(), limits, held_ready)

    def _limit_figures(self, c, now: int, limits, held_ready: bool, known: dict | None = None) -> dict:
        """limit_figures read in the caller's transaction `c` at `now`; `known`: held_ready counts
        the caller already has (stats: from the held jobs it counted), not read again."""
        from jobctl import limits as policy

        held = self._held_rows(c)
        units = policy.held_units(limits, held)
        starts = {t: self._recent_starts(c, held, t, n, window, now) for t, (n, window) in limits.rates.items()}
        admission = policy.admission(limits, {t: len(s) for t, s in starts.items()}, units)
        ready_sql = (f"SELECT count(*) FROM jobs{{}} WHERE {READY} "
                     "AND run_at <= ? AND {}" + NOT_PAUSED)
        counts: dict[tuple[str, str], int] = {}
        for t in ({*limits.rates, *limits.types} if held_ready else ()):
            room = admission.room.get(("type", t), 0)  # (only types with a concurrency limit use it)
            if known is not None and ("type", t) in known:
                counts[("type", t)] = known[("type", t)]
                continue
            if t in admission.shut_types:  # every ready job of a rate-shut type waits
                sql, args = ready_sql.format(self._indexed("jobs_ready_by_type"), "type = ?"), [now, t]
            elif t in limits.types and (room < 1 or limits.type_costs.get(t, 1) > room):
                # full, or too full for the type's cost: all of its ready jobs wait but those
                # that set a cost of their own that fits
                sql = ready_sql.format(self._indexed("jobs_ready_by_type"),
                                       "type = ? AND concurrency_group IS NULL AND (cost_units > ? OR cost_units = 0)")
                args = [now, t, room]
            elif t in limits.types:  # those that need more units than are free: only costly jobs can
                sql = ready_sql.format(self._indexed("jobs_ready_costly"),
                                       "type = ? AND concurrency_group IS NULL AND cost_units > 1 AND cost_units > ?")
                args = [now, t, room]
            else:  # a rate with starts to spare holds nothing back
                counts[("type", t)] = 0
                continue
            counts[("type", t)] = c.execute(sql, [*args, now, now]).fetchone()[0]
        for g in (limits.groups if held_ready else ()):
            room = admission.room[("group", g)]
            over, over_params = self._over_sql(room, limits)
            n = c.execute(
                ready_sql.format(self._indexed("jobs_ready_by_group"), f"concurrency_group = ? AND {over}"),
                (now, g, *over_params, now, now)).fetchone()[0]
            for t in (t for t, group in limits.type_groups.items() if group == g):  # jobs that set no group
                if room >= 1 and limits.type_costs.get(t, 1) <= room:  # only costly jobs can be over it
                    sql = ready_sql.format(self._indexed("jobs_ready_costly"),
                                           f"type = ? AND concurrency_group IS NULL AND cost_units > 1 AND {over}")
                else:
                    sql = ready_sql.format(self._indexed("jobs_ready_by_type"),
                                           f"type = ? AND concurrency_group IS NULL AND {over}")
                n += c.execute(sql, (now, t, *over_params, now, now)).fetchone()[0]
            counts[("group", g)] = n
        return {"now": now, "starts": starts, "held": units, "admission": admission, "held_ready": counts}

    def _bury_damaged(self, c, job_id: int, damage: str, now: int, actor: str) -> None:
        """Inside the claim's transaction: the job just taken cannot be trusted; bury it instead,
        as if never claimed (that run does not count)."""
        error = damage if damage.startswith("payload damaged") else f"damaged: {damage}"
        c.execute(
            "UPDATE jobs SET status = 'buried', attempts = attempts - 1, worker = NULL, claimed_at = NULL, "
            "heartbeat_at = NULL, lease_ms = NULL, lease_expires_at = NULL, lease_boot_ms = NULL, lease_boot_id = NULL, "
            "token = NULL, error = ?, finished_at = ?, updated_at = ? WHERE id = ?", (error, now, now, job_id))
        self._event(c, job_id, now, "pending", "buried", actor, f"{error}; buried instead of handed out")

    # -- transitions -----------------------------------------------------------------------

    def update_job(self, job_id: int, decide: Decide, actor: str) -> Job:
        completion = self._completion_alone(job_id, decide)
        if completion is not None:
            with self._write() as (c, now):
                done = self._complete_held_or_decide(c, job_id, decide, completion, now, actor)
            return done if done is not None else completed(*completion, now)
        return self._update_job(job_id, decide, actor)

    def _update_job(self, job_id: int, decide: Decide, actor: str) -> Job:
        """update_job, decided on the row as read in the transaction."""
        with self._write_job(job_id) as (c, now, row):
            job = self._decide_and_apply(c, job_id, row, decide, now, actor)
        if job.id in self._claims:
            self._holding(job)
        return job

    def update_jobs_and_claim(self, updates: list[tuple[int, Decide]], requests: list[ClaimRequest],
                              actor: str) -> tuple[list[Job], list[Job]]:
        """Every update, then up to len(requests) claims, in one transaction: a worker finishing
        jobs and taking the next ones pays for one commit (one fsync). All or nothing."""
        if len(updates) != 1:
            return self._update_jobs_and_claim(updates, requests, actor)
        job_id, decide = updates[0]
        return self._update_one_and_claim(job_id, decide, self._completion_alone(job_id, decide), requests, actor)

    def prepare_update_and_claim(self, job_id: int, decide: Decide, request: ClaimRequest,
                                 actor: str) -> Callable[[], tuple[list[Job], list[Job]]]:
        # The completion alone is decided now, on the job as claimed (it reads no clock), so that
        # only the transaction is left for the moment the handler exits.
        return partial(self._update_one_and_claim, job_id, decide, self._completion_alone(job_id, decide),
                       [request], actor)

    def _update_one_and_claim(self, job_id: int, decide: Decide, completion: tuple[Job, Change] | None,
                              requests: list[ClaimRequest], actor: str) -> tuple[list[Job], list[Job]]:
        """update_jobs_and_claim of one update, with its completion alone (_completion_alone) if it
        has one: written where the row still holds the claim, else decided on the row as it is."""
        if completion is None:
            return self._update_jobs_and_claim([(job_id, decide)], requests, actor)
        with self._write() as (c, now):
            done = self._complete_held_or_decide(c, job_id, decide, completion, now, actor)
            claimed = self._claims_in(c, requests, now)
        for job in claimed:
            self._holding(job)
        return [done if done is not None else completed(*completion, now)], claimed

    def _update_jobs_and_claim(self, updates: list[tuple[int, Decide]], requests: list[ClaimRequest],
                               actor: str) -> tuple[list[Job], list[Job]]:
        """update_jobs_and_claim, each update decided on its row as read in the transaction."""
        with self._write_job(updates[0][0] if updates else None) as (c, now, first):
            done = [self._decide_and_apply(c, job_id, first if i == 0 else self._job_row(c, job_id), decide, now, actor)
                    for i, (job_id, decide) in enumerate(updates)]
            claimed = self._claims_in(c, requests, now)
        for job in done + claimed:
            self._holding(job)
        return done, claimed

    def _claims_in(self, c, requests: list[ClaimRequest], now: int) -> list[Job]:
        claimed = []
        for request in requests:
            job = self._claim(c, request, now)
            if job is None:
                break
            claimed.append(job)
        return claimed

    # -- completing a job this engine claimed, without reading its row first -------------------

    def _holding(self, job: Job | None) -> Job | None:
        """Keep (or forget) a job as this engine last saw it while it holds it: its completion can
        then be decided on it, and written where the row still holds that claim (_complete_held)."""
        if job is not None:
            if job.status == "running" and job.token is not None:
                if len(self._claims) >= MAX_CLAIMS_KEPT:
                    self._claims.clear()
                self._claims[job.id] = job
            else:
                self._claims.pop(job.id, None)
        return job

    def _completion_alone(self, job_id: int, decide: Decide) -> tuple[Job, Change] | None:
        """(the job as claimed here, the completion decided on it) when the decision reads no
        clock (a Decision that is time_free: Queue's completions) and the change is a plain completion;
        else None."""
        job = self._claims.get(job_id)
        if job is None or not (isinstance(decide, Decision) and decide.time_free):
            return None
        try:
            change = decide(job, None)  # type: ignore[arg-type]  # (time_free: never read; None fails loudly)
        except JobctlError:
            return None  # refused on the job as claimed: the general path refuses on the row as it is
        if change is None or not completes_alone(job, change):
            return None
        return job, change

    def _complete_held(self, c, job: Job, change: Change, now: int, actor: str) -> bool:
        """Inside a write transaction: write the completion decided on `job` as this engine claimed
        it, where the row still holds that claim (same id, running, same token, nobody waiting on
        it); False, with nothing written, where it does not (the caller decides on the row as it is)."""
        self._claims.pop(job.id, None)
        if c.execute(*completion_statement(job, completion_fields(change), now)).rowcount != 1:
            return False
        assert change.run is not None  # (completes_alone)
        self._run_ended(c, job, now, change.run)
        if change.log is not None:
            self._store_output(c, job, change, now)
        self._event(c, job.id, now, "running", "completed", change.actor or actor, change.message)
        return True

    def _complete_held_or_decide(self, c, job_id: int, decide: Decide, completion: tuple[Job, Change], now: int,
                                 actor: str) -> Job | None:
        """Inside a write transaction: the completion decided on the job as claimed, where the row
        still holds that claim (None: the caller makes the job it left, `completed(*completion, now)`,
        once the transaction is over); else `decide` on the row as it is (the general path)."""
        if self._complete_held(c, *completion, now, actor):
            return None
        return self._decide_and_apply(c, job_id, self._job_row(c, job_id), decide, now, actor)

    def _job_row(self, c, job_id: int):
        """Inside a write transaction: job `job_id`'s row, locked until the end of it where rows
        are locked (ROW_LOCK); None when there is no such job."""
        return c.execute("SELECT * FROM jobs WHERE id = ?" + self.ROW_LOCK, (job_id,)).fetchone()

    def _decide_and_apply(self, c, job_id: int, row, decide: Decide, now: int, actor: str) -> Job:
        """Inside a write transaction: let the queue decide on the job's row (read by _job_row),
        apply the change."""
        if row is None:
            raise NoSuchJob(job_id)
        job = Job.from_row(row)
        change = decide(job, now)
        return job if change is None else self._apply(c, job, change, now, actor, row["dep_flags"])

    def _apply(self, c, job: Job, change: Change, now: int, actor: str, dep_flags: int) -> Job:
        """Inside a write transaction: make `change` to `job`, whose row (with `dep_flags`) was read
        with its lock in this transaction (nothing else changes it before the end of it)."""
        fields = dict(change.fields)
        fields["status"] = change.to_status
        fields["updated_at"] = now
        if change.to_status in FINISHED and job.status not in FINISHED:
            fields.setdefault("finished_at", now)
        elif change.to_status not in FINISHED:
            fields.setdefault("finished_at", None)
        if fields.get("lease_expires_at") is not None:
            self._time_lease(fields, now, job)
        assignments = ", ".join(f"{k} = ?" for k in fields)
        extra: list = []
        if "payload_hash" in fields or "queue" in fields or (job.status in FINISHED and change.to_status not in FINISHED):
            # (an edit, a retry) the key follows the payload and queue; a finished job's key, which
            # no lookup reads, may be missing (a job finished before schema v13) or stale
            assignments += ", unique_key = ?"
            extra.append(unique_key(fields.get("queue", job.queue), job.type,
                                    fields.get("payload_hash") or self._payload_hash(c, job.id)))
        reacting = change.to_status != job.status and change.to_status in REACTING
        # The changed row is the one read before with these values written, and is built so, unless
        # a reaction needs it as stored or a value might be stored as other than it was given (a
        # float in an INTEGER column, say): reading back all of a job's columns and checking them
        # again was a tenth of the worker's transaction. Without RETURNING, the UPDATE is one a
        # connection may defer into its next round trip (PostgreSQL's does).
        known = not (reacting and change.reaction is not None) and all(
            k in JOB_COLUMNS and (v is None or type(v) is int or type(v) is str) for k, v in fields.items())
        sql = f"UPDATE jobs SET {assignments} WHERE id = ? AND status = ?"
        params = [*fields.values(), *extra, job.id, job.status]
        row = None
        if known:
            # (-1 when deferred: the row's lock, held since it was read, is the guarantee then)
            changed = c.execute(sql, params).rowcount != 0
        else:
            row = c.execute(sql + " RETURNING *", params).fetchone()
            changed = row is not None
        if not changed:  # cannot happen under the write lock (or the row's lock); refuse rather than guess
            raise InvalidState(f"job {job.id} changed while it was being updated; retry")
        if change.to_status == "completed" and job.status != "completed" and dep_flags & DEPENDED_ON:
            # Jobs waiting on this one have one dependency fewer; one whose last dependency just
            # completed becomes ready now, so its age (and its place in the claim order) counts
            # from this moment rather than from when it was enqueued.
            c.execute(
                f"UPDATE jobs SET run_at = CASE WHEN waiting_on = 1 THEN {self.GREATEST}(run_at, ?) ELSE run_at END, "
                "waiting_on = waiting_on - 1 WHERE waiting_on > 0 AND id IN "
                "(SELECT job_id FROM job_deps WHERE after_id = ?)",
                (now, job.id),
            )
            self._jobs_may_be_ready(c)
        elif (change.to_status == "pending" and fields.get("run_at", job.run_at) <= now
              and not fields.get("waiting_on", job.waiting_on)):
            # A release, a requeue, a retry due now (one with a backoff is found later by polling).
            self._jobs_may_be_ready(c)
        elif change.frees:  # units of a concurrency limit freed: a held-back job may fit now
            self._jobs_may_be_ready(c)
        message = change.message
        if reacting:
            reaction_id = self._react(c, job, row, change, now, change.actor or actor)
            if reaction_id is not None and change.reaction is not None:
                message = f"{message or change.to_status}; reaction: job {reaction_id} ({change.reaction.type})"
        if change.run and job.claimed_at is not None:
            self._run_ended(c, job, now, change.run)
        if change.log is not None and job.claimed_at is not None:
            self._store_output(c, job, change, now)
        if message is not None or change.to_status != job.status:
            self._event(c, job.id, now, job.status, change.to_status, change.actor or actor, message, change.details)
        if known:
            return job.updated(fields)
        assert row is not None
        return Job.from_row(row)

    @staticmethod
    def _payload_hash(c, job_id: int) -> str:
        return c.execute("SELECT payload_hash FROM jobs WHERE id = ?", (job_id,)).fetchone()[0]

    def _apply_many(self, c, items: list[tuple[Job, Change, int]], now: int, actor: str) -> None:
        """Inside a write transaction: _apply for each (job, change, dep_flags), where the changes
        that need nothing but their columns and their event (no reaction, run, output, dependents
        or freed units) are written one UPDATE per group of identical changes: an action on many
        jobs pays per job for its rows and indexes only, not for a statement each."""
        groups: dict[tuple, list[Job]] = {}
        for job, change, dep_flags in items:
            reacting = change.to_status != job.status and change.to_status in REACTING
            simple = (change.reaction is None and change.log is None and not change.frees and change.run is None
                      and change.to_status != "completed" and "lease_expires_at" not in change.fields
                      and "payload_hash" not in change.fields and "queue" not in change.fields
                      and not (reacting and job.reaction_type(change.to_status) is not None)
                      and all(k in JOB_COLUMNS and (v is None or type(v) is int or type(v) is str)
                              for k, v in change.fields.items()))
            if not simple:
                self._apply(c, job, change, now, actor, dep_flags)
                continue
            key = (job.status, change.to_status, tuple(change.fields.items()), change.message, change.actor,
                   details_text(change.details))
            groups.setdefault(key, []).append(job)
        for (from_status, to_status, field_items, message, change_actor, details), jobs in groups.items():
            fields = dict(field_items)
            fields["status"] = to_status
            fields["updated_at"] = now
            if to_status in FINISHED and from_status not in FINISHED:
                fields.setdefault("finished_at", now)
            elif to_status not in FINISHED:
                fields.setdefault("finished_at", None)
            assignments = ", ".join(f"{k} = ?" for k in fields)
            for start in range(0, len(jobs), 500):
                part = jobs[start:start + 500]
                changed = c.execute(f"UPDATE jobs SET {assignments} WHERE id IN ({','.join('?' * len(part))}) "
                                    "AND status = ?", [*fields.values(), *(j.id for j in part), from_status]).rowcount
                if changed not in (len(part), -1):  # cannot happen under the lock: refuse rather than guess
                    raise InvalidState(f"jobs {part[0].id}..{part[-1].id} changed while they were being updated; retry")
                if from_status in FINISHED and to_status not in FINISHED:  # their keys, as _apply writes them
                    c.executemany("UPDATE jobs SET unique_key = ? WHERE id = ?", [
                        (unique_key(r[1], r[2], r[3]), r[0]) for r in c.execute(
                            f"SELECT id, queue, type, payload_hash FROM jobs WHERE id IN ({','.join('?' * len(part))})",
                            [j.id for j in part]).fetchall()])
            if to_status == "pending" and any(fields.get("run_at", j.run_at) <= now and not j.waiting_on for j in jobs):
                self._jobs_may_be_ready(c)
            if message is not None or to_status != from_status:
                self._events(c, [(j.id, now, from_status, to_status, change_actor or actor, message, details)
                                 for j in jobs])

    @staticmethod
    def _store_output(c, job: Job, change: Change, now: int) -> None:
        """Inside the change's transaction: the run's output so far (the run is the job's claim)."""
        out = change.log
        assert out is not None
        ended = None if change.to_status in ("running", "cancel_requested") else now
        c.execute(
            INTO_LOGS + "VALUES (?,?,?,?,?,?)" + LOGS_UPSERT,
            (job.id, job.claimed_at, ended, bytes(out.head), bytes(out.tail), out.dropped))

    def _react(self, c, job: Job, row, change: Change, now: int, actor: str) -> int | None:
        """Inside the transaction that made `job` become change.to_status (`row`: the job's row as
        it is now when the Change carries a reaction, else None): enqueue the reaction the Change
        carries, with the job as it is now in its payload; its id (None: none). A job with a
        reaction type for that state and a Change without one is refused."""
        if change.reaction is None:
            wanted = job.reaction_type(change.to_status)  # stored at enqueue: no change sets it
            if wanted is not None:
                raise InvalidState(
                    f"job {job.id} has a reaction ({wanted}) to becoming {change.to_status}, and this change "
                    "would not enqueue it; nothing changed (make the change through jobctl's Queue)")
            return None
        changed = self._with_after(c, [Job.from_row(row)])[0]
        body = {"event": change.to_status, "job": changed.to_dict()}
        r = change.reaction
        reaction = NewJob(**{k: getattr(r, k) for k in NewJob.__slots__})  # the template may be shared
        reaction.payload = payloads.compact(body, depth_checked=True)
        reaction.payload_hash = payloads.canonical_hash(body, reaction.payload)
        reaction.after, reaction.idempotency_key, reaction.unique = [], None, False
        reaction_id, _ = self._insert_one(c, reaction, now, actor,
                                          f"enqueued: reaction to job {row['id']} ({change.to_status})")
        self._jobs_may_be_ready(c)
        return reaction_id

    def _update_selected(self, select: Callable[[int], tuple[str, list]], decide: Decide, actor: str,
                         dry_run: bool, on_progress: Callable[[int, int], None] | None = None
                         ) -> list[tuple[Job, Change]]:
        """select(now) -> (sql, params) of the rows to decide on, inside the one transaction (where
        rows are locked, they are locked as they are read: concurrent sweeps act on each once)."""
        with self._write(rollback=dry_run) as (c, now):
            done = []
            sql, params = select(now)
            # A dry run writes nothing, so it locks nothing: a user who may only read can ask it
            # (`logs --follow` asks a dry recover whether a job's worker is lost).
            rows = c.execute(sql + ("" if dry_run else self.ROW_LOCK), params).fetchall()
            for n, row in enumerate(rows, 1):
                # A damaged row is left as it is (doctor names it): it must not stop the others.
                if row_damage(row) is None:
                    job = Job.from_checked_row(row)
                    change = decide(job, now)
                    if change is not None:
                        done.append((job if dry_run else self._apply(c, job, change, now, actor, row["dep_flags"]),
                                     change))
                if on_progress is not None and (n % 100 == 0 or n == len(rows)):
                    on_progress(n, len(rows))
            return done

    def update_expired(self, decide: Decide, actor: str, *, silent_for_ms: int | None = None,
                       dry_run: bool = False) -> list[tuple[Job, Change]]:
        def select(now: int) -> tuple[str, list]:
            expired, params = self._expired_where(now)
            # (only held rows are read, through an index on status: tests/test_lease_sweeps.py)
            sql = f"SELECT * FROM jobs WHERE {HELD_SQL} AND ({expired}"
            if silent_for_ms is not None:
                silent, silent_params = self._silent_where(now, silent_for_ms)
                sql += f" OR {silent}"
                params += silent_params
            return sql + ") ORDER BY id", params

        return self._update_selected(select, decide, actor, dry_run)

    def update_dependents(self, job_id: int, decide: Decide, actor: str) -> list[Job]:
        """decide on the job, then on every job that waits on it, directly or not (oldest first),
        in one transaction: the job, then each dependent that changed."""
        with self._write() as (c, now):
            done = [self._decide_and_apply(c, job_id, self._job_row(c, job_id), decide, now, actor)]
            # Where rows are locked (READ COMMITTED), read again until a reading finds no dependent not
            # yet decided on: one statement's snapshot predates an enqueue after a dependent that held
            # its row while the statement waited for it; the next statement sees the job it added.
            decided: set[int] = set()
            while True:
                rows = c.execute(
                    "WITH RECURSIVE dependents(id) AS (SELECT job_id FROM job_deps WHERE after_id = ? "
                    "UNION SELECT d.job_id FROM job_deps d JOIN dependents ON d.after_id = dependents.id) "
                    "SELECT * FROM jobs WHERE id IN (SELECT id FROM dependents) ORDER BY id" + self.ROW_LOCK,
                    (job_id,)).fetchall()
                rows = [row for row in rows if row["id"] not in decided]
                if not rows:
                    return done
                for row in rows:
                    decided.add(row["id"])
                    job = Job.from_row(row)
                    change = decide(job, now)
                    if change is not None:
                        done.append(self._apply(c, job, change, now, actor, row["dep_flags"]))
                if not self.ROW_LOCK:  # one writer at a time: nothing was added meanwhile
                    return done

    # -- selections (jobctl/selection.py): find, then act in short transactions ----------------

    def held_where(self, now: int, admission=None) -> tuple[str, list]:
        """SQL (and parameters) true for a held job at `now` (held_back's definition, _held_terms),
        given the limits' `admission` (limits.Admission, None: no limits) read by the caller:
        `list --status held` and every filter action use it."""
        terms, params = self._held_terms(now, admission)
        return f"{READY} AND run_at <= ? AND (" + " OR ".join(terms) + ")", [now, *params]

    _held_where = held_where  # (the name selection.Dialect asks for)

    def _payload_equals(self, path: list, value: object) -> tuple[str, list]:
        """SQL true when the payload's value at `path` equals `value`: SQLite's JSON functions
        (PostgreSQL: jsonb). A number in the path is a list index."""

        where = "$" + "".join(f"[{p}]" if isinstance(p, int) else f'."{p}"' for p in path)
        sql, params = self._payload_test(where, value)
        hint = payload_hint(value)
        if hint is None:
            return sql, params
        # A cheap test first: the payload's text must hold the value as jobctl writes it, so most
        # rows are passed over without their JSON being parsed (a scan of 1,000,000 jobs: ~0.2 s).
        return f"(instr(payload, ?) > 0 AND {sql})", [hint, *params]

    @staticmethod
    def _payload_test(where: str, value: object) -> tuple[str, list]:
        from jobctl.selection import payload_json

        if value is None:
            return "json_type(payload, ?) = 'null'", [where]
        if isinstance(value, bool):
            return f"json_type(payload, ?) = '{'true' if value else 'false'}'", [where]
        if isinstance(value, str):
            return "(json_type(payload, ?) = 'text' AND json_extract(payload, ?) = ?)", [where, where, value]
        if isinstance(value, (int, float)):
            if isinstance(value, int) and not -2**63 <= value < 2**63:
                value = float(value)  # (SQLite reads an integer past 64 bits as a real, and binds none)
            return "(json_type(payload, ?) IN ('integer', 'real') AND json_extract(payload, ?) = ?)", [where, where, value]
        # By value, as on PostgreSQL (keys in any order, 1 = 1.0): the same text at once, else
        # jobctl_same_json (SQLiteEngine registers it: payloads.same_value) decides.
        kind = "object" if isinstance(value, dict) else "array"
        text = payload_json(value)
        return (f"(json_type(payload, ?) = '{kind}' AND (json_extract(payload, ?) = json(?) "
                "OR jobctl_same_json(json_extract(payload, ?), ?)))", [where, where, text, where, text])

    def _last_worker_where(self, workers: list[str]) -> tuple[str, list]:
        """A job that a worker of `workers` holds now, or, held by none, whose latest run was one
        of theirs: their runs found first, then each such job's latest run (few rows per job)."""
        marks = ",".join("?" * len(workers))
        return (f"(worker IN ({marks}) OR (worker IS NULL AND id IN (SELECT job_id FROM "
                f"(SELECT job_id, worker, row_number() OVER (PARTITION BY job_id ORDER BY started_at DESC) AS n "
                f"FROM {self.RUNS_READ} WHERE job_id IN (SELECT job_id FROM {self.RUNS_READ} WHERE worker IN ({marks}))) "
                f"AS latest WHERE n = 1 AND worker IN ({marks}))))", [*workers, *workers, *workers])

    def _selection_where(self, selection, now: int, admission=None) -> tuple[list[str], list]:
        from jobctl.selection import where_sql

        return where_sql(selection, now, self, admission)

    def select_ids(self, selection, *, admission=None) -> list[int]:
        """The ids of the jobs `selection` matches now, in id order: what an action will act on
        (jobs that arrive later are left alone)."""
        with self._read() as c:
            clauses, params = self._selection_where(selection, self.now(), admission)
            where = " WHERE " + " AND ".join(clauses) if clauses else ""
            return [r[0] for r in c.execute(f"SELECT id FROM jobs{where} ORDER BY id", params)]

    def update_selection(self, ids: list[int], selection, decide: Decide, actor: str, *, limits=None,
                         dry_run: bool = False, batch: int = 1000, budget_ms: float | None = None,
                         on_progress: Callable[[int, int], None] | None = None) -> Iterator[tuple[int, str, str | None]]:
        """Apply decide to the jobs `ids` that `selection` still matches, in transactions of at
        most `batch` jobs whose work ends once it has taken `budget_ms` (with its commit, about
        100 ms: how long a worker may wait for the write lock), with TURN_S between them; a
        transaction that found the database busy is done again. Yields (id, outcome, detail) per
        job: outcome "changed"
        (detail: the new status), "unchanged" (decide had nothing to change), "skipped" (the job
        changed state meanwhile, or is gone: it no longer matches), "refused" (the rule refuses it
        in its state: detail says why). A dry run writes nothing and locks nothing."""
        import random
        import time as clock

        from jobctl.errors import DatabaseBusy

        budget_ms = self.ACTION_BUDGET_MS if budget_ms is None else budget_ms
        done, total, i = 0, len(ids), 0
        write_ms = [0.2]  # a guess, on the dear side, until the first transaction measures it
        size = batch
        while i < total:
            chunk = ids[i:i + size]
            for attempt in range(10):
                try:
                    taken, results = self._update_chunk(chunk, selection, decide, actor, limits, dry_run, budget_ms,
                                                        write_ms)
                    break
                except DatabaseBusy:  # (nothing of the chunk was kept: take turns, then do it again)
                    if attempt == 9:
                        raise
                    clock.sleep(random.uniform(0.01, 0.05))
            i += taken
            done += taken
            size = min(batch, taken + taken // 4 + 10)  # read about what the budget lets one transaction take
            if i < total and not dry_run and self.TURN_S:
                clock.sleep(self.TURN_S)  # the workers' turn (see TURN_S)
            yield from results
            if on_progress is not None:
                on_progress(done, total)

    @contextmanager
    def _read_at_now(self) -> Iterator[tuple]:
        """A read transaction, yielding (connection, now) as _write does: a dry run decides as the
        real one would, and neither takes nor waits for the write lock."""
        now = self.now()
        with self._read() as c:
            yield c, now

    def _update_chunk(self, chunk: list[int], selection, decide: Decide, actor: str, limits, dry_run: bool,
                      budget_ms: float, write_ms: list[float]) -> tuple[int, list[tuple[int, str, str | None]]]:
        """One transaction of update_selection: (how many of `chunk` it took, their outcomes).
        write_ms[0]: what writing one job's change costs, in ms (measured here, for the next)."""
        import time as clock

        results: list[tuple[int, str, str | None]] = []
        with (self._read_at_now() if dry_run else self._write()) as (c, now):
            started = clock.monotonic()
            # Held by a limit: as the limits stand in this transaction, not as they stood when the action began.
            admission = self._limit_figures(c, now, limits, False)["admission"] if limits else None
            clauses, params = self._selection_where(selection, now, admission)
            # The ids lead: the filters as one expression that no index can serve (COALESCE), or a
            # planner with statistics may walk an index of theirs over the whole table instead.
            extra = f" AND COALESCE(({' AND '.join(clauses)}), 0 = 1)" if clauses else ""
            rows = {r["id"]: r for r in c.execute(
                f"SELECT * FROM jobs WHERE id IN ({','.join('?' * len(chunk))}){extra} ORDER BY id"
                + ("" if dry_run else self.ROW_LOCK), [*chunk, *params])}
            taken = 0
            decided: list[tuple[Job, Change, int]] = []
            for job_id in chunk:
                taken += 1
                row = rows.get(job_id)
                if row is None or row_damage(row) is not None:
                    results.append((job_id, "skipped", None))
                else:
                    job = Job.from_checked_row(row)
                    try:
                        change = decide(job, now)
                    except InvalidState as e:
                        results.append((job_id, "refused", e.message))
                    else:
                        if change is None:
                            results.append((job_id, "unchanged", job.status))
                        else:
                            decided.append((job, change, row["dep_flags"]))
                            results.append((job_id, "changed", change.to_status))
                # The budget is for deciding and writing: the writing comes after, at the cost per
                # job the last transaction measured.
                if (clock.monotonic() - started) * 1000 + len(decided) * write_ms[0] * (not dry_run) >= budget_ms:
                    break  # the rest of the chunk goes in the next transaction
            if decided and not dry_run:
                writing = clock.monotonic()
                self._apply_many(c, decided, now, actor)
                write_ms[0] = (clock.monotonic() - writing) * 1000 / len(decided)
        return taken, results

    def purge(self, status: str, older_than_ms: int, *, dry_run: bool = False, batch: int = 500,
              on_progress: Callable[[int], None] | None = None, keep_ms: dict[str, int] | None = None,
              selection=None) -> int:
        """on_progress(deleted so far) is called after each batch's commit. selection: only the
        jobs it matches too."""
        where = "status = ? AND finished_at < ?"
        now = self.now()
        finished_before = now - older_than_ms  # one cut-off for every batch
        params: list = [status, finished_before]
        if selection is not None:
            more, more_params = self._selection_where(selection, now)
            where += "".join(f" AND {x}" for x in more)
            params += more_params
        # A rate window still counts the starts of runs that ended in it (every run of a job
        # started before the job finished): keep those jobs, and their runs, until it has passed.
        for type, ms in sorted((keep_ms or {}).items()):
            if ms > older_than_ms:
                where += " AND NOT (type = ? AND finished_at >= ?)"
                params += [type, now - ms]
        if dry_run:
            with self._read() as c:
                return c.execute(f"SELECT count(*) FROM jobs WHERE {where}", params).fetchone()[0]
        total = 0
        while True:
            # Small batches, each its own short transaction, so workers are never held up long.
            # Where rows are locked, the pick locks them (a row another transaction holds, such as a
            # buried job being retried, is skipped, and one changed meanwhile is read anew): the
            # DELETEs by id below must never reach a job that is no longer what the pick chose.
            with self._write() as (c, _now):
                ids = [r[0] for r in c.execute(
                    f"SELECT id FROM jobs WHERE {where} LIMIT ?{self.SKIP_LOCKED}", [*params, batch])]
                if ids:
                    self._file_history(c)  # (so that the DELETEs below reach all of their history)
                    marks = ",".join("?" * len(ids))
                    for table, column in (("events", "job_id"), ("runs", "job_id"), ("job_logs", "job_id"),
                                          ("job_deps", "job_id"), ("jobs", "id")):
                        c.execute(f"DELETE FROM {table} WHERE {column} IN ({marks})", ids)
            total += len(ids)
            if on_progress is not None and ids:
                on_progress(total)
            if len(ids) < batch:
                return total

    def set_paused(self, queue: str, paused: bool, *, type: str | None = None, until: int | None = None) -> None:
        with self._write() as (c, now):
            if not paused or until is not None:  # removed, or maybe shortened: its jobs may be claimable
                self._jobs_may_be_ready(c)
            if type is None:
                c.execute(
                    "INSERT INTO queues (name, paused, paused_until, updated_at) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, paused_until = excluded.paused_until, "
                    "updated_at = excluded.updated_at",
                    (queue, int(paused), until if paused else None, now),
                )
                if not paused:  # the whole queue flows again, every type in it too
                    c.execute("DELETE FROM paused_types WHERE queue = ?", (queue,))
                return
            c.execute("INSERT INTO queues (name, paused, updated_at) VALUES (?, 0, ?) ON CONFLICT (name) DO NOTHING",
                      (queue, now))  # a known queue (completion, stats), not a paused one
            if paused:
                c.execute(
                    "INSERT INTO paused_types (queue, type, until, updated_at) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (queue, type) DO UPDATE SET until = excluded.until, updated_at = excluded.updated_at",
                    (queue, type, until, now))
            else:
                c.execute("DELETE FROM paused_types WHERE queue = ? AND type = ?", (queue, type))

    # -- reads -----------------------------------------------------------------------------

    def _with_after(self, c, jobs: list[Job]) -> list[Job]:
        ids = [j.id for j in jobs]
        if ids:
            deps: dict[int, list[int]] = {}
            for start in range(0, len(ids), 500):
                chunk = ids[start:start + 500]
                for r in c.execute(
                    f"SELECT job_id, after_id FROM job_deps WHERE job_id IN ({','.join('?' * len(chunk))}) "
                    "ORDER BY after_id", chunk,
                ):
                    deps.setdefault(r[0], []).append(r[1])
            for j in jobs:
                j.after = deps.get(j.id, [])
        return jobs

    def get_job(self, job_id: int) -> Job:
        with self._read() as c:
            row = c.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise NoSuchJob(job_id)
            return self._with_after(c, [Job.from_row(row)])[0]

    def get_jobs(self, job_ids: list[int]) -> list[Job]:
        with self._read() as c:
            jobs = []
            for start in range(0, len(job_ids), 500):
                chunk = job_ids[start:start + 500]
                jobs += [Job.from_row(r) for r in c.execute(
                    f"SELECT * FROM jobs WHERE id IN ({','.join('?' * len(chunk))})", chunk)]
            by_id = {j.id: j for j in self._with_after(c, jobs)}
            return [by_id[i] for i in job_ids if i in by_id]

    def events(self, job_id: int) -> list[Event]:
        with self._read() as c:
            return [
                Event(r["job_id"], r["at"], r["from_status"], r["to_status"], r["actor"], r["message"], r["details"])
                for r in self._event_rows(c, job_id)
            ]

    def run_output(self, job_id: int, run: int | None = None) -> RunLog | None:
        with self._read() as c:
            if c.execute("SELECT 1 FROM jobs WHERE id = ?", (job_id,)).fetchone() is None:
                raise NoSuchJob(job_id)
            from jobctl.runlog import claim_attempts

            starts = claim_attempts((r["at"], r["from_status"], r["to_status"], r["message"])
                                    for r in self._event_rows(c, job_id))
            logged = [r[0] for r in c.execute("SELECT started_at FROM job_logs WHERE job_id = ? ORDER BY started_at",
                                              (job_id,))]

            def attempt_of(started_at: int, fallback: int) -> int:
                earlier = [n for at, n in starts if at <= started_at]
                return earlier[-1] if earlier else fallback

            numbered = [(attempt_of(s, i + 1), s) for i, s in enumerate(logged)]
            latest = starts[-1][1] if starts else (numbered[-1][0] if numbered else 0)
            if run is None:
                if not numbered:
                    return None
                n, started = numbered[-1]
            else:
                found = [s for a, s in numbered if a == run]
                if not found:  # a run that started and printed nothing: say so, with how it ended
                    claims = [at for at, a in starts if a == run]
                    if not claims:
                        return None
                    end = self._run_end(c, job_id, claims[-1])
                    return RunLog(job_id, run, latest, claims[-1], end[0] if end else None, b"", b"", 0,
                                  end[1] if end else None, kept=False)
                n, started = run, found[-1]
            r = c.execute("SELECT started_at, ended_at, head, tail, dropped FROM job_logs WHERE job_id = ? "
                          "AND started_at = ?", (job_id, started)).fetchone()
            end = self._run_end(c, job_id, r[0])
            ended_at = r[1] if r[1] is not None or end is None else end[0]
            return RunLog(job_id, n, max(latest, n), r[0], ended_at, bytes(r[2]), bytes(r[3]), r[4],
                          end[1] if end is not None else None)

    _LIST_ORDERS = {"newest": "id DESC", "oldest": "id", "priority": "priority DESC, run_at, id",
                    "run-at": "run_at, id", "updated": "updated_at DESC, id DESC"}  # keys: models.LIST_SORTS

    def list_jobs(self, *, statuses=(), queue: str | None = None, type: str | None = None, limit: int = 50,
                  stuck: bool = False, created_older_than_ms: int | None = None, sort: str = "newest",
                  held_by=None, damaged: list | None = None, selection=None, admission=None) -> list[Job]:
        """limit 0: every matching job. damaged: see sound_jobs. selection (a selection.Selection,
        with the admission its "held" needs): only the jobs it matches too."""
        where, args = self._job_filter(statuses, queue, type, stuck, created_older_than_ms, held_by, selection, admission)
        sql = f"SELECT * FROM jobs{where} ORDER BY {self._LIST_ORDERS[sort]} LIMIT ?"
        with self._read() as c:
            return self._with_after(c, sound_jobs(c.execute(sql, [*args, limit or self.NO_LIMIT]), damaged))

    def count_jobs(self, *, statuses=(), queue: str | None = None, type: str | None = None,
                   stuck: bool = False, created_older_than_ms: int | None = None, held_by=None,
                   selection=None, admission=None, at_most: int | None = None,
                   within_s: float | None = None) -> int | None:
        """How many jobs list_jobs would return without a limit (with at_most: at most at_most + 1;
        with within_s: None when counting takes longer than that)."""
        where, args = self._job_filter(statuses, queue, type, stuck, created_older_than_ms, held_by, selection, admission)
        with self._read() as c:
            if at_most is not None:  # stop counting there: a view's "more than N" costs at most N rows
                sql, args = f"SELECT count(*) FROM (SELECT 1 FROM jobs{where} LIMIT ?) AS matching", [*args, at_most + 1]
            else:
                sql = f"SELECT count(*) FROM jobs{where}"
            if within_s is not None:
                return self._count_within(c, sql, args, within_s)
            return c.execute(sql, args).fetchone()[0]

    def _count_within(self, c, sql: str, args: list, within_s: float) -> int | None:
        """A count that gives up (None) once it has taken within_s seconds, where the engine can
        stop a statement cheaply (SQLite); here it simply counts."""
        return c.execute(sql, args).fetchone()[0]

    def _job_filter(self, statuses, queue, type, stuck, created_older_than_ms, held_by=None, selection=None,
                    admission=None) -> tuple[str, list]:
        clauses, args = [], []
        statuses = list(statuses)
        if statuses:
            clauses.append(f"status IN ({','.join('?' * len(statuses))})")
            args += statuses
        if queue is not None:
            clauses.append("queue = ?")
            args.append(queue)
        if type is not None:
            clauses.append("type = ?")
            args.append(type)
        now = self.now()
        if stuck:  # held, and its lease expired or it ran past its timeout
            expired, expired_args = self._expired_where(now)
            over, over_args = self._over_timeout_where(now)
            clauses.append(f"{HELD_SQL} AND ({expired} OR {over})")
            args += [*expired_args, *over_args]
        if created_older_than_ms is not None:
            clauses.append("created_at < ?")
            args.append(now - created_older_than_ms)
        if held_by is not None:  # ready, and held back by a pause or a limit (a limits.Admission)
            held, held_args = self.held_where(now, held_by)
            clauses.append(held)
            args += held_args
        if selection is not None:
            more, more_args = self._selection_where(selection, now, admission)
            clauses += more
            args += more_args
        return (" WHERE " + " AND ".join(clauses) if clauses else ""), args

    def dependencies(self, job_id: int) -> list[tuple[int, str | None]]:
        """The `after` jobs of a job and their states (None when the row is gone)."""
        with self._read() as c:
            return [(r[0], r[1]) for r in c.execute(
                "SELECT d.after_id, j.status FROM job_deps d LEFT JOIN jobs j ON j.id = d.after_id "
                "WHERE d.job_id = ? ORDER BY d.after_id", (job_id,))]

    def paused_queues(self) -> set[str]:
        with self._read() as c:
            return {r[0] for r in c.execute(
                "SELECT name FROM queues WHERE paused = 1 AND (paused_until IS NULL OR paused_until > ?)", (self.now(),))}

    def pauses(self) -> list[tuple[str, str | None, int | None]]:
        with self._read() as c:
            return self._pauses(c, self.now())

    @staticmethod
    def _pauses(c, now: int) -> list[tuple[str, str | None, int | None]]:
        rows = c.execute(
            "SELECT name, NULL, paused_until FROM queues WHERE paused = 1 AND (paused_until IS NULL OR paused_until > ?) "
            "UNION ALL SELECT queue, type, until FROM paused_types WHERE until IS NULL OR until > ?", (now, now)).fetchall()
        return sorted(((r[0], r[1], r[2]) for r in rows), key=lambda p: (p[0], p[1] is not None, p[1] or ""))

    def queue_names(self) -> list[str]:
        with self._read() as c:
            names = {q for q, _state, n in self._state_counts(c) if n > 0}
            names.update(r[0] for r in c.execute("SELECT name FROM queues"))
            return sorted(names)

    def stats_snapshot(self, *, limit: int = 10, sample: int = 10_000, queues: list[str] | None = None,
                       limits=None, type_ages: list[str] | None = None) -> dict:
        """The raw figures of `jobctl stats`, from one read transaction (one consistent snapshot).

        Every figure is a short index walk or the engine's count by state (_state_counts), but the
        ready jobs by type (one walk of the index of ready jobs) and, when a pause or a limit can
        hold jobs, the held ones by queue and type (a second walk): the cost grows with the ready
        jobs, never with the finished ones. Run times and waits are
        taken from the latest `sample` runs of the last hour. With `queues`, the stuck, buried and
        aging jobs and the runs are those of these queues only. `known`: every queue that ever had
        a job or a pause. `limits` (limits.Limits): the config's, which with the pauses decide
        which ready jobs are held (held_back); held jobs are no part of oldest_ready or aging.
        `type_ages`: types whose oldest waiting job is wanted too (a walk of each one's ready jobs)."""
        only, only_args = "", []
        if queues:
            only, only_args = f" AND queue IN ({','.join('?' * len(queues))})", list(queues)
        damaged: list[DamagedJob] = []  # rows that cannot be decoded: left out, named (a view goes on past them)
        with self._read() as c:
            now = self.now()
            counts: dict[str, dict[str, int]] = {}
            known = set()
            for queue, state_, n in self._state_counts(c):
                known.add(queue)
                if n and (not queues or queue in queues):
                    counts.setdefault(queue, {})[state_] = int(n)
            paused = {r[0]: False for r in c.execute("SELECT name FROM queues")}
            known |= set(paused)
            hold = self.held_back(c, now, limits)
            paused_until: dict[str, int | None] = {}
            paused_types: dict[str, dict[str, int | None]] = {}
            for queue, type_, until in hold.pauses:
                if type_ is None:
                    paused[queue] = True
                    paused_until[queue] = until
                else:
                    paused_types.setdefault(queue, {})[type_] = until
            scheduled, oldest_ready, aging = {}, {}, []
            ready_by_type: dict[str, int] = {}
            held_by: dict[tuple[str, str], tuple[int, int]] = {}  # {(queue, type): (held, oldest run_at)}
            held_parts: list[tuple[str, str, int]] = []  # [(kind of the part, type, held)] (_held_parts)
            oldest_by_type: dict[str, int | None] = {}  # {type asked for: oldest waiting run_at}
            if any(by_state.get("pending") for by_state in counts.values()):
                # Ready jobs by type: one walk of the ready index, which is in type order (no sort).
                ready_by_type = {r[0]: int(r[1]) for r in c.execute(
                    f"SELECT type, count(*) FROM jobs{self._indexed('jobs_ready_by_type')} "
                    f"WHERE {READY} AND run_at <= ?{only} GROUP BY type", (now, *only_args))}
                ready_sql = f"FROM jobs{{}} WHERE {READY} AND run_at <= ?"
                for t in type_ages or ():  # (a walk of the type's ready jobs, for a check of its ready age)
                    parts = hold.of_types([t])
                    held_sql = " OR ".join(f"({sql})" for sql, _, _, _ in parts) or "1 = 0"
                    oldest_by_type[t] = c.execute(
                        f"SELECT min(run_at) {ready_sql.format(self._indexed('jobs_ready_by_type'))} "
                        f"AND type = ? AND NOT ({held_sql}){only}",
                        (now, t, *(p for _, params, _, _ in parts for p in params), *only_args)).fetchone()[0]
                # The held ones by queue and type: each part of the held test of the types with ready
                # jobs (each type against its own limits only) counted alone, in one statement,
                # where the index finds its jobs: walks of the types a shut or full limit holds, seeks
                # for the others (+run_at: by type and group, never a skip-scan of every type's jobs
                # for the range of run_at, which SQLite's planner may prefer).
                # A few queues: a count and an oldest per queue in each row (FILTER), which needs no
                # sort, in type order; more: grouped by type and queue (a sort of the held jobs).
                ready_from = f"FROM jobs{{}} WHERE {READY} AND +run_at <= ?"
                parts = hold.of_types(ready_by_type)
                by_queue = sorted(q for q, by_state in counts.items() if by_state.get("pending"))
                if len(by_queue) > 8:
                    by_queue = []
                columns = ", ".join(["count(*) FILTER (WHERE queue = ?), min(run_at) FILTER (WHERE queue = ?)"]
                                    * len(by_queue)) if by_queue else "queue, count(*), min(run_at)"
                selects = [(f"SELECT {i}, type, {columns} {ready_from.format(self._indexed(index))} "
                            f"AND {sql}{only} GROUP BY type{'' if by_queue else ', queue'}",
                            [*(q for q in by_queue for _ in (0, 1)), now, *params, *only_args])
                           for i, (sql, params, index, _kind) in enumerate(parts)]
                if selects:
                    for r in c.execute(" UNION ALL ".join(sql for sql, _ in selects),
                                       [p for _, params in selects for p in params]):
                        got = ([(q, r[2 + 2 * k], r[3 + 2 * k]) for k, q in enumerate(by_queue)] if by_queue
                               else [(r[2], r[3], r[4])])
                        for queue, n, first in got:
                            if n:
                                was, oldest = held_by.get((queue, r[1]), (0, first))
                                held_by[(queue, r[1])] = (was + int(n), min(oldest, first))
                                held_parts.append((parts[r[0]][3], r[1], int(n)))
            held_n: dict[str, int] = {}
            oldest_held: dict[str, int] = {}
            for (queue, _type), (n, first) in held_by.items():
                held_n[queue] = held_n.get(queue, 0) + n
                if first < oldest_held.get(queue, first + 1):
                    oldest_held[queue] = first
            # Per queue: the scheduled jobs, and the aging list: the ready jobs that wait for a worker,
            # longest first (a walk from the front of the queue that steps over the held ones).
            waiting_sql, waiting_params = hold.waiting()
            for queue, by_state in counts.items():
                if not by_state.get("pending"):
                    continue
                scheduled[queue] = c.execute(
                    f"SELECT count(*) FROM jobs{self._indexed('jobs_pending_age')} "
                    f"WHERE {READY} AND queue = ? AND run_at > ?", (queue, now),
                ).fetchone()[0]
                if held_n.get(queue, 0) >= by_state["pending"] - scheduled[queue]:
                    continue  # every ready job of the queue is held (a paused queue): none waits
                rows = c.execute(
                    f"SELECT * FROM jobs{self._indexed('jobs_pending_age')} "
                    f"WHERE queue = ? AND {waiting_sql} ORDER BY run_at, id LIMIT ?",
                    (queue, *waiting_params, limit)).fetchall()
                ready = sound_jobs(rows, damaged)
                if ready:
                    oldest_ready[queue] = ready[0].run_at
                aging += ready
            aging = sorted(aging, key=lambda j: (j.run_at, j.id))[:limit]
            expired, expired_args = self._expired_where(now)
            over, over_args = self._over_timeout_where(now)
            held = ("SELECT {} FROM jobs WHERE status IN (?, ?) "
                    f"AND ({expired} OR {over})" + only)
            stuck_by_type = {r[0]: int(r[1]) for r in c.execute(
                held.format("type, count(*)") + " GROUP BY type", (*HELD, *expired_args, *over_args, *only_args))}
            stuck_total = sum(stuck_by_type.values())
            stuck = sound_jobs(c.execute(
                held.format("*") + " ORDER BY claimed_at, id LIMIT ?",
                (*HELD, *expired_args, *over_args, *only_args, limit)), damaged)
            buried = sound_jobs(c.execute(
                "SELECT * FROM jobs WHERE status = 'buried'" + only + " ORDER BY finished_at DESC, id DESC LIMIT ?",
                (*only_args, limit)), damaged)
            # One row per queue, type and error (the same failure buried a hundred times is one
            # thing to look at), the latest first.
            buried_groups = [(r[0], r[1], r[2], r[3], r[4], r[5]) for r in c.execute(
                "SELECT queue, type, error, count(*), max(finished_at), max(id) FROM jobs WHERE status = 'buried'"
                + only + " GROUP BY queue, type, error ORDER BY max(finished_at) DESC, max(id) DESC LIMIT ?",
                (*only_args, limit))]
            # Held and buried jobs by type (held: few rows; buried: those a person has to see to).
            states_by_type = [(r[0], r[1], int(r[2])) for r in c.execute(
                f"SELECT type, status, count(*) FROM jobs WHERE {states_in((*HELD, 'buried'))}" + only
                + " GROUP BY type, status", only_args)]
            # Runs that ended in (now - 60 min, now], per minute back from now (bucket 0 = the last
            # minute), outcome and type: counted from the latest runs when those are every run of
            # the hour (fewer than `sample`), else by the database.
            recent = self._latest_runs(c, now - 3_600_000, now, only, only_args, sample)
            if len(recent) < sample:
                counted: dict[tuple[int, str, str], int] = {}
                for r in recent:
                    key = ((now - r[3]) // 60000, r[2], r[4])
                    counted[key] = counted.get(key, 0) + 1
                by_minute = [(*key, n) for key, n in counted.items()]
            else:
                by_minute = c.execute(
                    f"SELECT (? - ended_at) / 60000 AS minute, outcome, type, count(*) FROM {self.RUNS_READ} "
                    "WHERE ended_at > ? AND ended_at <= ?" + only + " GROUP BY minute, outcome, type",
                    (now, now - 3_600_000, now, *only_args),
                ).fetchall()
            limit_figures = None
            if limits:  # the limits section, read here too: the held jobs counted above are not read again
                held_ready: dict | None = None
                if not hold.pauses and not queues:  # (then what a limit holds is what was counted)
                    held_ready = {}
                    for t in {*limits.rates, *limits.types}:
                        if t in hold.admission.shut_types:  # every ready job of the type
                            held_ready[("type", t)] = ready_by_type.get(t, 0)
                        elif t in limits.types:  # those its type's limit holds (the "over" parts)
                            held_ready[("type", t)] = sum(n for kind, type_, n in held_parts if kind == "over" and type_ == t)
                limit_figures = self._limit_figures(c, now, limits, True, held_ready)
            self._with_after(c, stuck + buried + aging)
        runs_by_minute: dict[tuple[int, str], int] = {}
        for minute, outcome, _type, n in by_minute:
            runs_by_minute[(minute, outcome)] = runs_by_minute.get((minute, outcome), 0) + n
        return {
            "now": now, "counts": counts, "paused": paused, "paused_until": paused_until, "paused_types": paused_types,
            "known": sorted(known), "scheduled": scheduled,
            "oldest_ready": oldest_ready, "held": held_n, "oldest_held": oldest_held,
            "stuck": stuck, "stuck_expired": {j.id for j in stuck if self.lease_expired(j, now)},
            "running_ms": {j.id: self.running_ms(j, now) for j in stuck},  # (on the lease's clock)
            "stuck_total": stuck_total, "buried": buried, "buried_groups": buried_groups,
            "aging": aging, "damaged": [(e.job_id, e.reason) for e in damaged],
            "runs_by_minute": [(m, o, n) for (m, o), n in sorted(runs_by_minute.items())],
            "run_ms": [r[0] for r in recent if r[2] in ("completed", "failed")],
            "wait_ms": [r[1] for r in recent if r[1] is not None],
            # per type: {type: ready}, {(queue, type): (held, oldest held run_at)}, {type in
            # type_ages: oldest waiting run_at or None}, [(type, status, n)],
            # {type: stuck}, [(minute, outcome, type, n)], [(type, run ms)]
            "ready_by_type": ready_by_type, "held_by_type": held_by, "oldest_by_type": oldest_by_type,
            "limit_figures": limit_figures,
            "states_by_type": states_by_type, "stuck_by_type": stuck_by_type,
            "runs_by_type_minute": [(r[0], r[1], r[2], r[3]) for r in by_minute],
            "run_ms_by_type": [(r[4], r[0]) for r in recent if r[2] in ("completed", "failed")],
        }

    def damaged_jobs(self, *, chunk: int = 500) -> tuple[int, list[tuple[int, str]]]:
        """Every job row checked as a claim checks it (decodable, payload matching its hash):
        (rows checked, [(id, why)]). Read in short chunks, so checkpoints are never held up long."""
        checked, damaged, last = 0, [], 0
        while True:
            with self._read() as c:
                rows = c.execute("SELECT * FROM jobs WHERE id > ? ORDER BY id LIMIT ?", (last, chunk)).fetchall()
            for row in rows:
                reason = row_damage(row, check_hash=True)
                if reason is not None:
                    damaged.append((row["id"], reason))
            checked += len(rows)
            if len(rows) < chunk:
                return checked, damaged
            last = rows[-1]["id"]

    def never_runnable(self) -> list[tuple[int, int, str]]:
        """Blocked jobs that wait directly on a job that was cancelled, or that was deleted before
        it completed: nothing can make them run. [(job id, that dependency's id, what became of
        it)], oldest first. Jobs that wait on these are not listed: they run, or are cancelled with
        them (`cancel --with-dependents`), once these are dealt with."""
        with self._read() as c:
            rows = c.execute(
                "SELECT j.id, max(CASE WHEN a.status = 'cancelled' THEN d.after_id END), "
                "max(CASE WHEN a.id IS NULL THEN d.after_id END) "
                "FROM jobs j JOIN job_deps d ON d.job_id = j.id LEFT JOIN jobs a ON a.id = d.after_id "
                "WHERE j.status = 'pending' AND j.waiting_on > 0 GROUP BY j.id, j.waiting_on "
                "HAVING max(CASE WHEN a.status = 'cancelled' THEN 1 ELSE 0 END) = 1 "
                "OR j.waiting_on > sum(CASE WHEN a.id IS NOT NULL AND a.status <> 'completed' THEN 1 ELSE 0 END) "
                "ORDER BY j.id").fetchall()
        return [(r[0], r[1], "was cancelled") if r[1] is not None else (r[0], r[2], "was deleted before it completed")
                for r in rows]

    def _job_checks(self, remedy: str, schema: Check | None = None) -> list[Check]:
        """doctor's checks of the jobs themselves, for every SQL engine: expired leases, blocked
        jobs that can never run, and rows that cannot be decoded or whose payload does not match
        its hash (`remedy`: what to do). None of them when the schema check found a table missing:
        they read the tables, and doctor then says what is missing rather than fail on it."""
        if schema is not None and any(m.startswith("table ") for m in (schema.data or {}).get("schema_missing", ())):
            return []
        expired = self.count_expired()
        never = self.never_runnable()
        stuck, examples = len(never), never[:10]
        example = examples[0][0] if examples else "ID"
        checked, damaged = self.damaged_jobs()
        return [
            Check("expired leases", expired == 0, "none" if expired == 0 else
                  f"{expired} job(s); run `jobctl recover` (workers also do it)"),
            Check("blocked jobs", stuck == 0, "none waits on a cancelled or deleted job" if stuck == 0 else
                  f"{stuck} job(s) can never run: " + "; ".join(f"job {i} waits on job {d}, which {what}"
                                                                for i, d, what in examples)
                  + (f"; and {stuck - len(examples)} more" if stuck > len(examples) else "")
                  + f"; `jobctl cancel {example} --with-dependents` cancels job {example} and every job waiting on it",
                  data={"never_runnable": [{"id": i, "waits_on": d, "why": what} for i, d, what in never]}),
            Check("job rows", not damaged,
                  f"{checked} job(s) decode and match their payload hash" if not damaged else
                  f"{len(damaged)} damaged: " + "; ".join(f"job {i}: {why}" for i, why in damaged[:10])
                  + (f"; and {len(damaged) - 10} more" if len(damaged) > 10 else "")
                  + f"; a claim buries such a job instead of handing it out; {remedy}",
                  data={"damaged_jobs": [{"id": i, "why": why} for i, why in damaged]}),
        ]

    # -- the workers' registry ---------------------------------------------------------------
    # One row per `jobctl work` process (schema.WORKERS), written by that process only: when it
    # starts, with its renewals, when it stops. An operator writes only `request`. Rows of stopped
    # workers, and of workers not seen for WORKERS_FORGET_MS, are deleted by the next registration.

    _WORKER_COLUMNS = ("instance, worker, host, pid, version, queues, types, concurrency, started_at, last_seen, "
                       "renew_ms, state, request, requested_by, done, failed, stopped_at, seen_boot_ms, seen_boot_id")

    def _seen(self) -> tuple[int | None, int | None]:
        """(seen_boot_ms, seen_boot_id) of a worker's write now: the boot clock's time and boot, or NULLs."""
        boot = self._boot()
        return (None, None) if boot is None else boot

    def _alive_where(self, now: int) -> tuple[str, list]:
        """SQL (and its parameters) true for a registry row renewed within LOST_AFTER of its renewal
        periods, on the clock that times leases (jobctl.workers.state_of, with worker_silence)."""
        from jobctl.workers import LOST_AFTER

        return f"last_seen >= ? - {LOST_AFTER} * renew_ms", [now]

    def worker_silence(self, row: dict, now: int) -> int:
        """How long ago a registry row was last written (ms), on the clock that times leases."""
        return now - row["last_seen"]

    def _orders_sent(self, c) -> None:
        """Inside a write that gave workers an order (drain, stop): wake them, through the engine's
        wake-up (PostgreSQL: a NOTIFY with the COMMIT). Here: the commit itself (SQLite's
        data_version, which workers watch) is the news."""

    def register_worker(self, instance: str, info: dict, started_at: int | None = None) -> int:
        """Add this process's row (info: worker, host, pid, version, queues, types, concurrency,
        renew_ms, state, done, failed) and forget old rows; returns its started_at (now, unless given:
        a row deleted by hand is written again with the process's own start)."""
        with self._write() as (c, now):
            forget = now - WORKERS_FORGET_MS
            c.execute("DELETE FROM workers WHERE (state = 'stopped' AND stopped_at < ?) OR last_seen < ?",
                      (forget, forget))
            started = now if started_at is None else started_at
            c.execute("DELETE FROM workers WHERE instance = ?", (instance,))
            c.execute(
                "INSERT INTO workers (instance, worker, host, pid, version, queues, types, concurrency, started_at, "
                "last_seen, renew_ms, state, done, failed, seen_boot_ms, seen_boot_id) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (instance, info["worker"], info["host"], info["pid"], info["version"],
                 None if info["queues"] is None else json.dumps(info["queues"]), json.dumps(info["types"]),
                 info["concurrency"], started, now, info["renew_ms"], info["state"], info.get("done", 0),
                 info.get("failed", 0), *self._seen()))
        return started

    def renew_worker(self, instance: str, state: str, done: int, failed: int) -> tuple[bool, str | None]:
        """One write: last_seen = now, with the worker's state and counts. (found, the operator's
        request or None); found is False when the row is gone (deleted by hand): register again."""
        with self._write() as (c, now):
            row = c.execute("UPDATE workers SET last_seen = ?, state = ?, done = ?, failed = ?, seen_boot_ms = ?, "
                            "seen_boot_id = ? WHERE instance = ? RETURNING request",
                            (now, state, done, failed, *self._seen(), instance)).fetchone()
        return (False, None) if row is None else (True, row[0])

    def worker_stopped(self, instance: str, done: int, failed: int) -> None:
        """The worker leaves cleanly: its row says stopped (kept a day for `workers --all`)."""
        with self._write() as (c, now):
            c.execute("UPDATE workers SET state = 'stopped', stopped_at = ?, last_seen = ?, done = ?, failed = ?, "
                      "seen_boot_ms = ?, seen_boot_id = ? WHERE instance = ?",
                      (now, now, done, failed, *self._seen(), instance))

    def worker_request(self, instance: str) -> tuple[bool, str | None]:
        """(the row exists, what an operator asked of it: drain, stop or None): one read by key."""
        with self._read() as c:
            row = c.execute("SELECT request FROM workers WHERE instance = ?", (instance,)).fetchone()
        return (False, None) if row is None else (True, row[0])

    def order_workers(self, request: str, *, workers: list[str] | None = None, host: str | None = None,
                      actor: str) -> tuple[list[dict], list[str]]:
        """Ask every worker alive (neither stopped nor lost) that is named (`workers`), or on
        `host`, or all of them (neither given), to drain or stop, in one transaction; a stop is never
        turned back into a drain. Returns (the rows ordered, as they were, the named workers with
        no such row)."""
        with self._write() as (c, now):
            # (lost: not seen for LOST_AFTER renewal periods, as jobctl.workers.state_of says)
            alive, params = self._alive_where(now)
            where = f"state <> 'stopped' AND {alive}"
            if workers is not None:
                where += " AND worker IN (" + ", ".join("?" * len(workers)) + ")"
                params += workers
            if host is not None:
                where += " AND host = ?"
                params.append(host)
            rows = [dict(zip(r.keys(), r)) for r in c.execute(
                f"SELECT {self._WORKER_COLUMNS} FROM workers WHERE {where} ORDER BY worker, started_at", params)]
            missing = [w for w in dict.fromkeys(workers or []) if not any(r["worker"] == w for r in rows)]
            if rows and not missing:
                keep_stop = " AND (request IS NULL OR request <> 'stop')" if request == "drain" else ""
                c.execute(f"UPDATE workers SET request = ?, requested_by = ? WHERE {where}{keep_stop}",
                          [request, actor, *params])
                self._orders_sent(c)
        return rows, missing

    def worker_rows(self, *, jobs: bool = True) -> tuple[int, list[dict], list[tuple[int, str, str | None]]]:
        """For `jobctl workers` and stats, from one read: (now, every registry row as a dict with its
        silent_ms (worker_silence), the held jobs as (id, type, worker), by id; none with jobs=False)."""
        now = self.now()
        with self._read() as c:
            rows = [dict(zip(r.keys(), r)) for r in c.execute(
                f"SELECT {self._WORKER_COLUMNS} FROM workers ORDER BY worker, started_at")]
            held = [(r[0], r[1], r[2]) for r in c.execute(
                f"SELECT id, type, worker FROM jobs WHERE {HELD_SQL} ORDER BY id")] if jobs else []
        for row in rows:  # (jobctl.workers.state_of judges a row on it)
            row["silent_ms"] = self.worker_silence(row, now)
        return now, rows, held

    def count_expired(self) -> int:
        """Held jobs whose lease has expired."""
        expired, args = self._expired_where(self.now())
        with self._read() as c:
            return c.execute(
                f"SELECT count(*) FROM jobs WHERE {HELD_SQL} AND ({expired})", args
            ).fetchone()[0]

    def pending_types(self) -> dict[str, int]:
        with self._read() as c:
            return {r[0]: r[1] for r in c.execute(
                "SELECT type, count(*) FROM jobs WHERE status = 'pending' GROUP BY type")}

    def own_limits(self, types: list[str]) -> list[tuple[str, str | None, int, int, int]]:
        if not types:
            return []
        with self._read() as c:
            return [tuple(r) for r in c.execute(
                "SELECT type, concurrency_group, cost_units, count(*), min(id) FROM jobs "
                f"WHERE {states_in(UNFINISHED)} AND type IN ({','.join('?' * len(types))}) AND (concurrency_group IS NOT NULL OR cost_units <> 0) "
                "GROUP BY type, concurrency_group, cost_units ORDER BY type, min(id)", types)]

    def pending_costs(self) -> list[tuple[str, str | None, int, int, int]]:
        with self._read() as c:
            return [tuple(r) for r in c.execute(
                "SELECT type, concurrency_group, cost_units, count(*), min(id) FROM jobs WHERE status = 'pending' "
                "GROUP BY type, concurrency_group, cost_units ORDER BY type, min(id)")]


_KINDS = ("table", "column", "index", "trigger", "function")


def schema_check(version: int, expected_version: int, promised: set[str], present: set[str],
                 remedy: str) -> Check:
    """doctor's schema check: the version, and every table, column, index, trigger (and function)
    that version promises (`promised`) found in the database (`present`, in the same terms: `table
    jobs`, `column jobs.queue`, `index jobs_ready`, ...). The columns of a missing table are not
    listed again; `doctor --json` has them as schema_missing."""
    missing = promised - present
    tables = {m.split(" ", 1)[1] for m in missing if m.startswith("table ")}
    shown = sorted((m for m in missing if not (m.startswith("column ") and m[7:].split(".")[0] in tables)),
                   key=lambda m: (_KINDS.index(m.split(" ")[0]) if m.split(" ")[0] in _KINDS else 9, m))
    ok = version == expected_version and not shown
    detail = f"v{version}" if not shown else (
        f"v{version}, but {len(shown)} thing(s) it needs are missing: " + ", ".join(shown[:10])
        + (f" and {len(shown) - 10} more" if len(shown) > 10 else "") + f"; {remedy}")
    return Check("schema", ok, detail, data={"schema_missing": shown} if shown else None)


def _queue_and_type(queue: str | None, type: str | None) -> tuple[str, list]:
    """" AND queue = ? AND type = ?" for the ones given, and their parameters."""
    sql, params = "", []
    if queue is not None:
        sql += " AND queue = ?"
        params.append(queue)
    if type is not None:
        sql += " AND type = ?"
        params.append(type)
    return sql, params
