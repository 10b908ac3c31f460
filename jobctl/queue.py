"""The queue: what the CLI and the worker call. It validates input, turns each request into a
transition rule (jobctl/transitions.py) and hands it to the engine, which carries it out atomically
with the database's clock. Nothing here does I/O of its own, and nothing here imports typer, rich
or sqlite-utils.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Callable, Iterable

from jobctl import jobspec, payloads, transitions
from jobctl.config import Settings, duration_in_range
from jobctl.durations import parse_duration, parse_time, validate_name
from jobctl.engines.base import ClaimRequest, Decision, Engine, Inserted, NewJob
from jobctl.errors import CancelRequested, DatabaseBusy, InvalidInput, JobctlError, NoSuchJob, PermissionDenied
from jobctl.jobspec import reschedule_when, validate_job_id
from jobctl.models import Event, Job, Record
from jobctl.transitions import backoff_delay, one_line  # noqa: F401  (re-exported: tests and scripts use them)

if TYPE_CHECKING:
    from jobctl.limits import Limits

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


class NoSuchKey(NoSuchJob):
    """No job has this idempotency key (exit 3)."""

    def __init__(self, key: str):
        from jobctl.untrusted import safe

        JobctlError.__init__(self, f"no job has the idempotency key {safe(key)!r}; `jobctl list --key K` "
                                   "finds jobs by key")
        self.job_id = 0


def _rescheduling(delay_ms: int, not_before: int | None):
    """The decide of a reschedule (jobspec.reschedule_when's reading of --now, --in or --at)."""
    def decide(job: Job, now_ms: int):
        return transitions.reschedule(job, now_ms, delay_ms=delay_ms, not_before=not_before)

    return decide


def _retry(reset_attempts: bool):
    def decide(job: Job, now: int):
        return transitions.retry(job, now, reset_attempts=reset_attempts)

    return decide


class EnqueueResult(Record):
    __slots__ = ("id", "created")

    def __init__(self, id: int, created: bool):
        self.id = id
        self.created = created


def _decide(rule, token: str | None, actor: str | None, *, holder: bool = True, **inputs):
    """A decide(job, now) for the engine: the transition rule with its inputs bound. With `holder`,
    a report that carries the claim's token is recorded as the worker's change (by_holder)."""
    def decide(job: Job, now: int):
        change = rule(job, now, token=token, **inputs)
        return transitions.by_holder(change, job, token, actor) if holder else change

    return decide


def _with_output(decide, output):
    """decide, with a run's output (engines.base.RunOutput, or None) stored in the same transaction."""
    if output is None:
        return decide

    def with_output(job: Job, now: int):
        change = decide(job, now)
        if change is not None:
            change.log = output
        return change

    return with_output


class Queue:
    """The job queue over one engine. Checking input needs none: jobctl.jobspec."""

    engine: Engine

    def __init__(self, engine, settings: Settings | None = None):
        self.engine = engine
        self.settings = settings or Settings()
        self._limits: Limits | None = None
        self._reaction_jobs: dict[str, NewJob] = {}
        self._claim_args: dict[tuple, tuple] = {}  # what a claim asked for, checked (a worker asks the same each time)

    def _reaction_job(self, type: str) -> NewJob:
        """The job a reaction of `type` enqueues, from that type's config, like any enqueue (the
        engine fills in its payload)."""
        if type not in self._reaction_jobs:
            self._reaction_jobs[type] = self.prepare(type, check_limit=False)
        return self._reaction_jobs[type]

    def _reacting(self, decide):
        """decide, plus the reaction a job has to the state the change puts it in (transitions.with_reaction).
        Every decide handed to the engine goes through here."""
        def with_reaction(job: Job, now: int):
            change = transitions.with_reaction(decide(job, now), job, self._reaction_job)
            if (change is not None and job.status in transitions.HELD and change.to_status not in transitions.HELD
                    and self._counted(job)):
                change.frees = True
            return change

        return with_reaction

    def _counted(self, job: Job) -> bool:
        """Whether a held job counts against a concurrency limit of this queue's config."""
        limits = self.limits
        if not limits.concurrency:
            return False  # no concurrency limit at all (the usual case: nothing to look up)
        kind, name = limits.key(job.type, job.concurrency_group)
        return name in (limits.groups if kind == "group" else limits.types)

    @property
    def limits(self):
        """The admission-control limits of this queue's config (limits.Limits)."""
        if self._limits is None:
            from jobctl.limits import from_settings

            self._limits = from_settings(self.settings)
        return self._limits

    @classmethod
    def open(cls, db, settings: Settings | None = None, *, create: bool = False, read_only: bool = False,
             busy_timeout: float | None = None, allow_network_fs: bool | None = None, clock=None) -> "Queue":
        """Open the database `db` names (a path, sqlite:///PATH or postgresql://...). clock: seconds
        since the epoch, for tests; by default the database's own clock."""
        from jobctl import engines

        settings = settings or Settings()
        engine = engines.open(db, create=create, read_only=read_only, settings=settings, busy_timeout=busy_timeout,
                              allow_network_fs=allow_network_fs, clock=clock)
        return cls(engine, settings)

    def close(self) -> None:
        self.engine.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def created(self) -> bool:
        """Whether opening the queue created its database (a SQLite file; jobctl's schema on PostgreSQL)."""
        return self.engine.created

    def now(self) -> int:
        """The database's clock, ms since the epoch."""
        return self.engine.now()

    def has_changed(self) -> bool:
        """Whether anyone wrote to the database since the last call (a cheap check for wait loops)."""
        return self.engine.has_changed() if self.engine.wakes else True

    def wait_for_change(self, timeout: float) -> bool:
        """Sleep until someone writes to the database (a job may have become ready) or `timeout`
        seconds pass. Engines without a wake-up simply sleep; callers then claim again either way."""
        if not self.engine.wakes:
            time.sleep(timeout)
            return True
        return self.engine.wait_for_change(timeout)

    # -- enqueue ---------------------------------------------------------------------------

    def prepare(self, type: str, payload=None, **options) -> NewJob:
        """jobspec.prepare with this queue's settings: one job's options checked into a NewJob."""
        return jobspec.prepare(self.settings, type, payload, **options)

    def enqueue(self, type: str, payload=None, *, actor: str | None = None, **options) -> EnqueueResult:
        return self.insert([self.prepare(type, payload, **options)], actor=actor)[0]

    def insert(self, jobs: list[NewJob], *, actor: str | None = None,
               on_progress: Callable[[int, int], None] | None = None) -> list[EnqueueResult]:
        """Insert jobs validated by prepare()/prepare_batch(), all or nothing. Validation needs no
        engine (jobctl.jobspec), so a command can refuse bad input before it opens, or creates,
        the database. on_progress(inserted, total) is called along the way,
        inside the one transaction (so a later failure still leaves nothing inserted)."""
        if not jobs:
            return []
        inserted = self.insert_stream(jobs, len(jobs), actor=actor, on_progress=on_progress)
        return [EnqueueResult(i, c) for i, c in inserted]

    def insert_stream(self, jobs: Iterable[NewJob], total: int, *, actor: str | None = None,
                      on_progress: Callable[[int, int], None] | None = None) -> Inserted:
        """insert() for more jobs than fit in memory: `jobs` may be iterated more than once, each
        time from its first job (a JobSpool); the (id, created) pairs come back compactly."""
        try:
            return self.engine.insert_stream(jobs, total, actor or operator_name(), on_progress=on_progress)
        except NoSuchJob as e:  # an `after` id: name the batch line that asked for it
            source = next((j.source for j in jobs if e.job_id in j.after and j.source), None)
            if source is None:
                raise
            raise NoSuchJob(e.job_id, where=f"{source}: \"after\": ") from None

    def prepare_batch(self, lines: list[str], **options) -> list[NewJob]:
        """jobspec.prepare_batch with this queue's settings: every `enqueue --batch` line checked."""
        return jobspec.prepare_batch(self.settings, lines, **options)

    def enqueue_batch(self, lines: list[str], *, actor: str | None = None) -> list[EnqueueResult]:
        """All or nothing: every line is validated before one transaction inserts them all."""
        return self.insert(self.prepare_batch(lines), actor=actor)

    # -- claim -----------------------------------------------------------------------------

    def claim(self, *, worker: str | None = None, queues: list[str] | None = None,
              types: list[str] | None = None, lease=None) -> Job | None:
        return self.engine.claim(self._claim_request(worker, queues, types, lease))

    def _claim_request(self, worker, queues, types, lease) -> ClaimRequest:
        key = (tuple(queues) if queues else None, tuple(types) if types else None, lease)
        checked = self._claim_args.get(key)
        if checked is None:
            checked = ([validate_name(q, "queue") for q in queues] if queues else None,
                       [validate_name(t, "type") for t in types] if types else None,
                       int(duration_in_range(lease, "lease", "lease") * 1000) if lease is not None else None)
            if len(self._claim_args) < 16:
                self._claim_args[key] = checked
        queues, types, lease_ms = checked
        return ClaimRequest(worker=worker or shell_worker_id(), token=os.urandom(12).hex(),
                            queues=None if queues is None else list(queues), types=None if types is None else list(types),
                            lease_ms=lease_ms, limits=self.limits or None)

    def claim_wait(self, wait: float, poll: float = 0.5, **claim_options) -> Job | None:
        """Claim, waiting up to `wait` seconds (monotonic clock) for a job to become ready. Between
        claims it sleeps on the engine's wake-up (a commit by anyone) or `poll`, whichever is first:
        a job scheduled to run later, or one whose queue is resumed, is claimed by the next poll.
        A lock held past the busy timeout (nothing changed) is waited out too, while time is left."""
        deadline = time.monotonic() + wait
        while True:
            try:
                job = self.claim(**claim_options)
            except DatabaseBusy:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise  # (never "no job is ready": it could not look)
                self.wait_for_change(min(poll, left))
                continue
            if job is not None:
                return job
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.wait_for_change(min(poll, left))

    # -- a running job's reports -----------------------------------------------------------

    def complete(self, job_id: int, *, token: str | None = None, result=None, actor: str | None = None,
                 output=None) -> Job:
        """output (every report of a running job takes it): the run's output, stored with the change."""
        return self.engine.update_job(validate_job_id(job_id), self._completion(token, result, actor, output),
                                      actor or operator_name())

    def complete_and_claim(self, job_id: int, *, token: str | None = None, result=None, actor: str | None = None,
                           worker: str | None = None, queues=None, types=None, lease=None,
                           output=None) -> tuple[Job, Job | None]:
        """complete, then claim the next job, in one transaction (the worker's fast path):
        (the completed job, the next job or None)."""
        done, claimed = self.engine.update_jobs_and_claim([(validate_job_id(job_id),
                                                            self._completion(token, result, actor, output))],
                                                          [self._claim_request(worker, queues, types, lease)],
                                                          actor or operator_name())
        return done[0], (claimed[0] if claimed else None)

    def prepare_complete_and_claim(self, job: Job, *, actor: str | None = None, worker: str | None = None,
                                   queues=None, types=None, lease=None) -> Callable[[], tuple[list[Job], list[Job]]]:
        """complete_and_claim(job.id, token=job.token, actor=..., ...) of a run that ends with no
        result and no output, with all that does not depend on the moment worked out now: a worker
        prepares it while the handler runs and calls it once the handler exited, so that only the
        transaction is left between one handler's exit and the next start. The call returns
        ([the completed job], [the next job] or [])."""
        return self.engine.prepare_update_and_claim(validate_job_id(job.id), self._completion(job.token, None, actor, None),
                                                    self._claim_request(worker, queues, types, lease),
                                                    actor or operator_name())

    def complete_many_and_claim(self, completions: list[tuple], *, claim: int = 0,
                                actor: str | None = None, worker: str | None = None, queues=None, types=None,
                                lease=None) -> tuple[list[Job], list[Job]]:
        """Complete each (job id, token, result[, output]) and claim up to `claim` next jobs, each with
        its own token, in one transaction (one commit): ([completed jobs], [claimed jobs])."""
        updates = [(validate_job_id(c[0]), self._completion(c[1], c[2], actor, c[3] if len(c) > 3 else None))
                   for c in completions]
        requests = [self._claim_request(worker, queues, types, lease) for _ in range(claim)]
        return self.engine.update_jobs_and_claim(updates, requests, actor or operator_name())

    def _completion(self, token: str | None, result, actor: str | None, output):
        """The decision of a completion by the claim's holder, with its output: time_free (it never
        reads `now`), so an engine may decide it on the job as it claimed it (engines/base.py)."""
        return Decision(_with_output(self._complete_change(token, result, actor), output), time_free=True)

    def _complete_change(self, token: str | None, result, actor: str | None):
        result_text = None
        if result is not None:
            result_text = payloads.compact(
                payloads.parse_json(result, what="result") if isinstance(result, (str, bytes)) else result,
                what="result", max_bytes=self.settings.max_payload_bytes)
            if not self.stores(result_text):
                raise InvalidInput(f"invalid result: {payloads.NUL_REFUSED}; nothing changed")
        return self._reacting(_decide(transitions.complete, token, actor, result_text=result_text))

    def stores(self, text: str) -> bool:
        """Whether the database stores this payload or result text unchanged: PostgreSQL cannot
        store NUL, and jobctl refuses such text there rather than change it."""
        return self.engine.STORES_NUL or not payloads.holds_nul(text)

    def fail(self, job_id: int, *, token: str | None = None, error: str | None = None, bury: bool = False,
             retry_in=None, actor: str | None = None, details: dict | None = None,
             bury_reason: str | None = None, output=None) -> Job:
        """bury_reason: why `bury` was asked, for the history ("exit code 65 is in bury_exit_codes");
        without it the history says --bury."""
        if bury and retry_in is not None:
            raise InvalidInput("--bury and --retry-in cannot be used together: a buried job is not retried; "
                               "give one of them")
        retry_s = parse_duration(retry_in, what="retry delay") if retry_in is not None else None
        jitter = 1.0
        if self.settings.backoff_jitter and retry_s is None:
            import random  # only a jittered backoff needs it: one-shot commands start sooner

            jitter = 1 + random.uniform(-self.settings.backoff_jitter, self.settings.backoff_jitter)
        decide = self._reacting(_decide(transitions.fail, token, actor, error=one_line(error) or "failed", bury=bury,
                                        bury_reason=bury_reason, retry_in=retry_s, jitter=jitter, details=details))
        decide = _with_output(decide, output)
        return self.engine.update_job(validate_job_id(job_id), decide, actor or operator_name())

    def heartbeat(self, job_id: int, *, token: str | None = None, extend=None, actor: str | None = None,
                  output=None) -> Job:
        extend_ms = int(duration_in_range(extend, "lease extension", "lease") * 1000) if extend is not None else None
        decide = _with_output(_decide(transitions.heartbeat, token, actor, holder=False, extend_ms=extend_ms), output)
        job = self.engine.update_job(validate_job_id(job_id), decide, actor or operator_name())
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
        decide = _decide(transitions.progress, token, actor, holder=False, progress_text=text)
        return self.engine.update_job(validate_job_id(job_id), decide, actor or operator_name())

    # -- operators -------------------------------------------------------------------------

    def cancel(self, job_id: int, *, token: str | None = None, reason: str | None = None,
               actor: str | None = None, output=None) -> Job:
        decide = _with_output(self._reacting(_decide(transitions.cancel, token, actor, reason=one_line(reason))),
                              output)
        return self.engine.update_job(validate_job_id(job_id), decide, actor or operator_name())

    def cancel_with_dependents(self, job_id: int, *, reason: str | None = None, actor: str | None = None) -> list[Job]:
        """Cancel the job and every job that waits on it, directly or not, in one transaction
        (running ones get cancel_requested, as with cancel): [the job, each dependent cancelled]."""
        root = validate_job_id(job_id)
        reason = one_line(reason)
        why = f"job {root}, which it waits on, was cancelled" + (f": {reason}" if reason else "")

        def decide(job: Job, now: int):
            if job.id == root:  # already cancelled: its dependents are what is left to cancel
                return None if job.status == "cancelled" else transitions.cancel(job, now, token=None, reason=reason)
            return transitions.cancel_dependent(job, now, reason=why)

        return self.engine.update_dependents(root, self._reacting(decide), actor or operator_name())

    def reschedule(self, job_id: int, *, now: bool = False, delay=None, at=None, actor: str | None = None) -> Job:
        """Set when a pending job may run: now, after `delay` from now, or at `at` (one of them)."""
        decide = _rescheduling(*reschedule_when(now, delay, at))
        return self.engine.update_job(validate_job_id(job_id), decide, actor or operator_name())

    def retry(self, job_id: int, *, reset_attempts: bool = False, actor: str | None = None) -> Job:
        decide = self._reacting(_retry(reset_attempts))
        return self.engine.update_job(validate_job_id(job_id), decide, actor or operator_name())

    def retry_buried(self, *, queue: str | None = None, type: str | None = None, reset_attempts: bool = False,
                     dry_run: bool = False, actor: str | None = None,
                     on_progress: Callable[[int, int], None] | None = None) -> list[Job]:
        """Every buried job (of a queue and type) back to pending, in short transactions (act);
        the jobs retried, as they are now (as they are, with dry_run)."""
        from jobctl.selection import parse

        sel = parse(queues=None if queue is None else [queue], types=None if type is None else [type], statuses=["buried"])
        done = [job_id for job_id, outcome, _ in self.act("retry", self.matching_ids(sel), sel, dry_run=dry_run,
                                                          actor=actor, on_progress=on_progress,
                                                          reset_attempts=reset_attempts) if outcome == "changed"]
        return self.get_many(done)

    def bury(self, job_id: int, *, reason: str | None = None, actor: str | None = None) -> Job:
        """Park a job that has not started as buried (transitions.bury)."""
        return self.engine.update_job(validate_job_id(job_id), self._burying(reason), actor or operator_name())

    def _burying(self, reason: str | None):
        reason = one_line(reason)
        return self._reacting(lambda job, now: transitions.bury(job, now, reason=reason))

    def edit(self, job_id: int, *, payload=None, payload_text: str | bytes | None = None, queue: str | None = None,
             priority=None, max_attempts=None, timeout=None, backoff=None, actor: str | None = None) -> Job:
        """Change what a job that is not running will run with (transitions.edit), checked as
        enqueue checks it. Nothing given: InvalidInput."""
        from jobctl.config import parse_backoff
        from jobctl.jobspec import validate_max_attempts
        from jobctl.durations import parse_priority

        changes: dict = {}
        if payload_text is not None:
            payload = payloads.parse_json(payload_text)
        if payload is not None:
            text = payloads.compact(payload, max_bytes=self.settings.max_payload_bytes)
            if not self.stores(text):
                raise InvalidInput(f"invalid payload: {payloads.NUL_REFUSED}; nothing changed")
            changes["payload"], changes["payload_hash"] = text, payloads.canonical_hash(payload, text)
        if queue is not None:
            changes["queue"] = validate_name(queue, "queue")
        if priority is not None:
            changes["priority"] = parse_priority(priority)
        if max_attempts is not None:
            changes["max_attempts"] = validate_max_attempts(max_attempts)
        if timeout is not None:
            seconds = parse_duration(timeout, what="timeout")
            if seconds <= 0:
                raise InvalidInput("invalid timeout: must be more than 0")
            changes["timeout_ms"] = int(seconds * 1000)
        if backoff is not None:
            changes["backoff"] = parse_backoff(backoff)
        if not changes:
            raise InvalidInput("nothing to change: give --payload, --payload-file, --queue, --priority, "
                               "--max-attempts, --timeout or --backoff")
        return self.engine.update_job(validate_job_id(job_id), lambda job, now: transitions.edit(job, now, changes=changes),
                                      actor or operator_name())

    def get_by_key(self, key: str) -> Job:
        """The job with this idempotency key (NoSuchJob, exit 3, when none has it)."""
        from jobctl.selection import Selection

        ids = self.engine.select_ids(Selection(keys=[key]))
        if not ids:
            raise NoSuchKey(key)
        return self.get(ids[0])

    # -- find and act: a selection (jobctl/selection.py) ------------------------------------


    @staticmethod
    def _asks_held(selection) -> bool:
        """Whether a selection tells held jobs apart: --status held, or top's waiting view."""
        return "held" in selection.statuses or "waiting" in selection.statuses

    def admission_for(self, selection):
        """What a selection's --status held (or top's waiting view) needs: the config's limits as they
        stand (None: not asked)."""
        if not self._asks_held(selection):
            return None
        figures = self.limit_figures()
        return figures["admission"] if figures else None

    def matching_ids(self, selection) -> list[int]:
        """The ids of the jobs a selection matches now, in id order. Its durations are pinned to
        now (Selection.pin): acting on these ids then judges them with the same window."""
        selection.pin(self.engine.now())
        return self.engine.select_ids(selection, admission=self.admission_for(selection))

    def act(self, action: str, ids: list[int], selection, *, dry_run: bool = False, actor: str | None = None,
            on_progress: Callable[[int, int], None] | None = None, reason: str | None = None,
            reset_attempts: bool = False, now: bool = False, delay=None, at=None):
        """Apply an action (models.ACTS_ON) to the jobs `ids` that `selection` still matches, in short
        transactions (Engine.update_selection): yields (id, outcome, detail) per job."""
        decide = self._action(action, reason=reason, reset_attempts=reset_attempts, now=now, delay=delay, at=at)
        limits = self.limits if self._asks_held(selection) and self.limits else None  # judged in each transaction
        return self.engine.update_selection(ids, selection, decide, actor or operator_name(),
                                            limits=limits, dry_run=dry_run,
                                            on_progress=on_progress)

    def _action(self, action: str, *, reason, reset_attempts: bool, now: bool, delay, at):
        if action == "retry":
            return self._reacting(_retry(reset_attempts))
        if action == "cancel":
            return self._reacting(_decide(transitions.cancel, None, None, holder=False, reason=one_line(reason)))
        if action == "bury":
            return self._burying(reason)
        if action == "reschedule":
            return _rescheduling(*reschedule_when(now, delay, at))
        raise ValueError(action)

    def recover(self, *, older_than=None, dry_run: bool = False, actor: str | None = None,
                exclude_tokens: frozenset[str] | set[str] = frozenset()) -> list[tuple[Job, str]]:
        """Requeue or bury jobs whose worker is gone (lease expired, or silent for `older_than`), in
        one sweep. The engine judges a lease on the clock that times it (engines/sql.py, _boot), so
        a step of the wall clock neither expires a live lease nor delays a dead one.
        exclude_tokens: claims the caller holds itself and knows to be alive (a worker's own
        running jobs), never recovered whatever their lease says.
        Returns each job as it was found (its lost worker and expired lease), with the action:
        requeued, buried or cancelled."""
        silent_for_ms = None
        if older_than is not None:
            silent_for_ms = int(parse_duration(older_than, what="--older-than") * 1000)

        found: dict[int, Job] = {}
        engine = self.engine

        def decide(job: Job, now: int):
            if job.token in exclude_tokens:
                return None
            found[job.id] = job
            silent = silent_for_ms is not None and engine.lease_silent(job, now, silent_for_ms)
            return transitions.recover(job, now, expired=engine.lease_expired(job, now), silent=silent)

        done = self.engine.update_expired(self._reacting(decide), actor or operator_name(), silent_for_ms=silent_for_ms,
                                          dry_run=dry_run)
        actions = {"pending": "requeued", "buried": "buried", "cancelled": "cancelled"}
        return [(found[job.id], actions[change.to_status]) for job, change in done]

    def release(self, job_id: int, *, token: str, actor: str | None = None, reason: str = "worker shutting down",
                output=None) -> Job:
        """A worker gives back a job it could not finish: that run does not count."""
        decide = _with_output(self._reacting(_decide(transitions.release, token, actor, holder=False, reason=reason)),
                              output)
        return self.engine.update_job(validate_job_id(job_id), decide, actor or operator_name())

    # -- views and housekeeping ------------------------------------------------------------

    def get(self, job_id: int) -> Job:
        return self.engine.get_job(validate_job_id(job_id))

    def run_output(self, job_id: int, run: int | None = None):
        """A run's stored output (engines.base.RunLog; run 1 = the first, None = the latest) or None."""
        return self.engine.run_output(validate_job_id(job_id), run)

    def events(self, job_id: int) -> list[Event]:
        return self.engine.events(validate_job_id(job_id))

    def list_jobs(self, *, statuses: Iterable[str] = (), queue: str | None = None, type: str | None = None,
                  limit: int = 50, stuck: bool = False, older_than=None, sort: str = "newest",
                  held: bool = False, damaged: list | None = None, selection=None) -> list[Job]:
        """Jobs matching all filters. stuck: running or cancel_requested with an expired lease or past
        their timeout (as in stats). older_than: created longer ago than this duration. limit 0: all.
        damaged: a list to collect rows that cannot be decoded in (left out), instead of exit 8."""
        from jobctl.models import LIST_SORTS

        if sort not in LIST_SORTS:
            raise InvalidInput(f"invalid sort {sort!r}: use one of {', '.join(LIST_SORTS)}")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= 1_000_000:
            raise InvalidInput(f"invalid limit {limit!r}: must be from 1 to 1000000, or 0 for all")
        return self.engine.list_jobs(**self._list_filters(statuses, queue, type, stuck, older_than, held, selection),
                                     limit=limit, sort=sort, damaged=damaged)

    def count_jobs(self, *, statuses: Iterable[str] = (), queue: str | None = None, type: str | None = None,
                   stuck: bool = False, older_than=None, held: bool = False, selection=None,
                   at_most: int | None = None, within_s: float | None = None) -> int | None:
        """How many jobs list_jobs would return without a limit (at_most: stop counting past it;
        within_s: None when counting would take longer, where the engine can tell)."""
        return self.engine.count_jobs(**self._list_filters(statuses, queue, type, stuck, older_than, held, selection),
                                      at_most=at_most, within_s=within_s)

    def _list_filters(self, statuses, queue, type, stuck, older_than, held=False, selection=None) -> dict:
        """held: only ready jobs that a limit of the config holds back (none without limits)."""
        from jobctl.models import STATES

        statuses = list(statuses)
        for s in statuses:
            if s not in STATES:
                raise InvalidInput(f"invalid status {s!r}: use one of {', '.join(STATES)}")
        if queue is not None:
            validate_name(queue, "queue")
        if type is not None:
            validate_name(type, "type")
        created_older_than_ms = None
        if older_than is not None:
            created_older_than_ms = int(parse_duration(older_than, what="--older-than") * 1000)
        filters = dict(statuses=statuses, queue=queue, type=type, stuck=stuck,
                       created_older_than_ms=created_older_than_ms)
        if selection is not None and not selection.empty:
            filters.update(selection=selection, admission=self.admission_for(selection))
        if held:
            from jobctl.limits import Admission

            figures = self.limit_figures()
            filters["held_by"] = figures["admission"] if figures else Admission(set(), {})
        return filters

    def purge(self, *, completed_older_than=None, cancelled_older_than=None, buried_older_than=None,
              dry_run: bool = False, on_progress: Callable[[int, int], None] | None = None,
              selection=None) -> dict[str, int]:
        """Delete finished jobs older than the given ages; with none given, the config's [retention].

        on_progress(deleted, total) is called after each small batch; total is counted first (only
        when on_progress is given), and never reported below `deleted`."""
        cutoffs = self._purge_cutoffs(completed_older_than, cancelled_older_than, buried_older_than)
        keep = self._rate_windows()
        extra = {"selection": selection} if selection is not None and not selection.empty else {}
        if selection is not None and selection.statuses:  # --status narrows which finished states go
            cutoffs = {k: v for k, v in cutoffs.items() if k in selection.statuses}
        if on_progress is None or dry_run:
            return {status: self.engine.purge(status, cutoff, dry_run=dry_run, keep_ms=keep, **extra)
                    for status, cutoff in cutoffs.items()}
        total = sum(self.engine.purge(status, cutoff, dry_run=True, keep_ms=keep, **extra)
                    for status, cutoff in cutoffs.items())
        counts: dict[str, int] = {}
        for status, cutoff in cutoffs.items():
            before = sum(counts.values())
            counts[status] = self.engine.purge(
                status, cutoff, keep_ms=keep, **extra,
                on_progress=lambda n, before=before: on_progress(before + n, max(total, before + n)))  # type: ignore[misc]
        return counts

    def kept_for_rate_windows(self, *, completed_older_than=None, cancelled_older_than=None, buried_older_than=None,
                              dry_run: bool = False) -> int:
        """How many finished jobs a purge with these ages keeps because a rate window still counts
        their runs: after the purge, those left that the ages alone would delete; with dry_run,
        the difference between the two counts."""
        keep = self._rate_windows()
        if not keep:
            return 0
        cutoffs = self._purge_cutoffs(completed_older_than, cancelled_older_than, buried_older_than)
        by_age = sum(self.engine.purge(status, cutoff, dry_run=True) for status, cutoff in cutoffs.items())
        if not dry_run:
            return by_age
        return by_age - sum(self.engine.purge(status, cutoff, dry_run=True, keep_ms=keep)
                            for status, cutoff in cutoffs.items())

    def _purge_cutoffs(self, completed_older_than, cancelled_older_than, buried_older_than) -> dict[str, int]:
        """{status: age in ms} of a purge: the ages given, else the config's [retention]."""
        given = {"completed": completed_older_than, "cancelled": cancelled_older_than, "buried": buried_older_than}
        if all(v is None for v in given.values()):
            ages = dict(self.settings.retention)
        else:
            ages = {k: (parse_duration(v, what=f"--{k}-older-than") if v is not None else None) for k, v in given.items()}
        return {status: int(age * 1000) for status, age in ages.items() if age is not None}

    def _rate_windows(self) -> dict[str, int]:
        """{type: its rate window in ms}: a purge keeps a job of such a type while its window lasts,
        since the window counts its runs' starts."""
        return {t: window for t, (_n, window) in self.limits.rates.items()}

    def get_many(self, job_ids: list[int]) -> list[Job]:
        """The jobs that exist among job_ids, in that order."""
        return self.engine.get_jobs([validate_job_id(i) for i in job_ids])

    def dependencies(self, job_id: int) -> list[tuple[int, str | None]]:
        """The jobs a job waits on, with their states (None: purged)."""
        return self.engine.dependencies(validate_job_id(job_id))

    def paused_queues(self) -> set[str]:
        return self.engine.paused_queues()

    def queue_names(self) -> list[str]:
        return self.engine.queue_names()

    def stats(self, *, queues: list[str] | None = None, limit: int = 10,
              also_known: frozenset[str] | set[str] = frozenset(),
              type_ages: list[str] | None = None) -> tuple[dict, int]:
        """The `stats --json` object from one consistent read, and the database time it was read at.
        also_known: queue names the config knows (a check of one of them is not a typo). type_ages:
        types whose entry under `types` also gets `oldest_ready_age` (a check of their ready age)."""
        from jobctl.stats import collect

        snap = self.engine.stats_snapshot(limit=limit, queues=queues or None, limits=self.limits or None,
                                          type_ages=type_ages)
        config_types = {name for name, tc in self.settings.types.items()
                        if not queues or (tc.queue or self.settings.queue) in queues}
        figures = collect(snap, queues=queues, limit=limit, also_known=also_known, also_types=config_types)
        try:
            figures["workers"] = self.worker_summary()
        except PermissionDenied:  # a monitoring role not yet granted the workers' table: stats go on without it
            figures["workers"] = None
        limit_figures = (self._opens_at(snap["limit_figures"]) if snap.get("limit_figures") is not None
                         else self.limit_figures())  # (read with the snapshot, when it has them)
        if limit_figures is not None:
            from jobctl.limits import summary

            figures["limits"] = summary(self.limits, limit_figures)
        return figures, snap["now"]

    @property
    def location(self) -> str:
        """The database, fit to print (never a password)."""
        return self.engine.location

    # -- workers ---------------------------------------------------------------------------

    def workers(self, *, all: bool = False) -> tuple[list[dict], int]:
        """`jobctl workers`: one entry per worker (jobctl.workers.view), and the database time."""
        from jobctl import workers

        now, rows, held = self.engine.worker_rows()
        return workers.view(now, rows, held, all=all), now

    def worker_summary(self) -> dict:
        """{"alive", "lost"}: worker processes (stats)."""
        from jobctl import workers

        now, rows, _ = self.engine.worker_rows(jobs=False)
        return workers.summary(now, rows)

    def order_workers(self, request: str, *, workers: list[str] | None = None, host: str | None = None,
                      actor: str | None = None) -> list[dict]:
        """Ask workers to drain or stop ("drain", "stop"): those named, those on `host`, or every
        one (neither). Only live workers are asked: a lost one (jobctl.workers.state_of) has no
        process left to hear it. A name or host with no live worker is NoSuchWorker (exit 3), and
        nothing is asked of anyone. Returns the registry rows ordered."""
        from jobctl import workers as registry
        from jobctl.errors import NoSuchWorker

        rows, missing = self.engine.order_workers(request, workers=workers, host=host, actor=actor or operator_name())
        if missing or (host is not None and not rows):
            now, known, held = self.engine.worker_rows()
            lost = [r for r in known if registry.state_of(r, now) == "lost" and not registry.forgotten(r, now)
                    and (r["worker"] in missing if missing else r["host"] == host)]
            name = missing[0] if missing else None
            if name is not None and name in {w for _, _, w in held} and not any(r["worker"] == name for r in lost):
                raise NoSuchWorker(f"worker {name} is not a `jobctl work` process (its running jobs were claimed "
                                   "by a script with `jobctl claim`); nothing was asked of any worker")
            gone = [r for r in lost if name is None or r["worker"] == name]
            if gone:
                from jobctl.durations import format_duration

                names = ", ".join(dict.fromkeys(r["worker"] for r in gone))
                who = f"worker {name} is" if name is not None else \
                    f"no running worker on host {host}: {names} {'is' if len(gone) == 1 else 'are'}"
                since = format_duration((now - max(r["last_seen"] for r in gone)) / 1000)
                raise NoSuchWorker(f"{who} lost (not seen for {since}: killed, its host down, or cut off from the "
                                   "database): no process is left to tell, nothing was asked of any worker; jobs it "
                                   "ran go back to pending once their leases expire (`jobctl recover`)")
            stopped = [r for r in known if registry.state_of(r, now) == "stopped" and not registry.forgotten(r, now)
                       and (r["worker"] == name if name is not None else r["host"] == host)]
            if stopped:  # the help promises to say which: a worker that exited cleanly has nothing to drain
                from jobctl.durations import format_duration

                ended = max(r["stopped_at"] if r["stopped_at"] is not None else r["last_seen"] for r in stopped)
                ago = format_duration((now - ended) / 1000)
                who = f"worker {name} stopped already ({ago} ago)" if name is not None else \
                    f"every worker on host {host} has stopped (the last {ago} ago)"
                raise NoSuchWorker(f"{who}: nothing is left to tell, nothing was asked of any worker; "
                                   "`jobctl workers --all` lists the stopped ones")
            if name is not None:
                raise NoSuchWorker(f"no running worker {name}; nothing was asked of any worker; `jobctl workers` "
                                   "lists them")
            raise NoSuchWorker(f"no running worker on host {host}; nothing was asked; `jobctl workers` lists them")
        return rows

    def health_checks(self) -> list:
        """The engine's checks (integrity, schema, files or server), then the queue's own: jobs of a
        type that no worker here can run."""
        from jobctl.engines.base import Check

        checks = list(self.engine.health_checks())
        runnable = {name for name, tc in self.settings.types.items() if tc.command}
        if not any(c.name == "schema" and c.data and c.data.get("schema_missing") for c in checks):
            # (it reads the jobs table, which may be gone: the schema check then says what is)
            orphans = {t: n for t, n in self.engine.pending_types().items() if t not in runnable}
            checks.append(Check("handlers", not orphans,
                                "every pending type has a command" if not orphans else
                                "no [types.X] command for: " + ", ".join(f"{t} ({n} pending)" for t, n in sorted(orphans.items()))
                                + " (fine if workers use --type or scripts claim them)"))
            checks.append(self._own_limits_check())
        from jobctl.handlers import command_problems

        broken = command_problems(self.settings)
        checks.append(Check("handler commands", not broken,
                            "every command can be run" if not broken else
                            "; ".join(f"type {t}: {p}" for t, p in broken.items()) + " (workers refuse to start)"))
        limited: dict[str, int] = {}
        for t, tc in sorted(self.settings.types.items()):
            n = self.settings.memory_limit_of(t)
            if tc.command and n is not None:
                limited[t] = n
        if limited:
            from jobctl.durations import format_size

            from jobctl.worker.cgroup import describe

            # Not a problem (it does not fail doctor), but what the limit means here must be plain.
            # Found from this process's own cgroup, read only: a worker started like it would get
            # the same (each worker also says which applies to it when it starts).
            version, where = describe()
            types = " (" + ", ".join(f"{t} {format_size(n)}" for t, n in limited.items()) + ")"
            if version is not None:
                text = (f"memory_limit caps each handler's whole process tree ({version}: a worker started from "
                        f"here puts each handler in a cgroup of its own under {where}; its log says which cap "
                        "applies when it starts)")
            else:
                text = ("memory_limit caps each process only (its address space, RLIMIT_AS), not the handler's "
                        "whole tree: a handler that starts 4 processes may use 4 times its type's memory_limit "
                        f"(no cgroup for it here: {where})")
            checks.append(Check("memory limits", True, text + types,
                                {"memory_limit_scope": "tree" if version else "process", "memory_cgroup": version}))
        return checks

    def _own_limits_check(self):
        """Unfinished jobs of a limited type whose own group or cost (set at enqueue, or frozen from
        the enqueuer's config by an older jobctl) differs from what the config gives the
        type: theirs wins, so the limit counts them otherwise than the config says."""
        from jobctl.engines.base import Check

        limits = self.limits
        keys = {t: limits.key(t, None) for t in self.settings.types}
        limited = sorted(t for t, (kind, name) in keys.items() if name in (limits.groups if kind == "group" else limits.types))
        found = []
        for type, group, cost, n, first in self.engine.own_limits(limited):
            config_group, config_cost = limits.resolve(type, None, 0)
            differs = []
            if group is not None and group != config_group:
                differs.append(f"group {group} (config: {config_group or 'none'})")
            if cost and cost != config_cost:
                differs.append(f"cost {cost} (config: {config_cost})")
            if differs:
                more = f" and {n - 1} more" if n > 1 else ""
                found.append(f"job {first}{more} of type {type}: {', '.join(differs)}")
        if found:
            found[-1] += (" (set on the job, so it wins over the config; if that is not meant, "
                          "cancel and enqueue it again without --group/--cost)")
        # Pending jobs whose cost is over the limit they count against: held for ever (a reaction,
        # or a job enqueued without this config, was not refused at enqueue).
        never = []
        for type, group, cost, n, first in (self.engine.pending_costs() if limits.concurrency else ()):
            group, cost = limits.resolve(type, group, cost)
            kind, name = limits.key(type, group)
            limit = (limits.groups if kind == "group" else limits.types).get(name)
            if limit is not None and cost > limit:
                more = f" and {n - 1} more" if n > 1 else ""
                never.append(f"job {first}{more} of type {type} needs {cost} units, more than the limit of "
                             f"{kind} {name} ({limit}): it can never start (raise the limit, or cancel it)")
        return Check("limits", not (found or never),
                     "every unfinished job of a limited type counts as its type's config says" if not (found or never)
                     else "; ".join(found + never))

    def backup(self, dest, *, on_progress: Callable[[int, int], None] | None = None) -> None:
        """A consistent copy of a file database; a server database has its own tools (exit 2)."""
        files = self.engine.files
        if files is None:
            raise InvalidInput(
                f"{self.location} is not a file that jobctl can copy; back it up with the server's own tools "
                "(for PostgreSQL: pg_dump)")
        files.backup(dest, on_progress=on_progress)

    def limit_figures(self, *, held_ready: bool = True) -> dict | None:
        """Admission-control figures for views (None without limits): Engine.limit_figures plus the
        admission they lead to and when each shut type's rate window opens."""
        limits = self.limits
        if not limits:
            return None
        return self._opens_at(self.engine.limit_figures(limits, held_ready=held_ready))

    def _opens_at(self, figures: dict) -> dict:
        """Engine.limit_figures plus when each rate window opens."""
        from jobctl import limits as policy

        figures["opens_at"] = {t: policy.window_opens_at(figures["starts"][t], n, window)
                               for t, (n, window) in self.limits.rates.items()}
        return figures

    def held_because(self, job: Job, figures: dict | None = None, *, short: bool = False) -> str | None:
        """Why a ready job is held back by a limit, or None (short: in a few words, limits.describe_hold)."""
        from jobctl import limits as policy

        figures = figures if figures is not None else self.limit_figures()
        if figures is None:
            return None
        return policy.describe_hold(job.type, job.concurrency_group, job.cost_units, self.limits,
                                    figures["admission"], figures["opens_at"], figures["now"], short=short)

    def held_reasons(self, jobs: list[Job], now: int) -> dict[int, str]:
        """Why the ready jobs among `jobs` that something holds back are held, in a few words (`show`'s
        reasons: a pause of the job's queue or type, else a limit): {id: reason}, of the held ones only."""
        ready = [j for j in jobs if j.status == "pending" and not j.waiting_on and j.run_at <= now]
        if not ready:
            return {}
        from jobctl.stats import held_reason

        pauses = self.pauses()
        figures = self.limit_figures(held_ready=False)  # (what admits a claim; not the counts of held jobs)
        reasons = {j.id: held_reason(j, now, pauses=pauses,
                                     held=self.held_because(j, figures, short=True) if figures is not None else None)
                   for j in ready}
        return {i: why for i, why in reasons.items() if why}

    def next_admission_in(self, types: list[str] | None = None, queues: list[str] | None = None) -> float | None:
        """Seconds until the earliest rate window of a shut type (of `types`) opens; None when no
        rate limit holds a ready job (of `queues`; None or empty: every queue) back. A freed
        concurrency slot is a commit: wait_for_change sees it."""
        from jobctl.selection import Selection

        figures = self.limit_figures(held_ready=False)
        if figures is None:
            return None
        shut = [t for t in figures["admission"].shut_types if types is None or t in types]
        if not shut:
            return None
        # A full window over no ready job holds nothing back: nothing to wait for (--stop-when-empty).
        held = Selection(queues=list(queues or []), types=sorted(shut), statuses=["held"])
        if not self.engine.count_jobs(selection=held, admission=figures["admission"], at_most=0):
            return None
        return max(min(figures["opens_at"][t] for t in shut) - figures["now"], 0) / 1000

    def pause(self, queue: str, *, type: str | None = None, for_=None, until=None) -> int | None:
        """Pause claims from a queue, or of one type in it; `for_` (a duration) or `until` (a time)
        end it by itself. Returns the end (ms) or None."""
        name = validate_name(queue, "queue")
        type = validate_name(type, "type") if type is not None else None
        if for_ is not None and until is not None:
            raise InvalidInput("--for and --until cannot be used together; give one of them")
        end = None
        if for_ is not None:
            seconds = parse_duration(for_, what="--for")
            if seconds <= 0:
                raise InvalidInput("invalid --for: must be more than 0")
            end = self.engine.now() + int(seconds * 1000)
        elif until is not None:
            end = parse_time(until)
            if end <= self.engine.now():
                raise InvalidInput(f"--until {until} is not in the future; give a later time, or --for DUR")
        self.engine.set_paused(name, True, type=type, until=end)
        return end

    def pauses(self) -> list[tuple[str, str | None, int | None]]:
        """The pauses in force: (queue, type or None for the whole queue, until ms or None)."""
        return self.engine.pauses()

    def resume(self, queue: str, *, type: str | None = None) -> None:
        """Refused (InvalidInput) for a queue or type that is not paused: a typo must not pass for
        done. Without `type`, the queue and every type paused in it flow again."""
        name = validate_name(queue, "queue")
        type = validate_name(type, "type") if type is not None else None
        pauses = self.pauses()
        here = [p for p in pauses if p[0] == name]
        if type is not None:
            if not any(p[1] == type for p in here):
                types = sorted(p[1] for p in here if p[1] is not None)
                raise InvalidInput(f"type {type} is not paused in queue {name}; paused types there: "
                                   f"{', '.join(types) or 'none'}"
                                   + (f" (the whole queue is paused: `jobctl resume {name}`)"
                                      if any(p[1] is None for p in here) else ""))
        elif not here:
            known = self.engine.queue_names()
            paused = sorted({p[0] for p in pauses})
            what = f"queue {name} is not paused" if name in known else f"there is no queue named {name!r}"
            raise InvalidInput(f"{what}; paused queues: {', '.join(paused) or 'none'}"
                               + (f"; known queues: {', '.join(known)}" if name not in known else ""))
        self.engine.set_paused(name, False, type=type)
