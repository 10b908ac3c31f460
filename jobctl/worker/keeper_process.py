"""The keeper process (see keeper.py): it sleeps until its worker is gone, then kills the
handlers that the table it shares with the worker holds.

It runs on its own, as `python -I -S -c "…import keeper_process…"`, and imports only modules
written in C besides `struct`: not jobctl, not `signal` (its enum is most of a bare start's cost;
the stop signals come blocked instead), not even `os` (whose import pulls in
`_collections_abc`), but `posix`, the module `os` is built on. Its start is then a bare Python's.
"""

import struct
import sys

import posix

SIGKILL = 9  # (Linux, the keeper's only system)
TOKEN_MAX = 70  # bytes of the token kept (a claim's token is 24)
# A handler's slot: in use, pid, start time range in ticks (-1: unknown), token length, token
SLOT = struct.Struct(f"<BxxxiqqH{TOKEN_MAX}s")
SLOT_SIZE = SLOT.size  # 96
SLOTS = 4096  # two per handler at most (an exited one is cleared right after the next start): --concurrency 1024 fits
TABLE_FD = 3  # the table, in the keeper
LOOK_EVERY = 5.0  # seconds: the keeper's one periodic look (is its worker still its parent?), a safety net


def _start_time(pid: int):
    """A process's start time in ticks since boot, zombie or not; None when there is no such pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _read_table(table) -> dict:
    """The handlers the table holds: pid -> (start_min, start_max, token)."""
    handlers = {}
    for at in range(0, SLOTS * SLOT_SIZE, SLOT_SIZE):
        if table[at]:
            _, pid, lo, hi, n, token = SLOT.unpack_from(table, at)
            handlers[pid] = (lo, hi, token[:n])
    return handlers


def _prune(handlers: dict) -> None:
    """Forget the handlers whose leader is gone: its worker reaped it and killed its group then."""
    for pid in list(handlers):
        try:
            posix.kill(pid, 0)
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
            posix.killpg(pid, SIGKILL)
        except OSError:
            pass
        if token:
            tokens.append(b"\0JOBCTL_TOKEN=" + token + b"\0")
    if not tokens:
        return
    me, uid = posix.getpid(), posix.getuid()
    for name in posix.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            if posix.stat(f"/proc/{name}").st_uid != uid:
                continue
            with open(f"/proc/{name}/environ", "rb") as f:
                env = b"\0" + f.read()
        except OSError:
            continue
        if any(t in env for t in tokens):
            try:
                posix.kill(int(name), SIGKILL)
            except OSError:
                pass


def main(argv: list[str]) -> int:
    import mmap
    import select

    worker = int(argv[1])
    table = mmap.mmap(TABLE_FD, SLOTS * SLOT_SIZE, prot=mmap.PROT_READ)
    ep = select.epoll()
    try:
        ep.register(0, 0)  # the pipe: its hang-up is the worker's end (nothing is ever written to it)
    except OSError:
        pass
    try:
        ep.register(posix.pidfd_open(worker), select.EPOLLIN)  # readable once the worker has exited
    except (AttributeError, OSError):
        pass
    while posix.getppid() == worker:  # (checked after the pidfd opened: a worker dead before is seen)
        if ep.poll(LOOK_EVERY):
            break
    handlers = _read_table(table)
    if posix.getppid() == worker:
        _prune(handlers)  # the worker is leaving as it should: the handlers it reaped are not to kill
    _kill_all(handlers)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
