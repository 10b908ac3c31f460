"""The SQLite engine: one file, WAL, every write one short BEGIN IMMEDIATE transaction.

The queue's SQL is shared with the PostgreSQL engine (engines/sql.py, SQLEngine); this module
holds what is SQLite's own: the file (creating, opening, checking, migrating, backing up),
PRAGMAs, transactions and their errors, data_version wake-ups, the bulk insert, job_counts,
and doctor's checks.

Why BEGIN IMMEDIATE everywhere: a deferred BEGIN that reads and then writes fails at once with
SQLITE_BUSY when another connection committed in between (its snapshot is stale, so the busy
timeout cannot help). Taking the write lock up front makes concurrent processes queue on the busy
timeout instead. Python's implicit transactions are off (isolation_level=None): we issue BEGIN
and COMMIT ourselves, so a SELECT is never left outside the transaction it belongs to.
"""

from __future__ import annotations

import errno
import os
import json
import sqlite3
import stat
import time
from collections.abc import Callable
from contextlib import contextmanager
from functools import lru_cache, partial
from itertools import chain
from operator import attrgetter
from pathlib import Path
from urllib.parse import quote

from jobctl.engines import files
from jobctl.engines.base import Check, NewJob
from jobctl.engines.schema import APPLICATION_ID, COUNT_INSERTED, SCHEMA_VERSION  # sqlite-utils loads only on migrate
from jobctl.engines.sql import HELD_SQL, SQLEngine, details_text, schema_check
from jobctl.engines.transfer import SQLiteTransfer
from jobctl.errors import DatabaseBusy, DatabaseUnusable, DiskFull, InvalidInput

_TEXT = partial(str, encoding="utf-8", errors="surrogateescape")
# A None parameter is bound as NULL either way; without an adapter of its own, Python's sqlite3
# first looks for one by raising and catching an AttributeError (~0.2 µs a None: five a job of
# `enqueue --batch`). dict.get of an empty dict hands None back, in C.
sqlite3.register_adapter(type(None), {}.get)  # type: ignore[arg-type]
WAL_WARN_BYTES = 64 * 1024 * 1024  # doctor: a WAL this big means something holds back checkpoints
# Jobs a statement of the bulk insert: one statement a row costs its preparation and step a row;
# past ~100 rows a page the longer statement costs more than it saves (docs/performance.md).
INSERT_PAGE = 64
# A bulk row's parameters (SQLiteEngine._insert_page), read in C rather than one by one in Python:
# all of them, or (_PLAIN_ROW) those of a job that sets none of the options _UNSET reads (most
# jobs of most batches), whose NULLs are then written into the statement instead of bound.
_BULK_FIELDS = ("queue", "type", "payload", "payload_hash", "priority", "max_attempts", "backoff", "timeout_ms",
                "delay_ms", "not_before", "unique_key", "cost_units", "concurrency_group", "on_buried", "on_completed",
                "on_cancelled")
_OPTIONS = ("not_before", "concurrency_group", "on_buried", "on_completed", "on_cancelled")
_BULK_ROW = attrgetter(*_BULK_FIELDS)
_PLAIN_ROW = attrgetter(*(f for f in _BULK_FIELDS if f not in _OPTIONS))
_UNSET = attrgetter(*_OPTIONS)
_NONE_SET = (None,) * len(_OPTIONS)
FILE_HISTORY_EVERY = 300  # rows of history_log (about 100 jobs a worker ran) filed into events and runs at once
_EVENT_AHEAD = "INSERT INTO history_log (job_id, at, from_status, to_status, actor, message, details) VALUES "
_EVENT_AHEAD_SQL = {False: _EVENT_AHEAD + "(?,?,?,?,?,?,?)", True: _EVENT_AHEAD + "(?,?,?,?,?,?,NULL)"}  # by "no details"

# RETURNING (the one-statement claim) came in SQLite 3.35; Debian 11 and Ubuntu 20.04 ship 3.31-3.34.
MIN_SQLITE = (3, 35, 0)


@lru_cache(maxsize=8)
def _json_value(text: str) -> object:
    return json.loads(text)


def _same_json(stored, given) -> bool:
    """SQL jobctl_same_json(a, b): two JSON texts hold the same value (payloads.same_value); false,
    never an error, for anything that is not JSON text."""
    from jobctl.payloads import same_value

    if not isinstance(stored, str) or not isinstance(given, str):
        return False
    try:
        return same_value(json.loads(stored), _json_value(given))
    except (ValueError, RecursionError):
        return False


def _lower(text):
    """SQL jobctl_lower(text): lower() in every alphabet (SQLite's own folds ASCII letters only)."""
    return text.lower() if isinstance(text, str) else text


def check_sqlite_version(found: tuple[int, int, int] | None = None) -> None:
    found = sqlite3.sqlite_version_info if found is None else found
    if tuple(found) < MIN_SQLITE:
        raise DatabaseUnusable(
            f"this Python is built with SQLite {'.'.join(map(str, found))}, and jobctl needs SQLite "
            f"{'.'.join(map(str, MIN_SQLITE))} or newer; run jobctl with a Python built against a newer SQLite "
            "(a python.org or pyenv build, or the python3 of Debian 12 / Ubuntu 22.04 and later)"
        )


def boot_seconds() -> float:
    """The host's boot clock (CLOCK_BOOTTIME: seconds since boot, sleep included), which no step
    of the wall clock moves."""
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME) / 1e9


_BOOT_ID: list[int | None] = []  # this boot's number, read once per process (an empty list: not yet)


def boot_id() -> int | None:
    """This boot of the host as a number (the first 60 bits of /proc/sys/kernel/random/boot_id,
    which changes at every boot); None where there is no boot clock (off Linux)."""
    if not _BOOT_ID:
        number = None
        if hasattr(time, "CLOCK_BOOTTIME"):
            try:
                with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
                    number = int(f.read().strip().replace("-", "")[:15], 16)
            except (OSError, ValueError):
                pass
        _BOOT_ID.append(number)
    return _BOOT_ID[0]


def _disk_is_full(path: str) -> bool:
    try:
        st = os.statvfs(os.path.dirname(os.path.abspath(path)) or ".")
    except OSError:
        return False
    # An I/O error with less than 1 MiB left is the disk being full (a -shm that cannot grow by its
    # 32 KiB, say: SQLITE_IOERR_SHMSIZE), not a failing disk.
    return st.f_bavail * st.f_frsize < 1024 * 1024 or st.f_favail == 0


def translate(exc: sqlite3.Error, path: str, busy_timeout: float) -> Exception:
    """Turn a sqlite3 error into the user-facing error of its cause (by SQLite's error name).

    Only lock contention is "busy, safe to retry" (exit 6). A full disk, an I/O error, a read-only
    file and a schema jobctl did not write make the database unusable (exit 8), so that a worker
    stops instead of retrying for ever; anything else is returned as it is (a bug: exit 1)."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return DatabaseBusy(
            f"the database {path} is locked by another process (waited {busy_timeout:g}s); nothing "
            "changed, safe to retry, or wait longer with --busy-timeout"
        )
    if name.startswith("SQLITE_FULL") or (name.startswith("SQLITE_IOERR") and _disk_is_full(path)):
        return DiskFull(f"the disk holding {path} is full; nothing changed; free some space and retry")
    if name.startswith("SQLITE_READONLY"):
        return DatabaseUnusable(
            f"the database {path} is read-only ({name}); check the permissions of the file and its folder, "
            "and that its filesystem is mounted read-write")
    if name.startswith("SQLITE_NOTADB"):
        return DatabaseUnusable(f"{path} is not a SQLite database; point --db at a jobctl database file")
    if name.startswith("SQLITE_CORRUPT"):
        return DatabaseUnusable(f"the database {path} is corrupt; restore it from a backup (`jobctl backup` makes one)")
    if name.startswith(("SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_AUTH")):
        return DatabaseUnusable(f"cannot open the database {path}; check the permissions of the file and its folder")
    if name.startswith("SQLITE_IOERR"):
        return DatabaseUnusable(f"I/O error on the database {path} ({name}); check the disk")
    if name == "SQLITE_ERROR" and isinstance(exc, sqlite3.OperationalError):
        # A missing table or column, or SQL this SQLite cannot parse: not the schema jobctl wrote.
        return DatabaseUnusable(
            f"{path} is not a usable jobctl database: {exc}; `jobctl doctor` says more")
    return exc


def _create_database(path: Path) -> bool:
    """Create a fully initialised database at `path`, atomically; False when another process
    created it first (this one's copy is dropped).

    The schema is written to a private temporary file beside it, which is then hard-linked into
    place (link fails if the name exists). So a database file either does not exist or is a whole
    jobctl database: a crash mid-creation never leaves an empty file that looks foreign later.

    The schema is written in rollback-journal mode, straight into the file, so that a full disk
    fails the COMMIT; in WAL mode the commit only reached the -wal and the file itself was filled
    by the checkpoint of close(), whose errors nobody sees, and a truncated file was linked into
    place. The copy is read back whole (quick_check) before it is linked.
    """
    from jobctl.engines import schema

    files.make_private_dirs(path.parent)
    files.clean_stale_temps(path)
    tmp = files.temp_name(path, "init")
    files.create_private_file(tmp)
    try:
        conn = sqlite3.connect(str(tmp), isolation_level=None)
        try:
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("BEGIN IMMEDIATE")
            schema.migrate(conn, 0)
            conn.execute("COMMIT")
            conn.execute("PRAGMA journal_mode = WAL")  # (in the file's header: also a checked write)
            check = [r[0] for r in conn.execute("PRAGMA quick_check").fetchall()]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
        finally:
            conn.close()
        if check != ["ok"] or version != schema.SCHEMA_VERSION:
            raise DatabaseUnusable(f"the new database {path} could not be written whole ({'; '.join(check[:3])}); "
                                   "nothing was kept; check the disk and retry")
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False  # another process created it first: use theirs
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise
            if path.exists():
                return False
            os.rename(tmp, path)  # a filesystem without hard links
        return True
    finally:
        for suffix in ("", "-journal", "-wal", "-shm"):
            try:
                os.unlink(f"{tmp}{suffix}")
            except FileNotFoundError:
                pass


def _empty_file(real: str) -> bool:
    """A file of no bytes, beside no -wal that holds some: no one's data, so a database to be."""
    try:
        if os.stat(real).st_size != 0:
            return False
        return os.stat(f"{real}-wal").st_size == 0
    except FileNotFoundError:  # (no -wal beside it)
        return os.path.isfile(real)
    except OSError:
        return False


def _initialise_empty(real: str, busy_timeout: float) -> bool:
    """Make the empty file `real` (`touch`, `mktemp`) a jobctl database, private like a new one, in
    one transaction; False when another process did it first. Only an empty file is written to:
    SQLite's write lock is taken before looking again, so two processes never both do it."""
    from jobctl.engines import schema

    conn = sqlite3.connect(f"file:{quote(real)}?mode=rw", uri=True, isolation_level=None, timeout=busy_timeout)
    try:
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("BEGIN IMMEDIATE")
        if (conn.execute("PRAGMA application_id").fetchone()[0] != 0
                or conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] != 0):
            conn.execute("ROLLBACK")
            return False
        os.chmod(real, 0o600)
        schema.migrate(conn, 0)
        conn.execute("COMMIT")
        return True
    finally:
        conn.close()


def _cannot_write(dest, folder: str, e: OSError) -> Exception:
    """The error of a copy that could not be created or named at `dest` (the database is not to blame)."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFull(f"the disk holding {dest} is full; nothing was written; free some space there or "
                        "write the backup elsewhere")
    if e.errno == errno.ENOENT:
        return InvalidInput(f"the folder {folder} does not exist; nothing was written; give another path")
    reason = "its filesystem is read-only" if e.errno == errno.EROFS else (e.strerror or str(e)).lower()
    return DatabaseUnusable(f"cannot write {dest}: {reason}; nothing was written; choose a folder you can write to")


def _copy_error(e: sqlite3.Error, dest, *, always: bool = False) -> Exception | None:
    """The error of writing the copy `dest`, when `e` is one (a full disk, a write that failed), else
    None; with `always`, any error (it was met on the copy alone)."""
    name = getattr(e, "sqlite_errorname", "") or ""
    if name.startswith("SQLITE_FULL") or (name.startswith("SQLITE_IOERR") and _disk_is_full(str(dest))):
        return DiskFull(f"the disk holding {dest} is full; nothing was written; free some space there or "
                        "write the backup elsewhere")
    if always or name in ("SQLITE_IOERR_WRITE", "SQLITE_IOERR_FSYNC", "SQLITE_IOERR_TRUNCATE",
                          "SQLITE_IOERR_DIR_FSYNC", "SQLITE_READONLY", "SQLITE_CANTOPEN"):
        return DatabaseUnusable(f"cannot write {dest} ({name or e}); nothing was written; check that disk "
                                "or write the backup elsewhere")
    return None


class _WriteTransaction:
    """SQLiteEngine._write: a plain context manager, not a generator one (which costs every write,
    a worker's step included, a few microseconds more)."""

    __slots__ = ("engine", "rollback")

    def __init__(self, engine: "SQLiteEngine", rollback: bool):
        self.engine = engine
        self.rollback = rollback

    def __enter__(self):
        engine = self.engine
        try:
            engine.conn.execute("BEGIN IMMEDIATE")
            return engine.conn, engine.now()
        except BaseException as e:
            engine._rollback()
            error = engine._translated(e)
            if error is e:
                raise
            raise error from e

    def __exit__(self, kind, e, tb) -> None:
        engine = self.engine
        if e is None:
            try:
                engine.conn.execute("ROLLBACK" if self.rollback else "COMMIT")
                return
            except BaseException as failed:
                e = failed
                kind = None  # (raised here, not by the body)
        engine._rollback()
        error = engine._translated(e)
        if error is not e:
            raise error from e
        if kind is None:  # the COMMIT's own error, as it is
            raise e
        # the body's error, as it is: it goes on from the with statement


class SQLiteEngine(SQLiteTransfer, SQLEngine):
    """The Engine contract (engines/base.py) on one SQLite file: SQLEngine's SQL, SQLite's own
    file handling, transactions and hooks."""

    wakes = True  # has_changed: PRAGMA data_version, no I/O
    reconnects = False  # a file: no connection to lose
    on_reconnect: Callable[[str], None] | None = None  # (never called)
    UNICODE_LOWER = "jobctl_lower"  # (registered on each connection: _lower)
    # A pending twin by its key in jobs_pending_key, a running one among the jobs being run in its
    # queue, through jobs_status (how many run at once bounds that read, not the backlog; schema v14).
    _TWIN = "unique_key = ?1 AND queue = ?2 AND type = ?3 AND payload_hash = ?4"
    LIVE_TWIN = (f"SELECT min(id) FROM (SELECT id FROM jobs INDEXED BY jobs_pending_key WHERE status = 'pending' "
                 f"AND {_TWIN} UNION ALL SELECT id FROM jobs INDEXED BY jobs_status WHERE {HELD_SQL} "
                 f"AND finished_at IS NULL AND {_TWIN})")

    def __init__(self, conn: sqlite3.Connection, path: str, busy_timeout: float, clock=None):
        self.conn = conn
        self.path = path
        self.busy_timeout = busy_timeout
        self.clock = clock  # seconds since the epoch, for tests; None: this host's clock
        # What times leases besides the wall clock (seconds): None is the host's boot clock, or none
        # when a test gave `clock` (a test that steps the wall clock alone sets boot_seconds here).
        self.boot_clock: Callable[[], float] | None = None
        self._data_version: int | None = None
        self._orders_version: int | None = None  # (orders_changed)
        self._claims: dict = {}
        self._columns: dict[str, list[str]] = {}  # column names of a claim's rows, by its SQL text
        self._no_pauses_at: int | None = None  # the data_version at which no pause existed (_pauses_possible)

    def now(self) -> int:
        """This host's clock in ms: on SQLite every process of the database shares one host."""
        if self.clock is not None:
            return int(self.clock() * 1000)
        return time.time_ns() // 1_000_000

    # -- leases on the boot clock ----------------------------------------------------------
    # Every process that opens the file runs on this host (network filesystems are refused), so a
    # lease is timed on the host's boot clock, which a step of the wall clock (NTP, a resumed VM,
    # an admin's `date -s`) does not move: a lease ends at lease_boot_ms of boot lease_boot_id, and
    # one taken in an earlier boot has expired. lease_expires_at stays the wall-clock time shown
    # to people. A lease without them (taken before this schema, or copied from another
    # database) is judged on the wall clock.

    def _boot(self) -> tuple[int, int] | None:
        """(now on the clock that times leases in ms, the boot it counts from); None off Linux."""
        boot = boot_id()
        if boot is None:
            return None
        if self.boot_clock is not None:
            return int(self.boot_clock() * 1000), boot
        if self.clock is not None:
            return None  # a test's clock alone: leases on it (a real process then judges them on the wall clock)
        return time.clock_gettime_ns(time.CLOCK_BOOTTIME) // 1_000_000, boot

    def _time_lease(self, fields: dict, now: int, job) -> None:
        boot = self._boot()
        if boot is not None:
            fields["lease_boot_ms"] = boot[0] + fields["lease_expires_at"] - now
            fields["lease_boot_id"] = boot[1]
            if job.lease_boot_id != boot[1] and job.claimed_at is not None:
                # (claimed in another boot, or without a boot clock: the run's start on this boot's
                # clock is known only through the wall clock)
                fields["claimed_boot_ms"] = boot[0] - (now - job.claimed_at)

    def _expired_where(self, now: int) -> tuple[str, list]:
        boot = self._boot()
        if boot is None:
            return super()._expired_where(now)
        return ("(lease_boot_id <> ? OR lease_boot_ms < ? OR (lease_boot_id IS NULL AND lease_expires_at < ?))",
                [boot[1], boot[0], now])

    def lease_expired(self, job, now: int) -> bool:
        boot = self._boot()
        if boot is None or job.lease_boot_id is None or job.lease_boot_ms is None:
            return super().lease_expired(job, now)
        return job.lease_boot_id != boot[1] or job.lease_boot_ms < boot[0]

    # The last claim or heartbeat on the boot clock: lease_expires_at and lease_boot_ms were set
    # by the same write as it, so it lies as far before lease_boot_ms as it does before lease_expires_at.
    _BEAT_BOOT = "lease_boot_ms - lease_expires_at + COALESCE(heartbeat_at, claimed_at)"

    def _silent_where(self, now: int, silent_for_ms: int) -> tuple[str, list]:
        boot = self._boot()
        if boot is None:
            return super()._silent_where(now, silent_for_ms)
        return (f"(lease_boot_id <> ? OR {self._BEAT_BOOT} < ? "
                "OR (lease_boot_id IS NULL AND COALESCE(heartbeat_at, claimed_at) < ?))",
                [boot[1], boot[0] - silent_for_ms, now - silent_for_ms])

    def lease_silent(self, job, now: int, silent_for_ms: int) -> bool:
        boot = self._boot()
        beat = job.heartbeat_at if job.heartbeat_at is not None else job.claimed_at
        if (boot is None or job.lease_boot_id is None or job.lease_boot_ms is None or beat is None
                or job.lease_expires_at is None):
            return super().lease_silent(job, now, silent_for_ms)
        if job.lease_boot_id != boot[1]:
            return True
        return job.lease_boot_ms - job.lease_expires_at + beat < boot[0] - silent_for_ms

    # How long a run has lasted, on the boot clock too: from claimed_boot_ms, the claim on the clock
    # of lease_boot_id (a heartbeat renews the lease there but keeps no trace of the claim). A run
    # without it (claimed before this schema, or in another boot) is judged on claimed_at.

    def _over_timeout_where(self, now: int) -> tuple[str, list]:
        boot = self._boot()
        if boot is None:
            return super()._over_timeout_where(now)
        return ("(CASE WHEN lease_boot_id = ? AND claimed_boot_ms IS NOT NULL THEN claimed_boot_ms + timeout_ms < ? "
                "ELSE claimed_at + timeout_ms < ? END)", [boot[1], boot[0], now])

    def lease_now(self, job, now: int) -> int:
        boot = self._boot()
        if (boot is None or job.lease_boot_id != boot[1] or job.lease_boot_ms is None
                or job.lease_expires_at is None):
            return now
        return job.lease_expires_at + boot[0] - job.lease_boot_ms  # (the lease's end as far ahead as on the boot clock)

    def running_ms(self, job, now: int) -> int | None:
        boot = self._boot()
        if boot is None or job.claimed_boot_ms is None or job.lease_boot_id != boot[1]:
            return super().running_ms(job, now)
        return boot[0] - job.claimed_boot_ms

    # A worker's registry row is judged lost on the boot clock too (seen_boot_ms of boot
    # seen_boot_id, written with last_seen); a row of an earlier boot is lost; one without them
    # (written before this schema) on last_seen.

    def _alive_where(self, now: int) -> tuple[str, list]:
        from jobctl.workers import LOST_AFTER

        boot = self._boot()
        if boot is None:
            return super()._alive_where(now)
        return (f"(CASE WHEN seen_boot_id IS NULL THEN last_seen >= ? - {LOST_AFTER} * renew_ms "
                f"ELSE seen_boot_id = ? AND seen_boot_ms >= ? - {LOST_AFTER} * renew_ms END)", [now, boot[1], boot[0]])

    def worker_silence(self, row: dict, now: int) -> int:
        from jobctl.workers import LOST_AFTER

        boot = self._boot()
        if boot is None or row.get("seen_boot_id") is None or row.get("seen_boot_ms") is None:
            return super().worker_silence(row, now)
        if row["seen_boot_id"] != boot[1]:  # (its process did not outlive the host's reboot)
            return max(now - row["last_seen"], LOST_AFTER * row["renew_ms"] + 1)
        return boot[0] - row["seen_boot_ms"]

    @property
    def files(self) -> "SQLiteEngine":
        """The file capability (backup, checkpoint): this engine has it."""
        return self

    @property
    def url(self) -> str:
        """What reopens this database from another process (handlers get it as JOBCTL_DB)."""
        return os.path.abspath(self.path)

    @property
    def location(self) -> str:
        """The database as shown to people (a path here; never a password on a server engine)."""
        return self.path

    @property
    def identity(self) -> str:
        """A stable name of this database, the same from every process that opens it."""
        return os.path.realpath(self.path)

    def has_changed(self) -> bool:
        """Whether any connection committed since the last call (PRAGMA data_version: no I/O).

        Cheap enough to call every few milliseconds: a waiting worker or `claim --wait` polls it
        instead of running the claim query."""
        with self._errors():
            version = self.conn.execute("PRAGMA data_version").fetchone()[0]
        changed = version != self._data_version
        self._data_version = version
        return changed

    def orders_changed(self) -> bool:
        """Whether anyone committed since the last call, as has_changed but remembered apart: a
        worker asks this (about a second apart) before it reads its registry row for an order."""
        with self._errors():
            version = self.conn.execute("PRAGMA data_version").fetchone()[0]
        changed = version != self._orders_version
        self._orders_version = version
        return changed

    def wait_for_change(self, timeout: float, *, step: float = 0.02) -> bool:
        """Block until another connection commits or `timeout` seconds pass; True if it changed."""
        import time

        self.has_changed()
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(step, left))
            if self.has_changed():
                return True

    # -- opening ---------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike, *, create: bool = False, busy_timeout: float = 5.0,
             synchronous: str = "full", allow_network_fs: bool = False, read_only: bool = False,
             clock=None) -> "SQLiteEngine":
        """Open (or with `create`, make) a jobctl file; an older schema is migrated first.
        `read_only` opens it for looking only (shell completion): nothing is written, not even a
        migration or the journal mode; a file that would need migrating is refused."""
        check_sqlite_version()
        p = Path(path)
        created = made_file = False
        made_folders: list[str] = []
        if not allow_network_fs:
            files.check_filesystem(p)
        try:
            real = files.check_file(p)
        except FileNotFoundError:
            if not create:
                raise DatabaseUnusable(
                    f"no database at {p}; check --db / JOBCTL_DB, or create it with `jobctl --db {p} init`"
                ) from None
            files.check_db_folder(files.resolve(p))  # (before anything is created there)
            folder = Path(files.resolve(p)).parent
            while not folder.exists() and folder.parent != folder:  # (the folders it makes, deepest first)
                made_folders.append(str(folder))
                folder = folder.parent
            try:
                created = _create_database(Path(files.resolve(p)))
                made_file = created
            except sqlite3.Error as e:
                raise translate(e, str(p), busy_timeout) from e
            except OSError as e:
                if e.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise DiskFull(f"the disk holding {p} is full; no database was created; free some space "
                                   "and retry") from None
                raise DatabaseUnusable(f"cannot create the database {p}: {e.strerror}") from None
            real = files.check_file(p)
        files.check_db_folder(real)
        if not created and _empty_file(real):
            if not create:
                raise DatabaseUnusable(f"{p} is an empty file, not a jobctl database yet; make it one with "
                                       f"`jobctl --db {p} init`")
            try:
                created = _initialise_empty(real, busy_timeout)
            except sqlite3.Error as e:
                raise translate(e, str(p), busy_timeout) from e
            except OSError as e:  # (its mode could not be made private: a file root owns, say)
                raise DatabaseUnusable(f"cannot make the empty file {p} a database: {e.strerror}; nothing was "
                                       "written") from None
        if create:
            files.clean_stale_temps(real)
        try:
            conn = sqlite3.connect(  # the checked real path: a link cannot be changed in between
                f"file:{quote(real)}?mode={'ro' if read_only else 'rw'}", uri=True, isolation_level=None,
                timeout=busy_timeout, check_same_thread=False,
            )
        except sqlite3.Error as e:
            raise translate(e, str(p), busy_timeout) from e
        engine = cls(conn, str(p), busy_timeout, clock)
        engine.created = created
        engine.made_file = made_file  # (created: not from an empty file that was there)
        engine.made_folders = made_folders if made_file else []
        try:
            with engine._errors():
                conn.row_factory = sqlite3.Row
                conn.create_function("jobctl_same_json", 2, _same_json, deterministic=True)  # (--payload)
                conn.create_function("jobctl_lower", 1, _lower, deterministic=True)  # (--error beyond ASCII)
                # Text that is not UTF-8 (a damaged row) is read with its bad bytes kept as lone
                # surrogates, so that Job.from_row can name the job instead of the fetch failing.
                conn.text_factory = _TEXT
                conn.execute(f"PRAGMA synchronous = {'NORMAL' if synchronous == 'normal' else 'FULL'}")
                conn.execute("PRAGMA journal_size_limit = 8388608")  # a checkpointed WAL shrinks back to 8 MiB
                # An update of jobs fires the job_counts triggers, so SQLite keeps a statement
                # journal for it, by default in a new temporary file; in memory, a few µs.
                conn.execute("PRAGMA temp_store = MEMORY")
                # The first read opens the -wal and -shm: they must be the checked ones before a write.
                conn.execute("PRAGMA application_id").fetchone()
                files.check_open_side_files(real)
                engine._check_schema(migrate=not read_only)
                # WAL persists in the file; switch only when it is not set (a restored backup, say).
                if not read_only and conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    conn.execute("PRAGMA journal_mode = WAL")
                    files.check_open_side_files(real)
        except BaseException:
            conn.close()
            raise
        return engine

    def _check_schema(self, migrate: bool = True) -> None:
        app_id = self.conn.execute("PRAGMA application_id").fetchone()[0]
        version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        if app_id != APPLICATION_ID:
            raise DatabaseUnusable(
                f"{self.path} is not a jobctl database (it lacks jobctl's mark); nothing was changed; "
                "point --db at a jobctl file or at a new path"
            )
        if version > SCHEMA_VERSION:
            raise DatabaseUnusable(
                f"{self.path} was written by a newer jobctl (schema v{version}; this jobctl knows up to "
                f"v{SCHEMA_VERSION}); nothing was changed; upgrade jobctl"
            )
        if version < SCHEMA_VERSION and not migrate:
            raise DatabaseUnusable(f"{self.path} has schema v{version}; a command that may write migrates it first")
        if version < SCHEMA_VERSION:
            from jobctl.engines import schema

            with self._write() as (c, _now):
                current = c.execute("PRAGMA user_version").fetchone()[0]
                if current < SCHEMA_VERSION:  # another process may have migrated meanwhile
                    schema.migrate(self.conn, current)

    def close(self) -> None:
        self.conn.close()

    # -- transactions ----------------------------------------------------------------------

    @contextmanager
    def _errors(self):
        try:
            yield
        except sqlite3.Error as e:
            translated = translate(e, self.path, self.busy_timeout)
            if translated is e:
                raise
            raise translated from e

    def _write(self, *, rollback: bool = False) -> "_WriteTransaction":
        """One short write transaction that holds the write lock from its first statement; yields
        (connection, now), "now" read once, after the lock was granted.

        With rollback=True it is a dry run: the same reads and decisions, nothing kept. A COMMIT
        that fails (disk full, I/O error) is rolled back, so the write lock is never kept."""
        return _WriteTransaction(self, rollback)

    def _translated(self, e: BaseException) -> BaseException:
        """What to raise for an error met in a transaction: a sqlite3 error by its cause (translate)."""
        return translate(e, self.path, self.busy_timeout) if isinstance(e, sqlite3.Error) else e

    def _rollback(self) -> None:
        if self.conn.in_transaction:
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # SQLite may have rolled back already (a full disk, say); the first error is the news

    @contextmanager
    def _read(self):
        """One consistent snapshot for several SELECTs; ended at once so checkpoints can proceed."""
        with self._errors():
            self.conn.execute("BEGIN")
            try:
                yield self.conn
            finally:
                self._rollback()  # nothing to keep: a read ends without writing anything

    # -- the hooks of SQLEngine --------------------------------------------------------------

    def _indexed(self, name: str) -> str:
        """Pin an index: on a fresh file without statistics the planner may otherwise sort every
        pending row instead of walking the partial index that matches the claim order."""
        return f" INDEXED BY {name}"

    def _admission_now(self, c, now: int) -> int:
        self._file_history(c)  # the runs a rate window counts, all in `runs` (and its index)
        return now  # BEGIN IMMEDIATE already makes every claim take its turn

    def _pauses_possible(self, c) -> bool:
        """False when no pause exists at all, as seen by an earlier claim of this connection that
        nobody else has committed since (PRAGMA data_version: no I/O; this connection's own pauses
        forget what was seen, set_paused). The pick then skips its look-ups of the pauses."""
        version = c.execute("PRAGMA data_version").fetchone()[0]
        if version == self._no_pauses_at:
            return False
        if c.execute("SELECT EXISTS (SELECT 1 FROM queues WHERE paused = 1) OR EXISTS (SELECT 1 FROM paused_types)"
                     ).fetchone()[0]:
            self._no_pauses_at = None
            return True
        self._no_pauses_at = version
        return False

    # A commit of this connection leaves its data_version as it was: what writes pauses through it
    # forgets what was seen of them.
    def set_paused(self, queue: str, paused: bool, *, type: str | None = None, until: int | None = None) -> None:
        self._no_pauses_at = None
        super().set_paused(queue, paused, type=type, until=until)

    @contextmanager
    def importing(self):
        try:
            with super().importing() as importer:  # (migrate --to: queues and pauses arrive too)
                yield importer
        finally:
            self._no_pauses_at = None

    def _claimed_rows(self, c, sql: str, params: list, token: str) -> list:
        """The claim's row, read as plain values with strict UTF-8 (a sqlite3.Row and the lenient
        text decoder cost a tenth of a claim). A row whose text is not UTF-8 (damaged) fails to
        decode after the UPDATE took it: it is read again, under the claim's token, the lenient way."""
        cur = c.cursor()
        cur.row_factory = None
        c.text_factory = str
        try:
            found = cur.execute(sql, params).fetchall()
        except sqlite3.OperationalError as e:
            if "decode" not in str(e):
                raise
            found = None
        finally:
            c.text_factory = _TEXT
        if found is None:
            return c.execute(f"SELECT * FROM jobs WHERE {HELD_SQL} AND token = ?",
                             (token,)).fetchall()  # (the held jobs' partial index: few rows)
        if not found:
            return found
        names = self._columns.get(sql)
        if names is None:
            names = self._columns[sql] = [d[0] for d in cur.description]
        return [dict(zip(names, found[0]))] if len(found) == 1 else [dict(zip(names, row)) for row in found]

    # -- history written ahead (schema v8: history_log) ----------------------------------------

    def _event(self, c, job_id: int, now: int, from_status, to_status: str, actor: str, message=None, details=None,
               *, new_job: bool = False):
        if new_job:  # a job's first event: nothing of its history can be waiting to be filed
            super()._event(c, job_id, now, from_status, to_status, actor, message, details)
            return
        # Most events have no details: NULL in the text binds faster than a None parameter.
        params: tuple = (job_id, now, from_status, to_status, actor, message)
        self._ahead(c, c.execute(_EVENT_AHEAD_SQL[details is None],
                                 params if details is None else (*params, details_text(details))))

    def _events(self, c, rows: list[tuple]) -> None:
        for job_id, at, from_status, to_status, actor, message, details in rows:  # (written ahead, as every event)
            self._event(c, job_id, at, from_status, to_status, actor, message,
                        json.loads(details) if details else None)

    def _run_ended(self, c, job, now: int, outcome: str) -> None:
        self._ahead(c, c.execute(
            "INSERT INTO history_log (job_id, at, queue, type, worker, ready_at, started_at, outcome) "
            "VALUES (?,?,?,?,?,?,?,?)", (job.id, now, job.queue, job.type, job.worker, job.run_at, job.claimed_at, outcome)))

    def _ahead(self, c, cur) -> None:
        """After a row went into history_log: file the batch once it is full. Filing empties the
        table, so the next row's id starts again at 1 and the id tells how full it is."""
        if cur.lastrowid >= FILE_HISTORY_EVERY:
            self._file_history(c)

    def _file_history(self, c) -> None:
        """Move what history_log holds into events and runs, in the order it was written."""
        c.execute("INSERT INTO events (job_id, at, from_status, to_status, actor, message, details) "
                  "SELECT job_id, at, from_status, to_status, actor, message, details FROM history_log "
                  "WHERE outcome IS NULL ORDER BY id")
        c.execute("INSERT INTO runs (job_id, queue, type, worker, ready_at, started_at, ended_at, outcome) "
                  "SELECT job_id, queue, type, worker, ready_at, started_at, at, outcome FROM history_log "
                  "WHERE outcome IS NOT NULL ORDER BY id")
        c.execute("DELETE FROM history_log")

    # Every reader of events and runs reads these (SQLEngine.EVENTS_READ): the filed rows and those
    # still ahead, which go after every filed row. An event ahead takes an id above the filed ones,
    # in the order it was written (a job's history reads back in order by id); a run has no id here.
    # The events of one job: their index, plus a scan of the few rows ahead. (The runs' part has
    # plain columns only: a reader that orders by a column it returns gets each part walked in
    # index order and merged, not the whole of its range sorted.)
    EVENTS_READ = ("(SELECT id, job_id, at, from_status, to_status, actor, message, details FROM events UNION ALL "
                   "SELECT (SELECT coalesce(max(id), 0) FROM events) + id, job_id, at, from_status, to_status, "
                   "actor, message, details FROM history_log WHERE outcome IS NULL) AS events")
    RUNS_READ = ("(SELECT job_id, queue, type, worker, ready_at, started_at, ended_at, outcome FROM runs UNION ALL "
                 "SELECT job_id, queue, type, worker, ready_at, started_at, at, outcome FROM history_log "
                 "WHERE outcome IS NOT NULL) AS runs")

    def _count_within(self, c, sql: str, args: list, within_s: float) -> int | None:
        """The count, stopped by SQLite's progress handler once within_s has passed: None."""
        import time

        deadline = time.monotonic() + within_s
        self.conn.set_progress_handler(lambda: time.monotonic() > deadline, 20_000)
        try:
            return c.execute(sql, args).fetchone()[0]
        except sqlite3.OperationalError as e:
            if getattr(e, "sqlite_errorname", "") == "SQLITE_INTERRUPT":
                return None
            raise
        finally:
            self.conn.set_progress_handler(None, 0)

    def _lock_unique(self, c, unique_key: str) -> None:
        pass  # BEGIN IMMEDIATE already makes every enqueue take its turn

    def _jobs_may_be_ready(self, c) -> None:
        pass  # waiting workers see every commit through PRAGMA data_version (has_changed)

    def _count_inserted_jobs(self, c, first: int, last: int) -> None:
        """Jobs first..last were just inserted: count them in job_counts (no trigger does, schema v14),
        before anything changes them (the update triggers count a change from the state counted here)."""
        c.execute(COUNT_INSERTED, (first, last))

    def _state_counts(self, c) -> list[tuple[str, str, int]]:
        # job_counts: one row per queue and state, exact: the inserts count themselves
        # (_count_inserted_jobs), triggers count the updates and deletes (schema.py)
        return [(r[0], r[1], r[2]) for r in c.execute("SELECT queue, state, n FROM job_counts")]

    @classmethod
    def _insert_page(cls, rows: int, now: int, plain: bool) -> str:
        """The INSERT of `rows` jobs at once, as _INSERT inserts one, each with the parameters
        _BULK_ROW (plain: _PLAIN_ROW) reads: the transaction's `now` is written in (an integer of
        this process), and each row's run_at computed from it as NewJob.run_at does."""
        head, _one = cls._INSERT.split(" VALUES ")
        # OR FAIL: a statement that fails keeps the rows it inserted before, so SQLite keeps no
        # statement journal (a copy of every page the statement first touches, to undo it alone:
        # for the random places of the jobs' keys in their index, most of the batch's time). Nothing
        # is kept all the same: any error rolls the whole transaction back (_write).
        head = head.replace("INSERT INTO", "INSERT OR FAIL INTO", 1)
        now = int(now)
        one = (f"(?,?,?,?,?,'pending',?,?,?,{now} + ?,0,?,NULL,{now},{now},?,NULL,NULL,NULL,NULL)" if plain else
               f"(?,?,?,?,?,'pending',?,?,?,MAX({now} + ?, COALESCE(?, 0)),0,?,NULL,{now},{now},?,?,?,?,?)")
        return f"{head} VALUES {','.join([one] * rows)}"

    def _insert_many(self, c, jobs: list[NewJob], now: int, actor: str,
                     on_progress: Callable[[int, int], None] | None = None) -> list[tuple[int, bool]]:
        """Bulk path: AUTOINCREMENT ids inside one write transaction are consecutive."""
        row = c.execute("SELECT seq FROM sqlite_sequence WHERE name = 'jobs'").fetchone()
        first = (row[0] if row else 0) + 1
        step = len(jobs) if on_progress is None else self.PROGRESS_STEP
        for start in range(0, len(jobs), step):  # chunks of one transaction: still all or nothing
            chunk = jobs[start:start + step]
            plain = all(map(_NONE_SET.__eq__, map(_UNSET, chunk)))
            values = list(map(_PLAIN_ROW if plain else _BULK_ROW, chunk))
            pages = range(0, len(values) - len(values) % INSERT_PAGE, INSERT_PAGE)
            c.executemany(self._insert_page(INSERT_PAGE, now, plain),
                          (tuple(chain.from_iterable(values[i:i + INSERT_PAGE])) for i in pages))
            if len(values) % INSERT_PAGE:
                rest = values[len(pages) * INSERT_PAGE:]
                c.execute(self._insert_page(len(rest), now, plain), tuple(chain.from_iterable(rest)))
            if on_progress is not None:
                on_progress(min(start + step, len(jobs)), len(jobs))
        last = c.execute("SELECT seq FROM sqlite_sequence WHERE name = 'jobs'").fetchone()[0]
        if last - first + 1 != len(jobs):  # cannot happen while we hold the write lock
            raise RuntimeError("job ids of one batch are not consecutive")
        self._count_inserted_jobs(c, first, last)
        c.execute(
            "INSERT INTO events (job_id, at, from_status, to_status, actor, message) "
            "SELECT id, ?, NULL, 'pending', ?, 'enqueued' FROM jobs WHERE id BETWEEN ? AND ?",
            (now, actor, first, last),
        )
        return [(i, True) for i in range(first, last + 1)]

    # -- maintenance -----------------------------------------------------------------------

    def backup(self, dest: Path, *, on_progress: Callable[[int, int], None] | None = None) -> None:
        """A consistent copy through SQLite's backup API, written to a 0600 file, then renamed.
        on_progress(pages copied, pages in all) is called after each step of 4096 pages.
        Refused (exit 2): a target that is not a regular file (a device such as /dev/null, a link,
        a folder), this database or one of its side files under any name, a missing folder, a
        folder on a filesystem of the kernel (/proc, /sys, /dev). A destination that cannot be
        written (full, read-only, not allowed) exits 8 naming it. A failure leaves nothing behind."""
        problem = files.copy_target_problem(dest, self.identity) or files.copy_folder_problem(dest)
        if problem:
            raise InvalidInput(f"{problem}; nothing was written")
        folder = os.path.dirname(os.path.abspath(dest))
        with self._errors():
            needed = self.conn.execute("PRAGMA page_count").fetchone()[0] * self.conn.execute(
                "PRAGMA page_size").fetchone()[0]
        files.clean_stale_temps(dest)  # what a killed backup to this name left
        tmp = files.temp_name(dest, "backup")
        try:
            files.create_private_file(tmp)  # (a folder that is read-only or not ours to write says so here)
        except OSError as e:
            raise _cannot_write(dest, folder, e) from None
        try:
            free = files.free_bytes(folder)
            if free is not None and free < needed:
                raise DiskFull(f"the disk holding {dest} is full: the copy needs {needed / 1048576:.1f} MiB and "
                               f"{free / 1048576:.1f} MiB are free; nothing was written; free some space there or "
                               "write the backup elsewhere")
            target = sqlite3.connect(str(tmp))
            try:
                try:
                    self.conn.backup(target, pages=4096, progress=None if on_progress is None else
                                     lambda _status, remaining, total: on_progress(total - remaining, total))
                except sqlite3.Error as e:  # the database is only read: a write error is the copy's
                    raise (_copy_error(e, dest) or self._translated(e)) from e
                try:
                    # The backup API copies pages as they are: check the copy, so that a damaged
                    # file never yields a "backup" that someone later restores in good faith.
                    check = [r[0] for r in target.execute("PRAGMA quick_check").fetchall()]
                    if check == ["ok"]:
                        target.execute("PRAGMA journal_mode = DELETE")  # a self-contained single file
                except sqlite3.Error as e:
                    raise (_copy_error(e, dest, always=True) or e) from e
                if check != ["ok"]:
                    raise DatabaseUnusable(
                        f"the database {self.path} is corrupt ({'; '.join(check[:3])}); no backup was written; "
                        "restore it from an earlier backup")
            finally:
                target.close()
            try:
                os.rename(tmp, dest)
            except OSError as e:
                raise _cannot_write(dest, folder, e) from None
        except BaseException:
            for suffix in ("", "-journal", "-wal", "-shm"):
                try:
                    os.unlink(f"{tmp}{suffix}")
                except FileNotFoundError:
                    pass
            raise

    def health_checks(self) -> list[Check]:
        """doctor's checks of the file: integrity, schema version, journal mode, modes, WAL size,
        expired leases, job rows that cannot be decoded or whose payload does not match its hash."""
        with self._errors():
            c = self.conn
            integrity = [r[0] for r in c.execute("PRAGMA quick_check").fetchall()]
            version = c.execute("PRAGMA user_version").fetchone()[0]
            journal = c.execute("PRAGMA journal_mode").fetchone()[0]
            from jobctl.engines import schema

            present = schema.layout(c)
        schema_ok = schema_check(version, SCHEMA_VERSION, schema.expected_layout(), present,
                                 "restore the file from a backup")
        checks = [
            Check("integrity", integrity == ["ok"], "ok" if integrity == ["ok"] else "; ".join(integrity[:5])),
            schema_ok,
            Check("journal mode", journal == "wal", journal),
        ]
        loose = {}
        for suffix in ("", "-wal", "-shm"):
            try:
                mode = stat.S_IMODE(os.stat(self.path + suffix).st_mode)
            except FileNotFoundError:
                continue
            if mode & 0o077:
                loose[self.path + suffix] = mode
        checks.append(Check("permissions", not loose, "owner only (0600)" if not loose else
                            ", ".join(f"{p} is {m:04o}; run chmod 600 {p}" for p, m in loose.items())))
        try:
            wal = os.stat(self.path + "-wal").st_size
        except FileNotFoundError:
            wal = 0
        checks.append(Check("wal size", wal <= WAL_WARN_BYTES, f"{wal / 1048576:.1f} MiB" + (
            "" if wal <= WAL_WARN_BYTES else "; a long-running reader may be blocking checkpoints")))
        return checks + self._job_checks("restore the file from a backup or enqueue their work again", schema_ok)

    def checkpoint(self, *, wait: float | None = None) -> tuple[int, int, int]:
        """PRAGMA wal_checkpoint(TRUNCATE): (1 if readers or writers kept it from finishing, frames
        in the log, frames folded in). `wait`: the longest wait for them (default the busy timeout)."""
        with self._errors():
            if wait is None:
                return tuple(self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone())
            self.conn.execute(f"PRAGMA busy_timeout = {int(wait * 1000)}")
            try:
                return tuple(self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone())
            finally:
                self.conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")

