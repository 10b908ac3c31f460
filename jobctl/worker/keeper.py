"""The keeper: one small process per worker that kills the worker's handlers when the worker dies.

A worker killed with SIGKILL (or by the kernel's OOM killer) cannot stop its handlers, which run
in sessions of their own: they would run on after their leases expire, while other workers run
the same slots' next jobs, and a concurrency limit would no longer hold. So a worker starts, once,
this program (`python -I -S -c "…import keeper…" FOLDER WORKER_PID`, in a session of its own so that a signal to the
worker's process group leaves it be) and tells it through a pipe, at each start, the handler's pid
(= its process group), the range its /proc start time lies in, and its claim's token. The keeper
wakes every PERIOD to read the pipe and forget the handlers that are gone; nothing wakes it per
job. When the worker is gone (its pidfd, or the pipe's other end closed: the worker's exit,
whatever killed it), the keeper kills with SIGKILL the group of every handler still running, and
whatever carries the claim's token having left the group with setsid, then exits. At once, not
after a grace: the run's outcome can no longer be recorded, and its lease must be free of it
before it expires.

Why not PR_SET_PDEATHSIG on each handler: it needs code between fork and exec (handlers start
with posix_spawn, for speed), it acts on the handler alone (not its group), fires when the
*thread* that started it ends, and is cleared on a setuid program's exec. A keeper per handler
would cost a fork per job.

This file runs on its own (stdlib only, no jobctl import: `-I -S` keeps the start short); the
worker's side is the Keeper class.
"""

from __future__ import annotations

import os
import signal
import struct
import sys

PERIOD = 0.1  # seconds between the keeper's looks at the pipe (it holds ~17,000 records: 1 MiB)
HEADER = struct.Struct("<iqqH")  # pid, start time range in ticks (-1: unknown), token length
PIPE_SIZE = 1024 * 1024


_RUN = "import sys; sys.path.insert(0, sys.argv[1]); import keeper; sys.exit(keeper.main(sys.argv[1:]))"


class Keeper:
    """The worker's side: start the keeper, tell it each handler, close at the end."""

    def __init__(self, pid: int, fd: int, warn=None):
        self.pid = pid
        self.fd = fd
        self._warn = warn

    @classmethod
    def start(cls, warn=None) -> Keeper | None:
        """The keeper of this process, started; None (said once through `warn`) where it cannot be."""
        if not sys.platform.startswith("linux"):
            return None  # (it needs /proc and epoll; elsewhere the next worker's orphan check remains)
        r = w = -1
        try:
            r, w = os.pipe()
            try:
                import fcntl

                fcntl.fcntl(w, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_SIZE)
            except OSError:
                pass  # the default 64 KiB: the keeper reads it often enough
            # Imported by name, not run as a script, so that its compiled form is used (~10 ms less).
            argv = [sys.executable, "-I", "-S", "-c", _RUN, os.path.dirname(os.path.abspath(__file__)), str(os.getpid())]
            pid = os.posix_spawn(sys.executable, argv,
                                 os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, r, 0), (os.POSIX_SPAWN_DUP2, 2, 1)],
                                 setsid=True, setsigmask=())
        except OSError as e:
            for fd in (r, w):
                if fd >= 0:
                    os.close(fd)
            if warn is not None:
                warn(f"cannot start the process that stops this worker's handlers if it is killed "
                     f"({e.strerror or e}): a handler would outlive a killed worker")
            return None
        os.close(r)
        return cls(pid, w, warn)

    def add(self, pid: int, start_min, start_max, token: str | None) -> None:
        """A handler just started (its /proc start time lies between start_min and start_max)."""
        if self.fd < 0:
            return
        tok = (token or "").encode()[:1024]
        try:
            os.write(self.fd, HEADER.pack(pid, -1 if start_min is None else start_min,
                                          -1 if start_max is None else start_max, len(tok)) + tok)
        except OSError as e:  # the keeper is gone (killed on its own)
            os.close(self.fd)
            self.fd = -1
            if self._warn is not None:
                self._warn(f"the process that stops this worker's handlers if it is killed is gone ({e.strerror}); "
                           "from now on a handler would outlive a killed worker")

    def close(self, wait: float = 1.0) -> None:
        """The worker is leaving (its handlers are stopped): the keeper ends; reap it."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        import time

        deadline = time.monotonic() + wait
        while True:
            try:
                if os.waitpid(self.pid, os.WNOHANG)[0]:
                    return
            except ChildProcessError:
                return
            if time.monotonic() >= deadline:
                return
            time.sleep(0.005)


# -- the keeper process ----------------------------------------------------------------------------

def _start_time(pid: int):
    """A process's start time in ticks since boot, zombie or not; None when there is no such pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _read_records(fd: int, buf: bytearray, handlers: dict) -> bool:
    """Read what the pipe holds into `handlers` (pid -> (start_min, start_max, token)); True at its end."""
    end = False
    while not end:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            break
        except OSError:
            data = b""
        end = not data
        buf += data
    at = 0
    while len(buf) - at >= HEADER.size:
        pid, lo, hi, n = HEADER.unpack_from(buf, at)
        if len(buf) - at < HEADER.size + n:
            break
        token = bytes(buf[at + HEADER.size:at + HEADER.size + n])
        handlers[pid] = (lo, hi, token)
        at += HEADER.size + n
    del buf[:at]
    return end


def _prune(handlers: dict) -> None:
    """Forget the handlers whose leader is gone: its worker reaped it and killed its group then."""
    for pid in list(handlers):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            del handlers[pid]
        except OSError:
            pass


def _kill_all(handlers: dict) -> None:
    """SIGKILL to the group of every handler left, and to what carries its claim's token."""
    tokens = []
    for pid, (lo, hi, token) in handlers.items():
        start = _start_time(pid)
        if start is not None and lo >= 0 and hi >= 0 and not lo <= start <= hi:
            continue  # the pid is another process's now
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        if token:
            tokens.append(b"\0JOBCTL_TOKEN=" + token + b"\0")
    if not tokens:
        return
    me, uid = os.getpid(), os.getuid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid != uid:
                continue
            with open(f"/proc/{name}/environ", "rb") as f:
                env = b"\0" + f.read()
        except OSError:
            continue
        if any(t in env for t in tokens):
            try:
                os.kill(int(name), signal.SIGKILL)
            except OSError:
                pass


def main(argv: list[str]) -> int:
    import select

    worker = int(argv[1])
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)  # only the worker's end ends the keeper
    os.set_blocking(0, False)
    ep = select.epoll()
    try:
        ep.register(0, 0)  # the pipe: only its hang-up (the worker's end) wakes the keeper, not each record
    except OSError:
        pass  # (not a pipe: its end is still seen by the read of every PERIOD)
    try:
        ep.register(os.pidfd_open(worker), select.EPOLLIN)  # readable once the worker has exited
    except (AttributeError, OSError):
        pass
    handlers: dict[int, tuple] = {}
    buf = bytearray()
    while os.getppid() == worker:  # (checked after the pidfd opened: a worker dead before is seen)
        woke = ep.poll(PERIOD)
        if _read_records(0, buf, handlers) or woke:
            break
        _prune(handlers)
    _read_records(0, buf, handlers)
    if os.getppid() == worker:
        _prune(handlers)  # the worker is leaving as it should: the handlers it reaped are not to kill
    _kill_all(handlers)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
