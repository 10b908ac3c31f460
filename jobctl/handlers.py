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
import stat
import time
from pathlib import Path

from jobctl import payloads
from jobctl.errors import InvalidInput

# The signals that stop a worker (a first drains it, a second stops its handlers, a third leaves at
# once): held from the start of `jobctl work` and handled by its loop.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class Registry:
    """One small file per running handler started on this host, named by job id: its pid, when it
    started and the claim's token. A worker killed with SIGKILL leaves its handler running; the
    next worker here to claim that job reads the file and stops the old run first, so that two runs
    of one job never overlap on one host. Best effort: without the file nothing is found.

    The registry names processes to kill, so nobody else may write to it: the folder
    (`<db>-handlers`, beside the database's real file) must be a directory of ours with mode 0700
    (checked when the registry is made: a worker refuses to start otherwise), and a record is
    believed only when it is a regular file of ours that nobody else may write; anything else is
    ignored, with one warning. A worker removes only records it wrote itself, and only while the
    record still holds its claim's token: a worker that resumes after another took its job over
    never removes the rescuer's record. Records are replaced and removed under an flock on the
    folder, so that check-and-remove cannot interleave with another worker's replace."""

    MAX_RECORD = 65536

    def __init__(self, db_path: str, warn=None):
        self.folder = os.path.realpath(db_path) + "-handlers"
        self._mine: dict[int, str | None] = {}  # job id -> the token this registry recorded
        self._warned: set[str] = set()
        self._warn = warn or _warn_stderr
        self._prepare()

    def _prepare(self) -> None:
        """Make the folder if it is missing; refuse (exit 8, the reason) one that is not private."""
        from jobctl.engines import files
        from jobctl.errors import DatabaseUnusable

        try:
            # A server database's registry lives in the user's state folder, which may not exist yet.
            files.make_private_dirs(Path(self.folder).parent)
            os.mkdir(self.folder, 0o700)
            os.chmod(self.folder, 0o700)
        except FileExistsError:
            pass
        except OSError as e:
            raise DatabaseUnusable(f"cannot create the handler registry {self.folder}: {e.strerror}") from None
        real = files.resolve(self.folder)  # every folder and link on the way: ours or root's
        try:
            st = os.lstat(real)
        except OSError as e:
            raise DatabaseUnusable(f"cannot read the handler registry {self.folder}: {e.strerror}") from None
        why = None
        if not stat.S_ISDIR(st.st_mode):
            why = "is not a directory"
        elif st.st_uid != os.geteuid():
            why = f"belongs to {files.user_name(st.st_uid)}, not to you ({files.user_name(os.geteuid())})"
        elif stat.S_IMODE(st.st_mode) & 0o077:
            why = f"has mode {stat.S_IMODE(st.st_mode):04o}, not 0700"
        if why:
            raise DatabaseUnusable(
                f"the handler registry {self.folder} {why}; the worker keeps there the processes it may "
                "stop, so it must be yours alone; remove it (no worker may be running) and the next worker "
                "makes a private one")
        self.real = real

    def _locked(self):
        """An flock on the folder, held until the returned fd is closed."""
        import fcntl

        fd = os.open(self.real, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def record(self, job_id: int, token: str | None, worker: str, pid: int, start_min, start_max) -> None:
        """Note a handler just started; its /proc start time lies between start_min and start_max
        (reading it after the spawn would wait for the exec to finish, ~0.5 ms a job)."""
        record = json.dumps({"pid": pid, "start": None if None in (start_min, start_max) else [start_min, start_max],
                             "token": token, "worker": worker}).encode()
        tmp = os.path.join(self.real, f".{job_id}.{os.getpid()}")
        for _ in range(2):
            try:
                lock = self._locked()
                try:
                    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
                    try:
                        os.write(fd, record)
                    finally:
                        os.close(fd)
                    os.replace(tmp, os.path.join(self.real, str(job_id)))
                finally:
                    os.close(lock)
                self._mine[job_id] = token
                return
            except FileNotFoundError:  # the folder is made once, and again (checked) if someone removed it
                try:
                    self._prepare()
                except Exception as e:  # a registry we cannot trust: run without one
                    self._warn_once("folder", str(e))
                    return
            except OSError:
                return

    def forget(self, job_id: int) -> None:
        """Remove the record of this job if this registry wrote it and it still holds that token."""
        if job_id not in self._mine:
            return  # never ours (another worker's, or an earlier run's): not ours to remove
        token = self._mine.pop(job_id)
        path = os.path.join(self.real, str(job_id))
        try:
            lock = self._locked()
        except OSError:
            return
        try:
            rec = self._read(path)
            if rec is not None and rec.get("token") == token:
                os.unlink(path)
        except OSError:
            pass
        finally:
            os.close(lock)

    def _read(self, path: str) -> dict | None:
        """A record, if it is one to believe: a regular file of ours nobody else may write."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError as e:
            self._warn_once(path, f"ignoring the handler record {path}: {e.strerror}")
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
                from jobctl.engines.files import user_name

                self._warn_once(path, f"ignoring the handler record {path}: only a regular file of yours that "
                                      f"nobody else may write is believed (this one: owner {user_name(st.st_uid)}, "
                                      f"mode {stat.S_IMODE(st.st_mode):04o}); remove it")
                return None
            data = os.read(fd, self.MAX_RECORD)
        finally:
            os.close(fd)
        try:
            rec = json.loads(data)
        except ValueError:
            return None
        return rec if isinstance(rec, dict) else None

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self._warn(message)

    def strays(self, job_id: int, token: str | None) -> tuple[set[int], str | None]:
        """Live processes of an earlier run of this job on this host (its handler, and whatever
        it started, even what escaped with setsid: found by that claim's token in their
        environment), and that run's worker. Empty when the record is this claim's own or absent."""
        path = f"{self.real}/{job_id}"  # (os.path.join of an absolute folder and a number: the same)
        if not os.access(path, os.F_OK, follow_symlinks=False):
            return set(), None  # (no record: the usual case, told without raising an error)
        try:
            rec = self._read(path)
            if rec is None:
                return set(), None
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


def _warn_stderr(message: str) -> None:
    import sys

    print(f"jobctl: warning: {message}", file=sys.stderr, flush=True)


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
    found: list[int] = []
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
        if cut >= 0 and data[cut + 1:].strip():  # (a last line longer than the tail: its end is kept)
            data = data[cut + 1:]
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
    return result_of(os.pread(fd, size - start, start), size, max_bytes)


def result_of(data: bytes, size: int, max_bytes: int) -> tuple[object, str | None]:
    """read_result of the last (at least max_bytes + 4096) bytes of a stdout of `size` bytes."""
    if size == 0:
        return None, None
    limit = max_bytes + 4096
    data = data[-limit:].rstrip()
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
    return tail_of(os.pread(fd, size - start, start), size, limit)


def tail_of(data: bytes, size: int, limit: int) -> str:
    """tail_fd of the last (at least `limit`) bytes of a stream of `size` bytes."""
    data = data[-limit:] if limit else b""
    if size > limit:
        cut = data.find(b"\n")
        if cut >= 0 and data[cut + 1:].strip():  # (a last line longer than the tail: its end is kept)
            data = data[cut + 1:]
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


# What a process says or does when an allocation fails under RLIMIT_AS: Python's MemoryError,
# libc's ENOMEM text ("Cannot allocate memory"), bash's "xmalloc: cannot allocate N bytes" (and
# xrealloc's), C++'s std::bad_alloc, Go's "runtime: out of memory", Node's "Allocation failed -
# JavaScript heap out of memory", Rust's "memory allocation of N bytes failed", Perl's "Out of
# memory!", the JVM's OutOfMemoryError; or dying of the signal an unchecked NULL, an abort() or an
# allocator's kill gives.
_MEMORY_WORDS = ("memoryerror", "cannot allocate", "out of memory", "bad_alloc", "memory exhausted",
                 "failed to allocate", "allocation failed", "memory allocation of", "outofmemoryerror", "enomem",
                 "mmap failed")


def memory_failure(returncode: int, stderr_tail: str, signals: bool = True) -> bool:
    """Whether a failed run under a memory limit looks like it hit the limit (signals: whether a
    SIGSEGV, SIGABRT, SIGKILL or SIGBUS counts as a sign of it, as it does under RLIMIT_AS)."""
    if signals and returncode in (-signal.SIGSEGV, -signal.SIGABRT, -signal.SIGKILL, -signal.SIGBUS):
        return True
    tail = stderr_tail.lower()
    return any(word in tail for word in _MEMORY_WORDS)

