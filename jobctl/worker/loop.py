"""The work loop behind `jobctl work`: claim jobs, start their handlers, report what they came to.

One thread, one loop. Signal handlers only count signals; through `signal.set_wakeup_fd` every
signal also writes a byte to a pipe, and each handler has a pidfd that turns readable when it
exits (where the kernel has none, SIGCHLD wakes the pipe instead), so the loop sleeps in
`select()` until a handler exits, a signal arrives or the next deadline (timeout, heartbeat,
poll) is due: no spinning, and near-zero CPU when idle. While idle it also asks the database,
cheaply, whether anyone committed (`queue.has_changed()`), so a job enqueued meanwhile starts at
once instead of at the next poll.

Each step of the loop reads the injected monotonic clock and acts on what is due; `step()` does
one round without waiting, so the rules can be driven by a fake clock in unit tests. Processes are
the supervisor's (supervisor.py), writes are the recorder's (outcomes.py).
"""

from __future__ import annotations

import os
import select
import signal
import time
from functools import partial
from typing import Callable

from jobctl import __version__, handlers, payloads
from jobctl.config import Settings, WorkerSettings
from jobctl.durations import format_duration
from jobctl.errors import (CancelRequested, ConnectionLost, DatabaseBusy, DatabaseUnusable, InvalidInput, InvalidState,
                           JobctlError, NoSuchJob, StatementCancelled)
from jobctl.models import Job, Record
from jobctl.worker.keeper import Keeper
from jobctl.worker.log import Log
from jobctl.worker.outcomes import Outcome, Recorder, Retry
from jobctl.worker.output import RunOutputBuffer
from jobctl.worker.passfile import HandlerDb
from jobctl.worker.supervisor import PosixLauncher, Running, SpawnError, Supervisor, close_inherited_fds

STDERR_TAIL_BYTES = 4096
HEARTBEAT_MAX_INTERVAL = 5.0  # a cancellation is noticed within this many seconds
IDLE_MIN_DELAY = 0.05
CHANGE_CHECK = 0.05  # while idle, how often the database is asked whether anyone committed
SPAWN_MIN_DELAY, SPAWN_MAX_DELAY = 0.5, 30.0  # back-off after a handler could not be started
REGISTER_AFTER = 0.002  # a handler still running this long after its start is put in the orphan registry
UNWATCHED_LOOK = 0.01  # how often the loop looks at a handler whose exit it has no fd to wait on
RENEW_MAX_INTERVAL = 10.0  # the registry row's last_seen is renewed at least this often, idle or not
RENEW_MIN_INTERVAL = 1.0  # and at most this often (a third of the lease between the two)
ORDERS_CHECK = 0.5  # how often the worker looks whether an operator ordered it to drain or stop (noticed within 2 s)
STOP_SIGNALS = handlers.STOP_SIGNALS
STOP_NUMBERS = frozenset(int(s) for s in STOP_SIGNALS)  # as the wake-up pipe writes them (a byte each)
EXIT_UNUSABLE = DatabaseUnusable.exit_code


def own_worker_id() -> str:
    """`work`'s default worker id: JOBCTL_WORKER_ID, else host:pid of this worker process, so that
    N workers started from one shell differ (`claim` names the calling shell instead)."""
    return os.environ.get("JOBCTL_WORKER_ID") or f"{os.uname().nodename}:{os.getpid()}"


def registry_base(engine) -> str:
    """Where this host's records of running handlers live: beside a database file
    (`<db>-handlers/`), else in this user's state folder, named after the database's identity."""
    files = engine.files
    if files is not None:
        return files.path
    import hashlib

    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "jobctl", hashlib.sha256(engine.identity.encode()).hexdigest()[:16])


_DEFAULTS = WorkerSettings()  # the [worker] table's defaults: WorkerOptions's too


class WorkerOptions(Record):
    """What `jobctl work` was asked to do. A plain record (models.Record), not a dataclass:
    importing dataclasses costs a worker's start-up ~10 ms."""

    __slots__ = ("worker_id", "queues", "types", "concurrency", "max_jobs", "max_time", "stop_when_empty", "poll",
                 "grace", "lease", "kill_grace", "recover_every", "purge_every", "log_format", "config_path")

    def __init__(self, worker_id: str | None = None,
                 queues: list[str] | None = None,  # None: every queue
                 types: list[str] | None = None,  # None: every type with a command
                 concurrency: int = _DEFAULTS.concurrency, max_jobs: int | None = None, max_time: float | None = None,
                 stop_when_empty: bool = False, poll: float = _DEFAULTS.poll, grace: float = _DEFAULTS.grace,
                 lease: float = _DEFAULTS.lease, kill_grace: float = _DEFAULTS.kill_grace,
                 recover_every: float = _DEFAULTS.recover_every, purge_every: float = _DEFAULTS.purge_every,
                 log_format: str = _DEFAULTS.log_format,
                 config_path: str | None = None):  # passed to handlers as JOBCTL_CONFIG when set
        self.worker_id: str = own_worker_id() if worker_id is None else worker_id
        self.queues = queues
        self.types = types
        self.concurrency = concurrency
        self.max_jobs = max_jobs
        self.max_time = max_time
        self.stop_when_empty = stop_when_empty
        self.poll = poll
        self.grace = grace
        self.lease = lease
        self.kill_grace = kill_grace
        self.recover_every = recover_every
        self.purge_every = purge_every
        self.log_format = log_format
        self.config_path = config_path


def handler_types(settings: Settings, wanted: list[str] | None) -> list[str]:
    """The types a worker claims: those named (each must have a command), else all with one."""
    with_command = sorted(n for n, t in settings.types.items() if t.command)
    where = f"the config file {settings.config_path}" if settings.config_path else "a config file"
    if wanted:
        missing = [t for t in wanted if t not in with_command]
        if missing:
            raise InvalidInput(
                f"no command for type {', '.join(missing)} in {where}; add [types.{missing[0]}] with "
                'command = ["/path/to/handler"]'
            )
        return list(dict.fromkeys(wanted))
    if not with_command:
        hint = "" if settings.config_path else " (none was found; `jobctl config init` writes one)"
        raise InvalidInput(
            f"no job type has a command in {where}{hint}; add [types.NAME] with "
            'command = ["/path/to/handler"] so the worker knows what to run'
        )
    return with_command


def check_commands(settings: Settings, types: list[str]) -> None:
    """Refuse to work with a handler command that cannot be run (a config error, exit 2)."""
    problems = handlers.command_problems(settings, types)
    if problems:
        where = f" in {settings.config_path}" if settings.config_path else ""
        detail = "; ".join(f"type {t}: {p}" for t, p in problems.items())
        raise InvalidInput(f"cannot run the handler command of {detail}; fix [types.{next(iter(problems))}] "
                           f"command{where} (`jobctl doctor` checks every type)")


class Worker:
    def __init__(self, queue, settings: Settings, options: WorkerOptions, log: Log | None = None, *,
                 clock: Callable[[], float] = time.monotonic, launcher=None):
        self.q = queue
        self.settings = settings
        self.o = options
        self.clock = clock
        self.log = log or Log(options.worker_id, options.log_format, secret_keys=settings.secret_keys)
        self.types = handler_types(settings, options.types)
        self.real = launcher is None  # real processes (not a test's fakes)
        self.registry = (handlers.Registry(registry_base(queue.engine), warn=lambda m: self.log("registry", m))
                         if self.real else None)
        self.sup = Supervisor(launcher or PosixLauncher(), clock, kill_grace=options.kill_grace,
                              registry=self.registry, worker_id=options.worker_id, log=self.log)
        self.rec = Recorder(queue, self.log, options.worker_id, clock)
        if queue.engine.reconnects:  # an engine on a server: a lost connection is made again
            queue.engine.on_reconnect = self.rec.reconnected
        self.claimed = 0
        self.signals = 0  # stop signals seen by the Python-level handler (or handed in by on_signal)
        self.piped = 0  # stop signals counted on the wake-up pipe (or handed in by on_signal)
        self.signals_seen = 0
        self.last_signal = signal.SIGTERM
        self.stopping = False
        self.stop_at: float | None = None  # when running handlers are stopped (grace over)
        self.exit_code = 0
        self.empty = False
        self.rate_held = False
        self.idle_delay = IDLE_MIN_DELAY
        self.next_claim = 0.0
        self.next_change_check = 0.0
        self.change_delay = CHANGE_CHECK
        # Idle workers watch the database for commits when its engine offers a cheap way to.
        self.watch = queue.engine.wakes
        self.spawn_delay = 0.0
        self.heartbeat_every = max(min(options.lease / 3, HEARTBEAT_MAX_INTERVAL), 0.05)
        env = dict(os.environ)
        self.handler_db = HandlerDb(queue.engine.url)  # the URL without its password (worker/passfile)
        env["JOBCTL_DB"] = self.handler_db.url
        if options.config_path:
            env["JOBCTL_CONFIG"] = os.path.abspath(options.config_path)
        self.env = env
        self._plans: dict[str, tuple[list[str], Callable[[], RunOutputBuffer], int | None]] = {}  # by type (_plan)
        self.claim_options = dict(worker=options.worker_id, queues=options.queues, types=self.types,
                                  lease=options.lease)
        self.max_time_at: float | None = None
        self.next_recover = self.next_purge = 0.0
        self.memory_note = ""  # which memory cap applies, said once at the start (_memory_cgroups)
        # The registry (`jobctl workers`): this process's row, renewed every renew_every seconds;
        # lost to a reader after LOST_AFTER of them (jobctl/workers.py).
        self.instance = os.urandom(8).hex()
        # (not more often than once a second: with a short lease, renewals as frequent as the
        # heartbeats would add a write-lock holder every third of a second per worker)
        self.renew_every = min(max(options.lease / 3, RENEW_MIN_INTERVAL), RENEW_MAX_INTERVAL)
        self.registered_at: int | None = None  # started_at of the row (the database's clock); None: not yet
        self.next_renew = self.next_orders = 0.0
        self.ordered = 0  # an operator's order seen: 1 drain, 2 stop (counted as signals are)

    # compatibility: what the old single class exposed
    @property
    def running(self) -> list[Running]:
        return self.sup.running

    @property
    def unrecorded(self) -> list[Outcome]:
        return self.rec.unrecorded

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> int:
        """Work until a limit or a signal stops the worker; return the exit code (0, or 8 when
        the database became unusable)."""
        if self.real:
            check_commands(self.settings, self.types)
            close_inherited_fds()
            self._memory_cgroups()  # before the keeper starts: under cgroup v2 the worker moves first
            self.sup.keeper = Keeper.start(warn=lambda m: self.log("keeper", m))
        wake_r, saved = self._install_signals()
        hold, release = getattr(self.log, "hold", None), getattr(self.log, "release", None)
        try:
            self.begin()  # (it registers the worker: a database found unusable there stops it as below)
            while True:
                if hold is not None:
                    hold()  # a round's lines (a job done, the next started) in one write
                try:
                    done = self.step()
                finally:
                    if release is not None:
                        release()
                if done:
                    break
                if self.sup.running and not self.stopping:
                    self.sup.prepare()  # the next start's pipes, off the path from an exit to the next start
                    self._prepare_steps()
                wait = self.next_deadline(self.clock()) - self.clock()
                if self.sup.unregistered:
                    # A first short wait: a handler that is over by then needs no orphan record.
                    # Its pipes are not watched during it (their end-of-file would wake the loop
                    # once more, just before its exit does): the most a handler that fills one
                    # within it waits is those 2 ms.
                    self._wait(wake_r, min(wait, REGISTER_AFTER), output=False)
                    self.sup.register()
                    continue
                self._wait(wake_r, wait)
        except DatabaseUnusable as e:
            self.log("unusable", f"stopping: {e}")
            self.exit_code = EXIT_UNUSABLE
        finally:
            self._abandon()
            self._unregister()
            self.sup.close()
            self.handler_db.close()
            if self.sup.keeper is not None:
                self.sup.keeper.close()
            self._restore_signals(saved)
            self._give_back_the_log()
        self.log("stopped", f"{self.claimed} job(s) started")
        return self.exit_code

    def _memory_cgroups(self) -> None:
        """Where a type it runs has a memory_limit: cap each handler's whole tree in a cgroup of
        its own if the system lets this worker, else each process (RLIMIT_AS). Nothing is done
        (not even looked at) when no type has a limit."""
        if any(self.settings.memory_limit_of(t) is not None for t in self.types):
            from jobctl.worker.cgroup import MemoryCgroups

            self.sup.cgroups, self.memory_note = MemoryCgroups.setup()

    def _give_back_the_log(self) -> None:
        """A stopping worker folds the write-ahead log into the file and truncates it, so that the
        log's space goes back to the disk (a worker stopped on a full disk held it). SQLite does
        this itself only when the last connection closes, and not while another process (a `stats
        --watch`) has the file open. Readers are waited for 0.5 s at most; a checkpoint that
        cannot finish (a busy queue, a disk too full to grow the file) is left to the next one."""
        files = self.q.engine.files
        if files is None:
            return
        try:
            files.checkpoint(wait=0.5)
        except Exception:  # noqa: BLE001 (best effort on the way out: the next checkpoint does it)
            pass

    def begin(self) -> None:
        started = self.clock()
        self.max_time_at = started + self.o.max_time if self.o.max_time is not None else None
        self.next_recover = started
        self.next_purge = started
        queues = ", ".join(self.o.queues) if self.o.queues else "all"
        config = os.path.abspath(self.settings.config_path) if self.settings.config_path else None
        # The first line names the database and the config (a JOBCTL_DB inherited by mistake shows
        # here): a file by its absolute path, a server by its URL without the password.
        database = self.q.location if self.q.engine.files is None else os.path.abspath(self.q.location)
        self.log("started", f"database {database}; config {config or 'none (built-in defaults)'}; "
                            f"pid {os.getpid()}, types {', '.join(self.types)}; queues {queues}; "
                            f"concurrency {self.o.concurrency}", database=database, config=config)
        if self.memory_note:
            self.log("memory", self.memory_note)
        self._register(started)

    def step(self) -> bool:
        """One round of the loop, without waiting; True when the worker is done."""
        clock = self.clock
        self._check_stop(clock())
        if self.forced:
            return True
        self._reap()
        self._retry_unrecorded(clock())
        self.sup.supervise(clock(), self.stop_at)
        self._heartbeats(clock())
        self._registry(clock())
        self._housekeeping(clock())
        self._claim(clock())
        return not self.sup.running and not self.rec.unrecorded and self._done()

    forced = False  # a third signal: leave at once, whatever is left

    def _done(self) -> bool:
        if self.stopping:
            return True
        if self.o.max_jobs is not None and self.claimed >= self.o.max_jobs:
            return True
        return self.o.stop_when_empty and self.empty and not self.rate_held

    def _may_claim(self) -> bool:
        return (not self.stopping and (self.o.max_jobs is None or self.claimed < self.o.max_jobs)
                and len(self.sup.running) < self.o.concurrency and not self.rec.unrecorded)

    # -- signals ---------------------------------------------------------------------------

    def on_signal(self, signum) -> None:
        """A stop signal that will not show on the wake-up pipe (received before the worker ran)."""
        self.signals += 1  # only a count: the loop acts on it
        self.piped += 1
        self.last_signal = signum

    def _install_signals(self):
        # Python runs a handler once for all the deliveries of a signal that came while the main
        # thread was inside C code (a statement waiting for the write lock): a second and a third
        # SIGTERM sent then would be one. The wake-up pipe has a byte per delivery: the loop
        # counts those (_wait), and a signal counts as soon as either way has seen it.
        def on_stop(signum, frame):
            self.signals += 1
            self.last_signal = signum

        old = {s: signal.getsignal(s) for s in (*STOP_SIGNALS, signal.SIGCHLD)}
        try:
            # (the handlers first: a signal delivered before the pipe is set is counted by them)
            for s in STOP_SIGNALS:
                signal.signal(s, on_stop)
        except ValueError:  # not the main thread: fall back to short sleeps
            return None, None
        if not self.sup.launcher.exit_fds:
            # A handler's exit wakes the loop through its pidfd where the kernel has them (no
            # signal then: nothing interrupts a wait, and nothing runs for it); else through SIGCHLD.
            signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # so that it wakes the pipe
        r, w = os.pipe()
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        return r, (old, old_fd, r, w)

    def _restore_signals(self, saved) -> None:
        if saved is None:
            return
        old, old_fd, r, w = saved
        signal.set_wakeup_fd(old_fd)
        for s, h in old.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
        os.close(r)
        os.close(w)

    def _wait(self, wake_r, timeout: float, *, output: bool = True) -> None:
        """Sleep until a signal (a handler's exit), or `timeout`; meanwhile read the handlers' output
        (unless `output` is false)."""
        timeout = max(0.0, min(timeout, 60.0))
        if wake_r is None:
            self._pump()
            time.sleep(min(timeout, 0.05))
            return
        exits = self.sup.exit_fds()
        if exits is None:  # a handler without one (no descriptor was left): look at it often
            timeout = min(timeout, UNWATCHED_LOOK)
            exits = set()
        end = time.monotonic() + timeout
        while True:
            pipes = self.sup.fds() if output else {}
            if not pipes and timeout <= 0:
                break
            try:
                ready, _, _ = select.select([wake_r, *exits, *pipes], [], [], max(timeout, 0.0))
            except InterruptedError:
                ready = [wake_r]
            for fd in ready:
                r = pipes.get(fd)
                if r is not None and fd in r.fds():
                    r.pump(fd)
            if wake_r in ready or timeout <= 0:
                break
            if exits and not exits.isdisjoint(ready):
                return  # a handler exited (nothing to read on the wake-up pipe for that)
            timeout = end - time.monotonic()
            if timeout <= 0:
                break
        try:
            while True:
                got = os.read(wake_r, 512)
                for signum in got:
                    if signum in STOP_NUMBERS:
                        self.piped += 1
                if len(got) < 512:  # a short read emptied it: no read to meet EAGAIN
                    break
        except (BlockingIOError, InterruptedError):
            pass

    def _check_stop(self, now: float) -> None:
        signals = max(self.signals, self.piped)
        if signals > self.signals_seen:
            self.signals_seen = signals
            name = handlers.signal_name(self.last_signal)
            level = self.signals_seen + self.ordered  # a drain ordered counts as a first signal
            if level == 1:
                self._begin_stop(now, self.o.grace, f"{name} received")
            elif level == 2:
                self._begin_stop(now, 0, f"second signal ({name})")
            else:
                self._force_stop(name)
        if self.max_time_at is not None and now >= self.max_time_at and not self.stopping:
            self._begin_stop(now, self.o.grace, f"--max-time {format_duration(self.o.max_time)} reached")

    def _begin_stop(self, now: float, grace: float, why: str) -> None:
        first = not self.stopping
        self.stopping = True
        if first:
            self.next_renew = now  # the registry row says `draining` at once
        at = now + grace
        if self.stop_at is not None and self.stop_at <= at:
            return
        self.stop_at = at
        n = len(self.sup.running)
        if not n:
            self.log("stopping", f"{why}; claiming nothing more")
        elif first and grace > 0:
            self.log("stopping", f"{why}; claiming nothing more; waiting up to {format_duration(grace)} for "
                                 f"{n} running job(s), then stopping and releasing them")
        else:
            self.log("stopping", f"{why}; stopping {n} running job(s) now and releasing them")

    def _force_stop(self, name: str) -> None:
        """A third signal: kill the handlers and leave now, even with outcomes not yet written
        (a full disk, a lock that never ends); what is left is named in the log."""
        self.stopping = True
        self.forced = True  # _abandon kills the handlers
        left = self.rec.unrecorded
        self.log("stopping", f"third signal ({name}); stopping the handlers and leaving at once"
                 + (f" with {len(left)} outcome(s) not recorded" if left else ""))

    # -- handlers --------------------------------------------------------------------------

    def _start(self, job: Job) -> Running | None:
        """Start the handler of a job just claimed (its "start" line is the caller's to log)."""
        self.claimed += 1
        self.empty = False
        self.rate_held = False
        self.idle_delay = IDLE_MIN_DELAY
        plan = self._plans.get(job.type)
        if plan is None:
            plan = self._plans[job.type] = self._plan(job.type)
        command, new_output, memory_limit = plan
        env = {**self.env, "JOBCTL_JOB_ID": str(job.id), "JOBCTL_JOB_TYPE": job.type, "JOBCTL_QUEUE": job.queue,
               "JOBCTL_ATTEMPT": str(job.attempts), "JOBCTL_MAX_ATTEMPTS": str(job.max_attempts),
               "JOBCTL_TOKEN": job.token or ""}
        try:
            return self.sup.start(job, command, env, self.heartbeat_every, new_output, memory_limit=memory_limit)
        except SpawnError as e:
            self._spawn_failed(job, e)
            return None

    def _plan(self, type: str) -> tuple[list[str], Callable[[], RunOutputBuffer], int | None]:
        """How a type's handlers are started: (command, what makes a run's output buffer, memory
        limit); the settings do not change while the worker runs, so each type's is worked out once."""
        tc = self.settings.types.get(type)
        assert tc is not None and tc.command, "only types with a command are claimed"
        head = tc.log_head if tc.log_head is not None else self.settings.log_head
        tail = tc.log_tail if tc.log_tail is not None else self.settings.log_tail
        new_output = partial(RunOutputBuffer, head, tail, self.settings.max_payload_bytes + 4096, STDERR_TAIL_BYTES)
        return list(tc.command), new_output, self.settings.memory_limit_of(type)

    def _spawn_failed(self, job: Job, e: SpawnError) -> None:
        """The worker could not start the handler: the job is not to blame. Release it (the run
        does not count), say why, and wait before claiming again."""
        self.claimed -= 1
        self.spawn_delay = min(max(self.spawn_delay * 2, SPAWN_MIN_DELAY), SPAWN_MAX_DELAY)
        now = self.clock()
        self.next_claim = now + self.spawn_delay
        self.log("spawn-failed", f"{e.reason}; releasing the job (this run does not count) and waiting "
                                 f"{format_duration(self.spawn_delay)} before claiming again", job)
        try:
            self.rec.db(self.q.release, job.id, token=job.token, actor=self.o.worker_id,
                        reason=f"the worker could not start its handler ({e.reason})")
        except Retry:
            self.rec.unrecorded.append(Outcome(Running(job, None, -1, -1, now, now, now),  # type: ignore[arg-type]  # never started
                                               "release", 0, 0.0,
                                               next_try=now + self.rec.delay))
        except (InvalidState, NoSuchJob):
            pass

    def _log_start(self, r: Running | None) -> None:
        if r is not None:
            self.spawn_delay = 0.0
            self.log("start", "", r.job)

    def _reap(self) -> None:
        finished = self.sup.reap()
        if not finished:
            return
        outcomes = []
        for r, rc in finished:
            o = self._finish(r, rc)
            if o is not None:
                outcomes.append(o)
        try:
            completed = [o for o in outcomes if o.kind == "complete"]
            if len(completed) > 1 and self._record_completions(completed):
                outcomes = [o for o in outcomes if o.kind != "complete"]
            for o in outcomes:
                self._record(o)
        except DatabaseUnusable:
            for o in outcomes:  # none may go missing: each is logged when the worker leaves
                if o not in self.rec.unrecorded:
                    self.rec.unrecorded.append(o)
            raise
        self.sup.finish_reaping()  # off the critical path: after the next handler started
        for r, _ in finished:
            self.sup.forget(r)

    def _pump(self) -> None:
        """Read what the handlers' pipes hold (without a wake-up pipe to sleep on)."""
        for fd, r in self.sup.fds().items():
            if fd in r.fds():
                r.pump(fd)

    def _finish(self, r: Running, rc: int) -> Outcome | None:
        r.drain()  # the handler has exited: all it wrote is in its pipes
        o = self._outcome(r, rc)
        out = r.output
        if o is not None and out is not None and (out.head_limit or out.tail.limit) and (out.dirty or out.head):
            o.output = out.snapshot()  # a run that printed nothing costs no row
        return o

    def _outcome(self, r: Running, rc: int) -> Outcome | None:
        duration = self.clock() - r.started
        reason = r.stop_reason
        out = r.output
        assert out is not None
        try:
            if reason == "lost":
                return None
            if reason == "shutdown":
                return Outcome(r, "release", rc, duration)
            if reason == "cancel":
                return Outcome(r, "cancel", rc, duration)
            if rc == 0 and reason is None:
                result, problem = handlers.result_of(out.stdout.data(), out.stdout.total, self.settings.max_payload_bytes)
                text = payloads.compact(result, what="result") if result is not None else None
                if text is not None and not self.q.stores(text):
                    problem = payloads.NUL_REFUSED.split(';')[0]
                if problem is not None:
                    # The run succeeded: as for a result too large to keep, the job completes
                    # without it, rather than run again (a handler's side effects twice).
                    self.log("result", f"not stored: {problem}; the job completes without a result", r.job)
                    result = None
                elif isinstance(result, str):
                    result = text  # a JSON string: the queue reads a str result as JSON text
                return Outcome(r, "complete", rc, duration, result=result)
            tail = handlers.tail_of(out.stderr.data(), out.stderr.total, STDERR_TAIL_BYTES)
            details: dict[str, object] = (
                {"exit_code": rc} if rc >= 0 else {"exit_code": None, "signal": handlers.signal_name(-rc)})
            details["duration"] = round(duration, 3)
            if tail:
                details["stderr_tail"] = tail
            if reason == "timeout":
                return Outcome(r, "fail", rc, duration, details=details,
                               error=f"timed out after {format_duration(r.job.timeout_ms / 1000)}")
            last_err = next((line.strip() for line in reversed(tail.splitlines()) if line.strip()), "")
            how = handlers.describe_exit(rc)
            limit = self.settings.memory_limit_of(r.job.type)
            # Under a memory cgroup the kernel counts its OOM kills: a SIGKILL alone says nothing then.
            if limit is not None and (r.oom_kills or handlers.memory_failure(rc, tail, signals=r.oom_kills is None)):
                from jobctl.durations import format_size

                details["memory_limit"] = limit
                if r.oom_kills:
                    details["oom_killed"] = r.oom_kills
                how = f"out of memory: the handler hit its memory limit of {format_size(limit)} ({how})"
            tc = self.settings.types.get(r.job.type)
            bury = bool(tc and rc in tc.bury_exit_codes)
            return Outcome(r, "bury" if bury else "fail", rc, duration, details=details,
                           error=f"{how}: {last_err}" if last_err else how)
        finally:
            self.sup.release_files(r)

    # -- writing outcomes ------------------------------------------------------------------

    def _record_completions(self, done: list[Outcome]) -> bool:
        """Several handlers finished at once (--concurrency > 1): complete them all and claim as
        many next jobs in one transaction. False when one of the claims is no longer ours: the
        caller then writes them one by one, each logged."""
        want = 0
        if self._may_claim():
            want = self.o.concurrency - len(self.sup.running)
            if self.o.max_jobs is not None:
                want = min(want, self.o.max_jobs - self.claimed)
        claimed = self.rec.complete_many(done, want, self.claim_options)
        if claimed is None:
            return False
        if any(o in self.rec.unrecorded for o in done):
            return True  # kept for a retry
        started = [self._start(job) for job in claimed]
        for o in done:
            self.rec.log_done(o)
        for r in started:
            self._log_start(r)
        now = self.clock()
        if claimed:
            self.next_claim = now
        if len(claimed) < want:
            self._claimed_none(now)
        return True

    def _prepare_steps(self) -> None:
        """While handlers run: for each, the completion and the next claim worked out ahead (the
        step taken when it exits with no result and no output), so that only the transaction is
        left between its exit and the next start."""
        for r in self.sup.running:
            if r.next_step is None and r.stop_reason is None:
                r.next_step = self.q.prepare_complete_and_claim(r.job, actor=self.rec.worker_id, **self.claim_options)

    def _record(self, o: Outcome) -> None:
        claim = o.kind == "complete" and self._may_claim()
        step, o.run.next_step = o.run.next_step, None  # (taken once: a retry goes the general way)
        if not (claim and o.result is None and o.output is None):
            step = None
        written, nxt = self.rec.record(o, self.claim_options if claim else None, step)
        if not written:
            return
        if o.kind == "complete" and not o.lost:  # (a refused completion was logged as lost, and claimed nothing)
            started = self._start(nxt) if nxt is not None else None
            self.rec.log_done(o)
            if claim:
                if nxt is None:
                    self._claimed_none(self.clock())
                else:
                    self.next_claim = self.clock()
                    self._log_start(started)

    def _retry_unrecorded(self, now: float) -> None:
        for o in self.rec.due(now):
            self._record(o)

    # -- heartbeats and housekeeping -------------------------------------------------------

    def _heartbeats(self, now: float) -> None:
        # (`now` is the monotonic clock; the leases themselves are timed by the engine on a clock
        # that a step of the wall clock does not move: a step needs no renewal ahead of time)
        for r in self.sup.running:
            if now < r.next_heartbeat or r.stop_reason == "lost":
                continue
            r.next_heartbeat = now + self.heartbeat_every
            output = r.output.snapshot() if r.output is not None and r.output.dirty else None
            try:
                self.rec.db(self.q.heartbeat, r.job.id, token=r.job.token, actor=self.o.worker_id, output=output)
            except Retry:
                if r.output is not None and output is not None:
                    r.output.dirty = True  # stored with a later heartbeat
                r.next_heartbeat = now + min(self.heartbeat_every, max(self.rec.delay, 0.1))
            except CancelRequested:
                if r.stop_reason is None:
                    self.log("cancel", "cancellation requested; stopping the handler", r.job)
                    self.sup.stop(r, "cancel", now)
                elif r.stop_reason in ("shutdown", "timeout"):
                    # Already being stopped: once it exits, the job ends cancelled as asked.
                    if r.stop_reason == "timeout":
                        self.log("cancel", "cancellation requested while the timed-out handler is stopped", r.job)
                    r.stop_reason = "cancel"
            except (InvalidState, NoSuchJob) as e:
                self.log("lost", f"the claim is no longer ours, stopping the handler: {e}", r.job)
                r.stop_reason = "lost"
                self.sup.stop(r, "lost", now)

    def _housekeeping(self, now: float) -> None:
        # Not while an outcome of ours waits to be written: its lease may have run out during a
        # database outage, and recovering our own finished job would run it again.
        if now >= self.next_recover and not self.rec.unrecorded:
            self.next_recover = now + self.o.recover_every
            # Our own running jobs are alive whatever their lease says (a wall-clock jump, a
            # heartbeat that waited on a lock): never recover them.
            mine = frozenset(r.job.token for r in self.sup.running if r.job.token)
            try:
                for job, action in self.rec.db(self.q.recover, actor=self.o.worker_id, exclude_tokens=mine):
                    self.log("recovered", f"{action}: worker {job.worker} lost its lease", job)
            except Retry:
                self.next_recover = now + min(self.o.recover_every, 5.0)
        if now >= self.next_purge:
            self.next_purge = now + self.o.purge_every
            try:
                counts = self.rec.db(self.q.purge)
                if sum(counts.values()):
                    detail = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
                    self.log("purged", f"{detail} (retention)", deleted=counts)
            except Retry:
                self.next_purge = now + min(self.o.purge_every, 5.0)

    # -- the registry ----------------------------------------------------------------------

    def _info(self) -> dict:
        return {"worker": self.o.worker_id, "host": os.uname().nodename, "pid": os.getpid(),
                "version": __version__, "queues": self.o.queues, "types": self.types,
                "concurrency": self.o.concurrency, "renew_ms": int(self.renew_every * 1000),
                "state": "draining" if self.stopping else "running", "done": self.rec.done,
                "failed": self.rec.failed}

    def _register(self, now: float) -> None:
        """Write this process's registry row (again, with its first start, when it was deleted)."""
        self.next_renew = now + self.renew_every
        try:
            self.registered_at = self.rec.db(self.q.engine.register_worker, self.instance, self._info(),
                                             self.registered_at)
        except Retry:
            self.next_renew = now + min(self.renew_every, max(self.rec.delay, 0.1))

    def _registry(self, now: float) -> None:
        """Renew the registry row when due (one write, whatever the number of running jobs), and
        twice a second, when the engine's wake-up says someone wrote (SQLite: data_version;
        PostgreSQL: a NOTIFY of an order), read the row for an operator's order."""
        if now >= self.next_renew:
            if self.registered_at is None:
                self._register(now)
                return
            self.next_renew = now + self.renew_every
            if self.sup.keeper is not None:
                self.sup.keeper.check()  # (said once, with the renewal's rhythm: nothing per job)
            try:
                found, request = self.rec.db(self.q.engine.renew_worker, self.instance,
                                             "draining" if self.stopping else "running", self.rec.done, self.rec.failed)
            except Retry:
                self.next_renew = now + min(self.renew_every, max(self.rec.delay, 0.1))
                return
            self._obey(found, request, now)
            self.next_orders = now + ORDERS_CHECK
        elif now >= self.next_orders:
            self.next_orders = now + ORDERS_CHECK
            # Reads, not through rec.db: one that succeeds during an outage is no sign that
            # writes go through again (db-ok), and one that fails is simply tried again.
            try:
                if not self.q.engine.orders_changed():
                    return
                found, request = self.q.engine.worker_request(self.instance)
            except (DatabaseBusy, ConnectionLost, StatementCancelled):
                return
            self._obey(found, request, now)

    def _obey(self, found: bool, request: str | None, now: float) -> None:
        if not found:
            self.log("registry", "this worker's entry in the workers' registry was gone; registered again")
            self._register(now)
        elif request == "stop" and self.ordered < 2:
            self.ordered = 2
            self._begin_stop(now, 0, "`jobctl workers stop --now` received")
        elif request == "drain" and self.ordered < 1:
            self.ordered = 1
            self._begin_stop(now, self.o.grace, "`jobctl workers drain` received")

    def _unregister(self) -> None:
        """On the way out: the row says stopped. One try: a worker that cannot write it shows as
        lost after three renewal periods, and is forgotten a day later."""
        if self.registered_at is None or self.exit_code == EXIT_UNUSABLE or self.forced:
            return  # (a third signal: leave at once, not after a wait for the write lock)
        try:
            self.q.engine.worker_stopped(self.instance, self.rec.done, self.rec.failed)
        except JobctlError:
            pass

    # -- claiming --------------------------------------------------------------------------

    def _claim(self, now: float) -> None:
        if not self._may_claim():
            return
        by_change = False
        if now < self.next_claim:
            if not self.empty or self.spawn_delay or not self.watch or now < self.next_change_check:
                return
            # Idle: a cheap look (no lock, no I/O) at whether anyone committed since our last claim.
            self.next_change_check = now + self.change_delay
            try:
                if not self.rec.db(self.q.has_changed):
                    self.change_delay = CHANGE_CHECK  # a quiet database: the next commit is worth a claim
                    return
            except Retry:
                return
            by_change = True
        while self._may_claim() and (now >= self.next_claim or by_change):
            try:
                if self.empty and self.watch:
                    self.rec.db(self.q.has_changed)  # the mark that a later look compares with
                job = self.rec.db(self.q.claim, **self.claim_options)
            except Retry:
                self.next_claim = now + self.rec.delay
                self.empty = False
                return
            if job is None:
                if by_change:
                    # Others' commits, nothing for us (other types, a busy queue): look less often,
                    # so idle workers do not hammer the write lock of busy ones.
                    self.change_delay = min(self.change_delay * 2, max(CHANGE_CHECK, self.o.poll / 4))
                    self.next_change_check = now + self.change_delay
                else:
                    self._claimed_none(now)
                return
            by_change = False
            self.change_delay = CHANGE_CHECK
            self.next_claim = now
            self._log_start(self._start(job))
            now = self.clock()

    def _claimed_none(self, now: float) -> None:
        self.empty = True
        self.rate_held = False
        self.next_claim = now + self.idle_delay
        self.next_change_check = now + self.change_delay
        self.idle_delay = min(self.idle_delay * 2, self.o.poll)
        if self.q.limits:
            # Ready jobs a rate limit holds back: --stop-when-empty waits for them (rate_held), and
            # the next claim is when the window opens, not a poll later. A freed concurrency slot
            # is a commit, which the idle look at has_changed() sees meanwhile (empty stays True).
            try:
                opens_in = self.rec.db(self.q.next_admission_in, self.types, self.o.queues)
            except Retry:
                return
            if opens_in is not None:
                self.rate_held = True
                self.next_claim = now + min(opens_in + 0.001, self.o.poll)

    def next_deadline(self, now: float) -> float:
        """When the next thing is due (an absolute time on the loop's clock)."""
        times = [now + 60.0]
        for r in self.sup.running:
            times.append(r.next_heartbeat)
        self.sup.next_deadline(times)
        if self.stop_at is not None and self.sup.running:
            times.append(self.stop_at)
        if self.max_time_at is not None and not self.stopping:
            times.append(self.max_time_at)
        if self._may_claim():
            times.append(self.next_claim)
            if self.empty and not self.spawn_delay and self.watch:
                times.append(self.next_change_check)
        times += [o.next_try for o in self.rec.unrecorded]
        times += [self.next_renew, self.next_orders]
        times.append(self.next_purge)
        if not self.rec.unrecorded:  # recovery waits while an outcome of ours does: its time may be past
            times.append(self.next_recover)
        return min(times)

    # -- leaving ---------------------------------------------------------------------------

    def _abandon(self) -> None:
        """Leaving abnormally (an unusable database, a third signal, a bug): stop every handler
        and try to hand its job back, so that nothing is left running; what cannot be written is
        logged, job by job, and recovered later when its lease expires."""
        for r in list(self.sup.running):
            if r.stop_reason is None and self.sup.launcher.exited(r.proc):
                # It finished by itself before the worker could look: its outcome is a real one.
                self.sup.running.remove(r)
                self.sup.launcher.signal_group(r.proc, signal.SIGKILL)
                rc = self.sup.launcher.reap(r.proc)
                self.sup.forget(r)
                o = self._finish(r, rc)
                if o is not None:
                    self.rec.unrecorded.append(o)
                continue
            rc = self.sup.abandon(r)
            if r.stop_reason != "lost":
                self.rec.unrecorded.append(Outcome(r, "release", rc, self.clock() - r.started))
        for o in list(self.rec.unrecorded):
            if self.forced and self.rec.busy_logged:
                break  # leaving at once: no more waiting on the database
            try:
                written = self._record_final(o)
            except JobctlError:
                break
            if not written and self.forced:
                break
        self.rec.log_unrecorded("before the worker stopped")
        if self.rec.unrecorded and not self.exit_code:
            self.exit_code = self.rec.cause_exit_code()

    def _record_final(self, o: Outcome) -> bool:
        written, _ = self.rec.record(o)
        if written and o.kind == "complete" and not o.lost:
            self.rec.log_done(o)
        return written
