"""Plain data: job states and the Job record. No I/O here."""

from __future__ import annotations

import json
from enum import Enum
from operator import attrgetter, itemgetter

from jobctl import payloads
from jobctl.durations import to_rfc3339
from jobctl.errors import DamagedJob


class JobStatus(str, Enum):
    """The six states of a job.

    pending -> running (claim) -> completed | pending (fail with runs left, recover, release)
    running -> buried (no runs left, --bury) | cancel_requested (operator cancel)
    running, cancel_requested -> cancelled (the holder confirms with its token)
    cancel_requested -> completed | buried | cancelled (recover)
    buried -> pending (retry) | cancelled;  pending -> cancelled.
    completed and cancelled are terminal.
    """

    PENDING = "pending"
    RUNNING = "running"
    CANCEL_REQUESTED = "cancel_requested"
    COMPLETED = "completed"
    BURIED = "buried"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value


TERMINAL = frozenset({JobStatus.COMPLETED, JobStatus.CANCELLED})
FINISHED = frozenset({JobStatus.COMPLETED, JobStatus.CANCELLED, JobStatus.BURIED})
ACTIVE = frozenset({JobStatus.RUNNING, JobStatus.CANCEL_REQUESTED})  # held by a worker
# The same states as tuples, named once for the code and its SQL alike (a query takes them as
# parameters, or as literals through states_in(), in this order).
HELD = ("running", "cancel_requested")  # held by a worker (ACTIVE)
UNFINISHED = ("pending", *HELD)  # (not FINISHED) a `--unique` job's twins, what the limits count
REACTING = ("buried", "completed", "cancelled")  # the states a job may have a reaction to (Job.reaction_type)


def counted_state(row: str | None = None) -> str:
    """SQL of the state a job counts in (job_counts on SQLite, job_count_changes on PostgreSQL, a
    transfer's check): a pending job waiting on `after` jobs counts as 'blocked'. row: the table or
    trigger row that qualifies the columns ("NEW", "jobs"), or None."""
    p = f"{row}." if row else ""
    return f"CASE WHEN {p}status = 'pending' AND {p}waiting_on > 0 THEN 'blocked' ELSE {p}status END"


def states_in(states) -> str:
    """`status IN ('a', 'b')`: states as literals, so that a planner can match a partial index."""
    return "status IN (" + ", ".join(f"'{s}'" for s in states) + ")"


STATES = tuple(s.value for s in JobStatus)
# What each action by filter can act on (its --status values: states and the views scheduled, blocked,
# held), and what it acts on without --status.
ACTS_ON = {
    "retry": (("buried",), ("buried",)),
    "cancel": (("pending", "scheduled", "blocked", "held", "buried"), ("pending",)),
    "reschedule": (("pending", "scheduled", "blocked", "held"), ("pending",)),
    "bury": (("pending", "scheduled", "blocked", "held"), ("pending",)),
}
LIST_SORTS = ("newest", "oldest", "priority", "run-at", "updated")  # `list --sort`, in the engine's order terms


class Record:
    """Base of the plain records (Job, Event, NewJob, Settings, ...): equality and repr by field,
    as a dataclass would give, without the ~0.7 ms per class that @dataclass spends generating
    and compiling methods at import (the hot commands import ten of them). A subclass lists its
    fields in __slots__, in constructor order, and writes its own __init__."""

    __slots__: tuple[str, ...] = ()
    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value: unhashable, like an eq=True dataclass

    def _values(self) -> tuple:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other):
        if other.__class__ is self.__class__:
            return self._values() == other._values()
        return NotImplemented

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{self.__class__.__qualname__}({fields})"


def pending_view(job: "Job", now: int) -> str | None:
    """Why a pending job is not ready, in the words of the views: "blocked" (it waits on other
    jobs) or "scheduled" (its time has not come); None for a ready job, or one not pending."""
    if job.status != "pending":
        return None
    if job.waiting_on:
        return "blocked"
    return "scheduled" if job.run_at > now else None


class Job(Record):
    """One row of the queue, with times in epoch milliseconds and JSON kept as text."""

    __slots__ = ("id", "queue", "type", "payload", "priority", "status", "attempts", "max_attempts", "backoff",
                 "timeout_ms", "run_at", "created_at", "updated_at", "idempotency_key", "worker", "claimed_at",
                 "heartbeat_at", "lease_expires_at", "lease_ms", "token", "progress", "error", "result",
                 "finished_at", "waiting_on", "lease_boot_ms", "lease_boot_id", "cost_units", "concurrency_group",
                 "on_buried", "on_completed", "on_cancelled", "progress_at", "claimed_boot_ms", "after")

    def __init__(self, id: int, queue: str, type: str,
                 payload: str,  # compact JSON text, exactly as enqueued
                 priority: int, status: str, attempts: int, max_attempts: int,
                 backoff: str,  # "exponential" | "linear" | "fixed" | "10,30,60"
                 timeout_ms: int, run_at: int, created_at: int, updated_at: int,
                 idempotency_key: str | None = None, worker: str | None = None, claimed_at: int | None = None,
                 heartbeat_at: int | None = None, lease_expires_at: int | None = None, lease_ms: int | None = None,
                 token: str | None = None,
                 progress: str | None = None,  # JSON text
                 error: str | None = None,
                 result: str | None = None,  # JSON text
                 finished_at: int | None = None,
                 waiting_on: int = 0,  # how many `after` jobs are not completed yet
                 lease_boot_ms: int | None = None,  # the lease's end on the host's boot clock (SQLite)
                 lease_boot_id: int | None = None,  # ... of that boot (engines/sqlite.py, boot_clock)
                 cost_units: int = 1,  # what it holds of its concurrency limit while it runs (0: not set, the type's)
                 concurrency_group: str | None = None,  # None: the type's, if any (limits.Limits.resolve)
                 on_buried: str | None = None,  # reaction types: a job of that type is enqueued when it
                 on_completed: str | None = None,  # becomes buried / completed / cancelled (stored at enqueue)
                 on_cancelled: str | None = None,
                 progress_at: int | None = None,  # when `progress` last changed (None: never reported)
                 claimed_boot_ms: int | None = None,  # the claim on the lease's boot clock (SQLite)
                 after: list[int] | None = None):  # None: a new empty list
        self.id = id
        self.queue = queue
        self.type = type
        self.payload = payload
        self.priority = priority
        self.status = status
        self.attempts = attempts
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.timeout_ms = timeout_ms
        self.run_at = run_at
        self.created_at = created_at
        self.updated_at = updated_at
        self.idempotency_key = idempotency_key
        self.worker = worker
        self.claimed_at = claimed_at
        self.heartbeat_at = heartbeat_at
        self.lease_expires_at = lease_expires_at
        self.lease_ms = lease_ms
        self.token = token
        self.progress = progress
        self.error = error
        self.result = result
        self.finished_at = finished_at
        self.waiting_on = waiting_on
        self.lease_boot_ms = lease_boot_ms
        self.lease_boot_id = lease_boot_id
        self.cost_units = cost_units
        self.concurrency_group = concurrency_group
        self.on_buried = on_buried
        self.on_completed = on_completed
        self.on_cancelled = on_cancelled
        self.progress_at = progress_at
        self.claimed_boot_ms = claimed_boot_ms
        self.after = [] if after is None else after

    def reaction_type(self, status: str) -> str | None:
        """The type of the job to enqueue when this job becomes `status` (None: no reaction)."""
        return {"buried": self.on_buried, "completed": self.on_completed,
                "cancelled": self.on_cancelled}.get(status)

    @classmethod
    def from_row(cls, row: dict, after: list[int] | None = None) -> "Job":
        """A job from a stored row; a row that cannot be decoded raises DamagedJob (exit 8)."""
        if not isinstance(row, dict):  # a sqlite3.Row, read once (see row_damage)
            row = dict(zip(row.keys(), row))
        reason = row_damage(row)
        if reason is not None:
            raise DamagedJob(row.get("id", "?"), reason)
        return cls.from_checked_row(row, after)

    @classmethod
    def from_checked_row(cls, row: dict, after: list[int] | None = None) -> "Job":
        """A job from a row that row_damage() found sound."""
        keys = row.keys()
        take = _columns_in_order(keys)
        if take is None:  # not every column: the constructor's defaults fill the others in
            items = row.items() if isinstance(row, dict) else zip(keys, row)
            args = {k: v for k, v in items if k in JOB_COLUMNS}
            args["after"] = after  # not a column
            return cls(**args)
        # A whole row (SELECT * or RETURNING *: the worker reads three per job it runs), passed by
        # position: a sqlite3.Row finds a name by comparing it with each column name in turn, and
        # a call with 32 keyword arguments costs several times one with 32 positional ones.
        return cls(*take(tuple(row.values()) if isinstance(row, dict) else row), after=after)  # type: ignore[misc]

    def updated(self, fields: dict) -> "Job":
        """A copy with these columns set to these values (as an UPDATE of them leaves the row)."""
        job = Job(*_job_args(self), after=list(self.after))  # type: ignore[misc]
        for name, value in fields.items():
            setattr(job, name, value)
        return job

    @property
    def timeout(self) -> float:
        return self.timeout_ms / 1000

    def backoff_json(self):
        if self.backoff in ("exponential", "linear", "fixed"):
            return self.backoff
        return [int(x) for x in self.backoff.split(",")]

    def to_dict(self, *, claim: bool = False) -> dict:
        """The job object that `--json` prints."""
        d = {
            "id": self.id,
            "queue": self.queue,
            "type": self.type,
            "payload": json.loads(self.payload),
            "priority": self.priority,
            "status": self.status,
            "attempts": self.attempts,
            "max_attempts": self.max_attempts,
            "backoff": self.backoff_json(),
            "timeout": self.timeout_ms / 1000 if self.timeout_ms % 1000 else self.timeout_ms // 1000,
            "run_at": to_rfc3339(self.run_at),
            "after": list(self.after),
            "idempotency_key": self.idempotency_key,
            "worker": self.worker,
            "claimed_at": to_rfc3339(self.claimed_at),
            "lease_expires_at": to_rfc3339(self.lease_expires_at),
            "token": self.token,
            "progress": json.loads(self.progress) if self.progress else None,
            "progress_at": to_rfc3339(self.progress_at),
            "error": self.error,
            "result": json.loads(self.result) if self.result is not None else None,
            "created_at": to_rfc3339(self.created_at),
            "updated_at": to_rfc3339(self.updated_at),
            "finished_at": to_rfc3339(self.finished_at),
            "cost_units": self.cost_units or None,  # null: not set on the job, the claimer's config decides
            "concurrency_group": self.concurrency_group,
            "on_buried": self.on_buried,
            "on_completed": self.on_completed,
            "on_cancelled": self.on_cancelled,
        }
        if claim:
            d["attempt"] = self.attempts
        return d


JOB_COLUMNS = frozenset(Job.__slots__) - {"after"}  # what from_row takes from a row
_JOB_ARGS = Job.__init__.__code__.co_varnames[1:Job.__init__.__code__.co_argcount - 1]  # the columns, in order
_job_args = attrgetter(*_JOB_ARGS)  # a job's constructor arguments, in order
_TAKERS: dict[tuple, itemgetter | None] = {}


def _columns_in_order(keys) -> itemgetter | None:
    """What picks Job's constructor arguments, in order, out of rows with these column names; None
    when some job column is missing. Worked out once per shape of row (a few SELECTs make them all)."""
    shape = tuple(keys)
    try:
        return _TAKERS[shape]
    except KeyError:
        pass
    first: dict[str, int] = {}
    for i, name in enumerate(shape):
        first.setdefault(name, i)  # a name twice: its first column, as row[name] reads
    take = itemgetter(*(first[n] for n in _JOB_ARGS)) if all(n in first for n in _JOB_ARGS) else None
    if len(_TAKERS) < 64:  # a handful of shapes in practice; never a leak
        _TAKERS[shape] = take
    return take

# What a sound row holds, column by column (only the columns present are checked).
_INTEGERS = ("id", "priority", "attempts", "max_attempts", "timeout_ms", "waiting_on", "cost_units", "dep_flags")
_TIMES = ("run_at", "created_at", "updated_at")
_OPTIONAL_TIMES = ("claimed_at", "heartbeat_at", "lease_expires_at", "finished_at", "progress_at")
_TEXTS = ("queue", "type", "backoff")
_OPTIONAL_TEXTS = ("idempotency_key", "worker", "token", "error", "on_buried", "on_completed", "on_cancelled",
                   "concurrency_group", "unique_key")
_MAX_MS = 253402300799999  # 9999-12-31T23:59:59.999Z: the last time RFC 3339 can write
_BACKOFF_NAMES = ("exponential", "linear", "fixed")
_TIME_CHECKS = tuple((k, k not in _TIMES, "milliseconds" if k == "lease_ms" else "a time")
                     for k in _TIMES + _OPTIONAL_TIMES + ("lease_ms",))  # (column, may be NULL, what it holds)
_ABSENT = object()  # a column the row does not have


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _bad_text(value) -> bool:
    if not isinstance(value, str):
        return True
    if value.isascii():
        return False
    try:
        value.encode("utf-8")  # read back with surrogateescape: bytes that were not UTF-8
    except UnicodeEncodeError:
        return True
    return False


def row_damage(row, *, check_hash: bool = False) -> str | None:
    """Why a stored job row cannot be decoded (None when it can): a column of the wrong type, a
    time out of range, an unknown state, JSON that does not parse; with check_hash, also a payload
    whose canonical form no longer matches the hash stored at enqueue."""
    if not isinstance(row, dict):  # a sqlite3.Row: one dict, so each look-up below is a hash
        row = dict(zip(row.keys(), row))
    # Each check is written for the sound row, which is nearly every row (three a job the worker
    # runs): one dict look-up, a type test, and a function call only for what may be damaged.
    get = row.get
    for k in _INTEGERS:
        v = get(k, _ABSENT)
        if v is not _ABSENT and type(v) is not int:
            return f"{k} holds {_shown(v)}, not an integer"
    for k, optional, what in _TIME_CHECKS:
        v = get(k, _ABSENT)
        if v is _ABSENT or (v is None and optional):
            continue
        if type(v) is not int or not 0 <= v <= _MAX_MS:
            return f"{k} holds {_shown(v)}, not {what}"
    v = get("status", _ABSENT)
    if v is not _ABSENT and v not in STATES:
        return f"status holds {_shown(v)}, not a state"
    for k in _TEXTS:
        v = get(k, _ABSENT)
        if v is not _ABSENT and not (type(v) is str and v.isascii()) and _bad_text(v):
            return f"{k} holds {_shown(v)}, not text"
    for k in _OPTIONAL_TEXTS:
        v = get(k)
        if v is not None and not (type(v) is str and v.isascii()) and _bad_text(v):
            return f"{k} holds {_shown(v)}, not text"
    b = get("backoff", _ABSENT)
    if b is not _ABSENT and b not in _BACKOFF_NAMES and not all(x.isdigit() and x.isascii() for x in b.split(",")):
        return f"backoff holds {_shown(b)}, not a strategy"
    if "payload" in row:
        reason = payloads.stored_damage(row["payload"], get("payload_hash"), check_hash=check_hash)
        if reason is not None:
            return reason
    for k in ("progress", "result"):
        v = get(k)
        if v is not None:
            if _bad_text(v):
                return f"{k} holds {_shown(v)}, not JSON text"
            try:
                json.loads(v)
            except (ValueError, RecursionError):
                return f"{k} holds {_shown(v)}, not valid JSON"
    return None


class Event(Record):
    __slots__ = ("job_id", "at", "from_status", "to_status", "actor", "message", "details")

    def __init__(self, job_id: int, at: int, from_status: str | None, to_status: str, actor: str,
                 message: str | None = None,
                 details: str | None = None):  # JSON text: exit code, stderr tail, ...
        self.job_id = job_id
        self.at = at
        self.from_status = from_status
        self.to_status = to_status
        self.actor = actor
        self.message = message
        self.details = details

    def to_dict(self) -> dict:
        d = {
            "at": to_rfc3339(self.at),
            "from": self.from_status,
            "to": self.to_status,
            "actor": self.actor,
            "message": self.message,
        }
        if self.details:
            try:
                d["details"] = json.loads(self.details)
            except (ValueError, RecursionError):
                raise DamagedJob(self.job_id, f"an event's details are not valid JSON ({_shown(self.details)})") from None
        return d
