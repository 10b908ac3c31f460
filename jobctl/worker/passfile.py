"""The database a handler is given, without its password where people read.

A handler gets JOBCTL_DB so that it can call `jobctl progress`. A handler that prints it (a
connection error, an `env` in a debug line) would put a URL's password into its output, which the
worker's log, `logs` and `show` print to anyone allowed to read the queue. So the handler's
JOBCTL_DB carries no password: it names, in libpq's `passfile` parameter, a file that holds it,
mode 0600 in a folder of its own (0700), written when the worker (or `jobctl run`) starts and
removed when it stops. libpq (jobctl, psql, psycopg) reads that file for this URL only, so the
handler's other connections keep their own ~/.pgpass and PGPASSFILE. The passphrase of a client
key (sslpassword) is left out of it altogether: libpq reads that from no file.
"""

from __future__ import annotations

import atexit
import os

from jobctl import engines


class HandlerDb:
    """`url` for a handler's JOBCTL_DB; close() removes the password's file (also at exit)."""

    def __init__(self, db: str):
        self.url = db
        self.folder: str | None = None
        if engines.scheme_of(db) not in engines.POSTGRES_SCHEMES:
            return
        bare, password = engines.without_password(db)
        if password is None:
            self.url = bare  # (without the client key's passphrase, if it had one)
            return
        import tempfile  # only here: a worker without a password does not load it
        from urllib.parse import quote

        self.folder = tempfile.mkdtemp(prefix="jobctl-", dir=_private_dir())  # mode 0700
        atexit.register(self.close)
        path = os.path.join(self.folder, "pgpass")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:  # any host, port, database and user: the file serves this URL only
            f.write("*:*:*:*:" + password.replace("\\", "\\\\").replace(":", "\\:") + "\n")
        self.url = f"{bare}{'&' if '?' in bare else '?'}passfile={quote(path, safe='/')}"

    def close(self) -> None:
        if self.folder is not None:
            import shutil

            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


def _private_dir() -> str | None:
    """This user's runtime folder (a tmpfs, emptied at logout) when there is one, else the system's."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    try:
        if runtime and os.stat(runtime).st_uid == os.getuid():
            return runtime
    except OSError:
        pass
    return None
