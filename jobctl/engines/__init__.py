"""Storage engines behind the queue, chosen by what `--db` / JOBCTL_DB / the config's `db` says.

A plain path, or `sqlite:` followed by a path (`sqlite:///var/lib/jobctl/jobs.db`), is a SQLite
file; `postgresql://...` (or `postgres://...`) is a PostgreSQL database. Nothing above this
module knows which engine it talks to.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Callable

from jobctl.errors import DatabaseUnusable, InvalidInput

if TYPE_CHECKING:
    from jobctl.engines.base import Engine

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
POSTGRES_SCHEMES = ("postgresql", "postgres")


def scheme_of(db: str) -> str | None:
    """The URL scheme of a database string, or None for a plain path."""
    m = _SCHEME.match(db)
    if m is None or (len(m.group(1)) == 1 and os.name == "nt"):  # C:\... is a path
        return None
    name = m.group(1).lower()
    if name == "sqlite" or db[m.end():].startswith("//"):
        return name
    return None  # "a:b.db" is a file name with a colon, not a URL


def sqlite_path(db: str) -> str:
    """The file path of a SQLite location: a plain path, or sqlite: + path (sqlite:///abs/path)."""
    if scheme_of(db) != "sqlite":
        return os.path.expanduser(db)
    rest = db[len("sqlite:"):]
    if rest.startswith("//"):
        rest = rest[2:]  # sqlite:///abs -> /abs; sqlite:////abs -> //abs (the same file)
        if not rest:
            raise InvalidInput(f"invalid database URL {db!r}: give a file path, as in sqlite:///var/lib/jobctl/jobs.db")
    return os.path.expanduser(rest)


_URL_HEAD = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def password_span(db: str) -> tuple[int, int] | None:
    """Where a URL's user:PASSWORD@ password is written: (start, end), or None. A password whose
    @ or / was not percent-encoded is taken whole (up to the last @ before the query; the last @
    of all when the first ? may be the password's own: no / before it), so that printing never
    shows a piece of it."""
    m = _URL_HEAD.match(db)
    if m is None:
        return None
    start = m.end()
    query = db.find("?", start)
    at = db.rfind("@", start, len(db) if query < 0 else query)
    if at < 0 and query >= 0 and "/" not in db[start:query]:
        at = db.rfind("@", start)
    colon = db.find(":", start, at) if at >= 0 else -1
    if colon < 0 or "/" in db[start:colon] or "@" in db[start:colon]:
        return None
    return colon + 1, at


def without_password(db: str) -> tuple[str, str | None]:
    """The URL with its password taken out (user:PASSWORD@, and password= parameters), and that
    password as libpq reads it (percent-decoded; a password= parameter wins), or None when it has
    none. A handler gets the first in JOBCTL_DB and the second in a private file (worker/passfile).
    The client key's passphrase (sslpassword=) is taken out too, and not returned: libpq reads it
    from no file, so a handler never gets it."""
    from urllib.parse import unquote

    head = _URL_HEAD.match(db)
    if head is None:
        return db, None  # a file path: a ? in it is a character of its name
    password = None
    span = password_span(db)
    if span is not None:
        password = unquote(db[span[0]:span[1]])
        # user:PW@host -> user@host; :PW@host -> host
        db = db[:span[0] - 1] + db[span[1]:] if span[0] - 1 > head.end() else db[:head.end()] + db[span[1] + 1:]
    if "?" in db:
        base, _, query = db.partition("?")
        kept = []
        for pair in query.split("&"):
            secret = _secret_key(pair.partition("=")[0])
            if secret == "password":
                password = unquote(pair.partition("=")[2])
            elif secret is None:
                kept.append(pair)
        db = base + ("?" + "&".join(kept) if kept else "")
    return db, password or None


SEARCH_PATH_OPTION = re.compile(r"(?:^|\s)-c\s*search_path\s*=\s*(\S*)")


def url_schema(db: str) -> str | None:
    """The schema a PostgreSQL URL names in its options (-csearch_path=NAME), else None."""
    from urllib.parse import parse_qsl, urlsplit

    if scheme_of(db) not in POSTGRES_SCHEMES:
        return None
    options = " ".join(v for k, v in parse_qsl(urlsplit(db).query) if k == "options")
    m = SEARCH_PATH_OPTION.search(options)
    return m.group(1).strip('"') if m else None


_QUERY_PAIR = re.compile(r"([?&])([^&=]*)=([^&]*)")


def _secret_key(key: str) -> str | None:
    """"password" or "sslpassword" when a URL parameter's name is one of those as libpq reads it
    (percent-decoded: pass%77ord is password too), else None."""
    from urllib.parse import unquote

    name = unquote(key).lower()
    return name if name in ("password", "sslpassword") else None


def secret_values(db: str) -> list[str]:
    """The values of a URL's password= and sslpassword= parameters, as written."""
    return [m.group(3) for m in _QUERY_PAIR.finditer(db) if _secret_key(m.group(2))]


def display(db: str) -> str:
    """A database string fit to print: any password in a URL (user:PASSWORD@, a password=
    parameter, or sslpassword=, the passphrase of the client's key) is replaced by ***."""
    span = password_span(db)
    if span is not None:
        db = db[:span[0]] + "***" + db[span[1]:]
    return _QUERY_PAIR.sub(lambda m: f"{m.group(1)}{m.group(2)}=***" if _secret_key(m.group(2)) else m.group(0), db)


def open(db: str | os.PathLike, *, create: bool = False, read_only: bool = False, settings=None,
         busy_timeout: float | None = None, allow_network_fs: bool | None = None,
         clock: Callable[[], float] | None = None) -> "Engine":
    """Open the database `db` names (creating a SQLite file when `create`), ready for the queue.

    settings: a config.Settings for the engine's own options ([sqlite] synchronous, busy timeout,
    network filesystems); busy_timeout and allow_network_fs given here win over it. clock: seconds
    since the epoch, for tests; by default the engine keeps its own clock (SQLite: this host's)."""
    text = os.fspath(db)
    scheme = scheme_of(text)
    if scheme in POSTGRES_SCHEMES:
        return _open_postgres(text, settings, create=create, read_only=read_only, busy_timeout=busy_timeout,
                              clock=clock)
    if scheme not in (None, "sqlite"):
        raise InvalidInput(
            f"unknown kind of database {display(text)!r}: give a file path (or sqlite:///PATH) for SQLite, "
            "or postgresql://user@host/dbname"
        )
    from jobctl.engines.sqlite import SQLiteEngine

    if settings is None:
        from jobctl.config import Settings

        settings = Settings()
    return SQLiteEngine.open(
        sqlite_path(text), create=create, read_only=read_only,
        busy_timeout=settings.busy_timeout if busy_timeout is None else busy_timeout,
        synchronous=settings.synchronous,
        allow_network_fs=settings.allow_network_fs if allow_network_fs is None else allow_network_fs,
        clock=clock,
    )


def _open_postgres(url: str, settings, *, create: bool, read_only: bool, busy_timeout: float | None,
                   clock: Callable[[], float] | None) -> "Engine":
    try:
        from jobctl.engines.postgres import PostgresEngine  # the driver is imported there, only there
    except ImportError as e:
        if not (e.name or "").startswith("psycopg2"):
            raise
        import shlex
        import sys

        # The command that works for the Python that runs jobctl, wherever it was installed from
        # (the distribution is jobctl-queue: `jobctl` on the package index is another project).
        raise DatabaseUnusable(
            f"cannot open {display(url)}: PostgreSQL support is not installed; install it with "
            f"{shlex.quote(sys.executable)} -m pip install 'psycopg2-binary>=2.9.9' "
            "(or pip install '.[postgres]' in jobctl's checkout)"
        ) from None
    return PostgresEngine.open(url, settings, create=create, read_only=read_only, busy_timeout=busy_timeout,
                               clock=clock)
