"""The psycopg2 connection as the SQL core uses it (jobctl/engines/sql.py): `?` placeholders,
rows read by name or index like sqlite3.Row, and fewer round trips inside a transaction (deferred
statements, statements prepared on the server, multi-row INSERTs)."""

from __future__ import annotations

import re
from typing import Any

import psycopg2


class Row(tuple):
    """A result row read as r["column"] or r[i], with keys(), like sqlite3.Row."""

    __slots__ = ()
    _index: dict[str, int] = {}
    _names: tuple[str, ...] = ()

    def __getitem__(self, key):
        if type(key) is str:
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> tuple[str, ...]:
        return self._names


_ROW_TYPES: dict[tuple[str, ...], type[Row]] = {}


def _row_type(description) -> type[Row]:
    names = tuple(d[0] for d in description)
    cls = _ROW_TYPES.get(names)
    if cls is None:
        cls = _ROW_TYPES[names] = type("Row", (Row,), {"__slots__": (), "_names": names,
                                                      "_index": {n: i for i, n in enumerate(names)}})
    return cls


class Cursor:
    """What execute() returns: fetchone, fetchall, iteration, rowcount; rows are Row."""

    __slots__ = ("cur",)

    def __init__(self, cur):
        self.cur = cur

    def fetchone(self) -> Any:  # a Row, or None
        row = self.cur.fetchone()
        return None if row is None else _row_type(self.cur.description)(row)

    def fetchall(self) -> list[Row]:
        rows = self.cur.fetchall()
        if not rows:
            return []
        make = _row_type(self.cur.description)
        return [make(r) for r in rows]

    def __iter__(self):
        return iter(self.fetchall())

    @property
    def rowcount(self) -> int:
        return self.cur.rowcount


class Statement:
    """The core's SQL text as this wrapper sends it: `text` for psycopg2 (placeholders %s, a
    literal % as %%), `prepared` for PREPARE (placeholders $1, $2, ...), and whether it may be
    deferred (it returns nothing: an INSERT, UPDATE or DELETE without RETURNING)."""

    __slots__ = ("text", "prepared", "args", "deferrable")

    def __init__(self, sql: str):
        self.text = sql.replace("%", "%%").replace("?", "%s")
        parts = sql.split("?")
        self.prepared = "".join(p + (f"${n}" if n < len(parts) else "") for n, p in enumerate(parts, 1))
        self.args = len(parts) - 1
        words = sql.lstrip().split(None, 1)
        self.deferrable = (bool(words) and words[0].upper() in ("INSERT", "UPDATE", "DELETE")
                           and "RETURNING" not in sql.upper())


_STATEMENTS: dict[str, Statement] = {}


def _statement(sql: str) -> Statement:
    st = _STATEMENTS.get(sql)
    if st is None:
        if len(_STATEMENTS) > 2000:  # IN lists of every length make new texts: keep the cache bounded
            _STATEMENTS.clear()
        st = _STATEMENTS[sql] = Statement(sql)
    return st


def _pg(sql: str) -> str:
    return _statement(sql).text


def _clean(params):
    """PostgreSQL text cannot hold NUL characters: a text parameter that has one (a handler's
    error output, say) is stored with U+FFFD (the replacement character) in its place. Other
    values go as they are. Payloads and results never reach this with a NUL: their JSON text
    writes it as \\u0000, and a payload or result holding one is refused before (_refuse_nul,
    Queue.stores), never changed."""
    for p in params:
        if type(p) is str and "\x00" in p:
            return [q.replace("\x00", "\ufffd") if type(q) is str else q for q in params]
    return params


_VALUES = re.compile(r"^(.*\bVALUES\s*)(\([^()]*\))(\s*(?:ON CONFLICT.*|RETURNING.*)?)$", re.S | re.I)
PAGE_ROWS, PAGE_BYTES = 1000, 8 * 1024 * 1024  # a multi-row INSERT: at most this many rows or bytes


class _NoRows:
    """What a deferred statement returns: nothing to fetch (it has not even run yet)."""

    rowcount = -1

    def fetchone(self):
        return None

    def fetchall(self) -> list:
        return []

    def __iter__(self):
        return iter(())


NO_ROWS = _NoRows()
PREPARE_AFTER = 2  # a statement is prepared on the server the second time a connection runs it
MAX_PREPARED = 500  # per connection
_NOT_PREPARABLE = ("42P18", "42P08", "42804", "42883", "42725")  # types of $n that PREPARE cannot infer


class Connection:
    """A psycopg2 connection (autocommit) as the SQL core expects one: execute(sql, params) with
    `?` placeholders -> Cursor, executemany. `notify`: a NOTIFY to send with this transaction's
    COMMIT (set by _jobs_may_be_ready).

    Round trips are what a transaction costs here, so inside a transaction:
    - a statement that returns nothing (an event's INSERT, say) is deferred: it goes in the same
      round trip as the next statement, or as the COMMIT, in order; an error it meets is raised
      there, still inside the transaction, which then rolls back as a whole;
    - a statement run a second time on this connection is prepared on the server (PREPARE and
      EXECUTE in one round trip), so that a worker's claims are not planned again each time (the
      claim's planning costs about as much as running it)."""

    def __init__(self, raw):
        self.raw = raw
        self.in_transaction = False
        self.notify = False
        self.orders = False  # a NOTIFY of an order to workers (`jobctl workers drain`) to send with the COMMIT
        self.pending: list[bytes] = []  # deferred statements, in order
        self._uses: dict[str, int] = {}
        self._prepared: dict[str, bytes] = {}  # SQL text -> its EXECUTE template
        self._unpreparable: set[str] = set()
        # Names are never used twice: a PREPARE outlives the rollback of its transaction (PREPARE
        # is not transactional), so one whose EXECUTE then failed (a lock timeout) left its name taken.
        self._names = 0
        self.prepares = True  # False once a pooler lost one (see PostgresEngine._translate)

    def execute(self, sql: str, params=()) -> Cursor | _NoRows:
        st = _statement(sql)
        cur = self.raw.cursor()
        params = _clean(params)
        if not self.in_transaction:
            cur.execute(st.text, params)
            return Cursor(cur)
        if st.deferrable:
            self.pending.append(cur.mogrify(st.text, params))
            return NO_ROWS
        execute = self._prepared.get(sql)
        if not self.prepares:
            execute = None
        elif execute is None and st.args and sql not in self._unpreparable:
            uses = self._uses[sql] = self._uses.get(sql, 0) + 1
            if uses >= PREPARE_AFTER and self._names < MAX_PREPARED:
                return self._prepare_and_execute(cur, sql, st, params)
        if execute is None:
            query = cur.mogrify(st.text, params)
        else:
            query = cur.mogrify(execute, params)
        cur.execute(self.take_pending(query))
        return Cursor(cur)

    def run_alone(self, sql: str, params) -> Cursor:
        """One statement outside any transaction: it commits as it runs (one round trip). Prepared
        on the server the second time, as inside a transaction (the PREPARE in a round trip of its
        own, once: there is no savepoint to fall back to here)."""
        cur = self.raw.cursor()
        params = _clean(params)
        execute = self._prepared.get(sql) if self.prepares else None
        if execute is None and self.prepares and sql not in self._unpreparable:
            uses = self._uses[sql] = self._uses.get(sql, 0) + 1
            if uses >= PREPARE_AFTER and self._names < MAX_PREPARED:
                self._names += 1
                name = f"jobctl_{self._names}"
                st = _statement(sql)
                try:
                    cur.execute(f"PREPARE {name} AS {st.prepared}".encode())
                except psycopg2.Error as e:
                    if getattr(e, "pgcode", None) not in _NOT_PREPARABLE or self.broken:
                        raise
                    self._unpreparable.add(sql)
                else:
                    execute = self._prepared[sql] = f"EXECUTE {name} ({', '.join(['%s'] * st.args)})".encode()
        cur.execute(cur.mogrify(execute if execute is not None else _statement(sql).text, params))
        return Cursor(cur)

    def forget_prepared(self) -> None:
        """Prepare every statement anew from now on (the old ones stay on the server, unused:
        names are never reused)."""
        self._prepared.clear()
        self._uses.clear()

    def begin(self, sql: str) -> Cursor:
        """Run a BEGIN (and what is sent with it) outside any transaction."""
        cur = self.raw.cursor()
        cur.execute(sql)
        return Cursor(cur)

    def take_pending(self, query: bytes) -> bytes:
        """`query` after the deferred statements, which are sent with it."""
        if not self.pending:
            return query
        query = b";".join([*self.pending, query])
        self.pending.clear()
        return query

    def _prepare_and_execute(self, cur, sql: str, st: Statement, params) -> Cursor:
        """PREPARE the statement and EXECUTE it, in one round trip; under a savepoint, so that a
        statement whose parameter types the server cannot infer is run as it is instead."""
        self._names += 1
        name = f"jobctl_{self._names}"
        execute = f"EXECUTE {name} ({', '.join(['%s'] * st.args)})".encode()
        query = (b"SAVEPOINT jobctl_prepare; PREPARE " + name.encode() + b" AS " + st.prepared.encode()
                 + b"; RELEASE jobctl_prepare; " + cur.mogrify(execute, params))
        try:
            cur.execute(self.take_pending(query))
        except psycopg2.Error as e:
            if getattr(e, "pgcode", None) not in _NOT_PREPARABLE or self.broken:
                raise
            try:  # (fails when the error came from elsewhere: then the error is the news)
                self.raw.cursor().execute("ROLLBACK TO SAVEPOINT jobctl_prepare")
            except psycopg2.Error:
                raise e from None
            self._unpreparable.add(sql)
            cur = self.raw.cursor()
            cur.execute(st.text, params)
            return Cursor(cur)
        self._prepared[sql] = execute
        return Cursor(cur)

    def executemany(self, sql: str, seq) -> None:
        """An INSERT ... VALUES (?, ...) of many rows as multi-row INSERTs (one round trip per
        page, not per row); any other statement once per row."""
        rows = list(seq)
        m = _VALUES.match(sql)
        if m is None or "?" in m.group(1) + m.group(3):
            for params in rows:
                self.execute(sql, params)
            return
        self.insert_values(m.group(1), m.group(2), rows, m.group(3))

    def insert_values(self, head: str, template: str, rows, tail: str = "") -> list[Row]:
        """head + (template), (template), ... + tail, for `rows` of parameters, in pages; the
        rows that a RETURNING in `tail` returns. head and tail hold no parameters."""
        cur = self.raw.cursor()
        template = _pg(template)
        start, end = head.encode(), tail.encode()
        returned: list[Row] = []
        page: list[bytes] = []
        size = 0
        for i, params in enumerate(rows, 1):
            value = cur.mogrify(template, _clean(params))
            page.append(value)
            size += len(value)
            if len(page) >= PAGE_ROWS or size >= PAGE_BYTES or i == len(rows):
                cur.execute(self.take_pending(start + b",".join(page) + end))
                if cur.description is not None:
                    returned += Cursor(cur).fetchall()
                page, size = [], 0
        return returned

    @property
    def broken(self) -> bool:
        return self.raw.closed != 0

    def close(self) -> None:
        try:
            self.raw.close()
        except psycopg2.Error:
            pass
