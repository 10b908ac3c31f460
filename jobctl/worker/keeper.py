"""The keeper: one small process per worker that kills the worker's handlers when the worker dies.

A worker killed with SIGKILL (or by the kernel's OOM killer) cannot stop its handlers, which run
in sessions of their own: they would run on after their leases expire, while other workers run
the same slots' next jobs, and a concurrency limit would no longer hold. So a worker starts, once,
a program (`python -I -S -c "…import keeper_process…" FOLDER WORKER_PID`, in a session of its own so that a signal to the
worker's process group leaves it be, with the stop signals blocked) and keeps, in a table of
memory it shares with it, a slot per running handler: its pid (= its process group), the range
its /proc start time lies in, and its claim's token. Filling and clearing a slot is a store to
memory, no system call, and nothing wakes the keeper while the worker lives: it sleeps until the
worker is gone (its pidfd, or the pipe whose other end only the worker holds: closed by its exit,
whatever killed it). Then it reads the table and kills with SIGKILL the group of every handler
still running, and whatever carries the claim's token having left the group with setsid, then
exits. At once, not after a grace: the run's outcome can no longer be recorded, and its lease
must be free of it before it expires.

Why not PR_SET_PDEATHSIG on each handler: it needs code between fork and exec (handlers start
with posix_spawn, for speed), it acts on the handler alone (not its group), fires when the
*thread* that started it ends, and is cleared on a setuid program's exec. A keeper per handler
would cost a fork per job.

This file is the worker's side (the Keeper class); the keeper itself is keeper_process.py, which
runs on its own.
"""

from __future__ import annotations

import os
import sys

from jobctl.worker.keeper_process import SLOT, SLOT_SIZE, SLOTS, TABLE_FD, TOKEN_MAX

_RUN = ("import sys; sys.path.insert(0, sys.argv[1]); import keeper_process; "
        "sys.exit(keeper_process.main(sys.argv[1:]))")


class Keeper:
    """The worker's side: start the keeper, keep its table of running handlers, close at the end."""

    def __init__(self, pid: int, fd: int, table, warn=None):
        self.pid = pid
        self.fd = fd  # the pipe's end that only this worker holds: its close ends the keeper
        self.table = table  # SLOTS slots of SLOT_SIZE bytes, shared with the keeper
        self._warn = warn
        self._free: list[int] = []  # slots cleared, reused first
        self._next = 0  # slots never used start here
        self._slot_of: dict[int, int] = {}  # handler pid -> its slot

    @classmethod
    def start(cls, warn=None) -> Keeper | None:
        """The keeper of this process, started; None (said once through `warn`) where it cannot be."""
        if not sys.platform.startswith("linux"):
            return None  # (it needs /proc and epoll; elsewhere the next worker's orphan check remains)
        import mmap
        import signal

        r = w = memfd = -1
        try:
            memfd = os.memfd_create("jobctl-keeper")
            os.ftruncate(memfd, SLOTS * SLOT_SIZE)  # (pages are made as slots are first used)
            table = mmap.mmap(memfd, SLOTS * SLOT_SIZE)
            r, w = os.pipe()
            # Imported by name, not run as a script, so that its compiled form is used (~10 ms less).
            argv = [sys.executable, "-I", "-S", "-c", _RUN, os.path.dirname(os.path.abspath(__file__)), str(os.getpid())]
            stop = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2}
            pid = os.posix_spawn(sys.executable, argv, os.environ,
                                 file_actions=[(os.POSIX_SPAWN_DUP2, r, 0), (os.POSIX_SPAWN_DUP2, memfd, TABLE_FD),
                                               (os.POSIX_SPAWN_DUP2, 2, 1)],
                                 setsid=True, setsigmask=stop)  # only the worker's end ends the keeper
        except OSError as e:
            for fd in (r, w, memfd):
                if fd >= 0:
                    os.close(fd)
            if warn is not None:
                warn(f"cannot start the process that stops this worker's handlers if it is killed "
                     f"({e.strerror or e}): a handler would outlive a killed worker")
            return None
        os.close(r)
        os.close(memfd)  # (the mapping stays)
        return cls(pid, w, table, warn)

    def add(self, pid: int, start_min, start_max, token: str | None) -> None:
        """A handler just started (its /proc start time lies between start_min and start_max)."""
        if self.table is None:
            return
        if self._free:
            slot = self._free.pop()
        elif self._next < SLOTS:
            slot, self._next = self._next, self._next + 1
        else:
            return  # (cannot happen: at most two slots a handler)
        self._slot_of[pid] = slot
        tok = (token or "").encode()[:TOKEN_MAX]
        at = slot * SLOT_SIZE
        # The slot says "in use" last: a worker killed in between leaves a slot the keeper skips.
        SLOT.pack_into(self.table, at, 0, pid, -1 if start_min is None else start_min,
                       -1 if start_max is None else start_max, len(tok), tok)
        self.table[at] = 1

    def remove(self, pid: int) -> None:
        """A handler was reaped: nothing of it is the keeper's to kill any more."""
        slot = self._slot_of.pop(pid, None)
        if slot is not None and self.table is not None:
            self.table[slot * SLOT_SIZE] = 0
            self._free.append(slot)

    def check(self) -> None:
        """Say once when the keeper is gone (killed on its own): from then on a handler would
        outlive a killed worker."""
        if self.fd < 0:
            return
        try:
            gone = os.waitpid(self.pid, os.WNOHANG)[0] != 0
        except ChildProcessError:
            gone = True
        if gone:
            os.close(self.fd)
            self.fd = -1
            self.table = None
            if self._warn is not None:
                self._warn("the process that stops this worker's handlers if it is killed is gone; "
                           "from now on a handler would outlive a killed worker")

    def close(self, wait: float = 1.0) -> None:
        """The worker is leaving (its handlers are stopped): the keeper ends; reap it."""
        self.check()
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
