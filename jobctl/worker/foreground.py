"""`jobctl run`: one handler in the foreground, started and stopped exactly as a worker would,
with no job in the database (the database is not even opened).

It reuses the worker's launcher (supervisor.PosixLauncher: posix_spawn in a session of its own,
the payload on stdin from a filled pipe or a scratch file) and its rules: the type's timeout, then
SIGTERM to the handler's group, SIGKILL after the kill grace; and, when the handler exits, SIGKILL
to whatever it left behind in its group. Unlike a worker, the handler's stdout and stderr are this
process's own, so they pass straight through.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from jobctl import engines, handlers
from jobctl.errors import CannotRun, HandlerTimedOut
from jobctl.worker.passfile import HandlerDb
from jobctl.worker.supervisor import COMMAND_ERRORS, CgroupMoveError, PosixLauncher, _stdin_fd, close_inherited_fds

FORWARDED = (signal.SIGINT, signal.SIGTERM)


def handler_env(settings, type: str, queue: str, max_attempts: int, db: str, config_path: str | None) -> dict:
    """The worker's environment for a handler, as for a first run of a job that has no id or claim."""
    env = dict(os.environ)
    env["JOBCTL_DB"] = os.path.abspath(engines.sqlite_path(db)) if engines.scheme_of(db) in (None, "sqlite") else db
    if config_path:
        env["JOBCTL_CONFIG"] = os.path.abspath(config_path)
    env["JOBCTL_JOB_ID"] = ""
    env["JOBCTL_JOB_TYPE"] = type
    env["JOBCTL_QUEUE"] = queue
    env["JOBCTL_ATTEMPT"] = "1"
    env["JOBCTL_MAX_ATTEMPTS"] = str(max_attempts)
    env["JOBCTL_TOKEN"] = ""
    return env


def run_foreground(settings, type: str, payload_text: str | bytes | None, *, db: str, config_path: str | None,
                   launcher=None, clock=time.monotonic) -> int:
    """Run the handler of `type` to its end; its exit code (128+N when killed by signal N).
    Raises InvalidInput for a bad payload or a type without a runnable command (before anything
    starts), CannotRun (126/127) when the spawn itself fails, HandlerTimedOut (124) after a timeout."""
    from jobctl import jobspec
    from jobctl.worker.loop import check_commands, handler_types

    job = jobspec.prepare(settings, type, payload_text=payload_text)  # the payload as enqueue takes it
    handler_types(settings, [type])
    check_commands(settings, [type])
    tc = settings.type_config(type)
    command = list(tc.command)
    handler_db = HandlerDb(db)  # the URL without its password, as a worker gives it (worker/passfile)
    env = handler_env(settings, type, job.queue, job.max_attempts, handler_db.url, config_path)
    memory_limit = settings.memory_limit_of(type)  # applied by the launcher, as the worker's does
    real = launcher is None
    launcher = launcher or PosixLauncher()
    kill_grace = settings.worker.kill_grace
    close_inherited_fds()
    cgroups = slot = None
    oom_kills = 0
    if memory_limit is not None and real:  # the handler's whole tree capped where the system allows it
        from jobctl.worker.cgroup import MemoryCgroups

        cgroups, _ = MemoryCgroups.setup()

    state: dict = {"proc": None, "pending": []}

    def forward(signum, frame):  # SIGINT/SIGTERM to jobctl: the handler's whole group gets it
        if state["proc"] is None:
            state["pending"].append(signum)
        else:
            launcher.signal_group(state["proc"], signum)

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        stdin = _stdin_fd(job.payload.encode("utf-8"))
        try:
            limit: dict = {} if memory_limit is None else {"memory_limit": memory_limit}
            if cgroups is not None and memory_limit is not None:
                try:
                    slot = cgroups.create(memory_limit)
                    limit["cgroup_procs"] = slot.procs_fd
                except OSError:
                    cgroups = None  # the per-process cap, as where there is no cgroup
            proc = launcher.spawn(command, stdin, 1, 2, env, **limit)
        except CgroupMoveError as e:
            raise CannotRun(f"cannot start the handler of {type} in its memory cgroup ({e.strerror})", 126) from None
        except (OSError, ValueError, TypeError) as e:
            reason = getattr(e, "strerror", None) or str(e)
            code = 127 if getattr(e, "errno", None) == 2 else 126
            where = f" in {settings.config_path}" if settings.config_path else ""
            if isinstance(e, OSError) and e.errno not in COMMAND_ERRORS:
                code = 126
            raise CannotRun(f"cannot run {command[0]}: {reason}; check [types.{type}] command{where}", code) from None
        finally:
            os.close(stdin)
        state["proc"] = proc
        for signum in state["pending"]:
            launcher.signal_group(proc, signum)
        timed_out = _watch(launcher, proc, clock, job.timeout_ms / 1000, kill_grace)
        launcher.signal_group(proc, signal.SIGKILL)  # what the handler left behind in its group
        rc = launcher.reap(proc)
        if slot is not None and cgroups is not None:
            oom_kills = cgroups.oom_kills(slot)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        handler_db.close()
        if slot is not None and cgroups is not None:
            cgroups.remove(slot)  # (what is left in it is killed first)
    if timed_out:
        from jobctl.durations import format_duration

        raise HandlerTimedOut(f"the handler of {type} ran past its timeout of {format_duration(job.timeout_ms / 1000)} "
                              f"and was stopped (SIGTERM to its process group, SIGKILL after {format_duration(kill_grace)})")
    if memory_limit is not None and rc != 0:
        # Only on a failure (a run that succeeds is not told of its limit): the handler's stderr
        # is the terminal's, so jobctl cannot read it, and says the limit whatever the failure.
        from jobctl.durations import format_size

        if oom_kills:
            sys.stderr.write(f"jobctl: the handler of {type} failed ({handlers.describe_exit(rc)}): it hit its memory "
                             f"limit of {format_size(memory_limit)} (the kernel killed {oom_kills} of its processes)\n")
        elif handlers.memory_failure(rc, "", signals=slot is None):
            sys.stderr.write(f"jobctl: the handler of {type} was killed ({handlers.describe_exit(rc)}) while running with "
                             f"a memory limit of {format_size(memory_limit)}: it probably hit the limit\n")
        else:
            sys.stderr.write(f"jobctl: the handler of {type} failed ({handlers.describe_exit(rc)}) under a memory limit "
                             f"of {format_size(memory_limit)}; if it could not allocate memory, raise the type's memory_limit\n")
    return rc if rc >= 0 else 128 - rc


def _watch(launcher, proc, clock, timeout: float, kill_grace: float) -> bool:
    """Wait for the handler to exit, enforcing its timeout; True when it was stopped for it."""
    waiter = _ExitWaiter(proc.pid)
    try:
        deadline = clock() + timeout
        kill_at = None
        timed_out = False
        while not launcher.exited(proc):
            now = clock()
            if not timed_out and now >= deadline:
                timed_out = True
                launcher.signal_group(proc, signal.SIGTERM)
                kill_at = now + kill_grace
            if kill_at is not None and now >= kill_at:
                launcher.signal_group(proc, signal.SIGKILL)
                kill_at = None
            wake = kill_at if timed_out else deadline
            waiter.wait(1.0 if wake is None else max(min(wake - now, 1.0), 0.0))
        return timed_out
    finally:
        waiter.close()


class _ExitWaiter:
    """Sleep until a child exits or a time passes: on its pidfd where the kernel has them, else by ticks."""

    def __init__(self, pid: int):
        self.fd = -1
        try:
            self.fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pass

    def wait(self, seconds: float) -> None:
        if self.fd < 0:
            time.sleep(min(seconds, 0.02))
            return
        import select

        select.select([self.fd], [], [], seconds)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
