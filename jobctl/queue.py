"""The queue's policy: validation, the transition rules of SPEC §3, backoff, retry-or-bury, leases,
idempotency. The engine below carries each decision out atomically; nothing here does I/O of its
own, and nothing here imports typer, rich or sqlite-utils.
"""

from __future__ import annotations

import os
import time
from typing import Callable, Iterable

from jobctl import payloads
from jobctl.config import Settings, parse_backoff
from jobctl.durations import format_duration, parse_duration, parse_priority, parse_time, to_rfc3339, validate_name
from jobctl.engines.base import ClaimRequest, Change, Engine, NewJob
from jobctl.errors import CancelRequested, InvalidInput, InvalidState, NoSuchJob, StaleToken
from jobctl.models import Event, Job, Record

MAX_ATTEMPTS_LIMIT = 1000
MAX_ID = 2**63 - 1
ERROR_MAX_CHARS = 500
HELD = ("running", "cancel_requested")
BATCH_KEYS = {"type", "payload", "queue", "priority", "delay", "at", "max_attempts", "backoff", "timeout",
              "key", "unique", "after"}


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


def backoff_delay(strategy: str, run: int) -> float:
    """Seconds to wait after run number `run` (1-based) failed (SPEC §2)."""
    if strategy == "exponential":
        return float(min(2**min(run, 32) * 30, 3600))
    if strategy == "linear":
        return float(run * 60)
    if strategy == "fixed":
        return 60.0
    steps = [int(x) for x in strategy.split(",")]
    return float(steps[min(run, len(steps)) - 1])


def one_line(text: str | None, limit: int = ERROR_MAX_CHARS) -> str | None:
    if text is None:
        return None
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


_OPERATOR: list[str] = []  # the name, looked up once per process (a read of the passwd database)


def operator_name() -> str:
    """The actor of an operator's change: the operating-system user."""
    if not _OPERATOR:
        try:
            import pwd

            _OPERATOR.append(pwd.getpwuid(os.getuid()).pw_name)
        except (KeyError, ImportError):
            _OPERATOR.append(os.environ.get("USER") or f"uid:{os.getuid()}")
    return _OPERATOR[0]


def shell_worker_id() -> str:
    """`claim`'s default worker id: JOBCTL_WORKER_ID, else host:pid of the calling shell (the parent of this process)."""
    import socket

    return os.environ.get("JOBCTL_WORKER_ID") or f"{socket.gethostname()}:{os.getppid()}"


class EnqueueResult(Record):
    __slots__ = ("id", "created")

    def __init__(self, id: int, created: bool):
        self.id = id
        self.created = created


def _refuse(job: Job, action: str, hint: str = "") -> InvalidState:
    return InvalidState(f"job {job.id} is {job.status}; cannot {action}{hint}")


def _check_token(job: Job, token: str | None, action: str) -> None:
    if token is not None and token != job.token:
        raise StaleToken(
            f"job {job.id}: the token is not that of its current claim (it was recovered or claimed "
            f"again; now {job.status}, run {job.attempts}); {action} refused, nothing changed"
        )


_CLEAR_CLAIM = {"worker": None, "lease_expires_at": None, "lease_ms": None, "token": None, "heartbeat_at": None}


def _by_holder(decide, token: str | None, actor: str | None):
    """A report that carries the claim's token is the worker's change: its event names the worker
    (SPEC §2), unless the caller named an actor itself."""
    if token is None or actor is not None:
        return decide

    def wrapped(job: Job):
        change = decide(job)
        if change is not None and change.actor is None:
            change.actor = job.worker
        return change

    return wrapped


class Queue:
    """The job queue over one engine. Times come from `clock` (seconds, like time.time)."""

    def __init__(self, engine: Engine | None, settings: Settings | None = None, clock=time.time):
        # None only for Queue(None, settings).prepare...(): checking input before a file exists.
        self.engine: Engine = engine  # type: ignore[assignment]
        self.settings = settings or Settings()
        self.clock = clock

    @classmethod
    def open(cls, db_path, settings: Settings | None = None, *, create: bool = False,
             busy_timeout: float | None = None, allow_network_fs: bool = False, clock=time.time) -> "Queue":
        from jobctl.engines.sqlite import SQLiteEngine

        settings = settings or Settings()
        engine = SQLiteEngine.open(
            db_path, create=create,
            busy_timeout=settings.busy_timeout if busy_timeout is None else busy_timeout,
            synchronous=settings.synchronous, allow_network_fs=allow_network_fs,
        )
        return cls(engine, settings, clock)

    def close(self) -> None:
        self.engine.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def now(self) -> int:
        return int(self.clock() * 1000)

    def has_changed(self) -> bool:
        """Whether anyone wrote to the database since the last call (a cheap check for wait loops)."""
        check = getattr(self.engine, "has_changed", None)
        return True if check is None else check()

    def wait_for_change(self, timeout: float) -> bool:
        """Sleep until someone writes to the database (a job may have become ready) or `timeout`
        seconds pass. Engines without a wake-up simply sleep; callers then claim again either way."""
        wait = getattr(self.engine, "wait_for_change", None)
        if wait is None:
            time.sleep(timeout)
            return True
        return wait(timeout)

    # -- enqueue ---------------------------------------------------------------------------

    def prepare(self, type: str, payload=None, *, payload_text: str | bytes | None = None, queue=None,
                priority=None, delay=None, at=None, max_attempts=None, backoff=None, timeout=None, key=None,
                unique: bool = False, after: Iterable = ()) -> NewJob:
        """Validate one job's options into a NewJob: command line > [types.X] > [defaults]."""
        s = self.settings
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
        now = self.now()
        run_at = now
        if delay is not None:
            run_at = now + int(parse_duration(delay, what="delay") * 1000)
        elif at is not None:
            run_at = max(now, parse_time(at))  # a time in the past means now
        if key is not None and (not isinstance(key, str) or not key or len(key) > 255):
            raise InvalidInput("invalid idempotency key: must be a string of 1 to 255 characters")
        if not isinstance(unique, bool):
            raise InvalidInput(f"invalid unique {unique!r}: must be true or false")
        if isinstance(after, (str, int)):
            after = [after]
        after_ids = [validate_job_id(a) for a in after]
        return NewJob(
            queue=queue, type=type, payload=compact, payload_hash=payloads.canonical_hash(payload),
            priority=priority, max_attempts=max_attempts, backoff=backoff, timeout_ms=int(timeout_s * 1000),
            run_at=run_at, idempotency_key=key, unique=unique, after=after_ids,
        )

    def enqueue(self, type: str, payload=None, *, actor: str | None = None, **options) -> EnqueueResult:
        return self.insert([self.prepare(type, payload, **options)], actor=actor)[0]

    def insert(self, jobs: list[NewJob], *, actor: str | None = None,
               on_progress: Callable[[int, int], None] | None = None) -> list[EnqueueResult]:
        """Insert jobs validated by prepare()/prepare_batch(), all or nothing. Validation needs no
        engine (Queue(None, settings).prepare(...)), so a command can refuse bad input before it
        opens, or creates, the database. on_progress(inserted, total) is called along the way,
        inside the one transaction (so a later failure still leaves nothing inserted)."""
        if not jobs:
            return []
        try:
            inserted = self.engine.insert_jobs(jobs, self.now(), actor or operator_name(), on_progress=on_progress)
        except NoSuchJob as e:  # an `after` id: name the batch line that asked for it
            source = next((j.source for j in jobs if e.job_id in j.after and j.source), None)
            if source is None:
                raise
            raise NoSuchJob(e.job_id, where=f"{source}: \"after\": ") from None
        return [EnqueueResult(i, c) for i, c in inserted]

    def prepare_batch_line(self, text: str, lineno: int) -> NewJob | None:
        """One NDJSON line of `enqueue --batch` (None for a blank line); errors name the line."""
        if not text.strip():
            return None
        try:
            obj = payloads.parse_json(text, what="JSON")
            if not isinstance(obj, dict):
                raise InvalidInput("each line must be a JSON object with at least a \"type\"")
            unknown = set(obj) - BATCH_KEYS
            if unknown:
                raise InvalidInput(f"unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(BATCH_KEYS))})")
            if "type" not in obj:
                raise InvalidInput("missing \"type\"")
            opts = {k: obj[k] for k in ("queue", "priority", "delay", "at", "max_attempts", "backoff", "timeout",
                                       "key") if obj.get(k) is not None}
            after = obj.get("after") or []
            if not isinstance(after, list):
                raise InvalidInput("\"after\" must be a list of job ids")
            if "payload" in obj and obj["payload"] is None:
                opts["payload_text"] = "null"  # an explicit null is a payload, not "use the default {}"
            job = self.prepare(obj["type"], obj.get("payload", {}), unique=obj.get("unique", False) or False,
                               after=after, **opts)
            job.source = f"line {lineno}"
            return job
        except InvalidInput as e:
            raise InvalidInput(f"line {lineno}: {e}; nothing was enqueued") from None

    def prepare_batch(self, lines: list[str], *, on_progress: Callable[[int, int], None] | None = None,
                      step: int = 1000) -> list[NewJob]:
        """Validate every line (blank ones skipped); on_progress(lines done, total) every `step` lines."""
        jobs = []
        for n, line in enumerate(lines, 1):
            job = self.prepare_batch_line(line, n)
            if job is not None:
                jobs.append(job)
            if on_progress is not None and (n % step == 0 or n == len(lines)):
                on_progress(n, len(lines))
        return jobs

    def enqueue_batch(self, lines: list[str], *, actor: str | None = None) -> list[EnqueueResult]:
        """All or nothing: every line is validated before one transaction inserts them all."""
        return self.insert(self.prepare_batch(lines), actor=actor)

    # -- claim -----------------------------------------------------------------------------

    def claim(self, *, worker: str | None = None, queues: list[str] | None = None,
              types: list[str] | None = None, lease=None) -> Job | None:
        return self.engine.claim(self._claim_request(worker, queues, types, lease), self.now())

    def _claim_request(self, worker, queues, types, lease) -> ClaimRequest:
        queues = [validate_name(q, "queue") for q in queues] if queues else None
        types = [validate_name(t, "type") for t in types] if types else None
        lease_ms = None
        if lease is not None:
            seconds = parse_duration(lease, what="lease")
            if seconds <= 0:
                raise InvalidInput("invalid lease: must be more than 0")
            lease_ms = int(seconds * 1000)
        return ClaimRequest(worker=worker or shell_worker_id(), token=os.urandom(12).hex(),
                            queues=queues, types=types, lease_ms=lease_ms)

    def claim_wait(self, wait: float, poll: float = 0.5, sleep=time.sleep, **claim_options) -> Job | None:
        """Poll until a job is ready or `wait` seconds have passed (monotonic clock)."""
        deadline = time.monotonic() + wait
        while True:
            job = self.claim(**claim_options)
            if job is not None:
                return job
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            sleep(min(poll, left))

    # -- a running job's reports -----------------------------------------------------------

    def complete(self, job_id: int, *, token: str | None = None, result=None, actor: str | None = None) -> Job:
        decide = _by_holder(self._complete_change(token, result), token, actor)
        return self.engine.update_job(validate_job_id(job_id), decide, self.now(), actor or operator_name())

    def complete_and_claim(self, job_id: int, *, token: str | None = None, result=None, actor: str | None = None,
                           worker: str | None = None, queues=None, types=None, lease=None) -> tuple[Job, Job | None]:
        """complete, then claim the next job, in one transaction (the worker's fast path):
        (the completed job, the next job or None)."""
        done, claimed = self.complete_many_and_claim([(job_id, token, result)], claim=1, actor=actor,
                                                     worker=worker, queues=queues, types=types, lease=lease)
        return done[0], (claimed[0] if claimed else None)

    def complete_many_and_claim(self, completions: list[tuple[int, str | None, object]], *, claim: int = 0,
                                actor: str | None = None, worker: str | None = None, queues=None, types=None,
                                lease=None) -> tuple[list[Job], list[Job]]:
        """Complete each (job id, token, result) and claim up to `claim` next jobs, each with its own
        token, in one transaction (one commit): ([completed jobs], [claimed jobs])."""
        updates = [(validate_job_id(i), self._complete_change(t, r)) for i, t, r in completions]
        requests = [self._claim_request(worker, queues, types, lease) for _ in range(claim)]
        return self.engine.update_jobs_and_claim(updates, requests, self.now(), actor or operator_name())

    def _complete_change(self, token: str | None, result):
        result_text = None
        if result is not None:
            result_text = payloads.compact(
                payloads.parse_json(result, what="result") if isinstance(result, (str, bytes)) else result,
                what="result", max_bytes=self.settings.max_payload_bytes)

        def decide(job: Job) -> Change:
            if job.status not in HELD:
                raise _refuse(job, "complete it (only a running job can be completed)")
            _check_token(job, token, "complete")
            return Change("completed", {**_CLEAR_CLAIM, "result": result_text, "progress": None},
                          message="completed", run="completed")

        return decide

    def fail(self, job_id: int, *, token: str | None = None, error: str | None = None, bury: bool = False,
             retry_in=None, actor: str | None = None, details: dict | None = None,
             bury_reason: str | None = None) -> Job:
        """bury_reason: why `bury` was asked, for the history ("exit code 65 is in bury_exit_codes");
        without it the history says --bury."""
        retry_s = parse_duration(retry_in, what="retry delay") if retry_in is not None else None
        error = one_line(error) or "failed"
        jitter = self.settings.backoff_jitter
        now = self.now()

        def decide(job: Job) -> Change:
            if job.status not in HELD:
                raise _refuse(job, "fail it (only a running job can fail)")
            _check_token(job, token, "fail")
            fields: dict[str, object] = {**_CLEAR_CLAIM, "error": error}
            if job.status == "cancel_requested":
                return Change("buried", fields, message=f"{error} (cancellation was requested: not retried)",
                              details=details, run="failed")
            if bury or job.attempts >= job.max_attempts:
                why = (bury_reason or "--bury") if bury else f"no runs left ({job.attempts} of {job.max_attempts})"
                return Change("buried", fields, message=f"{error}; buried: {why}", details=details, run="failed")
            delay = retry_s if retry_s is not None else backoff_delay(job.backoff, job.attempts)
            if jitter and retry_s is None:
                import random  # only a jittered backoff needs it: one-shot commands start sooner

                delay *= 1 + random.uniform(-jitter, jitter)
            fields["run_at"] = now + int(delay * 1000)
            return Change("pending", fields, details=details, run="failed",
                          message=f"{error}; retry in {format_duration(delay)} (run {job.attempts} of {job.max_attempts})")

        return self.engine.update_job(validate_job_id(job_id), _by_holder(decide, token, actor), now,
                                      actor or operator_name())

    def heartbeat(self, job_id: int, *, token: str | None = None, extend=None, actor: str | None = None) -> Job:
        extend_ms = None
        if extend is not None:
            seconds = parse_duration(extend, what="extension")
            if seconds <= 0:
                raise InvalidInput("invalid --extend: must be more than 0")
            extend_ms = int(seconds * 1000)
        now = self.now()

        def decide(job: Job) -> Change:
            if job.status not in HELD:
                raise _refuse(job, "heartbeat it (only a running job holds a lease)")
            _check_token(job, token, "heartbeat")
            ms = extend_ms if extend_ms is not None else (job.lease_ms or job.timeout_ms)
            return Change(job.status, {"lease_expires_at": now + ms, "heartbeat_at": now})

        job = self.engine.update_job(validate_job_id(job_id), decide, now, actor or operator_name())
        if job.status == "cancel_requested":
            raise CancelRequested(
                f"cancellation of job {job.id} was requested; stop it and confirm with "
                f"`jobctl cancel {job.id} --token TOKEN`"
            )
        return job

    def progress(self, job_id: int, *, token: str | None = None, message: str | None = None,
                 percent: int | None = None, actor: str | None = None) -> Job:
        if percent is not None and (isinstance(percent, bool) or not isinstance(percent, int) or not 0 <= percent <= 100):
            raise InvalidInput(f"invalid percent {percent!r}: must be an integer from 0 to 100")
        text = payloads.compact({"message": message, "percent": percent}, what="progress", max_bytes=64 * 1024)

        def decide(job: Job) -> Change:
            if job.status not in HELD:
                raise _refuse(job, "record progress (only a running job has progress)")
            _check_token(job, token, "progress")
            return Change(job.status, {"progress": text})

        return self.engine.update_job(validate_job_id(job_id), decide, self.now(), actor or operator_name())

    # -- operators -------------------------------------------------------------------------

    def cancel(self, job_id: int, *, token: str | None = None, reason: str | None = None,
               actor: str | None = None) -> Job:
        reason = one_line(reason)
        note = f": {reason}" if reason else ""

        def decide(job: Job) -> Change | None:
            if token is not None:
                _check_token(job, token, "cancel")
            if job.status in ("pending", "buried"):
                return Change("cancelled", {}, message=f"cancelled{note}")
            if job.status in HELD and token is not None:
                return Change("cancelled", {**_CLEAR_CLAIM}, message=f"stopped and cancelled{note}", run="cancelled")
            if job.status == "running":
                return Change("cancel_requested", {}, message=f"cancellation requested{note}")
            if job.status == "cancel_requested":
                return None  # asked again: nothing changes
            raise _refuse(job, "cancel it (it has finished)")

        return self.engine.update_job(validate_job_id(job_id), _by_holder(decide, token, actor), self.now(),
                                      actor or operator_name())

    def _retry_change(self, reset_attempts: bool, now: int):
        def decide(job: Job) -> Change:
            if job.status != "buried":
                raise _refuse(job, "retry it (only a buried job can be retried)")
            fields = {"run_at": now}
            if reset_attempts:
                fields["attempts"] = 0
            return Change("pending", fields, message="retried" + (" with attempts reset" if reset_attempts else ""))
        return decide

    def retry(self, job_id: int, *, reset_attempts: bool = False, actor: str | None = None) -> Job:
        now = self.now()
        return self.engine.update_job(validate_job_id(job_id), self._retry_change(reset_attempts, now), now,
                                      actor or operator_name())

    def retry_buried(self, *, queue: str | None = None, type: str | None = None, reset_attempts: bool = False,
                     dry_run: bool = False, actor: str | None = None,
                     on_progress: Callable[[int, int], None] | None = None) -> list[Job]:
        """on_progress(done, total) is called along the way (one transaction: all or nothing)."""
        if queue is not None:
            validate_name(queue, "queue")
        if type is not None:
            validate_name(type, "type")
        now = self.now()
        extra = {} if on_progress is None else {"on_progress": on_progress}
        done = self.engine.update_buried(self._retry_change(reset_attempts, now), now, actor or operator_name(),
                                         queue=queue, type=type, dry_run=dry_run, **extra)
        return [job for job, _ in done]

    def recover(self, *, older_than=None, dry_run: bool = False, actor: str | None = None,
                exclude_tokens: frozenset[str] | set[str] = frozenset()) -> list[tuple[Job, str]]:
        """Requeue or bury jobs whose worker is gone (lease expired, or silent for `older_than`).

        exclude_tokens: claims the caller holds itself and knows to be alive (a worker's own
        running jobs), never recovered whatever their lease says.
        Returns each job as it was found (its lost worker and expired lease), with the action."""
        now = self.now()
        heartbeat_before = None
        if older_than is not None:
            heartbeat_before = now - int(parse_duration(older_than, what="--older-than") * 1000)
        found: dict[int, Job] = {}

        def decide(job: Job) -> Change | None:
            if job.token in exclude_tokens:
                return None
            found[job.id] = job
            lost = f"worker {job.worker} lost: lease expired at {to_rfc3339(job.lease_expires_at)}"
            if job.lease_expires_at is not None and job.lease_expires_at >= now:
                lost = f"worker {job.worker} silent since {to_rfc3339(job.heartbeat_at or job.claimed_at)}"
            if job.status == "cancel_requested":
                return Change("cancelled", {**_CLEAR_CLAIM}, message=f"{lost}; cancellation completed", run="lost")
            if job.attempts >= job.max_attempts:
                return Change("buried", {**_CLEAR_CLAIM, "error": one_line(f"{lost} (no runs left)")},
                              message=f"{lost}; no runs left", run="lost")
            return Change("pending", {**_CLEAR_CLAIM, "run_at": now, "error": one_line(lost)},
                          message=f"{lost}; requeued", run="lost")

        done = self.engine.update_expired(decide, now, actor or operator_name(),
                                          heartbeat_before=heartbeat_before, dry_run=dry_run)
        actions = {"pending": "requeued", "buried": "buried", "cancelled": "cancelled"}
        return [(found.get(job.id, job), actions[change.to_status]) for job, change in done]

    def release(self, job_id: int, *, token: str, actor: str | None = None, reason: str = "worker shutting down") -> Job:
        """A worker gives back a job it could not finish: that run does not count."""

        def decide(job: Job) -> Change:
            if job.status not in HELD:
                raise _refuse(job, "release it")
            _check_token(job, token, "release")
            if job.status == "cancel_requested":
                return Change("cancelled", {**_CLEAR_CLAIM}, message=f"stopped ({reason}); cancellation completed",
                              run="cancelled")
            return Change("pending", {**_CLEAR_CLAIM, "attempts": max(job.attempts - 1, 0), "run_at": self.now()},
                          message=f"released: {reason}; this run does not count", run="released")

        return self.engine.update_job(validate_job_id(job_id), decide, self.now(), actor or operator_name())

    # -- views and housekeeping ------------------------------------------------------------

    def get(self, job_id: int) -> Job:
        return self.engine.get_job(validate_job_id(job_id))

    def events(self, job_id: int) -> list[Event]:
        return self.engine.events(validate_job_id(job_id))

    def list_jobs(self, *, statuses: Iterable[str] = (), queue: str | None = None, type: str | None = None,
                  limit: int = 50, stuck: bool = False, older_than=None, sort: str = "newest") -> list[Job]:
        """Jobs matching all filters. stuck: running or cancel_requested with an expired lease or past
        their timeout (as in stats). older_than: created longer ago than this duration."""
        from jobctl.models import LIST_SORTS, STATES

        if sort not in LIST_SORTS:
            raise InvalidInput(f"invalid sort {sort!r}: use one of {', '.join(LIST_SORTS)}")
        statuses = list(statuses)
        for s in statuses:
            if s not in STATES:
                raise InvalidInput(f"invalid status {s!r}: use one of {', '.join(STATES)}")
        if queue is not None:
            validate_name(queue, "queue")
        if type is not None:
            validate_name(type, "type")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1_000_000:
            raise InvalidInput(f"invalid limit {limit!r}: must be from 1 to 1000000")
        now = self.now()
        created_before = None
        if older_than is not None:
            created_before = now - int(parse_duration(older_than, what="--older-than") * 1000)
        return self.engine.list_jobs(statuses=statuses, queue=queue, type=type, limit=limit,
                                     stuck_at=now if stuck else None, created_before=created_before, sort=sort)

    def purge(self, *, completed_older_than=None, cancelled_older_than=None, buried_older_than=None,
              dry_run: bool = False, on_progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
        """Delete finished jobs older than the given ages; with none given, the config's [retention].

        on_progress(deleted, total) is called after each small batch; total is counted first (only
        when on_progress is given), and never reported below `deleted`."""
        given = {"completed": completed_older_than, "cancelled": cancelled_older_than, "buried": buried_older_than}
        if all(v is None for v in given.values()):
            ages = dict(self.settings.retention)
        else:
            ages = {k: (parse_duration(v, what=f"--{k}-older-than") if v is not None else None) for k, v in given.items()}
        now = self.now()
        cutoffs = {status: now - int(age * 1000) for status, age in ages.items() if age is not None}
        if on_progress is None or dry_run:
            return {status: self.engine.purge(status, cutoff, dry_run=dry_run) for status, cutoff in cutoffs.items()}
        total = sum(self.engine.purge(status, cutoff, dry_run=True) for status, cutoff in cutoffs.items())
        counts: dict[str, int] = {}
        for status, cutoff in cutoffs.items():
            before = sum(counts.values())
            counts[status] = self.engine.purge(
                status, cutoff, on_progress=lambda n, before=before: on_progress(before + n, max(total, before + n)))  # type: ignore[misc]
        return counts

    def pause(self, queue: str) -> None:
        self.engine.set_paused(validate_name(queue, "queue"), True, self.now())

    def resume(self, queue: str) -> None:
        self.engine.set_paused(validate_name(queue, "queue"), False, self.now())
