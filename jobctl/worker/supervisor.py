"""Handler processes: start one, watch its clock, stop it, reap it.

Handlers run with shell=False in their own session (so their process group is theirs alone and a
Ctrl-C on the worker's terminal does not reach them). The payload is given on stdin from a pipe
filled before the handler starts (a temporary file when it exceeds one pipe page). Its stdout and
stderr are two pipes that the worker reads as data arrives (output.py), non-blocking, whenever it
waits: what it keeps of them is bounded, and a handler that writes faster than the worker reads
only waits on its full pipe. A
handler's exit is first observed with waitid(WNOWAIT): while the leader is an unreaped zombie its
pid (= the group id) cannot be reused, so killing what it left behind in its group cannot hit a
stranger.

Stopping a handler (its timeout, a cancellation, the worker's shutdown) is SIGTERM to the whole
group, then SIGKILL after kill_grace. A process that left the group with setsid() is still found by
the claim's JOBCTL_TOKEN in its environment, and stopped too, so that it cannot overlap the next
run of its job.

A type's memory_limit is applied between fork and exec: the handler moves itself into a memory
cgroup of its own where the worker has them (cgroup.py: the limit then holds for its whole tree,
and what is left in the cgroup when it exits is killed with it), else it caps its address space
(RLIMIT_AS, each process for itself).

Everything that touches the operating system goes through a Launcher, and every time is read from
an injected monotonic clock: the rules here are unit-tested with fake processes and a fake clock,
beside the real-process tests.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from typing import TYPE_CHECKING, Callable

from jobctl import handlers
from jobctl.models import Job, Record
from jobctl.worker.output import RunOutputBuffer

if TYPE_CHECKING:
    from jobctl.worker.cgroup import MemoryCgroups, Slot
    from jobctl.worker.keeper import Keeper

# errno values of a spawn that failed on the worker's side: the job is not to blame.
RESOURCE_ERRORS = {errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.ENOMEM, errno.ENOSPC, errno.EINTR}
PIPE_SIZE = 1024 * 1024  # asked of an output pipe once it was found full (Linux; the default is 64 KiB)
FULL_PIPE = 64 * 1024  # a read this big found the pipe full: the handler writes fast, give it room
READ_CHUNK = 256 * 1024
STDERR_KEEP = 4096  # the end of stderr kept for the error line


def _output_pipe() -> tuple[int, int]:
    """(read end, non-blocking, for the worker; write end for the handler), both close-on-exec.
    Of the default size: most handlers print little; one that fills it gets a bigger one (_grow)."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    return r, w


def _handler_pipes() -> tuple[int, ...]:
    """A handler's three pipes: (stdout read, stdout write, stderr read, stderr write, stdin read,
    stdin write); none of them left open when one cannot be made."""
    made: list[int] = []
    try:
        made.extend(_output_pipe())
        made.extend(_output_pipe())
        made.extend(os.pipe())
    except OSError:
        for fd in made:
            os.close(fd)
        raise
    return tuple(made)


def _grow(fd: int) -> None:
    """Make the pipe of `fd` hold PIPE_SIZE: a handler that writes fast waits less on the worker."""
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_SIZE)
    except OSError:
        pass  # a lower pipe-max-size: the default size works too


COMMAND_ERRORS = {errno.ENOENT, errno.EACCES, errno.ENOEXEC, errno.ENOTDIR, errno.EISDIR, errno.ELOOP,
                  errno.ENAMETOOLONG, errno.ETXTBSY, errno.EPERM}


class CgroupMoveError(OSError):
    """A handler could not move itself into its memory cgroup (the worker's side, not the command's)."""


class SpawnError(Exception):
    """A handler could not be started. `command` is true when the command itself is the problem
    (missing, not executable), false for a resource of the worker (file descriptors, processes)."""

    def __init__(self, reason: str, command: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.command = command


class Proc:
    """A started handler: its pid (= its process group) and, once reaped, its returncode."""

    __slots__ = ("pid", "returncode", "over", "status", "exit_fd")

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None
        self.over = False  # seen exited (a zombie until reaped: it stays so)
        self.status: int | None = None  # its returncode as seen exited, before it is reaped (if known)
        self.exit_fd = -1  # readable once it has exited (its pidfd), while it is not reaped; -1: none

    def forget_exit_fd(self) -> None:
        if self.exit_fd >= 0:
            os.close(self.exit_fd)
            self.exit_fd = -1


_TMP: list[str] = []  # the folder of the scratch files, found once (as tempfile.gettempdir would)


def _scratch_fd() -> int:
    """An unnamed read/write temporary file (O_TMPFILE where the filesystem has it)."""
    flag = getattr(os, "O_TMPFILE", 0)
    if flag:
        if not _TMP:
            _TMP.append(next((os.environ[v] for v in ("TMPDIR", "TEMP", "TMP") if os.environ.get(v)), "/tmp"))
        try:
            return os.open(_TMP[0], os.O_RDWR | flag | os.O_CLOEXEC, 0o600)
        except OSError as e:
            if e.errno in (errno.EMFILE, errno.ENFILE):
                raise
    import tempfile

    fd, name = tempfile.mkstemp()
    os.unlink(name)
    return fd


STDIN_PIPE_MAX = 4096  # a payload this small reaches the handler through a pipe; a larger one, a file


def _feed(w: int, data: bytes) -> None:
    """Write a small payload (at most STDIN_PIPE_MAX) into the empty pipe of a handler's stdin and
    close it: the handler reads it to its end."""
    try:
        view = memoryview(data)
        while view:  # (one write: an empty pipe holds a page; a loop all the same)
            view = view[os.write(w, view):]
    finally:
        os.close(w)


def _stdin_fd(data: bytes, pipe: tuple[int, int] | None = None) -> int:
    """The handler's stdin holding `data`: a pipe (`pipe`, made beforehand, or a new one) already
    filled and closed when the payload fits in one pipe page (any pipe holds that much, so the
    write never blocks), else a temporary file. `pipe` is this function's to close."""
    if len(data) <= STDIN_PIPE_MAX:
        r, w = pipe if pipe is not None else os.pipe()
        try:
            if data:
                os.write(w, data)
        except OSError:
            os.close(r)
            raise
        finally:
            os.close(w)
        return r
    if pipe is not None:
        for end in pipe:
            os.close(end)
    fd = _scratch_fd()
    try:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd


def close_inherited_fds() -> None:
    """Mark every descriptor above stderr close-on-exec, so a handler gets only 0, 1 and 2 (what
    close_fds does, once for the worker's life instead of at each spawn)."""
    try:
        fds = [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        return
    for fd in fds:
        if fd > 2:
            try:
                os.set_inheritable(fd, False)
            except OSError:
                pass


def _signals_to_default() -> tuple[int, ...]:
    """The signals a handler starts with at their default action: every one, but those the worker
    was started with ignored and left so (they stay ignored, as across any exec); SIGPIPE and
    SIGXFSZ, which Python ignores for itself, are reset too. Naming them all also spares time:
    glibc's posix_spawn then resets each with one call in the child instead of looking at it
    first (62 system calls before the exec instead of 120, while the worker waits on it)."""
    own = (signal.SIGPIPE, signal.SIGXFSZ)
    return tuple(s for s in sorted(signal.valid_signals()) if s not in (signal.SIGKILL, signal.SIGSTOP)
                 and (s in own or signal.getsignal(s) != signal.SIG_IGN))


def _pidfds_work() -> bool:
    """Whether this kernel gives pidfds (Linux 5.3 and later)."""
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):
        return False
    return True


class PosixLauncher:
    """The real processes: posix_spawn of a command resolved once on PATH, waitid, killpg."""

    def __init__(self):
        self._paths: dict[str, str] = {}
        self._to_default: tuple[int, ...] | None = None  # (_signals_to_default, at the first start)
        self.exit_fds = _pidfds_work()  # each handler's exit wakes the loop through its pidfd

    def watch(self, proc: Proc) -> None:
        """Give a started handler its exit fd (a pidfd): the loop sleeps on it, not on SIGCHLD.
        None where the kernel has no pidfds (the loop then wakes by SIGCHLD) or no descriptor is
        left (the loop then looks often)."""
        if self.exit_fds:
            try:
                proc.exit_fd = os.pidfd_open(proc.pid)
            except OSError:
                pass

    def resolve(self, program: str, env: dict) -> str | None:
        if os.sep in program:
            return program
        path = self._paths.get(program)
        if path is None:
            path = handlers.which(program, env.get("PATH", os.defpath))
            if path is None:
                return None
            self._paths[program] = path
        return path

    def spawn(self, argv: list[str], stdin: int, stdout: int, stderr: int, env: dict,
              memory_limit: int | None = None, cgroup_procs: int | None = None) -> Proc:
        """Start argv in a session of its own with fds 0, 1 and 2 from stdin, stdout and stderr;
        memory_limit: its address space in bytes (RLIMIT_AS), set between fork and exec;
        cgroup_procs: the `cgroup.procs` of its memory cgroup (open), which it moves itself into
        between fork and exec instead (its whole tree is capped there: no RLIMIT_AS then)."""
        path = self.resolve(argv[0], env)
        if path is None:
            raise OSError(errno.ENOENT, "not found on PATH", argv[0])
        if memory_limit is not None or cgroup_procs is not None:
            return self._fork_exec(path, argv, env, (stdin, stdout, stderr),
                                   None if cgroup_procs is not None else memory_limit, cgroup_procs)
        if self._to_default is None:
            self._to_default = _signals_to_default()
        try:
            pid = os.posix_spawn(
                path, argv, env,
                file_actions=[(os.POSIX_SPAWN_DUP2, stdin, 0), (os.POSIX_SPAWN_DUP2, stdout, 1),
                              (os.POSIX_SPAWN_DUP2, stderr, 2)],
                setsid=True, setsigmask=(), setsigdef=self._to_default,
            )
        except OSError:
            self._paths.pop(argv[0], None)  # looked up again next time (reinstalled elsewhere?)
            raise
        return Proc(pid)

    @staticmethod
    def _fork_exec(path: str, argv: list[str], env: dict, fds: tuple[int, int, int], memory_limit: int | None,
                   cgroup_procs: int | None = None) -> Proc:
        """posix_spawn cannot set a resource limit or a cgroup in the child: fork, limit (or move
        into the cgroup), exec. An exec that fails is reported through a close-on-exec pipe, so
        the caller sees the OSError as with posix_spawn (CgroupMoveError for the move)."""
        import resource

        r, w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:  # the child: only async-signal-safe work, then exec or _exit
            step = b""
            try:
                os.close(r)
                os.setsid()
                if cgroup_procs is not None:  # first: all it starts, from here on, is in the cgroup
                    step = b"c"
                    os.write(cgroup_procs, str(os.getpid()).encode())
                    step = b""
                for target, fd in enumerate(fds):
                    os.dup2(fd, target)
                signal.pthread_sigmask(signal.SIG_SETMASK, ())
                for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
                    signal.signal(sig, signal.SIG_DFL)
                if memory_limit is not None:
                    resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
                os.execve(path, argv, env)
            except OSError as e:
                os.write(w, step + str(e.errno or 0).encode())
            finally:
                os._exit(127)
        os.close(w)
        try:
            failed = os.read(r, 16)
        finally:
            os.close(r)
        if failed:
            os.waitpid(pid, 0)
            if failed.startswith(b"c"):
                code = int(failed[1:])
                raise CgroupMoveError(code, os.strerror(code))
            raise OSError(int(failed), os.strerror(int(failed)), argv[0])
        return Proc(pid)

    def exited(self, proc: Proc) -> bool:
        if proc.over:  # asked again by the reap right after the registry's look: no second waitid
            return True
        try:
            seen = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            proc.over = True
            return True
        if seen is not None:
            proc.over = True
            proc.status = seen.si_status if seen.si_code == os.CLD_EXITED else -seen.si_status
        return proc.over

    def reap(self, proc: Proc, timeout: float | None = None) -> int | None:
        """The returncode (-N for a signal); with a timeout, None if it has not exited by then."""
        if proc.returncode is not None:
            return proc.returncode
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                pid, status = os.waitpid(proc.pid, 0 if deadline is None else os.WNOHANG)
            except ChildProcessError:
                proc.returncode = -signal.SIGKILL
                return proc.returncode
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                return proc.returncode
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(0.01)

    def signal_group(self, proc: Proc, sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def token_holders(self, token: str) -> set[int]:
        """Processes of this user that carry the claim's token (escaped from the group or not)."""
        return handlers.token_holders(token)

    def signal_pids(self, pids: set[int], sig: int) -> None:
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass

    def stop_pids(self, pids: set[int], grace: float) -> None:
        """SIGTERM, then SIGKILL to what is left after `grace` (blocks up to twice `grace`)."""
        handlers.stop_processes(pids, grace)


class Running(Record):
    """One handler process and the claim it works for."""

    __slots__ = ("job", "proc", "out", "err", "started", "deadline", "next_heartbeat", "stop_reason", "kill_at",
                 "killed", "spawn_ticks", "registered", "output", "grown", "next_step", "cgroup", "oom_kills")

    def __init__(self, job: Job, proc: Proc,
                 out: int,  # read end of its stdout pipe (-1 once at its end)
                 err: int,  # read end of its stderr pipe
                 started: float, deadline: float, next_heartbeat: float,
                 stop_reason: str | None = None,  # timeout | cancel | shutdown | lost
                 kill_at: float | None = None, killed: bool = False,
                 spawn_ticks: tuple = (None, None),  # its /proc start time lies in this range (for the registry)
                 registered: bool = False,
                 output: RunOutputBuffer | None = None):  # what is kept of its output (None: a run never started)
        self.job = job
        self.proc = proc
        self.out = out
        self.err = err
        self.started = started
        self.deadline = deadline
        self.next_heartbeat = next_heartbeat
        self.stop_reason = stop_reason
        self.kill_at = kill_at
        self.killed = killed
        self.spawn_ticks = spawn_ticks
        self.registered = registered
        self.output = output
        self.grown = False  # its pipes were made bigger (_grow)
        self.next_step: Callable[[], tuple] | None = None  # its completion and the next claim, prepared (the loop's)
        self.cgroup: Slot | None = None  # its memory cgroup, until removed
        self.oom_kills: int | None = None  # under a memory cgroup: its processes the OOM killer killed

    def fds(self) -> list[int]:
        return [fd for fd in (self.out, self.err) if fd >= 0]

    def pump(self, fd: int, budget: int = 4 * READ_CHUNK) -> None:
        """Read what the pipe `fd` holds now (up to `budget` bytes) into the output."""
        stream = 1 if fd == self.out else 2
        while budget > 0:
            try:
                data = os.read(fd, READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:  # every writer closed it
                os.close(fd)
                if stream == 1:
                    self.out = -1
                else:
                    self.err = -1
                return
            budget -= len(data)
            if len(data) >= FULL_PIPE and not self.grown:
                self.grown = True
                for end in self.fds():
                    _grow(end)
            if self.output is not None:
                self.output.add(data, stream)

    def drain(self) -> None:
        """Read everything the pipes hold (the handler has exited: what it wrote is there)."""
        for fd in self.fds():
            self.pump(fd, 1 << 62)

    def close(self) -> None:
        for fd in (self.out, self.err):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.out = self.err = -1


class Supervisor:
    """The running handlers of one worker and the rules of their lives: timeout, grace, kill."""

    def __init__(self, launcher, clock: Callable[[], float], *, kill_grace: float, registry=None,
                 worker_id: str = "", log=None):
        self.launcher = launcher
        self.clock = clock
        self.kill_grace = kill_grace
        self.registry = registry
        self.worker_id = worker_id
        self.log = log
        self.running: list[Running] = []
        self.unregistered: list[Running] = []  # started, not yet in the orphan registry
        self.keeper: Keeper | None = None  # kills the handlers if this worker dies (set by the loop)
        self.cgroups: MemoryCgroups | None = None  # a memory_limit caps a handler's tree there (set by the loop)
        self._spare: tuple[int, ...] | None = None  # the next handler's pipes, made beforehand (prepare)
        self._exited: list[Proc] = []  # exited and off the running list, not yet reaped (finish_reaping)

    # -- starting ------------------------------------------------------------------------------

    def start(self, job: Job, command: list[str], env: dict, heartbeat_every: float,
              new_output: Callable[[], RunOutputBuffer] | None = None, memory_limit: int | None = None) -> Running:
        """Start a handler for a claimed job; SpawnError when it cannot be started. `new_output`
        makes what keeps its output (by default, only the ends of stdout and stderr), once the
        handler runs: nothing reads its pipes before."""
        writers: list[int] = []
        readers: list[int] = []
        stdin = feed = -1
        slot = None
        try:
            payload = job.payload.encode("utf-8")  # exactly as stored; never on a command line
            pipes, self._spare = self._spare or _handler_pipes(), None
            readers, writers = [pipes[0], pipes[2]], [pipes[1], pipes[3]]
            if len(payload) <= STDIN_PIPE_MAX:
                # Written once the handler runs, off the path from the last exit to this start: the
                # pipe is empty and holds that much, so the write never waits, and its read end
                # stays open here until then, so it never meets a closed pipe.
                stdin, feed = pipes[4], pipes[5]
            else:
                stdin = _stdin_fd(payload, (pipes[4], pipes[5]))
            self._stop_orphans(job)
            before = handlers.boot_ticks()
            # a launcher of tests' fakes need not know of memory limits
            limit: dict = {} if memory_limit is None else {"memory_limit": memory_limit}
            if memory_limit is not None and self.cgroups is not None:
                try:
                    slot = self.cgroups.create(memory_limit)
                except OSError as e:
                    raise CgroupMoveError(e.errno, f"cannot make its memory cgroup: {e.strerror or e}") from None
                limit["cgroup_procs"] = slot.procs_fd
            proc = self.launcher.spawn(command, stdin, writers[0], writers[1], env, **limit)
        except (OSError, ValueError, TypeError) as e:
            for fd in writers + readers + [fd for fd in (stdin, feed) if fd >= 0]:
                os.close(fd)
            if slot is not None and self.cgroups is not None:
                self.cgroups.remove(slot)
            if isinstance(e, CgroupMoveError):
                raise SpawnError(f"cannot start a handler in its memory cgroup ({e.strerror})") from None
            if not isinstance(e, OSError):  # an argument with a NUL byte, say
                raise SpawnError(f"cannot run {command[0]}: {e}", command=True) from None
            reason = e.strerror or str(e)
            if e.errno in COMMAND_ERRORS:
                raise SpawnError(f"cannot run {command[0]}: {reason}", command=True) from None
            raise SpawnError(f"cannot start a handler ({reason})") from None
        if feed >= 0:
            try:
                _feed(feed, payload)
            except OSError as e:  # (not seen: an empty pipe takes a page at once) never half a payload
                self._kill_and_reap(proc)
                for fd in (stdin, *writers, *readers):
                    os.close(fd)
                if slot is not None and self.cgroups is not None:
                    self.cgroups.remove(slot)
                raise SpawnError(f"cannot give a handler its payload ({e.strerror or e})") from None
        for fd in (stdin, *writers):  # the handler has its own copies
            os.close(fd)
        self.launcher.watch(proc)
        now = self.clock()
        r = Running(job, proc, readers[0], readers[1], now, now + job.timeout_ms / 1000, now + heartbeat_every,
                    output=new_output() if new_output is not None else RunOutputBuffer(0, 0, 1024 * 1024 + 4096, STDERR_KEEP))
        if slot is not None:
            slot.close_fd()  # the handler moved itself in before its exec
            r.cgroup = slot
            r.oom_kills = 0
        self.running.append(r)
        r.spawn_ticks = (before, handlers.boot_ticks())
        if self.keeper is not None:
            self.keeper.add(proc.pid, *r.spawn_ticks, job.token)
        if self.registry is not None:
            self.unregistered.append(r)
        return r

    def prepare(self) -> None:
        """Make the next handler's pipes now, while handlers run, rather than between one
        handler's exit and the next one's start: that path is ~18 µs shorter. (It is not free
        work: where the handler runs on the worker's own core, as it often does on two cores, the
        rate stays the same.) Close-on-exec like any: no handler inherits them."""
        if self._spare is None:
            try:
                self._spare = _handler_pipes()
            except OSError:  # out of descriptors: start() makes them (and says so) when it needs them
                pass

    def register(self) -> None:
        """Record the handlers started since the last call that are still running in the orphan
        registry. The loop calls it after a first, short wait: a handler that is already over
        needs no record (a file created and deleted per job is most of a short job's cost)."""
        pending, self.unregistered = self.unregistered, []
        for r in pending:
            if r in self.running and not self.launcher.exited(r.proc):
                self.registry.record(r.job.id, r.job.token, self.worker_id, r.proc.pid, *r.spawn_ticks)
                r.registered = True

    def release_files(self, r: Running) -> None:
        """The run's output has been read: its pipes are closed (a process that escaped the
        handler's group and still writes to them gets EPIPE, never a later run's log)."""
        r.close()

    def fds(self) -> dict[int, Running]:
        """The output pipes to watch: fd -> its run."""
        return {fd: r for r in self.running for fd in r.fds()}

    def exit_fds(self) -> set[int] | None:
        """The fds that turn readable when a running handler exits: none where the launcher gives
        none (SIGCHLD wakes the loop then); None when a handler has none (the loop must look often)."""
        if not self.launcher.exit_fds:
            return set()
        fds = {r.proc.exit_fd for r in self.running}
        return None if -1 in fds else fds

    def close(self) -> None:
        self.finish_reaping()
        for r in self.running:
            r.close()
            r.proc.forget_exit_fd()
        if self.cgroups is not None:
            self.cgroups.sweep()
        spare, self._spare = self._spare, None
        for fd in spare or ():
            os.close(fd)

    def _stop_orphans(self, job: Job) -> None:
        """Before running a job: stop what an earlier run of it left running on this host (its
        worker was killed), so that two runs never overlap."""
        if self.registry is None:
            return
        pids, worker = self.registry.strays(job.id, job.token)
        if pids:
            if self.log is not None:
                self.log("orphan", f"a handler of an earlier run (worker {worker}, pid(s) "
                                   f"{', '.join(map(str, sorted(pids)))}) is still running on this host; stopping "
                                   "it before this run", job)
            self.launcher.stop_pids(pids, self.kill_grace)
            self.registry.forget(job.id)

    # -- stopping ------------------------------------------------------------------------------

    def stop(self, r: Running, reason: str, now: float) -> None:
        """SIGTERM to the handler's whole process group (and what escaped it); SIGKILL after kill_grace."""
        if r.stop_reason is None:
            r.stop_reason = reason
        if r.kill_at is None:
            self.launcher.signal_group(r.proc, signal.SIGTERM)
            self._signal_escaped(r, signal.SIGTERM)
            r.kill_at = now + self.kill_grace

    def kill(self, r: Running, sig: int = signal.SIGKILL) -> None:
        if r.stop_reason is None:
            r.stop_reason = "shutdown"
        self.launcher.signal_group(r.proc, sig)
        self._signal_escaped(r, sig)
        r.killed = True

    def _signal_escaped(self, r: Running, sig: int) -> None:
        if r.job.token:
            pids = self.launcher.token_holders(r.job.token)
            if pids:
                self.launcher.signal_pids(pids, sig)

    def supervise(self, now: float, stop_at: float | None) -> None:
        """Apply the clock: a timeout, the end of the shutdown grace, the end of a kill grace."""
        for r in self.running:
            if r.stop_reason is None and now >= r.deadline:
                self.stop(r, "timeout", now)
            if stop_at is not None and now >= stop_at and r.stop_reason is None:
                self.stop(r, "shutdown", now)
            if r.kill_at is not None and now >= r.kill_at and not r.killed:
                self.kill(r)

    def next_deadline(self, times: list[float]) -> None:
        for r in self.running:
            if r.stop_reason is None:
                times.append(r.deadline)
            if r.kill_at is not None and not r.killed:
                times.append(r.kill_at)

    # -- reaping -------------------------------------------------------------------------------

    def reap(self) -> list[tuple[Running, int]]:
        """The handlers that exited, each with its returncode, taken off the running list."""
        done = []
        for r in self.running:
            if self.launcher.exited(r.proc):
                done.append(r)
        if not done:
            return []
        finished = []
        for r in done:
            self.running.remove(r)
            rc = r.proc.status if r.stop_reason is None and r.cgroup is None else None
            if rc is not None:
                # Its exit status is known: the rest waits until the next handler has started
                # (finish_reaping), off the path from this exit to that start.
                self._exited.append(r.proc)
                finished.append((r, rc))
                continue
            rc = self._kill_and_reap(r.proc)
            if r.stop_reason is not None and r.job.token:
                # Stopped by us: nothing of this run may outlive it, not even what left the group.
                left = self.launcher.token_holders(r.job.token)
                if left:
                    self.launcher.stop_pids(left, self.kill_grace)
            if r.cgroup is not None:
                self._end_cgroup(r)
            finished.append((r, rc))
        if self.cgroups is not None and self.cgroups.leftover:
            self.cgroups.sweep()
        return finished

    def finish_reaping(self) -> None:
        """The rest of `reap` for the handlers it took off the running list by their exit status
        alone (after the next start: off the path from an exit to it)."""
        exited, self._exited = self._exited, []
        for proc in exited:
            self._kill_and_reap(proc)

    def _kill_and_reap(self, proc: Proc) -> int:
        """A handler that has exited: kill what it left in its process group (the leader, a zombie
        until reaped, keeps the group id ours, never a stranger's), reap it, and let go of it."""
        self.launcher.signal_group(proc, signal.SIGKILL)
        rc = self.launcher.reap(proc)
        self._let_go(proc)
        return rc

    def _let_go(self, proc: Proc) -> None:
        """A reaped handler: its exit fd closed, its slot in the keeper's table freed."""
        proc.forget_exit_fd()
        if self.keeper is not None:
            self.keeper.remove(proc.pid)

    def _end_cgroup(self, r: Running) -> None:
        """The handler has exited: read its cgroup's OOM kills, then kill what is left in it (a
        process that left its group with setsid is still there) and remove it."""
        slot, r.cgroup = r.cgroup, None
        if slot is not None and self.cgroups is not None:
            r.oom_kills = self.cgroups.oom_kills(slot)
            self.cgroups.remove(slot)

    def forget(self, r: Running) -> None:
        if self.registry is not None and r.registered:
            r.registered = False
            self.registry.forget(r.job.id)

    def abandon(self, r: Running, wait: float = 5.0) -> int:
        """Kill a handler at once and reap it (the worker is leaving); its returncode."""
        self.kill(r)
        rc = self.launcher.reap(r.proc, timeout=wait)
        if rc is not None:
            self._let_go(r.proc)
        if r.cgroup is not None:
            self._end_cgroup(r)
        if r in self.running:
            self.running.remove(r)
        self.forget(r)
        self.release_files(r)
        return rc if rc is not None else -signal.SIGKILL
