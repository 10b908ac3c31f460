"""The PostgreSQL engine: the queue on a server, for workers on many hosts.

The engine logic is the SQL core's (jobctl/engines/sql.py, SQLEngine); this module supplies what
is PostgreSQL's own: the connection (the URL and connecting: pg_target.py; psycopg2 as the core
uses it: pg_driver.py; the driver is imported only through this module, which engines/__init__.py
imports only when a PostgreSQL URL is opened), opening and the schema (pg_schema.py),
transactions, locks, the server's clock, errors by cause, wake-ups by LISTEN/NOTIFY, reconnecting,
and doctor's checks.

Transactions: the connection is in autocommit mode and the engine issues BEGIN and COMMIT itself.
A write is READ COMMITTED (said in its BEGIN: the server's default isolation may be another) and
takes its row locks as it reads, as strong as its later UPDATE needs them (FOR UPDATE; FOR NO KEY
UPDATE for an enqueue's `after` parents: two enqueues that both held a share lock on a parent and
then updated it deadlocked); the claim's pick and purge's are FOR UPDATE SKIP LOCKED, so workers
never wait on each other's rows; claims under limits
and enqueues of a `unique` job take turns through transaction advisory locks. A read is one
REPEATABLE READ READ ONLY transaction: one snapshot for all its SELECTs. Time is the server's
(clock_timestamp(), read once per write transaction in the same round trip as its BEGIN), so the
clocks of the workers' hosts never matter. A worker's step (complete its job, claim the next) and a
claim alone are one statement each, outside BEGIN (pg_onestatement.py): the session's default
isolation is set to READ COMMITTED for them.

Timeouts: lock_timeout is the busy timeout (--busy-timeout, default 5 s); statement_timeout is
the busy timeout plus 30 s (a statement that waited its full turn for a lock still has 30 s to
run). Either one giving up is "busy, nothing changed, safe to retry" (exit 6), as are deadlocks
and serialization failures.
"""

from __future__ import annotations

import hashlib
import re
import select
import time
from collections.abc import Callable, Iterable
from typing import Any
from contextlib import contextmanager
from functools import partial

import psycopg2
import psycopg2.errors

from jobctl import payloads
from jobctl.engines import pg_onestatement, pg_schema
from jobctl.engines.base import Change, Check, ClaimRequest, Decide, Inserted, NewJob
from jobctl.engines.pg_driver import Connection, Cursor, _row_type
from jobctl.engines.pg_schema import SCHEMA_VERSION
from jobctl.engines.pg_target import Target, _first_line
from jobctl.engines.sql import HELD_SQL, SQLEngine, completed, schema_check
from jobctl.engines.transfer import PostgresTransfer
from jobctl.errors import (ConnectionLost, DatabaseBusy, DatabaseUnusable, DiskFull, InvalidInput, JobctlError,
                           PermissionDenied, StatementCancelled)
from jobctl.models import Job, row_damage

ORDERS = "workers"  # the payload of a NOTIFY that carries an order to workers, not news of jobs
# "now" in ms since the epoch: the moment of the call, not the transaction's start (now()).
NOW_SQL = "floor(extract(epoch from clock_timestamp()) * 1000)::bigint"
# A write's isolation, said each time: a bare BEGIN takes the server's default_transaction_isolation,
# and the advisory locks' turns (admission, unique, the schema) need each statement to see what the
# previous holder committed, which REPEATABLE READ's snapshot, taken before the wait, does not.
BEGIN_WRITE = "BEGIN ISOLATION LEVEL READ COMMITTED"
LONG_TRANSACTION_S = 300  # doctor: a transaction open this long holds back vacuum
DEAD_ROWS_WARN = 10_000  # doctor: dead rows in jobs worth a word when also more than the live ones

# Errors that mean "busy: nothing changed, safe to retry" (exit 6), with what happened.
_BUSY = {
    "55P03": "a lock is held by another transaction",  # lock_not_available (lock_timeout)
    "57014": "a statement ran past its time limit",  # query_canceled by statement_timeout (not by a person)
    "40P01": "a deadlock with another transaction",  # deadlock_detected
    "40001": "a conflict with a concurrent transaction",  # serialization_failure
}
_NOT_JOBCTL = ("42P01", "42703", "42883")  # undefined table, column, function: not the schema jobctl wrote


class ReadOnly(DatabaseUnusable):
    """The server refuses writes (a standby, or default_transaction_read_only)."""


class KeyRace(DatabaseBusy):
    """Another transaction committed a job with the same idempotency key while this one was
    inserting it (the unique index made this one wait, then refused it)."""


def _key(*parts: str) -> int:
    """A transaction advisory lock's key: a signed 64-bit hash of what it protects."""
    digest = hashlib.sha256("\0".join(("jobctl", *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


# -- the engine ------------------------------------------------------------------------------


class PostgresEngine(PostgresTransfer, SQLEngine):
    """The Engine contract (engines/base.py) on a PostgreSQL database, in one schema of it."""

    NULL_EQ = "IS NOT DISTINCT FROM"
    GREATEST = "GREATEST"
    NO_LIMIT = None  # LIMIT NULL: no limit
    SKIP_LOCKED = pg_onestatement.SKIP_LOCKED
    ROW_LOCK = " FOR UPDATE"
    TURN_S = 0.0  # (workers wait for no lock of a long action: see SQLEngine.TURN_S)
    ACTION_BUDGET_MS = 100.0
    PARENTS_LOCK = " FOR NO KEY UPDATE"  # (they are updated: dep_flags)
    ID_AMONG = "id = ANY(ARRAY({}))"
    STORES_NUL = False  # text cannot hold NUL: a payload or result with one is refused (_refuse_nul)
    wakes = True  # LISTEN/NOTIFY on a connection of its own
    reconnects = True  # a lost connection is replaced at the next call (_reconnect)
    # The time a statement goes by: its parameter when a test injected a clock (_clock_ms), else
    # the server's. Tests and production run the same statements, as River's `coalesce(@now, now())`.
    CLOCK = f"COALESCE(?::bigint, {NOW_SQL})"

    def __init__(self, target: Target, raw, clock: Callable[[], float] | None = None):
        self.target = target
        self.conn = Connection(raw)
        self.clock = clock  # seconds since the epoch, for tests; None: the server's clock
        self.busy_timeout = target.busy_timeout
        self._offset_ms = 0  # the server's clock minus this host's, at the last reading
        self._identity: str | None = None
        self._listen = None  # the LISTEN connection, opened by the first has_changed()
        self._listen_fresh = False
        self._news = self._orders_news = False  # notifications heard and not yet asked about (_heard)
        self._listen_retry_at = 0.0
        # Told why, each time a lost connection was replaced (a server restart, a session ended by
        # an administrator): the worker logs it, unless it logged the outage itself.
        self.on_reconnect: Callable[[str], None] | None = None
        self._lost: str | None = None  # why the connection was found dead (the driver's first line)
        self._claims: dict[int, Job] = {}  # jobs held through this engine, as last seen (_holding)

    # -- opening ---------------------------------------------------------------------------

    @classmethod
    def open(cls, url: str, settings=None, *, create: bool = False, read_only: bool = False,
             busy_timeout: float | None = None, clock: Callable[[], float] | None = None) -> "PostgresEngine":
        """Connect to the database `url` names, in the schema that it or the config's [postgres]
        schema names (default `jobctl`). With `create`, a missing schema is made; an older one is
        migrated (not with `read_only`); a newer one is refused."""
        if settings is None:
            from jobctl.config import Settings

            settings = Settings()
        target = Target(url, settings.pg_schema, settings.busy_timeout if busy_timeout is None else busy_timeout)
        engine = cls(target, target.connect(), clock)
        try:
            engine._check_schema(create=create, migrate=not read_only)
        except BaseException:
            engine.close()
            raise
        return engine

    def _check_schema(self, *, create: bool, migrate: bool) -> None:
        version = self._schema_version()
        if version == SCHEMA_VERSION:
            return
        t = self.target
        if version is not None and version > SCHEMA_VERSION:
            raise DatabaseUnusable(
                f"the schema {t.schema} in {t.location} was written by a newer jobctl (schema v{version}; this "
                f"jobctl knows up to v{SCHEMA_VERSION}); nothing was changed; upgrade jobctl")
        if version is None and not create:
            raise DatabaseUnusable(f"no jobctl schema {t.schema!r} in {t.location}; check --db / JOBCTL_DB, or "
                                   f"create it with `jobctl --db '{t.location}' init`")
        if not migrate:
            raise DatabaseUnusable(f"the schema {t.schema} in {t.location} is at v{version}; a command that may "
                                   "write migrates it first")
        self._migrate()

    def _schema_version(self) -> int | None:
        """The schema's version, or None when there is no jobctl schema of this name (yet). A
        schema that exists but that this user may not use is PermissionDenied: the server leaves
        such a schema out of the search_path, so its tables look missing."""
        t = self.target
        with self._errors():
            try:
                return self.conn.execute("SELECT version FROM schema_version").fetchone()[0]
            except psycopg2.errors.UndefinedTable:
                pass
            usable = self.conn.execute("SELECT has_schema_privilege(oid, 'USAGE') FROM pg_namespace WHERE nspname = ?",
                                       (t.schema,)).fetchone()
        if usable is not None and not usable[0]:
            raise PermissionDenied(f"permission denied in {t.location}: the user {self._user} may not use the schema "
                                   f"{t.schema} (it exists); {self._grant_hint('schema')}")
        return None

    @property
    def _user(self) -> str:
        """This connection's user, as SQL names it (quoted when it must be)."""
        user = self.conn.raw.info.user
        return user if re.fullmatch(r"[a-z_][a-z0-9_]*", user) else '"' + user.replace('"', '""') + '"'

    def _grant_hint(self, kind: str | None = None) -> str:
        """What the schema's owner runs so that this user may work in it: the grant of the kind of
        object the server named (schema, table, sequence), else all three, the rights every jobctl
        command needs (README; the read commands need only USAGE and SELECT)."""
        s, u = self.target.schema, self._user
        grants = {"schema": f"GRANT USAGE ON SCHEMA {s} TO {u}",
                  "table": f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {s} TO {u}",
                  "sequence": f"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {s} TO {u}"}
        if kind in grants:
            return f"as the schema's owner, run: {grants[kind]}"
        return "as the schema's owner, run: " + "; ".join(grants.values())

    def _migrate(self) -> None:
        """Create or migrate the schema in one transaction, under the schema's advisory lock:
        processes that start at once wait for the first, then find the schema made."""
        t = self.target
        with self._errors():
            cur = self.conn.raw.cursor()
            cur.execute(BEGIN_WRITE + "; SELECT pg_advisory_xact_lock(%s)", (_key("schema", t.schema),))
            try:
                cur.execute("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = %s), "
                            "(SELECT count(*) FROM pg_tables WHERE schemaname = %s), to_regclass(%s)",
                            (t.schema, t.schema, f'"{t.schema}".schema_version'))
                exists, tables, marked = cur.fetchone()
                if exists and tables and marked is None:
                    raise DatabaseUnusable(
                        f"the schema {t.schema} in {t.location} holds tables that are not jobctl's; nothing was "
                        "changed; name another schema (?options=-csearch_path%3DNAME in the URL, or [postgres] "
                        "schema in the config)")
                version = 0
                if marked is not None:
                    cur.execute("SELECT version FROM schema_version")
                    version = cur.fetchone()[0]
                if version > SCHEMA_VERSION:
                    raise DatabaseUnusable(
                        f"the schema {t.schema} in {t.location} was written by a newer jobctl (schema v{version}); "
                        "nothing was changed; upgrade jobctl")
                if version == 0:
                    cur.execute("SELECT current_setting('server_encoding')")
                    encoding = cur.fetchone()[0]
                    if encoding != "UTF8":  # payloads are any JSON: text in any language, emoji
                        raise DatabaseUnusable(
                            f"the database of {t.location} uses the encoding {encoding}, which cannot hold every "
                            "payload; jobctl needs a UTF8 database (createdb -E UTF8 -T template0 NAME); nothing "
                            "was changed")
                if version < SCHEMA_VERSION:
                    if version == 0 and not exists:
                        try:
                            cur.execute(f'CREATE SCHEMA "{t.schema}"')
                        except psycopg2.errors.InsufficientPrivilege as e:
                            raise PermissionDenied(
                                f"permission denied in {t.location}: the user {self._user} may not create the schema "
                                f"{t.schema} ({_first_line(e)}); create it for this user (CREATE SCHEMA {t.schema} "
                                f"AUTHORIZATION {self._user}) or grant the user CREATE on the database") from None
                    pg_schema.migrate(cur, version)
                cur.execute("COMMIT")
                self.created = version == 0  # jobctl's schema is new in this database
                self.created_schema = version == 0 and not exists  # (not only its tables: the schema too)
            except BaseException:
                self._rollback()
                raise

    def close(self) -> None:
        self.conn.close()
        self._drop_listener()

    # -- what the engine is ----------------------------------------------------------------

    @property
    def files(self) -> None:
        """A server database: no file to back up or checkpoint (use pg_dump)."""
        return None

    @property
    def url(self) -> str:
        return self.target.url

    @property
    def location(self) -> str:
        return self.target.location

    @property
    def identity(self) -> str:
        """The server (its system identifier: the same from every host), database and schema."""
        if self._identity is None:
            with self._errors():
                try:
                    server = str(self.conn.execute("SELECT system_identifier FROM pg_control_system()").fetchone()[0])
                except psycopg2.errors.InsufficientPrivilege:
                    info = self.conn.raw.info
                    server = f"{info.host}:{info.port}"
                db = self.conn.execute("SELECT current_database()").fetchone()[0]
            self._identity = f"postgresql:{server}/{db}/{self.target.schema}"
        return self._identity

    # -- the clock -------------------------------------------------------------------------

    def _clock_ms(self) -> int | None:
        """CLOCK's parameter: the injected clock's time in ms (tests), None for the server's."""
        return None if self.clock is None else int(self.clock() * 1000)

    def now(self) -> int:
        """The server's clock in ms. Outside a transaction, when the server cannot be reached,
        this host's clock corrected by the difference seen last (views and the worker's
        clock-jump check only; every write reads the server's time itself)."""
        try:
            with self._errors():
                ms = self.conn.execute("SELECT " + self.CLOCK, (self._clock_ms(),)).fetchone()[0]
        except ConnectionLost:
            if self.conn.in_transaction:
                raise
            return time.time_ns() // 1_000_000 + self._offset_ms
        self._offset_ms = ms - time.time_ns() // 1_000_000
        return ms

    # -- transactions ----------------------------------------------------------------------

    @contextmanager
    def _errors(self):
        if self.conn.broken and not self.conn.in_transaction:
            self._reconnect()
        try:
            yield
        except psycopg2.Error as e:
            raise self._translate(e) from e

    def _reconnect(self) -> None:
        """A new connection in place of a lost one (the server restarted, or our backend was
        terminated); an outage until the server answers again (ConnectionLost). on_reconnect is
        told why the old one was lost."""
        self.conn.close()
        self.conn = Connection(self.target.connect(reconnecting=True))
        why, self._lost = self._lost or "the connection was closed", None
        if self.on_reconnect is not None:
            self.on_reconnect(why)

    def _translate(self, e: psycopg2.Error, *, committing: bool = False) -> Exception:
        """The jobctl error of a driver error's cause (see the module docstring); a bug as it is."""
        t = self.target
        code = getattr(e, "pgcode", None) or ""
        if self.conn.broken or code.startswith(("08", "57P")) or isinstance(e, psycopg2.InterfaceError):
            self._lost = _first_line(e)
            self.conn.in_transaction = False
            self.conn.pending.clear()
            if committing:
                return ConnectionLost(
                    f"the connection to {t.location} was lost while committing ({_first_line(e)}); the change may or "
                    "may not have been made: look before retrying (`jobctl show`)")
            return ConnectionLost(f"the connection to {t.location} was lost ({_first_line(e)}); nothing changed, "
                                  "safe to retry once the server answers")
        if code == "0A000" and "cached plan" in str(e):
            # A table changed under our prepared statements (a newer jobctl migrating, say): they
            # are forgotten, and the retry prepares them again against the table as it is now.
            self.conn.forget_prepared()
            return DatabaseBusy(f"the tables in {t.location} changed under this connection's prepared statements "
                                "(another jobctl migrating?); nothing changed, safe to retry")
        if code == "26000" and self.conn.prepares:
            # Our prepared statement is gone: a pooler in transaction mode (PgBouncer) sent this
            # transaction to another server session. Nothing was kept; prepare nothing from now on.
            self.conn.prepares = False
            return DatabaseBusy(f"the database {t.location} lost a prepared statement (a connection pooler in "
                                "transaction mode?); nothing changed, safe to retry")
        if code == "57014" and "user request" in str(e):  # (a statement timeout says "statement timeout")
            return StatementCancelled(
                f"a statement of this command was cancelled on the server of {t.location} (pg_cancel_backend, "
                "or a person's request); nothing changed")
        if code in _BUSY:
            return DatabaseBusy(
                f"the database {t.location} is busy: {_BUSY[code]} (waited up to {t.busy_timeout:g}s); nothing "
                "changed, safe to retry, or wait longer with --busy-timeout")
        if code == "23505" and "idempotency_key" in (getattr(e.diag, "constraint_name", None) or ""):
            return KeyRace(
                "another process enqueued a job with the same idempotency key at the same moment; nothing changed, "
                "safe to retry (the retry finds that job)")
        if code in ("22P05", "22021"):  # a schema made before jobctl refused databases that are not UTF8
            return InvalidInput(f"the database of {t.location} cannot store this text ({_first_line(e)}); "
                                "jobctl needs a UTF8 database (createdb -E UTF8 -T template0 NAME, then `jobctl "
                                "migrate --to` it); nothing changed")
        if code == "25006":
            return ReadOnly(
                f"the database {t.location} is read-only ({_first_line(e)}); point --db at the primary server, "
                "or turn default_transaction_read_only off for this user or database")
        if code == "53100":
            return DiskFull(f"the disk of the server of {t.location} is full; nothing changed; free some space "
                            "and retry")
        if code in _NOT_JOBCTL:
            return DatabaseUnusable(f"the schema {t.schema} in {t.location} is not a usable jobctl schema: "
                                    f"{_first_line(e)}; `jobctl doctor` says more")
        if code == "42501" and "must be owner" in str(e):  # a newer jobctl migrating the schema of another user
            return PermissionDenied(f"permission denied in {t.location} ({_first_line(e)}); only the owner of the "
                                    f"schema {t.schema} may change its tables: run `jobctl init` as that user first")
        if code == "42501":
            m = re.search(r"permission denied for (schema|table|relation|sequence)\b", _first_line(e))
            kind = None if m is None else "table" if m.group(1) == "relation" else m.group(1)
            return PermissionDenied(f"permission denied in {t.location} ({_first_line(e)}); {self._grant_hint(kind)}")
        if code in ("XX001", "XX002") or code.startswith("58"):  # damaged data or index; the server's I/O failed
            return DatabaseUnusable(f"the server of {t.location} cannot read or write its data ({_first_line(e)}); "
                                    "nothing changed; see the server's log")
        if code.startswith("53"):  # insufficient resources: out of memory, too many connections
            return DatabaseUnusable(f"the server of {t.location} is out of resources ({_first_line(e)}); "
                                    "retry later")
        return e

    @contextmanager
    def _write(self, *, rollback: bool = False):
        """One write transaction: BEGIN and the server's time in one round trip; yields
        (connection, now). COMMIT (with a NOTIFY when a job may have become ready), or ROLLBACK
        on any error and for a dry run. A connection lost at COMMIT is never reported as a commit."""
        with self._transaction(None, rollback=rollback) as (c, now, _row):
            yield c, now

    @contextmanager
    def _write_job(self, job_id: int | None):
        """As the core's, in one round trip fewer: the BEGIN, the job's row (locked) and the
        server's time go together (the time as a column of the row)."""
        with self._transaction(job_id) as started:
            yield started

    # The time in a projection above the row lock: read once the lock is granted, not before a wait for it.
    _JOB_ROW_AND_NOW = f"SELECT *, {CLOCK} AS jobctl_now FROM (SELECT * FROM jobs WHERE id = ? FOR UPDATE) AS locked"

    def _begin_with_job(self, job_id: int) -> tuple[int, Any]:
        """BEGIN, then job `job_id`'s row locked and the server's time, in one round trip (the
        SELECT is prepared like any statement the connection repeats): (now, row or None). A
        connection found dead is replaced, as in _begin: nothing had been done on it."""
        for attempt in (1, 2):
            c = self.conn
            c.pending[:] = [BEGIN_WRITE.encode()]
            c.in_transaction = True
            try:
                cur = c.execute(self._JOB_ROW_AND_NOW, (self._clock_ms(), job_id))
                assert isinstance(cur, Cursor)  # (a SELECT is never deferred)
                raw = cur.cur.fetchone()
                if raw is None:  # no such job: the time on its own (the caller refuses the job anyway)
                    return c.execute("SELECT " + self.CLOCK, (self._clock_ms(),)).fetchone()[0], None
                return raw[-1], _row_type(cur.cur.description[:-1])(raw[:-1])
            except BaseException as e:
                self._rollback()  # (a lock timeout, say, leaves the transaction open and failed)
                if attempt == 2 or not c.broken or not isinstance(e, psycopg2.Error):
                    raise
                self._lost = _first_line(e)
            self._reconnect()
        raise AssertionError("unreachable")

    @contextmanager
    def _transaction(self, job_id: int | None, *, rollback: bool = False):
        """_write's transaction, yielding (connection, now, row): with a job_id, its row is read
        (locked) in the same round trip as the BEGIN and the time (None: no such job)."""
        with self._errors():
            c = self.conn
            if c.in_transaction:
                raise RuntimeError("a write transaction inside another")
            row = None
            if job_id is None:
                clock = self._clock_ms()  # (a literal: the BEGIN's round trip sends no parameters)
                now = self._begin(f"{BEGIN_WRITE}; SELECT " + self.CLOCK.replace("?", "NULL" if clock is None else str(clock))
                                  ).fetchone()[0]
            else:
                now, row = self._begin_with_job(job_id)
            self._offset_ms = now - time.time_ns() // 1_000_000
            c = self.conn  # (a new one, if _begin had to reconnect)
            c.notify = c.orders = False
            c.in_transaction = True
            try:
                yield c, now, row
            except BaseException:
                self._rollback()
                raise
            end = "ROLLBACK" if rollback else "COMMIT"
            if c.notify and not rollback:
                end = f"NOTIFY {self.target.channel}; {end}"
            if c.orders and not rollback:
                end = f"NOTIFY {self.target.channel}, '{ORDERS}'; {end}"
            try:
                if rollback:
                    c.pending.clear()  # a dry run: what was deferred need not run at all
                c.raw.cursor().execute(c.take_pending(end.encode()))
            except psycopg2.Error as e:
                self._rollback()
                raise self._translate(e, committing=not rollback) from e  # (a dry run ends in ROLLBACK)
            finally:
                c.in_transaction = False

    def _begin(self, sql: str) -> Cursor:
        """Start a transaction. A connection found dead at this point (the server dropped it while
        we were idle: a restart, pg_terminate_backend) is replaced and the BEGIN sent again: nothing
        had been done on it, so nothing can be done twice."""
        self.conn.pending.clear()
        try:
            return self.conn.begin(sql)
        except psycopg2.Error as e:
            if not self.conn.broken:
                raise
            self._lost = _first_line(e)
        self._reconnect()
        return self.conn.begin(sql)

    def _rollback(self) -> None:
        c = self.conn
        c.in_transaction = False
        c.pending.clear()
        if c.broken:
            return
        try:
            c.raw.cursor().execute("ROLLBACK")
        except psycopg2.Error:
            pass  # the first error is the news

    @contextmanager
    def _read(self):
        """One consistent snapshot (REPEATABLE READ, READ ONLY) for several SELECTs; inside a
        write transaction, that transaction's own view."""
        with self._errors():
            if self.conn.in_transaction:
                yield self.conn
                return
            self._begin("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            c = self.conn
            c.in_transaction = True
            try:
                yield c
            finally:
                self._rollback()  # nothing to keep

    # -- the SQL core's hooks --------------------------------------------------------------

    def _indexed(self, name: str) -> str:
        return ""  # the planner picks the partial indexes itself

    def _admission_now(self, c, now: int) -> int:
        """Claims under limits take turns (a transaction advisory lock for this schema's
        admission), then count with a fresh statement snapshot, at a fresh server time: what
        other claims committed while this one waited is counted."""
        return c.execute(f"SELECT pg_advisory_xact_lock(?), {self.CLOCK}",
                         (_key("admission", self.target.schema), self._clock_ms())).fetchone()[1]

    def _held_rows_now(self, c, now: int) -> tuple[list, int]:
        rows = c.execute(f"SELECT t.now AS jobctl_now, held.* FROM (SELECT {self.CLOCK} AS now) AS t "
                         f"LEFT JOIN ({self.HELD_ROWS.format('')}) AS held ON true", (self._clock_ms(),)).fetchall()
        held = [r[1:] for r in rows if r[1] is not None]  # (type is never NULL: a NULL one is the empty join)
        return [dict(zip(("type", "concurrency_group", "cost_units", "claimed_at"), r)) for r in held], rows[0][0]

    def _count_inserted_jobs(self, c, first: int, last: int) -> None:
        pass  # the insert statement's trigger appends them to job_count_changes (pg_schema.py)

    def _lock_unique(self, c, unique_key: str) -> None:
        """Two enqueues of the same `unique` job take turns, so the second finds the first's."""
        c.execute("SELECT pg_advisory_xact_lock(?)", (_key("unique", self.target.schema, unique_key),))

    def _jobs_may_be_ready(self, c) -> None:
        """Wake listening workers: a NOTIFY sent with the COMMIT (PostgreSQL delivers it then,
        and only if the transaction commits), so it costs no round trip of its own."""
        c.notify = True

    def _orders_sent(self, c) -> None:
        """Wake the workers: a NOTIFY with the payload ORDERS, sent with the COMMIT. It does not
        wake idle workers to claim (has_changed tells it apart): it is no news of jobs."""
        c.orders = True

    def _state_counts(self, c) -> list[tuple[str, str, int]]:
        return [(r[0], r[1], int(r[2])) for r in c.execute(pg_schema.STATE_COUNTS).fetchall()]

    _COLUMNS = ("id, queue, type, payload, payload_hash, priority, status, max_attempts, backoff, timeout_ms, run_at, "
                "unique_key, created_at, updated_at, cost_units, concurrency_group, on_buried, on_completed, on_cancelled")

    def _insert_many(self, c, jobs: list[NewJob], now: int, actor: str,
                     on_progress: Callable[[int, int], None] | None = None) -> list[tuple[int, bool]]:
        """Jobs without keys or `after`, with their enqueue events: ids drawn from the sequence
        first (one round trip), then one multi-row INSERT per page, whose enqueue events are
        inserted by the same statement."""
        for j in jobs:
            _refuse_nul(j)
        ids: list[int | None] = [None]
        template = "(DEFAULT,?,?,?,?,?,'pending',?,?,?,?,?,?,?,?,?,?,?,?)"
        if len(jobs) > 1:  # (one job: `jobctl enqueue`, the job and its event in one round trip)
            ids = sorted(r[0] for r in c.execute(
                "SELECT nextval(pg_get_serial_sequence('jobs', 'id')) FROM generate_series(1, ?)",
                (len(jobs),)).fetchall())
            template = "(?,?,?,?,?,?,'pending',?,?,?,?,?,?,?,?,?,?,?,?)"
        head = f"WITH inserted AS (INSERT INTO jobs ({self._COLUMNS}) VALUES "
        tail = (" RETURNING id) INSERT INTO events (job_id, at, from_status, to_status, actor, message) "
                f"SELECT id, {int(now)}, NULL, 'pending', {_literal(c, actor)}, 'enqueued' FROM inserted "
                "RETURNING job_id")

        def row(job_id, j: NewJob) -> tuple:
            values = (j.queue, j.type, j.payload, j.payload_hash, j.priority, j.max_attempts, j.backoff, j.timeout_ms,
                      j.run_at(now), j.unique_key, now, now, j.cost_units, j.concurrency_group, j.on_buried, j.on_completed,
                      j.on_cancelled)
            return values if job_id is None else (job_id, *values)

        done: list[int] = []
        step = self.PROGRESS_STEP if on_progress is not None else len(jobs)
        for start in range(0, len(jobs), step):
            chunk = jobs[start:start + step]
            returned = c.insert_values(head, template, [row(i, j) for i, j in zip(ids[start:start + step], chunk)],
                                       tail)
            done += sorted(r[0] for r in returned)
            if on_progress is not None:
                on_progress(len(done), len(jobs))
        if len(done) != len(jobs):
            raise RuntimeError("a bulk insert returned fewer jobs than it was given")
        return [(i, True) for i in done]

    def _insert_one(self, c, j: NewJob, now: int, actor: str, message: str = "enqueued") -> tuple[int, bool]:
        _refuse_nul(j)
        return super()._insert_one(c, j, now, actor, message)

    def insert_stream(self, jobs: Iterable[NewJob], total: int, actor: str, *,
                      on_progress: Callable[[int, int], None] | None = None) -> Inserted:
        """As the core's, and when another process committed a job with the same idempotency key
        at the same moment (KeyRace), once more from the first job: nothing was kept, and this
        time the lookup finds that job, as on SQLite, where enqueues take turns."""
        for _ in range(2):
            try:
                return super().insert_stream(jobs, total, actor, on_progress=on_progress)
            except KeyRace:
                pass
        return super().insert_stream(jobs, total, actor, on_progress=on_progress)

    # -- the worker's hot path: one statement per step (pg_onestatement.py) ---------------------

    def claim(self, request: ClaimRequest) -> Job | None:
        if pg_onestatement.claims_alone(request):
            written = self._one_statement(None, request, "")
            if written is not None:
                return written[1]
        return super().claim(request)

    def update_job(self, job_id: int, decide: Decide, actor: str) -> Job:
        completion = self._completion_alone(job_id, decide)
        if completion is not None:
            written = self._one_statement(completion, None, actor)
            if written is not None and written[0] is not None:
                return written[0]
        return self._update_job(job_id, decide, actor)

    def update_jobs_and_claim(self, updates: list[tuple[int, Decide]], requests: list[ClaimRequest],
                              actor: str) -> tuple[list[Job], list[Job]]:
        if len(updates) <= 1 and len(requests) <= 1 and (updates or requests):
            completion = self._completion_alone(*updates[0]) if updates else None
            return self._in_one_statement_or_not(updates, completion, requests, actor)
        return self._update_jobs_and_claim(updates, requests, actor)

    def prepare_update_and_claim(self, job_id: int, decide: Decide, request: ClaimRequest,
                                 actor: str) -> Callable[[], tuple[list[Job], list[Job]]]:
        updates = [(job_id, decide)]
        return partial(self._in_one_statement_or_not, updates, self._completion_alone(job_id, decide), [request],
                       actor)

    def _in_one_statement_or_not(self, updates: list[tuple[int, Decide]], completion: tuple[Job, Change] | None,
                                 requests: list[ClaimRequest], actor: str) -> tuple[list[Job], list[Job]]:
        """At most one update (with its completion alone, if it has one) and one claim: in one
        statement where it can be, else by the general path."""
        request = requests[0] if requests else None
        if ((completion is not None or not updates)
                and (request is None or pg_onestatement.claims_alone(request))):
            written = self._one_statement(completion, request, actor)
            if written is not None:
                done, claimed = written
                return ([done] if done is not None else []), ([claimed] if claimed is not None else [])
        return self._update_jobs_and_claim(updates, requests, actor)

    def _one_statement(self, completion: tuple[Job, Change] | None, request: ClaimRequest | None,
                       actor: str) -> tuple[Job | None, Job | None] | None:
        """Complete and/or claim in one statement: (the completed job, the claimed job or None);
        None when nothing was written (the row no longer holds the claim the completion was decided
        on, or the connection was found dead before the statement ran): take the general path."""
        sql, params = pg_onestatement.statement(
            self.CLOCK, self._clock_ms(),
            None if completion is None else pg_onestatement.completion_ctes(*completion, actor),
            None if request is None else pg_onestatement.claim_ctes(request, after_done=completion is not None))
        with self._errors():
            if self.conn.in_transaction:
                raise RuntimeError("a write transaction inside another")
            try:
                cur = self.conn.run_alone(sql, params).cur
                raw = cur.fetchone()
            except psycopg2.Error as e:
                error = self._translate(e, committing=True)
                if not isinstance(error, ConnectionLost):
                    raise error from e
                if self._made_before_lost(completion, request) is None:
                    return None
                raise error from e
        names = [d[0] for d in cur.description]
        row = dict(zip(names, raw))
        now = row.pop("jobctl_now")
        self._offset_ms = now - time.time_ns() // 1_000_000
        done = None
        if completion is not None:
            if not row.pop("jobctl_done"):
                return None
            job, change = completion
            self._claims.pop(job.id, None)
            done = completed(job, change, now)
        if request is None or row.get("id") is None:
            return done, None
        after = row.pop("jobctl_after")
        damage = row_damage(row, check_hash=True)
        if damage is not None:
            return done, self._claim_past_damaged(row, damage, request)
        return done, self._holding(Job.from_checked_row(row, list(after or [])))

    def _made_before_lost(self, completion: tuple[Job, Change] | None, request: ClaimRequest | None) -> bool | None:
        """After the connection was lost during a one-statement step: look, on a new connection,
        whether the step was made. None: it was not (the job is still held by its claim, and no
        job carries the new claim's token), so the general path may make it; True otherwise (it
        was made, or it cannot be told: the caller says "may or may not"). A server that is
        still away: True (the outage is the news)."""
        try:
            with self._errors():
                c = self.conn
                held_with = f"SELECT 1 FROM jobs WHERE {HELD_SQL} AND token = ?"  # (jobs_held)
                if request is not None and c.execute(held_with, (request.token,)).fetchone():
                    return True
                if completion is not None:
                    job = completion[0]
                    row = c.execute("SELECT status, token FROM jobs WHERE id = ?", (job.id,)).fetchone()
                    if row is None or row[0] != "running" or row[1] != job.token:
                        return True
        except JobctlError:
            return True
        return None

    def _claim_past_damaged(self, row: dict, damage: str, request: ClaimRequest) -> Job | None:
        """The job that a one-statement claim took cannot be trusted: bury it (still ours: nothing
        else has its token), as the general claim does in its own transaction, then claim again."""
        with self._write_job(row["id"]) as (c, now, locked):
            if locked is not None and locked["token"] == request.token:
                self._bury_damaged(c, row["id"], damage, now, request.worker)
        return super().claim(request)

    # -- counts: folded now and then, so stats reads few rows ------------------------------

    def fold_counts(self) -> None:
        """Move the appended count changes into the totals (pg_schema.py), unless another process
        is doing it right now."""
        with self._write() as (c, _now):
            if c.execute("SELECT pg_try_advisory_xact_lock(?)", (_key("fold", self.target.schema),)).fetchone()[0]:
                c.execute(pg_schema.FOLD_COUNTS)

    def stats_snapshot(self, **kwargs) -> dict:
        try:
            self.fold_counts()
        except (DatabaseBusy, ReadOnly, PermissionDenied):
            pass  # (a standby, or a user who may only read: the counts are read unfolded, which costs a little more)
        return super().stats_snapshot(**kwargs)

    def _payload_equals(self, path: list, value: object) -> tuple[str, list]:
        """jsonb: one parse per row, equality by value (1 = 1.0; keys in any order). A number in
        the path is a list index (`-> 0` on an object is NULL), as on SQLite."""
        from jobctl.selection import payload_json

        from jobctl.engines.sql import payload_hint

        from jobctl.payloads import holds_nul

        text = payload_json(value)
        if holds_nul(text) or any(isinstance(p, str) and "\x00" in p for p in path):
            return "1 = 0", []  # (no payload here holds a NUL, and jsonb cannot even read one)
        # (`-> 0` on a single value, 1 or "a", gives that value back: a list index looks into a list only)
        at, guards, guard_params = "payload::jsonb", [], []
        for i, p in enumerate(path):
            if isinstance(p, int):
                guards.append(f"jsonb_typeof({at}) = 'array' AND ")
                guard_params += path[:i]
            at += " -> ?::int" if isinstance(p, int) else " -> ?::text"
        sql, params = f"({''.join(guards)}({at}) = ?::jsonb)", [*guard_params, *path, text]
        hint = payload_hint(value)
        if hint is None:
            return sql, params
        # (as on SQLite: a substring test first, and only the rows that pass are parsed)
        return f"(strpos(payload, ?) > 0 AND {sql})", [hint, *params]

    def purge(self, status: str, older_than_ms: int, **kwargs) -> int:
        n = super().purge(status, older_than_ms, **kwargs)
        if not kwargs.get("dry_run"):
            self.fold_counts()  # workers purge every few minutes: the changes never pile up
        return n

    # -- wake-ups ----------------------------------------------------------------------------

    def _listener(self):
        """The LISTEN connection (autocommit, separate: a connection inside a transaction gets no
        notifications), opened on first use and again after it was lost; None while it cannot be."""
        if self._listen is not None and self._listen.closed:
            self._drop_listener()
        if self._listen is None:
            if time.monotonic() < self._listen_retry_at:
                return None
            try:
                conn = self.target.connect(reconnecting=True)
                conn.cursor().execute(f"LISTEN {self.target.channel}")
            except (JobctlError, psycopg2.Error):
                self._listen_retry_at = time.monotonic() + 1.0
                return None
            self._listen = conn
            self._listen_fresh = True  # anything may have happened before it listened
        return self._listen

    def _drop_listener(self) -> None:
        if self._listen is not None:
            try:
                self._listen.close()
            except psycopg2.Error:
                pass
            self._listen = None

    def _heard(self) -> bool:
        """Read the notifications that arrived into _news (jobs) and _orders_news (orders to
        workers); False when not listening now (then the caller must look for itself)."""
        conn = self._listener()
        if conn is None:
            return False
        if self._listen_fresh:  # anything may have happened before it listened
            self._listen_fresh = False
            self._news = self._orders_news = True
        try:
            conn.poll()
        except psycopg2.Error:
            self._drop_listener()
            return False
        for n in conn.notifies:
            if n.payload == ORDERS:
                self._orders_news = True
            else:
                self._news = True
        conn.notifies.clear()
        return True

    def has_changed(self) -> bool:
        """Whether a job may have become ready since the last call: a notification arrived (or
        listening (re)started, or cannot start now: then the caller's claim finds out). A
        notification missed while the listener was down is covered by the caller's polling."""
        if not self._heard():
            return True
        news, self._news = self._news, False
        return news

    def orders_changed(self) -> bool:
        """Whether an order to workers (`jobctl workers drain|stop`) may have been written since
        the last call: its NOTIFY arrived (or listening (re)started, or cannot start now)."""
        if not self._heard():
            return True
        news, self._orders_news = self._orders_news, False
        return news

    def wait_for_change(self, timeout: float) -> bool:
        """Block until a notification arrives or `timeout` seconds pass; True if one came (one
        that arrived since the last look counts: it may be news the caller has not acted on)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            conn = self._listener()
            if conn is None:  # not listening now: wait a little, then let the caller look
                time.sleep(max(min(left, 0.5), 0))
                return True
            if self.has_changed():
                return True
            if left <= 0:
                return False
            select.select([conn], [], [], left)

    # -- doctor ------------------------------------------------------------------------------

    def health_checks(self) -> list[Check]:
        """doctor's checks: the connection, the schema version, transactions open long enough
        to hold back vacuum, dead rows in the jobs table, expired leases, damaged job rows."""
        t = self.target
        with self._read() as c:
            server = c.execute("SELECT current_setting('server_version')").fetchone()[0]
            version = c.execute("SELECT version FROM schema_version").fetchone()[0]
            present = {r[0] for r in c.execute(pg_schema.LAYOUT, (t.schema,) * 5)}
            old = c.execute(
                "SELECT count(*), COALESCE(max(extract(epoch from clock_timestamp() - xact_start)), 0)::bigint "
                "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND xact_start < clock_timestamp() - make_interval(secs => ?)", (LONG_TRANSACTION_S,)).fetchone()
            tables = c.execute("SELECT n_live_tup, n_dead_tup FROM pg_stat_user_tables "
                               "WHERE schemaname = ? AND relname = 'jobs'", (t.schema,)).fetchone()
        schema_ok = schema_check(version, SCHEMA_VERSION, pg_schema.expected_layout(), present,
                                 f"restore the schema {t.schema} from a backup (pg_dump)")
        checks = [
            Check("connection", True, f"PostgreSQL {server}, schema {t.schema}"),
            schema_ok,
            Check("long transactions", old[0] == 0, "none open over 5 minutes" if old[0] == 0 else
                  f"{old[0]} transaction(s) open for up to {old[1]}s hold back vacuum (dead rows pile up); see "
                  "pg_stat_activity and end them"),
        ]
        live, dead = (tables[0], tables[1]) if tables else (0, 0)
        bloated = dead > DEAD_ROWS_WARN and dead > live
        checks.append(Check("dead rows", not bloated, f"{dead} dead, {live} live rows in jobs" + (
            f"; vacuum is falling behind: VACUUM {t.schema}.jobs, and look for long transactions" if bloated else "")))
        return checks + self._job_checks("enqueue their work again", schema_ok)


def _refuse_nul(j: NewJob) -> None:
    """A payload or idempotency key holding NUL is refused (exit 2, naming the batch line), never
    stored changed: every job an enqueue inserts passes here, in the transaction (before its key
    is looked up), which then keeps nothing."""
    bad = ("payload" if payloads.holds_nul(j.payload)
           else "idempotency key" if j.idempotency_key is not None and "\x00" in j.idempotency_key else None)
    if bad is not None:
        raise InvalidInput((f"{j.source}: " if j.source else "") + f"invalid {bad}: " + payloads.NUL_REFUSED
                           + "; nothing was enqueued")


def _literal(c: Connection, value) -> str:
    """A value as an SQL literal, quoted by the driver (for SQL built around multi-row VALUES)."""
    return c.raw.cursor().mogrify("%s", (value,)).decode()
