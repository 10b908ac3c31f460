"""Handler processes on this host, for the worker (jobctl/worker/): the payload's stdin, what a
finished handler left behind (its stderr tail, its result line), and the registry through which a
later worker finds and stops a handler whose own worker was killed.

Everything here is about one process at a time and knows nothing of the queue: the loop decides
what an outcome means.
"""

from __future__ import annotations

import json
import os
import signal
import time

from jobctl import payloads
from jobctl.errors import InvalidInput

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class Registry:
    """One small file per running handler started on this host, named by job id: its pid, when it
    started and the claim's token. A worker killed with SIGKILL leaves its handler running; the
    next worker here to claim that job reads the file and stops the old run first, so that two runs
    of one job never overlap on one host. Best effort: without the file nothing is found."""

    def __init__(self, db_path: str):
        self.folder = os.path.abspath(db_path) + "-handlers"

    def record(self, job_id: int, token: str | None, worker: str, pid: int, start_min, start_max) -> None:
        """Note a handler just started; its /proc start time lies between start_min and start_max
        (reading it after the spawn would wait for the exec to finish, ~0.5 ms a job)."""
        record = json.dumps({"pid": pid, "start": None if None in (start_min, start_max) else [start_min, start_max],
                             "token": token, "worker": worker}).encode()
        tmp = os.path.join(self.folder, f".{job_id}.{os.getpid()}")
        for _ in range(2):
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                try:
                    os.write(fd, record)
                finally:
                    os.close(fd)
                os.replace(tmp, os.path.join(self.folder, str(job_id)))
                return
            except FileNotFoundError:  # the folder is made once, and again if someone removed it
                try:
                    os.makedirs(self.folder, mode=0o700, exist_ok=True)
                except OSError:
                    return
            except OSError:
                return

    def forget(self, job_id: int) -> None:
        try:
            os.unlink(os.path.join(self.folder, str(job_id)))
        except OSError:
            pass

    def strays(self, job_id: int, token: str | None) -> tuple[set[int], str | None]:
        """Live processes of an earlier run of this job on this host (its handler, and whatever
        it started, even what escaped with setsid: found by that claim's token in their
        environment), and that run's worker. Empty when the record is this claim's own or absent."""
        try:
            with open(os.path.join(self.folder, str(job_id))) as f:
                rec = json.load(f)
            pid, old_token = int(rec["pid"]), str(rec["token"])
        except (OSError, ValueError, KeyError, TypeError):
            return set(), None
        if old_token == token:
            return set(), None
        pids = set(environ_holders(f"JOBCTL_TOKEN={old_token}"))
        start = rec.get("start")
        if start is not None:
            now_start = proc_start(pid)
            if now_start is not None and (start[0] <= now_start <= start[1] if isinstance(start, list)
                                          else now_start == start):
                pids.add(pid)
        pids.discard(os.getpid())
        return pids, rec.get("worker")


def stop_processes(pids: set[int], grace: float) -> None:
    """SIGTERM, then SIGKILL to what is left, waiting up to `grace` for them to go."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in pids:
            try:
                os.kill(p, sig)
            except OSError:
                pass
        deadline = time.monotonic() + grace
        while any(proc_start(p) is not None for p in pids) and time.monotonic() < deadline:
            time.sleep(0.02)


def boot_ticks():
    """Now, in the clock ticks since boot of /proc/PID/stat's start time (None off Linux)."""
    try:
        return time.clock_gettime_ns(time.CLOCK_BOOTTIME) * _TICKS // 1_000_000_000
    except (AttributeError, OSError):
        return None


def stdin_for(data: bytes):
    """The handler's stdin holding `data`: a pipe already filled and closed when the payload fits
    in one pipe page (any pipe holds that much, so the write never blocks), else a temporary file."""
    if len(data) <= 4096:
        r, w = os.pipe()
        try:
            if data:
                os.write(w, data)
        finally:
            os.close(w)
        return os.fdopen(r, "rb", buffering=0)
    import tempfile

    f = tempfile.TemporaryFile()
    f.write(data)
    f.seek(0)
    return f


def proc_start(pid: int):
    """A live (not zombie) process's start time in clock ticks since boot; None when it is gone.
    With the pid it names one process: a pid reused by a stranger has another start time."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return None if fields[0] in (b"Z", b"X") else int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def environ_holders(entry: str) -> list[int]:
    """Pids of live processes whose environment holds `entry` (Linux /proc; empty elsewhere)."""
    needle = b"\0" + entry.encode() + b"\0"
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if name.isdigit():
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if needle in b"\0" + f.read():
                        found.append(int(name))
            except OSError:
                continue
    return found


def token_holders(token: str) -> set[int]:
    """Live processes of this user, other than this one, whose environment holds the claim's
    JOBCTL_TOKEN: a handler and everything it started, even what left its group with setsid."""
    if not token:
        return set()
    uid, me = os.getuid(), os.getpid()
    found = set()
    for pid in environ_holders(f"JOBCTL_TOKEN={token}"):
        try:
            if pid != me and os.stat(f"/proc/{pid}").st_uid == uid and proc_start(pid) is not None:
                found.add(pid)
        except OSError:
            continue
    return found


def which(program: str, path: str | None = None) -> str | None:
    """The executable file `program` names on PATH (shutil.which without its import cost)."""
    if path is None:
        path = os.environ.get("PATH", os.defpath)
    for folder in path.split(os.pathsep):
        candidate = os.path.join(folder or ".", program)
        if os.access(candidate, os.X_OK) and os.path.isfile(candidate):
            return candidate
    return None


def command_problems(settings, types=None) -> dict[str, str]:
    """Handler commands that cannot be run, by type: a program that is missing, not a file or
    not executable (looked up on PATH when it has no slash, as the worker does). `types` limits
    the check to those types; without it every type with a command is checked."""
    problems = {}
    for name, tc in sorted(settings.types.items()):
        if not tc.command or (types is not None and name not in types):
            continue
        program = tc.command[0]
        if os.sep not in program:
            if which(program) is None:
                problems[name] = f"{program!r} is not found on PATH"
            continue
        if not os.path.exists(program):
            problems[name] = f"{program} does not exist"
        elif os.path.isdir(program):
            problems[name] = f"{program} is a directory, not a program"
        elif not os.access(program, os.X_OK):
            problems[name] = f"{program} is not executable (chmod +x {program})"
    return problems


def describe_exit(rc: int) -> str:
    """`exit 3`, or `killed by SIGKILL` for a returncode of -9."""
    return f"exit {rc}" if rc >= 0 else f"killed by {signal_name(-rc)}"


def signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def tail_text(f, limit: int) -> str:
    """The last `limit` bytes of a file as text, starting at a whole line."""
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(max(0, size - limit))
    data = f.read()
    if size > limit:
        cut = data.find(b"\n")
        data = data[cut + 1:] if cut >= 0 else data
    return data.decode("utf-8", errors="replace").strip()


def read_result(fd: int, max_bytes: int) -> tuple[object, str | None]:
    """The result of a handler from its stdout file: (the last non-empty line's JSON value or
    None, None), or (None, why) when that line is JSON that jobctl cannot keep (a number with
    more than 4,300 digits, NaN, a lone surrogate, nesting too deep). A line that is not JSON at
    all, or too long to be a result, is no result: (None, None)."""
    size = os.fstat(fd).st_size
    if size == 0:
        return None, None
    limit = max_bytes + 4096
    start = max(0, size - limit)
    data = os.pread(fd, size - start, start).rstrip()
    cut = data.rfind(b"\n")
    if cut < 0 and size > limit:
        return None, None  # the line is longer than any result may be
    line = data[cut + 1:].strip()
    if not line or line[:1] not in b'{["-0123456789tfn':
        return None, None
    try:
        value = payloads.parse_json(line, what="result")
        payloads.compact(value, what="result", max_bytes=max_bytes)
    except InvalidInput as e:
        text = str(e)
        if ": not JSON (" in text or " too large" in text or ": not UTF-8" in text:
            return None, None
        return None, f"result line is not valid JSON: {text.removeprefix('invalid result: ')}"
    except ValueError as e:  # int("1" * 5000) and the like, raised by the decoder itself
        return None, f"result line is not valid JSON: {e}"
    return value, None


def tail_fd(fd: int, limit: int) -> str:
    """The last `limit` bytes of a file as text, starting at a whole line."""
    size = os.fstat(fd).st_size
    if size == 0:
        return ""
    start = max(0, size - limit)
    data = os.pread(fd, size - start, start)
    if size > limit:
        cut = data.find(b"\n")
        data = data[cut + 1:] if cut >= 0 else data
    return data.decode("utf-8", errors="replace").strip()


def result_line(f, max_bytes: int):
    """The last non-empty line of stdout, if it is JSON (and fits); else None."""
    f.seek(0, os.SEEK_END)
    size = f.tell()
    if size == 0:
        return None
    limit = max_bytes + 4096
    f.seek(max(0, size - limit))
    data = f.read().rstrip()
    cut = data.rfind(b"\n")
    if cut < 0 and size > limit:
        return None  # the line is longer than any result may be
    line = data[cut + 1:].strip()
    if not line or line[:1] not in b'{["-0123456789tfn':
        return None
    try:
        value = payloads.parse_json(line, what="result")
        payloads.compact(value, what="result", max_bytes=max_bytes)
    except InvalidInput:
        return None
    return value
