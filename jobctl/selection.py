"""Which jobs a command acts on: the filters shared by list, retry, cancel, reschedule, bury, purge
and retry-buried, checked once into a Selection, and turned into SQL once (where_sql).

A repeated filter ORs its values (`--status buried --status cancelled`), different filters AND
(`--type send-email --error timeout`). Pure: no clock, no I/O. Times given as durations ("1h":
that long ago) stay relative until the engine reads its own clock (Selection.bounds), so the
database's time decides, as for every other age jobctl judges. The few SQL pieces that differ
between engines (a value inside the JSON payload, "held") come from the engine (`dialect` below).
"""

from __future__ import annotations

import json
import time
from typing import Iterable, Protocol

from jobctl.errors import InvalidInput
from jobctl.models import STATES, Record, states_in

# The views a --status may name besides the states: pending jobs not yet ready (run_at later),
# waiting on `after` jobs, or ready but held back by a pause or a limit.
VIEWS = ("scheduled", "blocked", "held")
STATUSES = STATES + VIEWS
# A view no --status offers, for `jobctl top`'s aging tab: ready jobs that nothing holds back, which
# wait for a worker (pending, not blocked, due, and not held).
WAITING = "waiting"


class Selection(Record):
    """Filters as typed values. Each list ORs within itself; the fields AND. An empty list or None: no filter.

    since/before: ("at", ms since the epoch) or ("ago", ms before the engine's now).
    payload: [(path segments (str: a key, int: a list index), the value compared (a JSON value))]."""

    __slots__ = ("queues", "types", "statuses", "errors", "payload", "workers", "keys", "since", "before",
                 "min_attempts")

    def __init__(self, queues: list[str] | None = None, types: list[str] | None = None,
                 statuses: list[str] | None = None, errors: list[str] | None = None,
                 payload: list[tuple[list, object]] | None = None, workers: list[str] | None = None,
                 keys: list[str] | None = None, since: tuple[str, int] | None = None,
                 before: tuple[str, int] | None = None, min_attempts: int | None = None):
        self.queues = queues or []
        self.types = types or []
        self.statuses = statuses or []
        self.errors = errors or []
        self.payload = payload or []
        self.workers = workers or []
        self.keys = keys or []
        self.since = since
        self.before = before
        self.min_attempts = min_attempts

    @property
    def empty(self) -> bool:
        return not any(getattr(self, name) not in (None, []) for name in self.__slots__)

    def bounds(self, now: int) -> tuple[int | None, int | None]:
        """(since, before) in ms since the epoch, durations counted back from `now`."""
        return _at(self.since, now), _at(self.before, now)

    def pin(self, now: int) -> None:
        """Durations ("1h": that long ago) become the times they mean at `now`, so that an action
        found and then acts on its jobs with one window, however long it runs."""
        since, before = self.bounds(now)
        self.since = None if since is None else ("at", since)
        self.before = None if before is None else ("at", before)

    def describe(self) -> str:
        """The filters as options, for messages ("--type a --error timeout")."""
        parts = [f"--queue {v}" for v in self.queues] + [f"--type {v}" for v in self.types]
        parts += [f"--status {v}" for v in self.statuses] + [f"--error {v!r}" for v in self.errors]
        parts += [f"--payload {'.'.join(map(str, p))}={json.dumps(v, ensure_ascii=False)}" for p, v in self.payload]
        parts += [f"--worker {v}" for v in self.workers] + [f"--key {v}" for v in self.keys]
        return " ".join(parts)


def _at(bound: tuple[str, int] | None, now: int) -> int | None:
    if bound is None:
        return None
    kind, ms = bound
    return now - ms if kind == "ago" else ms


def parse_when(text: str, what: str) -> tuple[str, int]:
    """A time (ISO 8601) or a duration meaning that long ago: ("at", ms) or ("ago", ms)."""
    from jobctl.durations import parse_duration, parse_time

    s = str(text).strip()
    if s[:1].isdigit() and ("-" in s[1:] or "T" in s or ":" in s):  # 2026-11-29, 21:00 (a time)
        return "at", parse_time(s)
    try:
        return "ago", int(parse_duration(s, what=what) * 1000)
    except InvalidInput:
        raise InvalidInput(f"invalid {what} {text!r}: give a time (2026-11-29T21:00:00Z, 2026-11-29 22:00) "
                           "or a duration meaning that long ago (90s, 5m, 1h, 2d)") from None


def parse_payload_filter(text: str) -> tuple[list, object]:
    """`user.id=42` -> (["user", "id"], 42); `items.0.sku="A-1"` -> (["items", 0, "sku"], "A-1").
    The value is read as JSON, else taken as a string; a number in the path is a list index."""
    if "=" not in text:
        raise InvalidInput(f"invalid --payload {text!r}: use PATH=VALUE, such as user.id=42 or items.0.sku=A-1")
    path_text, value_text = text.split("=", 1)
    if not path_text.strip():
        raise InvalidInput(f"invalid --payload {text!r}: the path before = is empty (use PATH=VALUE, such as user.id=42)")
    path: list = []
    for part in path_text.strip().split("."):
        if part == "" or '"' in part or "\\" in part:
            raise InvalidInput(f"invalid --payload path {path_text!r}: keys are separated by single dots, "
                               "without quotes or backslashes (user.id, items.0)")
        path.append(int(part) if part.isdigit() and len(part) < 10 else part)
    from jobctl.payloads import compact, parse_json

    try:
        value = parse_json(value_text, what="--payload value")
        compact(value, what="--payload value")  # (1e400: a number no payload can hold)
    except InvalidInput:
        value = value_text  # as text, which must be text a payload can hold
        try:
            compact(value, what="--payload value")
        except InvalidInput as e:  # a lone surrogate (bytes that are not UTF-8): no payload holds it
            raise InvalidInput(f"{e.message}; give VALUE as UTF-8 text or JSON") from None
    return path, value


def parse(*, queues: Iterable[str] | None = None, types: Iterable[str] | None = None,
          statuses: Iterable[str] | None = None, errors: Iterable[str] | None = None,
          payload: Iterable[str] | None = None, workers: Iterable[str] | None = None,
          keys: Iterable[str] | None = None, since: str | None = None, before: str | None = None,
          min_attempts: int | None = None, allowed_statuses: Iterable[str] | None = None) -> Selection:
    """The options of a command, checked: bad input raises InvalidInput (exit 2) before anything is
    opened. allowed_statuses: the --status values this command can act on (default: all)."""
    from jobctl.durations import validate_name

    queues = [validate_name(q, "queue") for q in queues or []]
    types = [validate_name(t, "type") for t in types or []]
    statuses = list(dict.fromkeys(statuses or []))
    allowed = tuple(allowed_statuses) if allowed_statuses is not None else STATUSES
    for s in statuses:
        if s not in STATUSES:
            raise InvalidInput(f"invalid status {s!r}: use one of {', '.join(STATUSES)}")
        if s not in allowed:
            raise InvalidInput(f"--status {s}: this command acts on {', '.join(allowed)} jobs only")
    errors = [e for e in errors or []]
    if any(e == "" for e in errors):
        raise InvalidInput("invalid --error '': give some text the error contains")
    workers = [w for w in workers or []]
    keys = [k for k in keys or []]
    if any(not w for w in workers) or any(not k for k in keys):
        raise InvalidInput("--worker and --key need a value")
    since_at = parse_when(since, "--since") if since is not None else None
    before_at = parse_when(before, "--before") if before is not None else None
    if since_at is not None and before_at is not None:
        now = int(time.time() * 1000)  # (only to compare the two: the engine's clock places them)
        if _at(since_at, now) >= _at(before_at, now):  # type: ignore[operator]
            raise InvalidInput(f"--since {since} is not before --before {before}: no job can match; "
                               "give an earlier --since or a later --before")
    if min_attempts is not None and (isinstance(min_attempts, bool) or not isinstance(min_attempts, int)
                                     or min_attempts < 0):
        raise InvalidInput(f"invalid --min-attempts {min_attempts!r}: give a number of runs, 0 or more")
    return Selection(queues, types, statuses, errors, [parse_payload_filter(p) for p in payload or []], workers,
                     keys, since_at, before_at, min_attempts)


class Dialect(Protocol):
    """What where_sql needs from an engine: the SQL that differs between databases."""

    UNICODE_LOWER: str  # the SQL function that lowers text in every alphabet

    def _payload_equals(self, path: list, value: object) -> tuple[str, list]:
        """SQL true when the payload's value at `path` equals `value` (a JSON value)."""
        ...

    def _held_where(self, now: int, admission) -> tuple[str, list]:
        """SQL true for a ready job held back by a pause or by a limit (`admission`, or None)."""
        ...

    def _last_worker_where(self, workers: list[str]) -> tuple[str, list]:
        """SQL true for a job that is, or was last, claimed by one of `workers`."""
        ...


# --status values as SQL over jobs' columns; every parameter is "now".
STATUS_SQL = {
    "scheduled": "(status = 'pending' AND waiting_on = 0 AND run_at > ?)",
    "blocked": "(status = 'pending' AND waiting_on > 0)",
}


def where_sql(sel: Selection, now: int, dialect: Dialect, admission=None) -> tuple[list[str], list]:
    """The clauses (to AND) and their parameters that select `sel`'s jobs at `now`. The error
    filter is case-insensitive in every alphabet (the same lower() on both sides)."""
    clauses: list[str] = []
    params: list = []

    def any_of(column: str, values: list) -> None:
        if values:
            clauses.append(f"{column} = ?" if len(values) == 1 else f"{column} IN ({','.join('?' * len(values))})")
            params.extend(values)

    any_of("queue", sel.queues)
    any_of("type", sel.types)
    if sel.statuses:
        states = [s for s in sel.statuses if s in STATES]
        ors: list[str] = []
        if states:
            ors.append(f"status = '{states[0]}'" if len(states) == 1
                       else states_in(states))  # literals: as the indexes say
        for view in ("scheduled", "blocked"):
            if view in sel.statuses:
                ors.append(STATUS_SQL[view])
                params.extend([now] * STATUS_SQL[view].count("?"))
        if "held" in sel.statuses:
            held, held_params = dialect._held_where(now, admission)
            ors.append(f"({held})")
            params.extend(held_params)
        if WAITING in sel.statuses:  # (IS NOT TRUE: a held test that is NULL for a row does not hold it)
            held, held_params = dialect._held_where(now, admission)
            ors.append(f"(status = 'pending' AND waiting_on = 0 AND run_at <= ? AND ({held}) IS NOT TRUE)")
            params.extend([now, *held_params])
        clauses.append(ors[0] if len(ors) == 1 else "(" + " OR ".join(ors) + ")")
    if sel.errors:
        # (the database folds both sides alike; a text beyond ASCII needs a lower() of every
        # alphabet, which on SQLite is jobctl's own: the ASCII one is SQLite's, the quicker)
        lower = "lower" if all(e.isascii() for e in sel.errors) else dialect.UNICODE_LOWER
        clauses.append("(" + " OR ".join([f"{lower}(error) LIKE {lower}(?) ESCAPE '!'"] * len(sel.errors)) + ")")
        params.extend("%" + _like_escape(e) + "%" for e in sel.errors)
    if sel.payload:
        # The same path repeated ORs (user.id=1 or user.id=2); different paths AND.
        by_path: dict[str, list[tuple[list, object]]] = {}
        for path, value in sel.payload:
            by_path.setdefault(json.dumps(path), []).append((path, value))
        for group in by_path.values():
            ors = []
            for path, value in group:
                sql, p = dialect._payload_equals(path, value)
                ors.append(sql)
                params.extend(p)
            clauses.append("(" + " OR ".join(ors) + ")")
    if sel.workers:
        sql, worker_params = dialect._last_worker_where(sel.workers)
        clauses.append(sql)
        params.extend(worker_params)
    any_of("idempotency_key", sel.keys)
    since, before = sel.bounds(now)
    if since is not None:
        clauses.append("updated_at >= ?")
        params.append(since)
    if before is not None:
        clauses.append("updated_at < ?")
        params.append(before)
    if sel.min_attempts is not None:
        clauses.append("attempts >= ?")
        params.append(min(sel.min_attempts, 2**31))  # (more runs than any job has: a 64-bit column takes it)
    return clauses, params


def _like_escape(text: str) -> str:
    return text.replace("!", "!!").replace("%", "!%").replace("_", "!_")


def payload_json(value: object) -> str:
    """A value compared inside the payload, in the stored (compact) JSON form."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
