"""Memory cgroups: a type's memory_limit as a cap on the handler's whole process tree, where the
system lets the worker make cgroups; elsewhere the per-process cap (RLIMIT_AS) stays.

Two layouts are used, found once when a worker starts (and only when a type it runs has a limit):

- cgroup v2: the worker's own cgroup (`0::/path` in /proc/self/cgroup) is writable by it (a
  systemd unit with `Delegate=yes`), has the memory controller in `cgroup.controllers`, and holds
  no process but the worker. A v2 cgroup cannot hold processes and enable controllers for its
  children at once, so the worker first moves itself into a leaf `worker` under it, then enables
  `+memory` in its `cgroup.subtree_control`; each handler gets a sibling `jobctl-PID-N` with
  `memory.max` (and `memory.swap.max = 0`, `memory.oom.group = 1` where present).
- cgroup v1: the worker's group in the memory hierarchy is writable: each handler gets a child
  group `jobctl-PID-N` with `memory.limit_in_bytes` (and `memory.memsw.limit_in_bytes`, so swap
  is no way around it, where present). v1 groups may hold processes beside child groups.

The handler moves itself into its group between fork and exec (it writes its pid to the group's
`cgroup.procs`, opened by the worker beforehand), so that nothing it starts is ever outside it.
When the handler has exited, whatever is left in its group is killed (a process that left the
handler's process group with setsid is still in its cgroup), the kernel's OOM kill count is read
(`oom_kill` in `memory.events` or `memory.oom_control`) and the group is removed. Groups left by
a worker that was killed (an empty `jobctl-PID-N` whose PID is gone) are removed by the next
worker that starts in the same place.

Only files are touched, under one root directory that tests may inject (a temporary folder laid
out like cgroupfs).
"""

from __future__ import annotations

import errno
import os
import re
import signal
import time

V1 = "cgroup v1"
V2 = "cgroup v2"
_NAME = re.compile(r"jobctl-(\d+)-\d+\Z")
BUSY = (errno.EBUSY, errno.ENOTEMPTY)


class Slot:
    """One handler's cgroup: its folder and, until the handler has moved in, its cgroup.procs."""

    __slots__ = ("path", "procs_fd")

    def __init__(self, path: str, procs_fd: int):
        self.path = path
        self.procs_fd = procs_fd

    def close_fd(self) -> None:
        if self.procs_fd >= 0:
            os.close(self.procs_fd)
            self.procs_fd = -1


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _own_cgroups(text: str | None = None) -> dict[str, str]:
    """/proc/self/cgroup as {controller or "" (v2): path}."""
    if text is None:
        try:
            text = _read("/proc/self/cgroup")
        except OSError:
            return {}
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for name in (parts[1].split(",") if parts[1] else [""]):
                paths.setdefault(name, parts[2])
    return paths


def _mounts(text: str | None = None) -> list[tuple[str, str, str, list[str]]]:
    """The cgroup mounts of /proc/self/mountinfo: (fstype, root inside the hierarchy, mount point, super options)."""
    if text is None:
        try:
            text = _read("/proc/self/mountinfo")
        except OSError:
            return []
    found = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, after = left.split(), right.split()
        if len(fields) >= 5 and len(after) >= 3 and after[0] in ("cgroup", "cgroup2"):
            found.append((after[0], fields[3].replace("\\040", " "), fields[4].replace("\\040", " "), after[2].split(",")))
    return found


def _inside(mount_root: str, mount_point: str, path: str) -> str | None:
    """The folder of cgroup `path` under a mount of the hierarchy's `mount_root`; None when it is not visible there."""
    root = mount_root.rstrip("/")
    if path != root and not path.startswith(root + "/"):
        return None
    return mount_point.rstrip("/") + path[len(root):]


def locate(proc_cgroup: str | None = None, mountinfo: str | None = None) -> list[tuple[str, str]]:
    """The worker's own memory-capable cgroup folders to try, best first: [(V2 or V1, folder)]."""
    own = _own_cgroups(proc_cgroup)
    found = []
    for fstype, root, point, options in _mounts(mountinfo):
        if fstype == "cgroup2" and "" in own:
            where = _inside(root, point, own[""])
            if where:
                found.append((V2, where))
    for fstype, root, point, options in _mounts(mountinfo):
        if fstype == "cgroup" and "memory" in options and "memory" in own:
            where = _inside(root, point, own["memory"])
            if where:
                found.append((V1, where))
    return found


def _v2_problem(base: str) -> str | None:
    """Why the v2 cgroup `base` cannot hold the handlers' cgroups (read only); None when it can."""
    try:
        controllers = _read(os.path.join(base, "cgroup.controllers")).split()
    except OSError as e:
        return f"cannot read {base}/cgroup.controllers ({e.strerror})"
    if "memory" not in controllers:
        return f"the memory controller is not available in {base}"
    for name in ("cgroup.procs", "cgroup.subtree_control"):
        if not os.access(os.path.join(base, name), os.W_OK):
            return f"{base} is not delegated to this user (its {name} is not writable)"
    if not os.access(base, os.W_OK | os.X_OK):
        return f"{base} is not delegated to this user (cannot make cgroups in it)"
    if not _delegated(base):
        return (f"{base} is not marked as delegated (as root, jobctl reorganises only a cgroup its manager "
                "handed over: systemd's Delegate=yes)")
    return None


def _delegated(base: str) -> bool:
    """Whether the cgroup was handed over to this process's user: its cgroup.procs belongs to a
    user other than root and that is us (only a delegation gives a user one), or its manager marked
    it delegated (systemd 251 and later set the `trusted.delegate` or `user.delegate` attribute
    on a Delegate=yes unit's cgroup). Root may write to any cgroup, which says nothing of whether
    reorganising it would fight its manager."""
    try:
        owner = os.stat(os.path.join(base, "cgroup.procs")).st_uid
    except OSError:
        return False
    if owner != 0 and owner == os.geteuid():
        return True
    for name in ("trusted.delegate", "user.delegate"):
        try:
            if os.getxattr(base, name).strip(b"\0 \n") == b"1":
                return True
        except (OSError, AttributeError):
            pass
    return False


def _v1_problem(base: str) -> str | None:
    if not os.path.exists(os.path.join(base, "memory.limit_in_bytes")):
        return f"{base} has no memory.limit_in_bytes"
    if not os.access(base, os.W_OK | os.X_OK):
        return f"{base} is not writable by this user"
    return None


OFF = "JOBCTL_MEMORY_CGROUP"  # "0": the per-process cap even where a cgroup could hold the handlers


def switched_off() -> bool:
    return os.environ.get(OFF, "").strip().lower() in ("0", "no", "false", "off")


def describe(proc_cgroup: str | None = None, mountinfo: str | None = None) -> tuple[str | None, str]:
    """What a worker started like this process would get, found without changing anything:
    (V2 or V1, the folder) where its handlers' trees can be capped, else (None, why not)."""
    if switched_off():
        return None, f"{OFF}=0 is set"
    problems = []
    for version, base in locate(proc_cgroup, mountinfo):
        problem = _v2_problem(base) if version == V2 else _v1_problem(base)
        if problem is None:
            return version, base
        problems.append(f"{version}: {problem}")
    return None, "; ".join(problems) or "no cgroup hierarchy is mounted"


class MemoryCgroups:
    """The cgroups of one worker's handlers (made by `setup`)."""

    def __init__(self, version: str, base: str):
        self.version = version
        self.base = base  # where the handlers' cgroups are made
        self.seq = 0
        self.prefix = f"jobctl-{os.getpid()}-"
        self.leftover: list[str] = []  # groups that could not be removed yet (retried by sweep)
        self.swap = False  # the swap limit file exists (found at the first group)
        self.oom_group = False

    # -- finding and preparing the place ------------------------------------------------------

    @classmethod
    def setup(cls, places: list[tuple[str, str]] | None = None) -> tuple[MemoryCgroups | None, str]:
        """Prepare the worker's cgroup for its handlers' groups: (the cgroups, or None; the sentence
        that says which cap applies, for the log)."""
        problems = [f"{OFF}=0 is set"] if switched_off() else []
        for version, base in ([] if problems else locate() if places is None else places):
            try:
                problem = cls._setup_v2(base) if version == V2 else cls._setup_v1(base)
            except OSError as e:
                problem = f"{base}: {e.strerror or e}"
            if problem is None:
                cg = cls(version, base)
                cg._prune()
                return cg, (f"memory_limit caps each handler's whole process tree ({version}: a cgroup per "
                            f"handler in {base})")
            problems.append(f"{version}: {problem}")
        return None, ("memory_limit caps each process of a handler only, not its whole tree (RLIMIT_AS): "
                      + ("; ".join(problems) or "no cgroup hierarchy is mounted"))

    @staticmethod
    def _setup_v2(base: str) -> str | None:
        problem = _v2_problem(base)
        if problem is not None:
            return problem
        me = str(os.getpid())
        others = [p for p in _read(os.path.join(base, "cgroup.procs")).split() if p != me]
        if others:
            return (f"other processes share the worker's cgroup {base} (pid {', '.join(others[:3])}); "
                    "run the worker in a cgroup of its own (a systemd unit with Delegate=yes)")
        leaf = os.path.join(base, "worker")
        try:
            os.mkdir(leaf)
        except FileExistsError:
            pass
        _write(os.path.join(leaf, "cgroup.procs"), me)
        try:
            _write(os.path.join(base, "cgroup.subtree_control"), "+memory")
        except OSError as e:
            _write(os.path.join(base, "cgroup.procs"), me)  # back where it was
            try:
                os.rmdir(leaf)
            except OSError:
                pass
            return f"cannot enable the memory controller for {base}'s children ({e.strerror})"
        return None

    @staticmethod
    def _setup_v1(base: str) -> str | None:
        problem = _v1_problem(base)
        if problem is not None:
            return problem
        # A trial group, with a limit and this process moved in and out: so a handler's start never
        # finds out that the place only looked writable.
        probe = os.path.join(base, f"jobctl-{os.getpid()}-probe")
        os.mkdir(probe)
        try:
            _write(os.path.join(probe, "memory.limit_in_bytes"), str(1 << 40))
            _write(os.path.join(probe, "cgroup.procs"), str(os.getpid()))
            _write(os.path.join(base, "cgroup.procs"), str(os.getpid()))
        finally:
            os.rmdir(probe)
        return None

    def _prune(self) -> None:
        """Remove the empty groups that a worker killed before it could remove them left here."""
        try:
            names = os.listdir(self.base)
        except OSError:
            return
        for name in names:
            m = _NAME.match(name)
            if m is None or int(m.group(1)) == os.getpid():
                continue
            try:
                os.kill(int(m.group(1)), 0)
                continue  # its worker lives
            except ProcessLookupError:
                pass
            except OSError:
                continue
            try:
                os.rmdir(os.path.join(self.base, name))
            except OSError:
                pass

    # -- one handler's group ---------------------------------------------------------------------

    def create(self, limit: int) -> Slot:
        """A new group capped at `limit` bytes, with its cgroup.procs open for the handler to move
        itself in; OSError when it cannot be made (nothing is left behind then)."""
        self.seq += 1
        path = os.path.join(self.base, f"{self.prefix}{self.seq}")
        self._mkdir(path)
        try:
            if self.seq == 1:
                swap = "memory.swap.max" if self.version == V2 else "memory.memsw.limit_in_bytes"
                self.swap = os.path.exists(os.path.join(path, swap))
                self.oom_group = self.version == V2 and os.path.exists(os.path.join(path, "memory.oom.group"))
            if self.version == V2:
                _write(os.path.join(path, "memory.max"), str(limit))
                if self.swap:
                    _write(os.path.join(path, "memory.swap.max"), "0")
                if self.oom_group:
                    _write(os.path.join(path, "memory.oom.group"), "1")  # an OOM kill takes the whole handler
            else:
                _write(os.path.join(path, "memory.limit_in_bytes"), str(limit))
                if self.swap:
                    try:  # memory and swap together: no more than the limit either
                        _write(os.path.join(path, "memory.memsw.limit_in_bytes"), str(limit))
                    except OSError:
                        self.swap = False
            fd = os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:
            self._rmdir(path)
            raise
        return Slot(path, fd)

    _mkdir = staticmethod(os.mkdir)  # (the kernel fills the folder with the group's files; a test's fake does)

    def oom_kills(self, slot: Slot) -> int:
        """How many of the group's processes the kernel's OOM killer killed (0 when it cannot tell)."""
        name = "memory.events" if self.version == V2 else "memory.oom_control"
        try:
            text = _read(os.path.join(slot.path, name))
        except OSError:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    def remove(self, slot: Slot, wait: float = 1.0) -> bool:
        """Kill what is left in the group (the handler has exited) and remove it; False when it is
        still busy after `wait` seconds (then retried by `sweep`)."""
        slot.close_fd()
        done = self._rmdir(slot.path)
        deadline = time.monotonic() + wait
        while done is False and time.monotonic() < deadline:
            self._kill_members(slot.path)
            time.sleep(0.005)
            done = self._rmdir(slot.path)
        if not done:
            self.leftover.append(slot.path)
        return bool(done)

    def sweep(self) -> None:
        """Try again to remove the groups that were still busy."""
        if self.leftover:
            left = []
            for path in self.leftover:
                self._kill_members(path)
                if not self._rmdir(path):
                    left.append(path)
            self.leftover = left

    @staticmethod
    def _rmdir(path: str) -> bool | None:
        """True when the group is gone, False while processes are in it, None on another error."""
        try:
            os.rmdir(path)
        except FileNotFoundError:
            return True
        except OSError as e:
            return False if e.errno in BUSY else None
        return True

    def _kill_members(self, path: str) -> None:
        if self.version == V2 and os.path.exists(os.path.join(path, "cgroup.kill")):
            try:
                _write(os.path.join(path, "cgroup.kill"), "1")
                return
            except OSError:
                pass
        try:
            pids = _read(os.path.join(path, "cgroup.procs")).split()
        except OSError:
            return
        me = str(os.getpid())
        for pid in pids:
            if pid == me:
                continue
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass
