"""The work loop behind `jobctl work` (SPEC §5): claim jobs, run their handler commands, report.

One thread, one loop. Signal handlers only count signals; through `signal.set_wakeup_fd` every
signal (SIGCHLD included) also writes a byte to a pipe, so the loop sleeps in `select()` until a
handler exits, a signal arrives or the next deadline (timeout, heartbeat, poll) is due: no
spinning, and near-zero CPU when idle.

Handlers run with shell=False in their own session (so their process group is theirs alone and a
Ctrl-C on the worker's terminal does not reach them). The payload is given on stdin from a pipe
filled before the handler starts (a temporary file when it exceeds one pipe page), and
stdout/stderr go to temporary files, so no pipe can fill up and deadlock the worker. A handler's
exit is first observed with waitid(WNOWAIT): while the leader is an unreaped zombie its pid (= the
group id) cannot be reused, so killing what it left behind in its group cannot hit a stranger.

The policy (retry or bury, backoff, what a release means) stays in queue.py; this module only
turns process outcomes into queue calls, and survives a locked database by retrying.
"""

from __future__ import annotations

import json
import os
import random
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import IO

from jobctl import handlers
from jobctl.config import Settings
from jobctl.durations import format_duration, to_rfc3339
from jobctl.errors import CancelRequested, DatabaseBusy, DiskFull, InvalidInput, InvalidState, JobctlError, NoSuchJob
from jobctl.models import Job
from jobctl.untrusted import safe

STDERR_TAIL_BYTES = 4096
HEARTBEAT_MAX_INTERVAL = 5.0  # a cancellation is noticed within this many seconds
IDLE_MIN_DELAY = 0.05
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def own_worker_id() -> str:
    """`work`'s default worker id: JOBCTL_WORKER_ID, else host:pid of this worker process, so that
    N workers started from one shell differ (`claim` names the calling shell instead)."""
    return os.environ.get("JOBCTL_WORKER_ID") or f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class WorkerOptions:
    worker_id: str = field(default_factory=own_worker_id)
    queues: list[str] | None = None  # None: every queue
    types: list[str] | None = None  # None: every type with a command
    concurrency: int = 1
    max_jobs: int | None = None
    max_time: float | None = None
    stop_when_empty: bool = False
    poll: float = 1.0
    grace: float = 30.0
    lease: float = 60.0
    kill_grace: float = 5.0
    recover_every: float = 30.0
    purge_every: float = 600.0
    log_format: str = "human"
    config_path: str | None = None  # passed to handlers as JOBCTL_CONFIG when set


class Log:
    """One line per event on stderr: human-readable, or one JSON object (`--log-format json`).
    Payloads are never logged."""

    def __init__(self, worker_id: str, fmt: str = "human", stream=None):
        self.worker_id = worker_id
        self.json = fmt == "json"
        self.stream = stream or sys.stderr

    def __call__(self, event: str, message: str = "", job: Job | None = None, **fields) -> None:
        now = time.time()
        if self.json:
            record: dict[str, object] = {"ts": to_rfc3339(int(now * 1000)), "worker": self.worker_id, "event": event}
            if job is not None:
                record.update(job=job.id, type=job.type, queue=job.queue, attempt=job.attempts,
                              max_attempts=job.max_attempts)
            record.update({k: v for k, v in fields.items() if v is not None})
            if message:
                record["message"] = message
            # ASCII only: escape sequences, C1 and bidi controls in names, errors or paths arrive as \uXXXX
            line = json.dumps(record, ensure_ascii=True, separators=(",", ":"))
        else:
            line = f"{to_rfc3339(int(now * 1000))} {self.worker_id} {event}"
            if job is not None:
                line += (f" job {job.id} {safe(job.type)} ({safe(job.queue)}, "
                         f"run {job.attempts}/{job.max_attempts})")
            if message:
                line += ": " + safe(message)
        try:
            self.stream.write(line + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed stderr must not stop the worker


class Retry(Exception):
    """A database call hit a lock or a transient error; try again later."""


@dataclass
class Running:
    """One handler process and the claim it works for."""

    job: Job
    proc: subprocess.Popen
    out: IO[bytes]
    err: IO[bytes]
    started: float
    deadline: float
    next_heartbeat: float
    stop_reason: str | None = None  # timeout | cancel | shutdown | lost
    kill_at: float | None = None
    killed: bool = False


@dataclass
class Outcome:
    """A finished handler's result, waiting to be written (kept while the database is busy)."""

    run: Running
    kind: str  # complete | fail | bury | cancel | release
    returncode: int
    duration: float
    result: object = None
    error: str | None = None
    details: dict | None = None
    next_try: float = 0.0


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


class Worker:
    def __init__(self, queue, settings: Settings, options: WorkerOptions, log: Log | None = None):
        self.q = queue
        self.settings = settings
        self.o = options
        self.log = log or Log(options.worker_id, options.log_format)
        self.types = handler_types(settings, options.types)
        self.running: list[Running] = []
        self.unrecorded: list[Outcome] = []
        self.claimed = 0
        self.signals = 0
        self.signals_seen = 0
        self.last_signal = signal.SIGTERM
        self.stopping = False
        self.stop_at: float | None = None  # when running handlers are stopped (grace over)
        self.empty = False
        self.idle_delay = IDLE_MIN_DELAY
        self.next_claim = 0.0
        self.db_delay = 0.0
        self.db_busy_logged = False
        self.heartbeat_every = max(min(options.lease / 3, HEARTBEAT_MAX_INTERVAL), 0.05)
        self.registry = handlers.Registry(queue.engine.path, warn=lambda m: self.log("registry", m))
        env = dict(os.environ)
        env["JOBCTL_DB"] = os.path.abspath(queue.engine.path)
        if options.config_path:
            env["JOBCTL_CONFIG"] = os.path.abspath(options.config_path)
        self.env = env

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> int:
        """Work until a limit or a signal stops the worker; return the exit code (0)."""
        started = time.monotonic()
        self.max_time_at = started + self.o.max_time if self.o.max_time is not None else None
        self.next_recover = started
        self.next_purge = started
        wake_r, old = self._install_signals()
        queues = ", ".join(self.o.queues) if self.o.queues else "all"
        self.log("started", f"pid {os.getpid()}, types {', '.join(self.types)}; queues {queues}; "
                            f"concurrency {self.o.concurrency}")
        try:
            while True:
                now = time.monotonic()
                self._check_stop(now)
                self._reap()
                self._retry_unrecorded(now)
                self._supervise(time.monotonic())
                self._heartbeats(time.monotonic())
                self._housekeeping(time.monotonic())
                self._claim(time.monotonic())
                if not self.running and not self.unrecorded and self._done():
                    break
                self._wait(wake_r, self._next_deadline(time.monotonic()))
        finally:
            self._abandon()
            self._restore_signals(old)
        self.log("stopped", f"{self.claimed} job(s) started")
        return 0

    def _done(self) -> bool:
        if self.stopping:
            return True
        if self.o.max_jobs is not None and self.claimed >= self.o.max_jobs:
            return True
        return self.o.stop_when_empty and self.empty

    def _may_claim(self) -> bool:
        return (not self.stopping and (self.o.max_jobs is None or self.claimed < self.o.max_jobs)
                and len(self.running) < self.o.concurrency and not self.unrecorded)

    # -- signals ---------------------------------------------------------------------------

    def _install_signals(self):
        def on_stop(signum, frame):
            self.signals += 1  # only a flag: the loop acts on it
            self.last_signal = signum

        old = {s: signal.getsignal(s) for s in (*STOP_SIGNALS, signal.SIGCHLD)}
        try:
            r, w = os.pipe()
            os.set_blocking(r, False)
            os.set_blocking(w, False)
            old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except ValueError:  # not the main thread: fall back to short sleeps
            return None, None
        for s in STOP_SIGNALS:
            signal.signal(s, on_stop)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # so that it wakes the pipe
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

    def _wait(self, wake_r, timeout: float) -> None:
        timeout = max(0.0, min(timeout, 60.0))
        if wake_r is None:
            time.sleep(min(timeout, 0.05))
            return
        if timeout > 0:
            select.select([wake_r], [], [], timeout)
        try:
            while os.read(wake_r, 512):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def _check_stop(self, now: float) -> None:
        if self.signals > self.signals_seen:
            self.signals_seen = self.signals
            name = handlers.signal_name(self.last_signal)
            if self.signals_seen == 1:
                self._begin_stop(now, self.o.grace, f"{name} received")
            elif self.signals_seen == 2:
                self._begin_stop(now, 0, f"second signal ({name})")
            else:
                for r in self.running:
                    self._kill(r, signal.SIGKILL)
        if self.max_time_at is not None and now >= self.max_time_at and not self.stopping:
            self._begin_stop(now, self.o.grace, f"--max-time {format_duration(self.o.max_time)} reached")

    def _begin_stop(self, now: float, grace: float, why: str) -> None:
        first = not self.stopping
        self.stopping = True
        at = now + grace
        if self.stop_at is not None and self.stop_at <= at:
            return
        self.stop_at = at
        n = len(self.running)
        if not n:
            self.log("stopping", f"{why}; claiming nothing more")
        elif first and grace > 0:
            self.log("stopping", f"{why}; claiming nothing more; waiting up to {format_duration(grace)} for "
                                 f"{n} running job(s), then stopping and releasing them")
        else:
            self.log("stopping", f"{why}; stopping {n} running job(s) now and releasing them")

    # -- handlers --------------------------------------------------------------------------

    def _start(self, job: Job) -> None:
        self.claimed += 1
        self.empty = False
        self.idle_delay = IDLE_MIN_DELAY
        tc = self.settings.types.get(job.type)
        now = time.monotonic()
        env = dict(self.env)
        env.update(JOBCTL_JOB_ID=str(job.id), JOBCTL_JOB_TYPE=job.type, JOBCTL_QUEUE=job.queue,
                   JOBCTL_ATTEMPT=str(job.attempts), JOBCTL_MAX_ATTEMPTS=str(job.max_attempts),
                   JOBCTL_TOKEN=job.token or "")
        stdin = None
        out = tempfile.TemporaryFile()
        err = tempfile.TemporaryFile()
        try:
            stdin = handlers.stdin_for(job.payload.encode("utf-8"))  # exactly as stored; never on a command line
            self._stop_orphans(job)
            before = handlers.boot_ticks()
            # (no command for the type: the AttributeError is caught below)
            proc = subprocess.Popen(tc.command, stdin=stdin, stdout=out, stderr=err, env=env,  # type: ignore[union-attr,arg-type]
                                    start_new_session=True, close_fds=True, shell=False)
            self.registry.record(job.id, job.token, self.o.worker_id, proc.pid, before, handlers.boot_ticks())
        except (OSError, ValueError, AttributeError) as e:
            out.close()
            err.close()
            reason = getattr(e, "strerror", None) or str(e)
            cmd = tc.command[0] if tc and tc.command else job.type
            self.log("start", "", job)
            dummy = Running(job, None, None, None, now, now, now)  # type: ignore[arg-type]  # never started
            self._record(Outcome(dummy, "fail", -1, 0.0, error=f"cannot run {cmd}: {reason}",
                                 details={"command": list(tc.command) if tc and tc.command else None}))
            return
        finally:
            if stdin is not None:
                stdin.close()
        self.running.append(Running(job, proc, out, err, now, now + job.timeout_ms / 1000,
                                    now + self.heartbeat_every))
        self.log("start", "", job)

    def _stop_orphans(self, job: Job) -> None:
        """Before running a job: stop what an earlier run of it left running on this host (its
        worker was killed), so that two runs never overlap."""
        pids, worker = self.registry.strays(job.id, job.token)
        if pids:
            self.log("orphan", f"a handler of an earlier run (worker {safe(worker)}, pid(s) "
                               f"{', '.join(map(str, sorted(pids)))}) is still running on this host; stopping it "
                               "before this run", job)
            handlers.stop_processes(pids, self.o.kill_grace)
        self.registry.forget(job.id)

    def _signal_group(self, r: Running, sig) -> None:
        try:
            os.killpg(r.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _stop(self, r: Running, reason: str, now: float) -> None:
        """SIGTERM to the handler's whole process group; SIGKILL after kill_grace."""
        if r.stop_reason is None:
            r.stop_reason = reason
        if r.kill_at is None:
            self._signal_group(r, signal.SIGTERM)
            r.kill_at = now + self.o.kill_grace

    def _kill(self, r: Running, sig=signal.SIGKILL) -> None:
        if r.stop_reason is None:
            r.stop_reason = "shutdown"
        self._signal_group(r, sig)
        r.killed = True

    def _exited(self, r: Running) -> bool:
        try:
            info = os.waitid(os.P_PID, r.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    def _reap(self) -> None:
        outcomes = []
        for r in list(self.running):
            if not self._exited(r):
                continue
            # The leader is a zombie: its group id is still ours. Kill what it left behind.
            self._signal_group(r, signal.SIGKILL)
            rc = r.proc.wait()
            self.registry.forget(r.job.id)
            self.running.remove(r)
            o = self._finish(r, rc)
            if o is not None:
                outcomes.append(o)
        completed = [o for o in outcomes if o.kind == "complete"]
        if len(completed) > 1 and self._record_completions(completed):
            outcomes = [o for o in outcomes if o.kind != "complete"]
        for o in outcomes:
            self._record(o)

    def _finish(self, r: Running, rc: int) -> Outcome | None:
        duration = time.monotonic() - r.started
        tail = handlers.tail_text(r.err, STDERR_TAIL_BYTES)
        out = r.out
        r.err.close()
        details: dict[str, object] = {"exit_code": rc} if rc >= 0 else {"exit_code": None, "signal": handlers.signal_name(-rc)}
        details["duration"] = round(duration, 3)
        if tail:
            details["stderr_tail"] = tail
        last_err = next((line.strip() for line in reversed(tail.splitlines()) if line.strip()), "")
        how = handlers.describe_exit(rc)
        reason = r.stop_reason
        if reason == "lost":
            out.close()
            return None
        if reason == "shutdown":
            outcome = Outcome(r, "release", rc, duration)
        elif reason == "cancel":
            outcome = Outcome(r, "cancel", rc, duration)
        elif reason == "timeout":
            outcome = Outcome(r, "fail", rc, duration, details=details,
                              error=f"timed out after {format_duration(r.job.timeout_ms / 1000)}")
        elif rc == 0:
            outcome = Outcome(r, "complete", rc, duration,
                              result=handlers.result_line(out, self.settings.max_payload_bytes))
        else:
            tc = self.settings.types.get(r.job.type)
            bury = bool(tc and rc in tc.bury_exit_codes)
            outcome = Outcome(r, "bury" if bury else "fail", rc, duration, details=details,
                              error=f"{how}: {last_err}" if last_err else how)
        out.close()
        return outcome

    # -- writing outcomes ------------------------------------------------------------------

    def _record_completions(self, done: list[Outcome]) -> bool:
        """Several handlers finished at once (--concurrency > 1): complete them all and claim as
        many next jobs in one transaction, one commit instead of one per job. False when one of
        the claims is no longer ours: the caller then writes them one by one, each logged."""
        want = 0
        if self._may_claim():
            want = self.o.concurrency - len(self.running)
            if self.o.max_jobs is not None:
                want = min(want, self.o.max_jobs - self.claimed)
        try:
            _, claimed = self._db(self.q.complete_many_and_claim,
                                  [(o.run.job.id, o.run.job.token, o.result) for o in done],
                                  claim=max(want, 0), actor=self.o.worker_id, **self._claim_options())
        except Retry:
            for o in done:
                o.next_try = time.monotonic() + self.db_delay
                if o not in self.unrecorded:
                    self.unrecorded.append(o)
            return True
        except (InvalidState, NoSuchJob):
            return False
        for o in done:
            self.log("done", f"in {format_duration(o.duration)}", o.run.job, duration=round(o.duration, 3))
        now = time.monotonic()
        for job in claimed:
            self._claimed(job, now)
        if len(claimed) < want:
            self._claimed(None, now)
        return True

    def _record(self, o: Outcome) -> None:
        job, token, actor = o.run.job, o.run.job.token, self.o.worker_id
        dur = format_duration(o.duration)
        how = handlers.describe_exit(o.returncode)
        try:
            if o.kind == "complete":
                claim_next = self._may_claim()
                if claim_next:
                    done, nxt = self._db(self.q.complete_and_claim, job.id, token=token, result=o.result,
                                         actor=actor, **self._claim_options())
                else:
                    done, nxt = self._db(self.q.complete, job.id, token=token, result=o.result, actor=actor), None
                self.log("done", f"in {dur}", job, duration=round(o.duration, 3))
                if claim_next:
                    self._claimed(nxt, time.monotonic())
            elif o.kind in ("fail", "bury"):
                done = self._db(self.q.fail, job.id, token=token, error=o.error, bury=o.kind == "bury",
                                actor=actor, details=o.details)
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
                done = self._db(self.q.cancel, job.id, token=token, actor=actor, reason="stopped by the worker")
                self.log("cancelled", f"handler stopped after {dur} ({how})", job)
            elif o.kind == "release":
                done = self._db(self.q.release, job.id, token=token, actor=actor)
                if done.status == "cancelled":
                    self.log("cancelled", f"handler stopped ({how}); cancellation completed", job)
                else:
                    self.log("released", f"handler stopped after {dur} ({how}); back to pending, "
                                         "this run does not count", job)
        except Retry:
            o.next_try = time.monotonic() + self.db_delay
            if o not in self.unrecorded:
                self.unrecorded.append(o)
            return
        except (InvalidState, NoSuchJob) as e:
            # The claim is no longer ours (recovered after a long database outage, or deleted).
            self.log("lost", f"result not recorded: {e}", job)
        if o in self.unrecorded:
            self.unrecorded.remove(o)

    def _retry_unrecorded(self, now: float) -> None:
        for o in list(self.unrecorded):
            if now >= o.next_try:
                self._record(o)

    # -- supervision -----------------------------------------------------------------------

    def _supervise(self, now: float) -> None:
        for r in self.running:
            if r.stop_reason is None and now >= r.deadline:
                self._stop(r, "timeout", now)
            if self.stop_at is not None and now >= self.stop_at and r.stop_reason is None:
                self._stop(r, "shutdown", now)
            if r.kill_at is not None and now >= r.kill_at and not r.killed:
                self._kill(r)

    def _heartbeats(self, now: float) -> None:
        for r in self.running:
            if now < r.next_heartbeat or r.stop_reason == "lost":
                continue
            r.next_heartbeat = now + self.heartbeat_every
            try:
                self._db(self.q.heartbeat, r.job.id, token=r.job.token, actor=self.o.worker_id)
            except Retry:
                r.next_heartbeat = now + min(self.heartbeat_every, max(self.db_delay, 0.1))
            except CancelRequested:
                if r.stop_reason is None:
                    self.log("cancel", "cancellation requested; stopping the handler", r.job)
                    self._stop(r, "cancel", now)
                elif r.stop_reason == "shutdown":
                    r.stop_reason = "cancel"
            except (InvalidState, NoSuchJob) as e:
                self.log("lost", f"the claim is no longer ours, stopping the handler: {e}", r.job)
                r.stop_reason = "lost"
                self._stop(r, "lost", now)

    def _housekeeping(self, now: float) -> None:
        # Not while an outcome of ours waits to be written: its lease may have run out during a
        # database outage, and recovering our own finished job would run it again.
        if now >= self.next_recover and not self.unrecorded:
            self.next_recover = now + self.o.recover_every
            try:
                for job, action in self._db(self.q.recover, actor=self.o.worker_id):
                    self.log("recovered", f"{action}: worker {job.worker} lost its lease", job)
            except Retry:
                self.next_recover = now + min(self.o.recover_every, 5.0)
        if now >= self.next_purge:
            self.next_purge = now + self.o.purge_every
            try:
                counts = self._db(self.q.purge)
                if sum(counts.values()):
                    detail = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
                    self.log("purged", f"{detail} (retention)", deleted=counts)
            except Retry:
                self.next_purge = now + min(self.o.purge_every, 5.0)

    # -- claiming --------------------------------------------------------------------------

    def _claim_options(self) -> dict:
        return dict(worker=self.o.worker_id, queues=self.o.queues, types=self.types, lease=self.o.lease)

    def _claim(self, now: float) -> None:
        while self._may_claim() and now >= self.next_claim:
            try:
                job = self._db(self.q.claim, **self._claim_options())
            except Retry:
                self.next_claim = now + self.db_delay
                self.empty = False
                return
            self._claimed(job, now)
            if job is None:
                return
            now = time.monotonic()

    def _claimed(self, job: Job | None, now: float) -> None:
        if job is None:
            self.empty = True
            self.next_claim = now + self.idle_delay
            self.idle_delay = min(self.idle_delay * 2, self.o.poll)
            return
        self.next_claim = now
        self._start(job)

    def _next_deadline(self, now: float) -> float:
        times = [now + 60.0]
        for r in self.running:
            times.append(r.next_heartbeat)
            if r.stop_reason is None:
                times.append(r.deadline)
            if r.kill_at is not None and not r.killed:
                times.append(r.kill_at)
        if self.stop_at is not None and self.running:
            times.append(self.stop_at)
        if self.max_time_at is not None and not self.stopping:
            times.append(self.max_time_at)
        if self._may_claim():
            times.append(self.next_claim)
        times += [o.next_try for o in self.unrecorded]
        times.append(self.next_purge)
        if not self.unrecorded:  # recovery waits while an outcome of ours does: its time may be past
            times.append(self.next_recover)
        return min(times) - now

    # -- the database ----------------------------------------------------------------------

    def _db(self, fn, *args, **kwargs):
        """Call the queue; a lock or a transient error becomes Retry (logged once), with a
        jittered, growing delay. An unusable database (exit 8) propagates and stops the worker."""
        try:
            result = fn(*args, **kwargs)
        except (DatabaseBusy, DiskFull) as e:
            # A full disk is waited out like a lock (space is usually freed soon): dying would drop
            # the finished handlers' results, and their jobs would run again. Other unusable-file
            # errors (exit 8) propagate and stop the worker.
            full = isinstance(e, DiskFull)
            self.db_delay = min(max(self.db_delay * 2, 0.1), 5.0) * random.uniform(0.5, 1.5)
            if not self.db_busy_logged:
                self.db_busy_logged = True
                why = ("locked by another process" if isinstance(e, DatabaseBusy) else
                       "on a full disk" if full else f"error: {e}")
                self.log("db-busy", f"the database is {why}; waiting and retrying (logged once)")
            raise Retry() from None
        if self.db_busy_logged:
            self.db_busy_logged = False
            self.log("db-ok", "the database answers again")
            for o in self.unrecorded:
                o.next_try = 0.0  # write what waited first
        self.db_delay = 0.0
        return result

    def _abandon(self) -> None:
        """Leaving abnormally (an unusable database, a bug): stop every handler and try to hand its
        job back, so that nothing is left running; what cannot be written is recovered later."""
        for r in list(self.running):
            self._kill(r)
            try:
                r.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            self.running.remove(r)
            for f in (r.out, r.err):
                f.close()
            if r.stop_reason != "lost":
                self.unrecorded.append(Outcome(r, "release", r.proc.returncode or -9, time.monotonic() - r.started))
        for o in list(self.unrecorded):
            try:
                self._record(o)
            except JobctlError:
                pass
        for o in self.unrecorded:
            self.log("unrecorded", "could not write this job's outcome; it is recovered when its lease expires",
                     o.run.job)
