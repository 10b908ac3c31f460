"""The SQLite engine: one file, WAL, every write one short BEGIN IMMEDIATE transaction.

Why BEGIN IMMEDIATE everywhere: a deferred BEGIN that reads and then writes fails at once with
SQLITE_BUSY when another connection committed in between (its snapshot is stale, so the busy
timeout cannot help). Taking the write lock up front makes concurrent processes queue on the busy
timeout instead. Python's implicit transactions are off (isolation_level=None): we issue BEGIN
and COMMIT ourselves, so a SELECT is never left outside the transaction it belongs to.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from jobctl.engines.base import ClaimRequest, Change, Decide, NewJob
from jobctl.engines.schema import APPLICATION_ID, SCHEMA_VERSION  # sqlite-utils loads only on migrate
from jobctl.errors import DatabaseBusy, DatabaseUnusable, DiskFull, InvalidState, NoSuchJob, TransientDatabaseError
from jobctl.models import FINISHED, Event, Job
from jobctl.payloads import sha256

HELD = ("running", "cancel_requested")
DEPENDS, DEPENDED_ON = 1, 2  # bits of jobs.dep_flags (schema.py)
UNIQUE_LIVE = ("pending", "running", "cancel_requested")

# Filesystems on which SQLite's locks cannot be trusted.
NETWORK_FS = {
    "nfs", "nfs4", "cifs", "smb", "smb2", "smb3", "smbfs", "ncpfs", "afs", "coda", "9p", "ceph",
    "glusterfs", "lustre", "gpfs", "davfs", "fuse.sshfs", "sshfs", "fuse.glusterfs", "fuse.cephfs",
    "fuse.s3fs", "fuse.rclone", "fuse.gcsfuse", "fuse.davfs", "fuse.juicefs", "virtiofs",
}


def filesystem_type(path: str, mounts_text: str) -> str | None:
    """The type of the filesystem holding `path`, from /proc/mounts text (longest mount prefix)."""
    best, best_type = "", None
    for line in mounts_text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        mount = parts[1].replace("\\040", " ")
        if (path == mount or path.startswith(mount.rstrip("/") + "/")) and len(mount) >= len(best):
            best, best_type = mount, parts[2]
    return best_type


def _check_filesystem(path: Path) -> None:
    try:
        mounts = Path("/proc/mounts").read_text()
    except OSError:
        return  # not Linux, or /proc hidden: nothing to check against
    fstype = filesystem_type(os.path.realpath(path.parent), mounts)
    if fstype and fstype.lower() in NETWORK_FS:
        raise DatabaseUnusable(
            f"{path} is on a network filesystem ({fstype}), where SQLite's locking is unsafe and jobs "
            "could be lost or run twice; use a local disk or a server database, or pass "
            "--allow-network-fs if you know this mount's locking works"
        )


def translate(exc: sqlite3.Error, path: str, busy_timeout: float) -> Exception:
    """Turn a sqlite3 error into the user-facing error with its exit code (by error name)."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return DatabaseBusy(
            f"the database {path} is locked by another process (waited {busy_timeout:g}s); nothing "
            "changed, safe to retry, or wait longer with --busy-timeout"
        )
    if name.startswith("SQLITE_FULL"):
        return DiskFull(f"the disk holding {path} is full; nothing changed; free some space and retry")
    if name.startswith("SQLITE_READONLY"):
        return DatabaseUnusable(f"the database {path} is read-only; check the permissions of the file and its folder")
    if name.startswith("SQLITE_NOTADB"):
        return DatabaseUnusable(f"{path} is not a SQLite database; point --db at a jobctl database file")
    if name.startswith("SQLITE_CORRUPT"):
        return DatabaseUnusable(f"the database {path} is corrupt; restore it from a backup (`jobctl backup` makes one)")
    if name.startswith(("SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_AUTH")):
        return DatabaseUnusable(f"cannot open the database {path}; check the permissions of the file and its folder")
    if name.startswith("SQLITE_IOERR"):
        return DatabaseUnusable(f"I/O error on the database {path} ({name}); check the disk")
    if isinstance(exc, sqlite3.OperationalError) and str(exc).startswith(("no such column", "no such table")):
        # SQLITE_ERROR like many others: only the message says that the schema lost a part of it
        return DatabaseUnusable(f"the database {path} is damaged ({exc}); restore it from a backup "
                                "(`jobctl backup` makes one)")
    if isinstance(exc, sqlite3.OperationalError):  # rolled back, so nothing changed
        return TransientDatabaseError(f"database error on {path} ({name or exc}); nothing changed, safe to retry")
    return exc


def _make_private_dirs(folder: Path) -> None:
    """Create missing folders with mode 0700 (whatever the umask)."""
    missing = []
    p = folder
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            continue
        os.chmod(d, 0o700)


def _create_database(path: Path) -> None:
    """Create a fully initialised database at `path`, atomically.

    The schema is written to a private temporary file beside it, which is then hard-linked into
    place (link fails if the name exists). So a database file either does not exist or is a whole
    jobctl database: a crash mid-creation never leaves an empty file that looks foreign later.
    """
    from jobctl.engines import schema

    _make_private_dirs(path.parent)
    tmp = path.parent / f".{path.name}.init-{os.getpid()}-{os.urandom(4).hex()}"
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    try:
        conn = sqlite3.connect(str(tmp), isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("BEGIN IMMEDIATE")
            schema.migrate(conn, 0)
            conn.execute("COMMIT")
        finally:
            conn.close()
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process created it first: use theirs
        except OSError:
            if not path.exists():  # a filesystem without hard links
                os.rename(tmp, path)
    finally:
        for suffix in ("", "-wal", "-shm"):
            try:
                os.unlink(f"{tmp}{suffix}")
            except FileNotFoundError:
                pass


def _check_file(path: Path) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise DatabaseUnusable(f"cannot read {path}: {e.strerror}; check the permissions of its folder") from None
    if stat.S_ISLNK(st.st_mode):
        raise DatabaseUnusable(
            f"{path} is a symbolic link; jobctl refuses links to its database so that a link cannot "
            f"redirect it; give the real path ({os.path.realpath(path)})"
        )
    if stat.S_ISDIR(st.st_mode):
        raise DatabaseUnusable(f"{path} is a directory, not a database file; give a file path with --db")
    if not stat.S_ISREG(st.st_mode):
        raise DatabaseUnusable(f"{path} is not a regular file")
    if st.st_mode & 0o022:
        raise DatabaseUnusable(
            f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}); anyone could "
            f"change its jobs; run `chmod 600 {path}`"
        )


class SQLiteEngine:
    """The Engine contract (engines/base.py) on one SQLite file."""

    def __init__(self, conn: sqlite3.Connection, path: str, busy_timeout: float):
        self.conn = conn
        self.path = path
        self.busy_timeout = busy_timeout
        self._data_version: int | None = None

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
             synchronous: str = "full", allow_network_fs: bool = False, read_only: bool = False) -> "SQLiteEngine":
        """Open (or with `create`, make) a jobctl file; an older schema is migrated first.
        `read_only` opens it for looking only (shell completion): nothing is written, not even a
        migration or the journal mode; a file that would need migrating is refused."""
        p = Path(path)
        if not allow_network_fs:
            _check_filesystem(p)
        try:
            _check_file(p)
        except FileNotFoundError:
            if not create:
                raise DatabaseUnusable(
                    f"no database at {p}; check --db / JOBCTL_DB, or create it with `jobctl --db {p} init`"
                ) from None
            try:
                _create_database(p)
            except sqlite3.Error as e:
                raise translate(e, str(p), busy_timeout) from e
            except OSError as e:
                raise DatabaseUnusable(f"cannot create the database {p}: {e.strerror}") from None
            _check_file(p)
        try:
            conn = sqlite3.connect(
                f"file:{quote(str(p))}?mode={'ro' if read_only else 'rw'}", uri=True, isolation_level=None,
                timeout=busy_timeout, check_same_thread=False,
            )
        except sqlite3.Error as e:
            raise translate(e, str(p), busy_timeout) from e
        engine = cls(conn, str(p), busy_timeout)
        try:
            with engine._errors():
                conn.row_factory = sqlite3.Row
                conn.execute(f"PRAGMA synchronous = {'NORMAL' if synchronous == 'normal' else 'FULL'}")
                conn.execute("PRAGMA journal_size_limit = 8388608")  # a checkpointed WAL shrinks back to 8 MiB
                # Every write to jobs fires the job_counts triggers, so SQLite keeps a statement
                # journal for each statement, by default in a new temporary file: ~35 µs per
                # inserted row, half of `enqueue --batch` (bench/run.py); in memory, a few µs.
                conn.execute("PRAGMA temp_store = MEMORY")
                engine._check_schema(migrate=not read_only)
                # WAL persists in the file; switch only when it is not set (a restored backup, say).
                if not read_only and conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    conn.execute("PRAGMA journal_mode = WAL")
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

            with self._write():
                current = self.conn.execute("PRAGMA user_version").fetchone()[0]
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

    @contextmanager
    def _write(self, *, rollback: bool = False):
        """One short write transaction that holds the write lock from its first statement.

        With rollback=True it is a dry run: the same reads and decisions, nothing kept."""
        with self._errors():
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("ROLLBACK" if rollback else "COMMIT")

    @contextmanager
    def _read(self):
        """One consistent snapshot for several SELECTs; ended at once so checkpoints can proceed."""
        with self._errors():
            self.conn.execute("BEGIN")
            try:
                yield self.conn
            finally:
                self.conn.execute("COMMIT")

    def _event(self, job_id: int, now: int, from_status, to_status: str, actor: str, message=None, details=None):
        self.conn.execute(
            "INSERT INTO events (job_id, at, from_status, to_status, actor, message, details) VALUES (?,?,?,?,?,?,?)",
            (job_id, now, from_status, to_status, actor, message,
             json.dumps(details, ensure_ascii=False) if details else None),
        )

    # -- enqueue ---------------------------------------------------------------------------

    _INSERT = (
        "INSERT INTO jobs (queue, type, payload, payload_hash, priority, status, max_attempts, backoff, "
        "timeout_ms, run_at, waiting_on, unique_key, idempotency_key, created_at, updated_at) "
        "VALUES (?,?,?,?,?,'pending',?,?,?,?,?,?,?,?,?)"
    )

    PROGRESS_STEP = 1000  # jobs between two on_progress calls (all inside the one transaction)

    def insert_jobs(self, jobs: list[NewJob], now: int, actor: str, *,
                    on_progress: Callable[[int, int], None] | None = None) -> list[tuple[int, bool]]:
        with self._write() as c:
            if all(not (j.idempotency_key or j.unique or j.after) for j in jobs):
                return self._insert_plain(c, jobs, now, actor, on_progress)
            done = []
            for j in jobs:
                done.append(self._insert_one(c, j, now, actor))
                if on_progress is not None and (len(done) % self.PROGRESS_STEP == 0 or len(done) == len(jobs)):
                    on_progress(len(done), len(jobs))
            return done

    def _insert_plain(self, c, jobs: list[NewJob], now: int, actor: str,
                      on_progress: Callable[[int, int], None] | None = None) -> list[tuple[int, bool]]:
        """Bulk path: AUTOINCREMENT ids inside one write transaction are consecutive."""
        row = c.execute("SELECT seq FROM sqlite_sequence WHERE name = 'jobs'").fetchone()
        first = (row[0] if row else 0) + 1
        step = len(jobs) if on_progress is None else self.PROGRESS_STEP
        for start in range(0, len(jobs), step):  # chunks of one transaction: still all or nothing
            c.executemany(
                self._INSERT,
                ((j.queue, j.type, j.payload, j.payload_hash, j.priority, j.max_attempts, j.backoff,
                  j.timeout_ms, j.run_at, 0, None, None, now, now) for j in jobs[start:start + step]),
            )
            if on_progress is not None:
                on_progress(min(start + step, len(jobs)), len(jobs))
        last = c.execute("SELECT seq FROM sqlite_sequence WHERE name = 'jobs'").fetchone()[0]
        if last - first + 1 != len(jobs):  # cannot happen while we hold the write lock
            raise RuntimeError("job ids of one batch are not consecutive")
        c.execute(
            "INSERT INTO events (job_id, at, from_status, to_status, actor, message) "
            "SELECT id, ?, NULL, 'pending', ?, 'enqueued' FROM jobs WHERE id BETWEEN ? AND ?",
            (now, actor, first, last),
        )
        return [(i, True) for i in range(first, last + 1)]

    def _insert_one(self, c, j: NewJob, now: int, actor: str) -> tuple[int, bool]:
        if j.idempotency_key is not None:
            row = c.execute(
                "SELECT id, type, payload_hash FROM jobs WHERE idempotency_key = ?", (j.idempotency_key,)
            ).fetchone()
            if row:
                if row["type"] != j.type or row["payload_hash"] != j.payload_hash:
                    raise InvalidState(
                        f"idempotency key {j.idempotency_key!r} already belongs to job {row['id']} with a "
                        f"different type or payload; use another key, or `jobctl show {row['id']}`"
                    )
                return row["id"], False
        unique_key = None
        if j.unique:
            unique_key = sha256(f"{j.queue}\0{j.type}\0{j.payload_hash}".encode()).hexdigest()
            row = c.execute(
                "SELECT id FROM jobs WHERE unique_key = ? AND status IN (?,?,?) ORDER BY id LIMIT 1",
                (unique_key, *UNIQUE_LIVE),
            ).fetchone()
            if row:
                return row["id"], False
        waiting = 0
        after = sorted(set(j.after))
        if after:
            found = dict(c.execute(
                f"SELECT id, status FROM jobs WHERE id IN ({','.join('?' * len(after))})", after
            ).fetchall())
            for a in after:
                if a not in found:
                    raise NoSuchJob(a)
            waiting = sum(1 for a in after if found[a] != "completed")
        cur = c.execute(
            self._INSERT,
            (j.queue, j.type, j.payload, j.payload_hash, j.priority, j.max_attempts, j.backoff, j.timeout_ms,
             j.run_at, waiting, unique_key, j.idempotency_key, now, now),
        )
        job_id = cur.lastrowid
        if after:
            c.executemany("INSERT INTO job_deps (job_id, after_id) VALUES (?, ?)", [(job_id, a) for a in after])
            c.execute(
                f"UPDATE jobs SET dep_flags = dep_flags | CASE WHEN id = ? THEN {DEPENDS} ELSE {DEPENDED_ON} END "
                f"WHERE id IN (?,{','.join('?' * len(after))})", [job_id, job_id, *after])
        self._event(job_id, now, None, "pending", actor, "enqueued")
        return job_id, True

    # -- claim -----------------------------------------------------------------------------

    def claim(self, request: ClaimRequest, now: int) -> Job | None:
        with self._write() as c:
            return self._claim(c, request, now)

    def _claim(self, c, request: ClaimRequest, now: int) -> Job | None:
        type_filter, type_params = "", []
        if request.types:
            type_filter = f" AND type IN ({','.join('?' * len(request.types))})"
            type_params = list(request.types)
        for queue in request.queues or [None]:
            queue_filter = " AND queue = ?" if queue is not None else ""
            queue_params = [queue] if queue is not None else []
            # Pin the partial index that matches the claim order, so the planner never falls back
            # to sorting every pending row (its choice on a fresh file without statistics).
            index = "jobs_ready_by_queue" if queue is not None else "jobs_ready"
            # One statement picks and takes the job: no other writer can run between the two,
            # because the whole transaction holds the write lock (BEGIN IMMEDIATE).
            rows = c.execute(
                f"""
                UPDATE jobs SET status = 'running', attempts = attempts + 1, worker = ?, claimed_at = ?,
                    heartbeat_at = ?, lease_ms = COALESCE(?, timeout_ms),
                    lease_expires_at = ? + COALESCE(?, timeout_ms), token = ?, progress = NULL, updated_at = ?
                WHERE status = 'pending' AND id = (
                    SELECT id FROM jobs INDEXED BY {index}
                    WHERE status = 'pending' AND waiting_on = 0 AND run_at <= ?{queue_filter}{type_filter}
                      AND queue NOT IN (SELECT name FROM queues WHERE paused = 1)
                    ORDER BY priority DESC, run_at, id LIMIT 1)
                RETURNING *
                """,
                [request.worker, now, now, request.lease_ms, now, request.lease_ms, request.token, now, now,
                 *queue_params, *type_params],
            ).fetchall()  # fetch before COMMIT: an unfinished RETURNING cursor blocks it
            if rows:
                job = Job.from_row(rows[0])
                if rows[0]["dep_flags"] & DEPENDS:
                    job.after = [r[0] for r in c.execute(
                        "SELECT after_id FROM job_deps WHERE job_id = ? ORDER BY after_id", (job.id,))]
                self._event(job.id, now, "pending", "running", request.worker, f"run {job.attempts} of {job.max_attempts}")
                return job
        return None

    # -- transitions -----------------------------------------------------------------------

    def update_job(self, job_id: int, decide: Decide, now: int, actor: str) -> Job:
        with self._write() as c:
            return self._decide_and_apply(c, job_id, decide, now, actor)

    def update_jobs_and_claim(self, updates: list[tuple[int, Decide]], requests: list[ClaimRequest], now: int,
                              actor: str) -> tuple[list[Job], list[Job]]:
        """Every update, then up to len(requests) claims, in one transaction: a worker finishing
        jobs and taking the next ones pays for one commit (one fsync). All or nothing."""
        with self._write() as c:
            done = [self._decide_and_apply(c, job_id, decide, now, actor) for job_id, decide in updates]
            claimed = []
            for request in requests:
                job = self._claim(c, request, now)
                if job is None:
                    break
                claimed.append(job)
            return done, claimed

    def _decide_and_apply(self, c, job_id: int, decide: Decide, now: int, actor: str) -> Job:
        """Inside a write transaction: read the row, let the queue decide, apply the change."""
        row = c.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise NoSuchJob(job_id)
        job = Job.from_row(row)
        change = decide(job)
        return job if change is None else self._apply(c, job, change, now, actor)

    def _apply(self, c, job: Job, change: Change, now: int, actor: str) -> Job:
        fields = dict(change.fields)
        fields["status"] = change.to_status
        fields["updated_at"] = now
        if change.to_status in FINISHED and job.status not in FINISHED:
            fields.setdefault("finished_at", now)
        elif change.to_status not in FINISHED:
            fields.setdefault("finished_at", None)
        assignments = ", ".join(f"{k} = ?" for k in fields)
        rows = c.execute(
            f"UPDATE jobs SET {assignments} WHERE id = ? AND status = ? RETURNING *",
            [*fields.values(), job.id, job.status],
        ).fetchall()
        if not rows:  # cannot happen under the write lock; refuse rather than guess
            raise InvalidState(f"job {job.id} changed while it was being updated; retry")
        if change.to_status == "completed" and job.status != "completed" and rows[0]["dep_flags"] & DEPENDED_ON:
            # Jobs waiting on this one have one dependency fewer; one whose last dependency just
            # completed becomes ready now, so its age (and its place in the claim order) counts
            # from this moment rather than from when it was enqueued.
            c.execute(
                "UPDATE jobs SET run_at = CASE WHEN waiting_on = 1 THEN MAX(run_at, ?) ELSE run_at END, "
                "waiting_on = waiting_on - 1 WHERE waiting_on > 0 AND id IN "
                "(SELECT job_id FROM job_deps WHERE after_id = ?)",
                (now, job.id),
            )
        if change.run and job.claimed_at is not None:
            c.execute(
                "INSERT INTO runs (job_id, queue, type, worker, ready_at, started_at, ended_at, outcome) "
                "VALUES (?,?,?,?,?,?,?,?)",
                (job.id, job.queue, job.type, job.worker, job.run_at, job.claimed_at, now, change.run),
            )
        if change.message is not None or change.to_status != job.status:
            self._event(job.id, now, job.status, change.to_status, change.actor or actor, change.message,
                        change.details)
        return Job.from_row(rows[0])

    def _update_selected(self, sql: str, params: list, decide: Decide, now: int, actor: str,
                         dry_run: bool, on_progress: Callable[[int, int], None] | None = None
                         ) -> list[tuple[Job, Change]]:
        with self._write(rollback=dry_run) as c:
            done = []
            rows = c.execute(sql, params).fetchall()
            for n, row in enumerate(rows, 1):
                job = Job.from_row(row)
                change = decide(job)
                if change is not None:
                    done.append((job if dry_run else self._apply(c, job, change, now, actor), change))
                if on_progress is not None and (n % 100 == 0 or n == len(rows)):
                    on_progress(n, len(rows))
            return done

    def update_expired(self, decide: Decide, now: int, actor: str, *, heartbeat_before: int | None = None,
                       dry_run: bool = False) -> list[tuple[Job, Change]]:
        sql = "SELECT * FROM jobs WHERE status IN (?, ?) AND (lease_expires_at < ?"
        params: list = [*HELD, now]
        if heartbeat_before is not None:
            sql += " OR COALESCE(heartbeat_at, claimed_at) < ?"
            params.append(heartbeat_before)
        sql += ") ORDER BY id"
        return self._update_selected(sql, params, decide, now, actor, dry_run)

    def update_buried(self, decide: Decide, now: int, actor: str, *, queue: str | None = None,
                      type: str | None = None, dry_run: bool = False,
                      on_progress: Callable[[int, int], None] | None = None) -> list[tuple[Job, Change]]:
        sql, params = "SELECT * FROM jobs WHERE status = 'buried'", []
        if queue is not None:
            sql += " AND queue = ?"
            params.append(queue)
        if type is not None:
            sql += " AND type = ?"
            params.append(type)
        return self._update_selected(sql + " ORDER BY id", params, decide, now, actor, dry_run, on_progress)

    def purge(self, status: str, finished_before: int, *, dry_run: bool = False, batch: int = 500,
              on_progress: Callable[[int], None] | None = None) -> int:
        """on_progress(deleted so far) is called after each batch's commit."""
        where = "status = ? AND finished_at < ?"
        if dry_run:
            with self._read() as c:
                return c.execute(f"SELECT count(*) FROM jobs WHERE {where}", (status, finished_before)).fetchone()[0]
        total = 0
        while True:
            # Small batches, each its own short transaction, so workers are never held up long.
            with self._write() as c:
                ids = [r[0] for r in c.execute(
                    f"SELECT id FROM jobs WHERE {where} LIMIT ?", (status, finished_before, batch))]
                if ids:
                    marks = ",".join("?" * len(ids))
                    for table, column in (("events", "job_id"), ("runs", "job_id"), ("job_deps", "job_id"),
                                          ("jobs", "id")):
                        c.execute(f"DELETE FROM {table} WHERE {column} IN ({marks})", ids)
            total += len(ids)
            if on_progress is not None and ids:
                on_progress(total)
            if len(ids) < batch:
                return total

    def set_paused(self, queue: str, paused: bool, now: int) -> None:
        with self._write() as c:
            c.execute(
                "INSERT INTO queues (name, paused, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at",
                (queue, int(paused), now),
            )

    # -- reads -----------------------------------------------------------------------------

    def _with_after(self, c, jobs: list[Job]) -> list[Job]:
        ids = [j.id for j in jobs]
        if ids:
            deps: dict[int, list[int]] = {}
            for start in range(0, len(ids), 500):
                chunk = ids[start:start + 500]
                for job_id, after_id in c.execute(
                    f"SELECT job_id, after_id FROM job_deps WHERE job_id IN ({','.join('?' * len(chunk))}) "
                    "ORDER BY after_id", chunk,
                ):
                    deps.setdefault(job_id, []).append(after_id)
            for j in jobs:
                j.after = deps.get(j.id, [])
        return jobs

    def get_job(self, job_id: int) -> Job:
        with self._read() as c:
            row = c.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise NoSuchJob(job_id)
            return self._with_after(c, [Job.from_row(row)])[0]

    def get_jobs(self, job_ids: list[int]) -> list[Job]:
        with self._read() as c:
            jobs = []
            for start in range(0, len(job_ids), 500):
                chunk = job_ids[start:start + 500]
                jobs += [Job.from_row(r) for r in c.execute(
                    f"SELECT * FROM jobs WHERE id IN ({','.join('?' * len(chunk))})", chunk)]
            by_id = {j.id: j for j in self._with_after(c, jobs)}
            return [by_id[i] for i in job_ids if i in by_id]

    def events(self, job_id: int) -> list[Event]:
        with self._read() as c:
            return [
                Event(r["job_id"], r["at"], r["from_status"], r["to_status"], r["actor"], r["message"], r["details"])
                for r in c.execute("SELECT * FROM events WHERE job_id = ? ORDER BY id", (job_id,))
            ]

    _LIST_ORDERS = {"newest": "id DESC", "oldest": "id", "priority": "priority DESC, run_at, id",
                    "run-at": "run_at, id", "updated": "updated_at DESC, id DESC"}  # keys: models.LIST_SORTS

    def list_jobs(self, *, statuses=(), queue: str | None = None, type: str | None = None, limit: int = 50,
                  stuck_at: int | None = None, created_before: int | None = None, sort: str = "newest") -> list[Job]:
        clauses, args = [], []
        statuses = list(statuses)
        if statuses:
            clauses.append(f"status IN ({','.join('?' * len(statuses))})")
            args += statuses
        if queue is not None:
            clauses.append("queue = ?")
            args.append(queue)
        if type is not None:
            clauses.append("type = ?")
            args.append(type)
        if stuck_at is not None:  # held, and its lease expired or it ran past its timeout
            clauses.append("status IN ('running', 'cancel_requested') AND (lease_expires_at < ? OR claimed_at + timeout_ms < ?)")
            args += [stuck_at, stuck_at]
        if created_before is not None:
            clauses.append("created_at < ?")
            args.append(created_before)
        sql = "SELECT * FROM jobs" + (" WHERE " + " AND ".join(clauses) if clauses else "")
        sql += f" ORDER BY {self._LIST_ORDERS[sort]} LIMIT ?"
        with self._read() as c:
            return self._with_after(c, [Job.from_row(r) for r in c.execute(sql, [*args, limit])])

    def dependencies(self, job_id: int) -> list[tuple[int, str | None]]:
        """The `after` jobs of a job and their states (None when the row is gone)."""
        with self._read() as c:
            return [(r[0], r[1]) for r in c.execute(
                "SELECT d.after_id, j.status FROM job_deps d LEFT JOIN jobs j ON j.id = d.after_id "
                "WHERE d.job_id = ? ORDER BY d.after_id", (job_id,))]

    def paused_queues(self) -> set[str]:
        with self._errors():
            return {r[0] for r in self.conn.execute("SELECT name FROM queues WHERE paused = 1")}

    def queue_names(self) -> list[str]:
        with self._errors():
            rows = self.conn.execute(  # job_counts: one row per queue and state, kept by triggers
                "SELECT queue FROM job_counts WHERE n > 0 UNION SELECT name FROM queues ORDER BY 1"
            ).fetchall()
            return [r[0] for r in rows]

    def stats_snapshot(self, now: int, *, limit: int = 10, sample: int = 10_000) -> dict:
        """The raw figures of `jobctl stats`, from one read transaction (one consistent snapshot).

        Every figure is a short index walk or a read of job_counts (kept by triggers), so the cost
        does not grow with the number of finished jobs. Run times and waits are taken from the
        latest `sample` runs of the last hour."""
        with self._read() as c:
            counts: dict[str, dict[str, int]] = {}
            for queue, state_, n in c.execute("SELECT queue, state, n FROM job_counts WHERE n != 0"):
                counts.setdefault(queue, {})[state_] = n
            paused = {r[0]: bool(r[1]) for r in c.execute("SELECT name, paused FROM queues")}
            scheduled, oldest_ready, aging = {}, {}, []
            for queue, by_state in counts.items():
                if not by_state.get("pending"):
                    continue
                scheduled[queue] = c.execute(
                    "SELECT count(*) FROM jobs INDEXED BY jobs_pending_age "
                    "WHERE status = 'pending' AND waiting_on = 0 AND queue = ? AND run_at > ?", (queue, now),
                ).fetchone()[0]
                rows = c.execute(
                    "SELECT * FROM jobs INDEXED BY jobs_pending_age "
                    "WHERE status = 'pending' AND waiting_on = 0 AND queue = ? AND run_at <= ? "
                    "ORDER BY run_at, id LIMIT ?", (queue, now, limit),
                ).fetchall()
                if rows:
                    oldest_ready[queue] = rows[0]["run_at"]
                aging += [Job.from_row(r) for r in rows]
            aging = sorted(aging, key=lambda j: (j.run_at, j.id))[:limit]
            held = ("SELECT {} FROM jobs WHERE status IN (?, ?) "
                    "AND (lease_expires_at < ? OR claimed_at + timeout_ms < ?)")
            stuck_total = c.execute(held.format("count(*)"), (*HELD, now, now)).fetchone()[0]
            stuck = [Job.from_row(r) for r in c.execute(
                held.format("*") + " ORDER BY claimed_at, id LIMIT ?", (*HELD, now, now, limit))]
            buried = [Job.from_row(r) for r in c.execute(
                "SELECT * FROM jobs WHERE status = 'buried' ORDER BY finished_at DESC, id DESC LIMIT ?", (limit,))]
            # Runs that ended in (now - 60 min, now], per minute back from now (bucket 0 = the last minute).
            by_minute = c.execute(
                "SELECT (? - ended_at) / 60000 AS minute, outcome, count(*) FROM runs "
                "WHERE ended_at > ? AND ended_at <= ? GROUP BY minute, outcome",
                (now, now - 3_600_000, now),
            ).fetchall()
            recent = c.execute(
                "SELECT ended_at - started_at, started_at - ready_at, outcome FROM runs "
                "WHERE ended_at > ? AND ended_at <= ? ORDER BY ended_at DESC LIMIT ?",
                (now - 3_600_000, now, sample),
            ).fetchall()
            self._with_after(c, stuck + buried + aging)
        return {
            "counts": counts, "paused": paused, "scheduled": scheduled, "oldest_ready": oldest_ready,
            "stuck": stuck, "stuck_total": stuck_total, "buried": buried, "aging": aging,
            "runs_by_minute": [(m, outcome, n) for m, outcome, n in by_minute],
            "run_ms": [r[0] for r in recent if r[2] in ("completed", "failed")],
            "wait_ms": [r[1] for r in recent if r[1] is not None],
        }

    # -- maintenance -----------------------------------------------------------------------

    def backup(self, dest: Path, *, on_progress: Callable[[int, int], None] | None = None) -> None:
        """A consistent copy through SQLite's backup API, written to a 0600 file, then renamed.
        on_progress(pages copied, pages in all) is called after each step of 4096 pages."""
        tmp = dest.parent / f".{dest.name}.backup-{os.getpid()}-{os.urandom(4).hex()}"
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
        os.fchmod(fd, 0o600)
        os.close(fd)
        try:
            target = sqlite3.connect(str(tmp))
            try:
                with self._errors():
                    self.conn.backup(target, pages=4096, progress=None if on_progress is None else
                                     lambda _status, remaining, total: on_progress(total - remaining, total))
                    # The backup API copies pages as they are: check the copy, so that a damaged
                    # file never yields a "backup" that someone later restores in good faith.
                    check = [r[0] for r in target.execute("PRAGMA quick_check").fetchall()]
                if check != ["ok"]:
                    raise DatabaseUnusable(
                        f"the database {self.path} is corrupt ({'; '.join(check[:3])}); no backup was written; "
                        "restore it from an earlier backup")
                target.execute("PRAGMA journal_mode = DELETE")  # a self-contained single file
            finally:
                target.close()
            os.rename(tmp, dest)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise

    def file_report(self) -> dict:
        """Facts about the file for `doctor`."""
        with self._errors():
            c = self.conn
            integrity = [r[0] for r in c.execute("PRAGMA quick_check").fetchall()]
            report = {
                "integrity": "ok" if integrity == ["ok"] else "; ".join(integrity[:5]),
                "schema_version": c.execute("PRAGMA user_version").fetchone()[0],
                "journal_mode": c.execute("PRAGMA journal_mode").fetchone()[0],
            }
        modes = {}
        for suffix in ("", "-wal", "-shm"):
            try:
                modes[self.path + suffix] = stat.S_IMODE(os.stat(self.path + suffix).st_mode)
            except FileNotFoundError:
                pass
        report["modes"] = modes
        try:
            report["wal_bytes"] = os.stat(self.path + "-wal").st_size
        except FileNotFoundError:
            report["wal_bytes"] = 0
        return report

    def checkpoint(self) -> tuple[int, int, int]:
        with self._errors():
            return tuple(self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone())

    def count_expired(self, now: int) -> int:
        with self._errors():
            return self.conn.execute(
                "SELECT count(*) FROM jobs WHERE status IN (?, ?) AND lease_expires_at < ?", (*HELD, now)
            ).fetchone()[0]

    def pending_types(self) -> dict[str, int]:
        with self._errors():
            return dict(self.conn.execute(
                "SELECT type, count(*) FROM jobs WHERE status = 'pending' GROUP BY type").fetchall())

