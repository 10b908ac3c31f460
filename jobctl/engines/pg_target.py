"""Where the PostgreSQL engine connects: the URL as given (checked before the driver sees it),
the schema it names, its password kept out of every message, and the connection made with
jobctl's settings (timeouts, TCP keepalives, search_path). The driver's messages are shortened
to one line here, with a hint when a connection fails."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import psycopg2
import psycopg2.extensions

from jobctl.config import DEFAULT_PG_SCHEMA, PG_SCHEMA_NAME
from jobctl.engines import SEARCH_PATH_OPTION, display, password_span, secret_values
from jobctl.errors import ConnectionLost, DatabaseUnusable, InvalidInput

STATEMENT_GRACE_S = 30.0  # statement_timeout = busy timeout + this

# libpq's TCP settings, unless the URL sets them: keepalive probes after 30 s of silence, every
# 10 s, 3 unanswered ones end the connection; data unacknowledged for 60 s ends it too.
TCP_DEFAULTS = {"keepalives": "1", "keepalives_idle": "30", "keepalives_interval": "10", "keepalives_count": "3",
                "tcp_user_timeout": "60000"}


# -- the URL ---------------------------------------------------------------------------------

class Target:
    """Where the engine connects: the URL as given, the schema, and how to print both."""

    def __init__(self, url: str, schema: str | None = None, busy_timeout: float = 5.0):
        self.secrets = _secrets(url)
        span = password_span(url)
        if span is not None and re.search(r"[@/]|%(?![0-9A-Fa-f]{2})", url[span[0]:span[1]]):
            # libpq would read a piece of it as the host, port or database, and quote it in its error
            raise InvalidInput(f"invalid database URL {display(url)!r}: percent-encode the password's special "
                               "characters (@ as %40, / as %2F, % as %25)")
        part = _undecodable_part(url)
        if part is not None:  # the driver would raise UnicodeDecodeError on it
            raise InvalidInput(f"invalid database URL {display(url)!r}: its {part} is not UTF-8 text once "
                               "percent-decoded (a %XX that is not part of a UTF-8 character); fix it in --db / "
                               "JOBCTL_DB (or the config's db)")
        try:
            params = psycopg2.extensions.parse_dsn(url)
        except psycopg2.Error as e:
            raise InvalidInput(f"invalid database URL {display(url)!r}: {self.scrub(_first_line(e))}; "
                               "write it as postgresql://user@host:port/dbname") from None
        self.given = url
        self.params = params
        self.busy_timeout = busy_timeout
        m = SEARCH_PATH_OPTION.search(params.get("options", ""))
        self.schema_in_url = m is not None
        name = m.group(1).strip('"') if m else (schema or DEFAULT_PG_SCHEMA)
        if not PG_SCHEMA_NAME.match(name):
            where = "the URL's search_path" if m else "the config's [postgres] schema"
            raise InvalidInput(f"invalid schema name {name!r} in {where}: use 1 to 48 lowercase letters, digits "
                               "and _, starting with a letter or _ (not pg_; one schema, not a list)")
        self.schema = name
        self.channel = f'"jobctl.{name}"'  # LISTEN/NOTIFY: one channel per schema (per database)

    @property
    def url(self) -> str:
        """The URL, password included, that reopens this database and schema from another process."""
        if self.schema_in_url or self.schema == DEFAULT_PG_SCHEMA:
            return self.given
        parts = urlsplit(self.given)
        query = parse_qsl(parts.query, keep_blank_values=True)
        options = [v for k, v in query if k == "options"]
        query = [(k, v) for k, v in query if k != "options"]
        query.append(("options", " ".join([*options, f"-csearch_path={self.schema}"])))
        return urlunsplit(parts._replace(query=urlencode(query)))

    @property
    def location(self) -> str:
        """The database fit to print: the URL without its password."""
        return display(self.url)

    def connect(self, *, reconnecting: bool = False):
        """A new autocommit connection with this schema first in its search_path and the timeouts
        set; a failure is DatabaseUnusable (ConnectionLost when `reconnecting`: an outage)."""
        busy_ms = max(int(self.busy_timeout * 1000), 1)  # 0 would mean "wait for ever" to PostgreSQL
        statement_ms = busy_ms + int(STATEMENT_GRACE_S * 1000)
        options = " ".join(filter(None, [
            self.params.get("options", ""), f"-c search_path={self.schema}",
            f"-c lock_timeout={busy_ms}", f"-c statement_timeout={statement_ms}",
            # what a statement outside BEGIN runs at (the worker's one-statement steps): see BEGIN_WRITE
            "-c default_transaction_isolation=read\\ committed"]))
        extra = {"options": options, "client_encoding": "UTF8"}
        if "connect_timeout" not in self.params:
            extra["connect_timeout"] = "10"  # libpq waits for ever on an unreachable host by default
        if "application_name" not in self.params:
            extra["application_name"] = "jobctl"
        for key, value in TCP_DEFAULTS.items():
            # a server that vanishes without a reset (a host or network gone) is found dead within
            # about a minute, not after the system's two hours of silence
            if key not in self.params:
                extra[key] = value
        try:
            conn = psycopg2.connect(self.given, **extra)
            conn.autocommit = True
        except psycopg2.Error as e:
            if not reconnecting and _BAD_SETTING.match(_first_line(e)):
                # a value of the URL that libpq or the server refuses: a typo, not an outage
                raise InvalidInput(f"invalid database URL {self.location!r}: {self.scrub(_first_line(e))}; fix it "
                                   "in --db / JOBCTL_DB (or the config's db)") from None
            cls = ConnectionLost if reconnecting else DatabaseUnusable
            raise cls(f"cannot connect to PostgreSQL at {self.location}: {self.scrub(_connect_problem(e))}") from None
        return conn

    def scrub(self, text: str) -> str:
        """`text` (a driver's message) with the URL's password, as written or decoded, hidden."""
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text


def _secrets(url: str) -> list[str]:
    """The password of a URL as written (user:PASSWORD@, password=...) and decoded, and the client
    key's passphrase (sslpassword=...), longest first."""
    found = []
    span = password_span(url)
    if span is not None:
        found.append(url[span[0]:span[1]])
    found += secret_values(url)
    found += [unquote(s) for s in found]
    return sorted({s for s in found if s}, key=len, reverse=True)


def _undecodable_part(url: str) -> str | None:
    """The part of a URL (user, password, host, database, or a parameter such as options) whose
    percent-decoded bytes are not UTF-8, or None. The password is found as display() hides it."""
    parts = urlsplit(url)
    span = password_span(url)
    netloc = parts.netloc
    if span is not None:  # (a password with a raw @ or /: refused before this, but never shown)
        pieces = [("password", url[span[0]:span[1]]), ("user", url[len(parts.scheme) + 3:span[0] - 1]),
                  ("host", url[span[1] + 1:].split("/", 1)[0].split("?", 1)[0])]
    else:
        user, _, host = netloc.rpartition("@")
        pieces = [("user", user), ("host", host)]
    pieces.append(("database", parts.path[1:]))
    for item in parts.query.split("&"):
        key, _, value = item.partition("=")
        pieces += [("parameter name", key), (f"{unquote(key, errors='replace')} parameter", value)]
    for name, text in pieces:
        try:
            unquote(text.replace("+", " ") if "parameter" in name else text, errors="strict")
        except UnicodeDecodeError:
            return name
    return None


# libpq's refusals of a URL's values (before any connection), and the server's refusals of its options
_BAD_SETTING = re.compile(r"invalid [\w ]*?(value|port number)\b|unrecognized configuration parameter|"
                          r"invalid value for parameter|parameter \S+ cannot be changed", re.I)


def _first_line(e: BaseException) -> str:
    """The first line of a driver's message, without libpq's prefixes and padding."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    text = re.sub(r"^connection to server at .*?, port \d+ failed:\s*", "", text)
    text = re.sub(r"^connection to server on socket .*? failed:\s*", "", text)
    return re.sub(r"\s+", " ", re.sub(r"^(FATAL|ERROR):\s*", "", text)).strip()


def _connect_problem(e: psycopg2.Error) -> str:
    """Why a connection failed, and what to do, in one line (never the password: libpq's
    messages do not contain it)."""
    reason = _first_line(e)
    low = reason.lower()
    if "connection refused" in low or "no such file or directory" in low:
        hint = "is the server running and accepting TCP/IP connections there? check the host and port"
    elif "database" in low and "does not exist" in low:
        hint = "create the database (createdb) or fix its name in the URL"
    elif "role" in low and "does not exist" in low or "authentication failed" in low or "password" in low:
        hint = "check the user and password (in the URL, PGPASSWORD or ~/.pgpass)"
    elif "pg_hba.conf" in low:
        hint = "the server does not let this user in from here; see its pg_hba.conf"
    elif "starting up" in low or "shutting down" in low or "recovery mode" in low:
        hint = "the server is restarting; retry in a moment"
    elif "too many" in low or "remaining connection slots" in low:
        hint = "the server has no free connection slot; retry later, or raise its max_connections"
    elif "timeout" in low or "could not translate host name" in low:
        hint = "check the host name and the network"
    else:
        hint = "check --db / JOBCTL_DB"
    return f"{reason}; {hint}"
