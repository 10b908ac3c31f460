"""Put a backup back in place of a SQLite database: `jobctl restore BACKUP`.

Copying a backup over the database by hand goes wrong in two ways: a worker that still has the
old file open keeps writing to it (or, after `cp` over the same inode, into the middle of the new
one), and the old file's -wal is replayed onto the new file at the next open, which corrupts it
(SQLite's formats do not tie a log to its database). So a restore here:

1. checks the backup: a jobctl database, whole (quick_check), of a schema this jobctl knows;
2. copies it with SQLite's backup API into a private (0600) temporary file beside the database;
3. takes SQLite's locks on the database as only a sole user can (files.SoleUse): when another
   process has it open (a worker), it refuses and changes nothing;
4. while it holds them, removes the old -wal and -journal and renames the copy into place (atomic:
   the database is at every moment either the old file or the whole backup). The -shm stays: the
   next process to open the database is the first, and SQLite rebuilds the index from nothing;
   removing it while openers may wait on its locks could leave two of them apart.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from urllib.parse import quote

from jobctl.engines import files
from jobctl.engines.schema import APPLICATION_ID, SCHEMA_VERSION
from jobctl.errors import DatabaseBusy, DatabaseUnusable, InvalidInput


def check_backup(conn: sqlite3.Connection, path) -> int:
    """The number of jobs in a backup fit to restore; InvalidInput (exit 2) saying why not."""
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if app_id != APPLICATION_ID:
            raise InvalidInput(f"{path} is not a jobctl database; nothing was changed")
        if version > SCHEMA_VERSION:
            raise InvalidInput(f"{path} was written by a newer jobctl (schema v{version}); upgrade jobctl to restore it")
        check = [r[0] for r in conn.execute("PRAGMA quick_check").fetchall()]
        if check != ["ok"]:
            raise InvalidInput(f"{path} is damaged ({'; '.join(check[:3])}); restore an earlier backup")
        return conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
    except sqlite3.DatabaseError as e:
        raise InvalidInput(f"{path} is not a usable database ({getattr(e, 'sqlite_errorname', '') or e}); "
                           "nothing was changed") from None


def restore(backup: str | os.PathLike, database: str | os.PathLike, *, force: bool = False) -> int:
    """Replace `database` with a copy of `backup`; return the number of jobs restored."""
    backup, database = Path(backup), Path(database)
    try:
        src_real = files.check_file(backup)
    except FileNotFoundError:
        raise InvalidInput(f"no backup at {backup}") from None
    except DatabaseUnusable as e:
        raise InvalidInput(f"the backup cannot be trusted: {e}") from None
    try:
        real = files.check_file(database, wal=False)  # an old -wal is what a restore removes
        exists = True
    except FileNotFoundError:
        real, exists = files.resolve(database), False
    if real == src_real:
        raise InvalidInput(f"{backup} is the database itself; give a backup file")
    if exists and not force:
        raise InvalidInput(f"the database {database} exists; restoring replaces all its jobs with the backup's; "
                           "pass --force to do it (stop the workers first)")
    files.make_private_dirs(Path(real).parent)
    files.clean_stale_temps(real)
    tmp = files.temp_name(Path(real), "restore")
    files.create_private_file(tmp)
    try:
        src = sqlite3.connect(f"file:{quote(src_real)}?mode=ro", uri=True)
        try:
            jobs = check_backup(src, backup)
            dest = sqlite3.connect(str(tmp))
            try:
                src.backup(dest)
                dest.execute("PRAGMA journal_mode = DELETE")  # one self-contained file until the next open
                if [r[0] for r in dest.execute("PRAGMA quick_check").fetchall()] != ["ok"]:
                    raise DatabaseUnusable(f"the copy of {backup} in {tmp} does not check; nothing was changed")
            finally:
                dest.close()
        finally:
            src.close()
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        try:
            with files.SoleUse(real):
                for suffix in ("-wal", "-journal"):
                    try:
                        os.unlink(real + suffix)
                    except FileNotFoundError:
                        pass
                os.rename(tmp, real)
                folder = os.open(os.path.dirname(real), os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.fsync(folder)
                finally:
                    os.close(folder)
        except files.InUse:
            raise DatabaseBusy(
                f"the database {database} is open in another process (a worker, or a command still running); "
                "stop the workers and retry; nothing was changed") from None
    except sqlite3.Error as e:
        raise DatabaseUnusable(f"cannot copy {backup}: {getattr(e, 'sqlite_errorname', '') or e}; nothing was changed") from None
    except OSError as e:
        raise DatabaseUnusable(f"cannot restore into {database}: {e.strerror}; nothing was changed") from None
    finally:
        for suffix in ("", "-journal", "-wal", "-shm"):
            try:
                os.unlink(f"{tmp}{suffix}")
            except FileNotFoundError:
                pass
    return jobs
