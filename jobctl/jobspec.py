"""What a user asks to enqueue, checked and made into NewJobs with no database at all: a job's
type, payload and options (command line > [types.X] > [defaults]), and the lines of
`enqueue --batch`. Commands refuse bad input here before they open, or create, the database;
the queue runs the same checks for its own callers. Pure: no engine, no I/O.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Callable, Iterable

from jobctl import payloads
from jobctl.config import Settings, parse_backoff, parse_cost
from jobctl.durations import parse_duration, parse_priority, parse_time, validate_name
from jobctl.engines.base import NewJob
from jobctl.errors import InvalidInput

_FIELDS_OF = attrgetter(*NewJob.__slots__)  # a job's fields, in the order of NewJob's parameters

MAX_ATTEMPTS_LIMIT = 1000
MAX_ID = 2**63 - 1
BATCH_KEYS = {"type", "payload", "queue", "priority", "delay", "at", "max_attempts", "backoff", "timeout",
              "key", "unique", "after", "cost", "group", "on_buried", "on_completed", "on_cancelled"}
REACTIONS = ("on_buried", "on_completed", "on_cancelled")
BATCH_OPTIONS = frozenset(("queue", "priority", "delay", "at", "max_attempts", "backoff", "timeout", "key", "unique",
                           "after", "cost", "group", *REACTIONS))  # the batch keys that are prepare()'s options


def validate_job_id(value) -> int:
    try:
        n = int(value)
        if isinstance(value, float) and value != n:  # 1.5 from JSON is not job 1
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        raise InvalidInput(f"invalid job id {value!r}: must be a positive integer") from None
    if isinstance(value, bool) or not 1 <= n <= MAX_ID:
        raise InvalidInput(f"invalid job id {value!r}: must be from 1 to {MAX_ID}")
    return n


def reschedule_when(now: bool, delay, at) -> tuple[int, int | None]:
    """reschedule's --now, --in DUR or --at TIME (exactly one) as (delay_ms, not_before), for
    transitions.reschedule: bad input is exit 2, before anything is asked or changed."""
    if sum((bool(now), delay is not None, at is not None)) != 1:
        raise InvalidInput("give exactly one of --now, --in DUR or --at TIME")
    if delay is not None:
        return int(parse_duration(delay, what="--in") * 1000), None
    return 0, (parse_time(at) if at is not None else None)


def validate_max_attempts(value) -> int:
    try:
        n = int(value)
        if isinstance(value, bool) or isinstance(value, float) and value != n:
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        raise InvalidInput(f"invalid max attempts {value!r}: must be an integer from 1 to {MAX_ATTEMPTS_LIMIT}") from None
    if not 1 <= n <= MAX_ATTEMPTS_LIMIT:
        raise InvalidInput(f"invalid max attempts {value!r}: must be from 1 to {MAX_ATTEMPTS_LIMIT}")
    return n


def prepare(settings: Settings, type: str, payload=None, *, payload_text: str | bytes | None = None, queue=None,
            priority=None, delay=None, at=None, max_attempts=None, backoff=None, timeout=None, key=None,
            unique: bool = False, after: Iterable = (), cost=None, group=None, on_buried=None, on_completed=None,
            on_cancelled=None, check_limit: bool = True) -> NewJob:
    """Validate one job's options into a NewJob: command line > [types.X] > [defaults].
    check_limit: refuse a cost over the job's concurrency limit (not for a reaction, which a
    transition enqueues: refusing it there would refuse the transition)."""
    s = settings
    validate_name(type, "type")
    tc = s.type_config(type)
    if payload_text is not None:
        payload = payloads.parse_json(payload_text)
    elif payload is None:
        payload = {}
    compact = payloads.compact(payload, max_bytes=s.max_payload_bytes)
    queue = validate_name(queue, "queue") if queue is not None else (tc and tc.queue) or s.queue
    if priority is not None:
        priority = parse_priority(priority)
    else:
        priority = tc.priority if tc and tc.priority is not None else s.priority
    if max_attempts is not None:
        max_attempts = validate_max_attempts(max_attempts)
    else:
        max_attempts = tc.max_attempts if tc and tc.max_attempts is not None else s.max_attempts
    backoff = parse_backoff(backoff) if backoff is not None else (tc and tc.backoff) or s.backoff
    if timeout is not None:
        timeout_s = parse_duration(timeout, what="timeout")
        if timeout_s <= 0:
            raise InvalidInput("invalid timeout: must be more than 0")
    else:
        timeout_s = tc.timeout if tc and tc.timeout is not None else s.timeout
    if delay is not None and at is not None:
        raise InvalidInput("--delay and --at cannot be used together; give one of them")
    delay_ms, not_before = 0, None
    if delay is not None:
        delay_ms = int(parse_duration(delay, what="delay") * 1000)
    elif at is not None:
        not_before = parse_time(at)  # a time in the past means now: the engine takes the later
    _check_key(key)
    if not isinstance(unique, bool):
        raise InvalidInput(f"invalid unique {unique!r}: must be true or false")
    after_ids = _after_ids(after)
    # Only what the job sets itself is stored: a group or cost left out is the type's in the
    # config of whoever claims it (limits.Limits.resolve), not frozen from the enqueuer's.
    cost_units = parse_cost(cost) if cost is not None else 0
    group = validate_name(group, "group") if group is not None else None
    if s.types and check_limit:
        refuse_over_limit(s, type, tc, cost_units, group)
    given = {"on_buried": on_buried, "on_completed": on_completed, "on_cancelled": on_cancelled}
    reactions: dict[str, str | None] = {}
    for name, value in given.items():
        if value is None:
            reactions[name] = getattr(tc, name) if tc else None
            continue
        reactions[name] = validate_name(value, f"--{name.replace('_', '-')} type")
        if reactions[name] == type:
            raise InvalidInput(f"invalid --{name.replace('_', '-')} {value!r}: a job of type {type} cannot react "
                               "to itself; name another type")
    return NewJob(
        queue=queue, type=type, payload=compact, payload_hash=payloads.canonical_hash(payload, compact),
        priority=priority, max_attempts=max_attempts, backoff=backoff, timeout_ms=int(timeout_s * 1000),
        delay_ms=delay_ms, not_before=not_before, idempotency_key=key, unique=unique, after=after_ids,
        cost_units=cost_units, concurrency_group=group, on_buried=reactions["on_buried"],
        on_completed=reactions["on_completed"], on_cancelled=reactions["on_cancelled"],
    )


_GROUP_LIMITS: list = []  # [(settings.types, {group: smallest limit})]: computed once per config


def refuse_over_limit(settings: Settings, type: str, tc, cost_units: int, group: str | None) -> None:
    """Refuse (exit 2) a job whose cost is more than the concurrency limit it counts against
    (its group's, the smallest any type of the group declares; else its type's): no worker could
    ever start it. Its cost and group are its own, else its type's, as a claim resolves them."""
    group = group if group is not None else (tc.concurrency_group if tc else None)
    if group is not None:
        if not _GROUP_LIMITS or _GROUP_LIMITS[0][0] is not settings.types:
            limits: dict[str, int] = {}
            for t in settings.types.values():
                if t.concurrency_group is not None and t.concurrency_limit is not None:
                    limits[t.concurrency_group] = min(t.concurrency_limit, limits.get(t.concurrency_group,
                                                                                      t.concurrency_limit))
            _GROUP_LIMITS[:] = [(settings.types, limits)]
        limit, what = _GROUP_LIMITS[0][1].get(group), f"concurrency group {group}"
    else:
        limit, what = (tc.concurrency_limit if tc else None), f"type {type}"
    cost = cost_units or (tc.cost_units if tc and tc.cost_units else 1)
    if limit is not None and cost > limit:
        raise InvalidInput(f"a job of type {type} costs {cost} units, more than the concurrency limit of {what} "
                           f"({limit}): no worker could ever start it; give a cost of at most {limit} "
                           "(--cost, or the batch key cost), or raise the limit in the config")


_PLAIN = frozenset((str, int, bool))  # option values a template is kept for (hashable; 1, 1.0 and True apart)
_TEMPLATES_MOST = 1024  # distinct (type, options) of one batch kept; past that, prepare() each line


def _check_key(key):
    """An idempotency key as given (None: none), refused unless a string of 1 to 255 characters."""
    if key is not None and (not isinstance(key, str) or not key or len(key) > 255):
        raise InvalidInput("invalid idempotency key: must be a string of 1 to 255 characters")
    return key


def _after_ids(after) -> list[int]:
    """The ids a job waits for: one id, or a list of them, each checked."""
    if isinstance(after, (str, int)):
        after = [after]
    return [validate_job_id(a) for a in after]


def _from_template(t: NewJob, stored: tuple[str, str], key: str | None, after: list[int], source: str | None) -> NewJob:
    """A batch line's job: what prepare() made of its type and options (the template `t`), with the
    line's own payload (stored: its compact text and canonical hash), key and after."""
    return NewJob(t.queue, t.type, stored[0], stored[1], t.priority, t.max_attempts, t.backoff, t.timeout_ms,
                  t.delay_ms, t.not_before, key, t.unique, after, source, t.cost_units, t.concurrency_group,
                  t.on_buried, t.on_completed, t.on_cancelled)


def prepare_batch_line(settings: Settings, text: str, lineno: int, defaults: dict | None = None,
                       templates: dict | None = None) -> NewJob | None:
    """One NDJSON line of `enqueue --batch` (None for a blank line); errors name the line.
    defaults: {batch key: value} for a line that does not give that key (or gives null): the
    options given with --batch/--chain, in the forms of prepare().
    templates: a dict the caller keeps for one batch: what prepare() made of a line's type and
    options (all but its payload, key and after), so that a later line with the same ones checks
    only those three, in prepare()'s order, instead of resolving every option again."""
    if not text or text.isspace():
        return None
    try:
        # The line's object wraps the payload: only the payload's own depth counts, and as the
        # payload is one level down, the whole line's depth limit (one more) checks it.
        obj = payloads.parse_json(text, what="JSON", wrapper_levels=1)
        if templates and not defaults and type(obj) is dict and (len(obj) == 1 or len(obj) == 2 and "payload" in obj):
            # Most lines: a type seen before, maybe a payload, nothing else (the steps below, in short).
            type_ = obj.get("type")
            template = templates.get(type_) if type(type_) is str else None
            if template is not None:
                payload = obj["payload"] if len(obj) == 2 else {}
                return _from_template(template, payloads.stored_forms(payload, settings.max_payload_bytes),
                                      None, [], f"line {lineno}")
        if not isinstance(obj, dict):
            raise InvalidInput("each line must be a JSON object with at least a \"type\"")
        if not BATCH_KEYS.issuperset(obj):
            shown = sorted(repr(k if len(k) <= 40 else k[:40] + "…") for k in set(obj) - BATCH_KEYS)
            raise InvalidInput(f"unknown key(s) {', '.join(shown[:5])}{' …' if len(shown) > 5 else ''} "
                               f"(known: {', '.join(sorted(BATCH_KEYS))})")
        if "type" not in obj:
            raise InvalidInput("missing \"type\"")
        if len(obj) == 1 or len(obj) == 2 and "payload" in obj:
            opts = {}
        else:
            opts = {k: v for k, v in obj.items() if v is not None and k in BATCH_OPTIONS}  # null: not given
            if not isinstance(opts.get("after", []), list):
                raise InvalidInput("\"after\" must be a list of job ids")
        if defaults:
            for k, v in defaults.items():
                # A line that gives "delay" or "at" gives its start time: neither default applies.
                if v is not None and k not in opts and not (k in ("delay", "at") and ("delay" in opts or "at" in opts)):
                    opts[k] = v
        type_ = obj["type"]
        payload = obj["payload"] if "payload" in obj else {}  # an explicit null is a payload: JSON null
        key: object = None  # the line's type and options but key and after: the template's key
        if templates is not None and type(type_) is str:
            if not opts:
                key = type_
            else:
                key = (type_,)
                for k in sorted(opts):
                    v = opts[k]
                    if k == "key" or k == "after":
                        continue
                    if type(v) not in _PLAIN:
                        key = None
                        break
                    key += (k, type(v), v)
        template = templates.get(key) if templates is not None and key is not None else None
        if template is None:
            job = (prepare(settings, type_, payload, **opts) if payload is not None
                   else prepare(settings, type_, payload_text="null", **opts))
            if templates is not None and key is not None and len(templates) < _TEMPLATES_MOST:
                templates[key] = job
                job = NewJob(*_FIELDS_OF(job))  # (the template is never handed out)
        else:
            # The rest of prepare() for a type and options it accepted before: payload, key, after.
            compact, payload_hash = payloads.stored_forms(payload, settings.max_payload_bytes)
            idem = _check_key(opts.get("key"))  # (in prepare()'s order: payload, key, after)
            job = _from_template(template, (compact, payload_hash), idem, _after_ids(opts.get("after", ())), None)
        job.source = f"line {lineno}"
        return job
    except InvalidInput as e:
        raise InvalidInput(f"line {lineno}: {e}; nothing was enqueued") from None


def prepare_batch(settings: Settings, lines: list[str], *, on_progress: Callable[[int, int], None] | None = None,
                  step: int = 1000, defaults: dict | None = None) -> list[NewJob]:
    """Validate every line (blank ones skipped); on_progress(lines done, total) every `step` lines."""
    jobs = []
    templates: dict = {}
    for n, line in enumerate(lines, 1):
        job = prepare_batch_line(settings, line, n, defaults, templates)
        if job is not None:
            jobs.append(job)
        if on_progress is not None and (n % step == 0 or n == len(lines)):
            on_progress(n, len(lines))
    return jobs
