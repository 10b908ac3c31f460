"""A review of the PostgreSQL engine as its next maintainer and as an attacker would read it:
concurrency between transactions (row locks taken in the order the statements need them, rows
re-checked under their lock), the isolation level the engine relies on, what a URL's password
may leak through, and the confirmations of what was suspected and found sound (the admission's
time read after its lock, counts exact under several processes, ids after a migrate).

Each test works in a schema of its own (the pg_url fixture), dropped afterwards."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from urllib.parse import quote

import pytest

from conftest import new_job, open_pg, pg_admin, pg_sql, run_cli, wait_for, with_schema
from jobctl.engines.base import Change, ClaimRequest

PAYLOAD = "{}"


new = new_job
sql = pg_sql


def named(url: str, app: str) -> str:
    """The URL with an application_name, so a test can find that engine's server processes."""
    return f"{url}&application_name={app}"


def lock_waiters(base: str, app: str) -> int:
    """How many server processes of `app` wait for a lock (a row's or an advisory one)."""
    return sql(base, "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                     "WHERE NOT l.granted AND a.application_name = %s", (app,))[0][0]


class Thread(threading.Thread):
    """A thread whose exception (or result) the test reads after join()."""

    def __init__(self, fn, *args):
        super().__init__(daemon=True)
        self.fn, self.args, self.error, self.result = fn, args, None, None

    def run(self):
        try:
            self.result = self.fn(*self.args)
        except BaseException as e:  # noqa: BLE001 - the test looks at it
            self.error = e


# -- row locks: in the order the statements need them -------------------------------------------


def release_when_waited_on(holder, pg_base, app, what: str) -> int:
    """Once the engine waits on `holder`'s lock (and half a second more), commit the holder; the
    server's time just before that commit, in ms."""
    wait_for(lambda: lock_waiters(pg_base, app) == 1, what=what)
    time.sleep(0.5)
    cur = holder.cursor()
    cur.execute("SELECT floor(extract(epoch from clock_timestamp()) * 1000)::bigint")
    released = cur.fetchone()[0]
    cur.execute("COMMIT")
    return released


def test_enqueues_after_the_same_parent_at_once_never_deadlock(pg_url):
    """Fan-out: several processes enqueue jobs that wait on one parent at the same moment. Each
    enqueue read its parents FOR SHARE, then UPDATEd them (dep_flags), which needs a stronger lock
    that every other reader's share lock blocks: two such enqueues deadlocked, and one was refused
    as busy (measured: 117 of 120 refused with four processes). The parents are locked for the
    update from the start now, so these enqueues take turns."""
    parent = open_pg(pg_url)
    try:
        [(pid, _)] = parent.insert_jobs([new()], "x")
    finally:
        parent.close()

    def enqueue_children():
        e = open_pg(pg_url, busy_timeout=20)
        try:
            return [e.insert_jobs([new(after=[pid])], "x")[0][0] for _ in range(4)]
        finally:
            e.close()

    threads = [Thread(enqueue_children) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [t.error for t in threads] == [None, None, None]
    e = open_pg(pg_url)
    try:
        children = sorted(i for t in threads for i in t.result)
        assert len(children) == 12
        assert {j.status for j in e.get_jobs(children)} == {"pending"}
        assert all(j.after == [pid] for j in e.get_jobs(children))
        # and they wait for it: completing the parent releases them all
        job = e.claim(ClaimRequest("w", "tok"))
        assert job.id == pid
        e.update_job(pid, lambda j, now: Change("completed", {}, run="completed"), "w")
        assert {e.claim(ClaimRequest("w", f"t{i}")).id for i in range(12)} == set(children)
    finally:
        e.close()


def test_a_purge_never_deletes_a_job_retried_meanwhile(pg_base, pg_schema):
    """`purge --buried-older-than` picked its buried jobs without locking them, then deleted them
    by id: a `retry` that committed in between (buried -> pending) had its job deleted: a lost
    job. The purge's pick locks its rows now, and finds the retried job no longer buried."""
    app = f"jt_purge_{pg_schema}"
    url = with_schema(pg_base, pg_schema)
    e = open_pg(url)
    purger = open_pg(named(url, app))
    try:
        [(jid, _)] = e.insert_jobs([new()], "x")
        e.claim(ClaimRequest("w", "tok"))
        e.update_job(jid, lambda j, now: Change("buried", {"error": "boom"}, run="failed"), "w")
        time.sleep(0.01)
        locked, go = threading.Event(), threading.Event()

        def retry(j, now):  # the row is locked (read FOR UPDATE) while this runs
            locked.set()
            assert go.wait(20)
            return Change("pending", {"run_at": now, "error": None})

        retrying = Thread(e.update_job, jid, retry, "operator")
        retrying.start()
        assert locked.wait(20)
        purging = Thread(purger.purge, "buried", 0)
        purging.start()
        wait_for(lambda: lock_waiters(pg_base, app) or not purging.is_alive(), what="the purge to wait for the row")
        go.set()
        retrying.join(20)
        purging.join(20)
        assert retrying.error is None and purging.error is None, (retrying.error, purging.error)
        assert purging.result == 0
        job = e.get_job(jid)
        assert job.status == "pending"
        assert [ev.to_status for ev in e.events(jid)] == ["pending", "running", "buried", "pending"]
    finally:
        e.close()
        purger.close()


# -- the isolation level the engine relies on ----------------------------------------------------


def race_behind_lock(pg_base, app, lock_key: int, calls: list[tuple], what: str) -> list[Thread]:
    """Start each call (a Thread's arguments) while an admin session holds the advisory lock
    `lock_key`; once every one waits for it, release it; the joined threads."""
    holder = pg_admin(pg_base)
    try:
        holder.cursor().execute("BEGIN; SELECT pg_advisory_xact_lock(%s)", (lock_key,))
        threads = [Thread(*call) for call in calls]
        for t in threads:
            t.start()
        wait_for(lambda: lock_waiters(pg_base, app) == len(threads), what=what)
        holder.cursor().execute("COMMIT")
        for t in threads:
            t.join(20)
    finally:
        holder.close()
    return threads


def repeatable_read_url(pg_base, pg_schema, app):
    """The test schema's URL in a session whose default isolation is REPEATABLE READ, as a server
    set up with ALTER DATABASE ... SET default_transaction_isolation would give every session."""
    options = f"-csearch_path={pg_schema} -cdefault_transaction_isolation=repeatable\\ read"
    return f"{pg_base}?options={quote(options, safe='')}&application_name={app}"


def test_a_server_whose_default_isolation_is_repeatable_read_keeps_unique_enqueues_unique(pg_base, pg_schema):
    """The engine's writes take turns through advisory locks and then count with a fresh
    statement snapshot: READ COMMITTED. A bare BEGIN takes the server's default isolation, and
    under REPEATABLE READ the snapshot is the one taken before the lock was waited for: two
    `--unique` enqueues that queued behind one lock both inserted their job. Every write now says
    READ COMMITTED itself, and the session's own default is set to it when jobctl connects (the
    worker's one-statement steps run outside BEGIN), whatever the server's or the URL's."""
    from jobctl.engines.postgres import _key
    from jobctl.payloads import sha256

    app = f"jt_rr_{pg_schema}"
    url = repeatable_read_url(pg_base, pg_schema, app)
    open_pg(url).close()
    job = new(unique=True)
    unique_key = sha256(f"{job.queue}\0{job.type}\0{job.payload_hash}".encode()).hexdigest()
    engines = [open_pg(url, busy_timeout=20) for _ in range(2)]
    try:
        assert engines[0].conn.execute("SHOW transaction_isolation").fetchone()[0] == "read committed"
        threads = race_behind_lock(pg_base, app, _key("unique", pg_schema, unique_key),
                                   [(e.insert_jobs, [new(unique=True)], "x") for e in engines],
                                   "both enqueues to wait for the lock")
        assert [t.error for t in threads] == [None, None]
        assert sorted(created for t in threads for _, created in t.result) == [False, True]
        assert len({i for t in threads for i, _ in t.result}) == 1
    finally:
        for e in engines:
            e.close()


def test_a_server_whose_default_isolation_is_repeatable_read_keeps_limits_exact(pg_base, pg_schema):
    """The same for claims under a concurrency limit: the second claim, which queued behind the
    admission lock, must count the first one's job as running."""
    from jobctl.engines.postgres import _key
    from jobctl.limits import Limits

    app = f"jt_rr_{pg_schema}"
    url = repeatable_read_url(pg_base, pg_schema, app)
    e = open_pg(url)
    e.insert_jobs([new(type="solo", queue=q) for q in ("a", "b")], "x")
    e.close()
    limits = Limits(types={"solo": 1})
    engines = [open_pg(url, busy_timeout=20) for _ in range(2)]
    try:
        threads = race_behind_lock(pg_base, app, _key("admission", pg_schema),
                                   [(e.claim, ClaimRequest(f"w{q}", f"tok{q}", queues=[q], limits=limits))
                                    for q, e in zip("ab", engines)],
                                   "both claims to wait for the lock")
        assert [t.error for t in threads] == [None, None]
        assert sorted(t.result is not None for t in threads) == [False, True]
        assert sql(pg_base, f'SELECT count(*) FROM "{pg_schema}".jobs WHERE status = %s', ("running",)) == [(1,)]
    finally:
        for e in engines:
            e.close()


# -- names from outside: schemas, and passwords never printed --------------------------------------


def test_a_schema_name_with_a_trailing_newline_is_a_config_error(tmp_path, pg_base):
    """`$` also matches before a final newline: "jobs\\n" passed the schema name's check, and the
    schema was created under a name the session's search_path did not name (exit 1, internal)."""
    (tmp_path / "jobctl.toml").write_text('[postgres]\nschema = "jt_newline\\n"\n')
    r = run_cli("--db", pg_base, "init")
    assert r.exit_code == 2, r.output
    assert "schema" in r.one_error_line()
    assert sql(pg_base, "SELECT count(*) FROM pg_namespace WHERE nspname LIKE %s", ("jt_newline%",)) == [(0,)]


@pytest.mark.parametrize("url, secret", [
    ("postgresql://u:pa%zzss@127.0.0.1:5432/test", "zzss"),  # a % not percent-encoded: libpq quotes the token
    ("postgresql://u:p@ss@127.0.0.1:5432/test", "ss@"),  # an @ not encoded: libpq takes the rest for the host
    ("postgresql://u:pa/ss@127.0.0.1:5432/test", "ss@"),  # a / not encoded: the URL ends its authority there
    ("postgresql://u:pa/ss@127.0.0.1:5432/test", ":pa"),  # (and libpq reads "pa" as the port)
    ("postgresql://u@127.0.0.1:5432/test?password=pa%zzss", "zzss"),  # the same in a password= parameter
])
def test_a_password_that_is_not_percent_encoded_is_never_printed(url, secret):
    """libpq's own messages quote the parts of a URL it cannot read, and a password whose @, / or
    % was not percent-encoded is such a part: the error line printed it (and display() did not
    hide a password holding a /)."""
    from jobctl.engines import display

    assert secret not in display(url)
    r = run_cli("--db", url, "list")
    assert r.exit_code in (2, 8), r.output
    line = r.one_error_line()
    assert secret not in line, line
    assert "percent-encode" in line or "%40" in line, line


def test_display_hides_the_whole_password_and_keeps_the_rest():
    from jobctl.engines import display

    assert display("postgresql://u:secret@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert display("postgresql://u:p@ss@h/db") == "postgresql://u:***@h/db"
    assert display("postgresql://u:pa/ss@h/db") == "postgresql://u:***@h/db"
    assert display("postgresql://u:pa?ss@h/db") == "postgresql://u:***@h/db"
    assert display("postgresql://u@h/db?application_name=a@b") == "postgresql://u@h/db?application_name=a@b"
    assert display("postgresql://u:pw@h/db?application_name=a@b") == "postgresql://u:***@h/db?application_name=a@b"
    assert display("postgresql://h:5432/db?application_name=a@b") == "postgresql://h:5432/db?application_name=a@b"
    assert display("postgresql://h/db?password=secret&x=1") == "postgresql://h/db?password=***&x=1"
    assert display("/var/lib/jobctl/a:b@c.db") == "/var/lib/jobctl/a:b@c.db"


# -- deferred statements: an error, or a lost connection, in the round trip that carries them ---------


def test_a_deferred_write_that_waits_out_the_lock_timeout_at_commit_is_busy_and_changes_nothing(pg_base, pg_schema):
    """A deferred UPDATE meets its lock only in the COMMIT's round trip: a lock timeout there is
    "busy, nothing changed" (the COMMIT after it never ran), not "may or may not have been made";
    nothing of the transaction is kept and the next one on the connection starts clean."""
    from jobctl.errors import DatabaseBusy

    url = with_schema(pg_base, pg_schema)
    e = open_pg(url, busy_timeout=0.2)
    holder = pg_admin(pg_base)
    try:
        [(a, _), (b, _)] = e.insert_jobs([new(), new()], "x")
        holder.cursor().execute(f'BEGIN; SELECT 1 FROM "{pg_schema}".jobs WHERE id = %s FOR UPDATE', (b,))
        with pytest.raises(DatabaseBusy) as busy:
            with e._write() as (c, now):
                c.execute("UPDATE jobs SET priority = 99 WHERE id = ?", (a,))  # deferred
                c.execute("INSERT INTO events (job_id, at, to_status, actor) VALUES (?, ?, 'x', 'x')", (a, now))
                c.execute("UPDATE jobs SET priority = 98 WHERE id = ?", (b,))  # deferred: waits for the lock
        assert "nothing changed" in str(busy.value) and "may or may not" not in str(busy.value)
        assert not e.conn.pending and not e.conn.in_transaction
        holder.cursor().execute("ROLLBACK")
        assert [j.priority for j in e.get_jobs([a, b])] == [10, 10] and len(e.events(a)) == 1
        with e._write() as (c, _now):
            c.execute("UPDATE jobs SET priority = 11 WHERE id = ?", (b,))
        assert e.get_job(b).priority == 11 and e.get_job(a).priority == 10
    finally:
        holder.close()
        e.close()


def test_a_connection_lost_with_deferred_writes_pending_changes_nothing_and_the_next_call_reconnects(pg_base, pg_schema):
    """The connection is cut while a transaction holds deferred writes not yet sent: the next
    round trip (a read, not the COMMIT) fails: "nothing changed", and nothing was; nothing
    deferred is sent later on the new connection."""
    from jobctl.errors import ConnectionLost

    app = f"jt_cut_{pg_schema}"
    url = with_schema(pg_base, pg_schema)
    e = open_pg(named(url, app))
    try:
        [(a, _)] = e.insert_jobs([new()], "x")
        with pytest.raises(ConnectionLost) as lost:
            with e._write() as (c, _now):
                c.execute("UPDATE jobs SET priority = 99 WHERE id = ?", (a,))  # deferred
                sql(pg_base, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                    (app,))
                c.execute("SELECT count(*) FROM jobs").fetchone()
        assert "nothing changed" in str(lost.value) and lost.value.exit_code == 8
        assert not e.conn.pending
        assert e.get_job(a).priority == 10  # reconnected by itself
        with e._write() as (c, _now):
            c.execute("UPDATE jobs SET priority = 12 WHERE id = ?", (a,))
        assert e.get_job(a).priority == 12
    finally:
        e.close()


def test_a_dry_run_whose_connection_is_lost_does_not_say_the_change_may_have_been_made(pg_base, pg_schema):
    """A dry run ends with ROLLBACK: a connection lost there cannot have made anything."""
    from jobctl.errors import ConnectionLost

    app = f"jt_dry_{pg_schema}"
    url = with_schema(pg_base, pg_schema)
    e = open_pg(named(url, app))
    try:
        [(a, _)] = e.insert_jobs([new()], "x")
        e.claim(ClaimRequest("w", "tok", lease_ms=1))
        time.sleep(0.01)

        def decide(job, now):
            sql(pg_base, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (app,))
            return Change("pending", {"token": None})

        with pytest.raises(ConnectionLost) as lost:
            e.update_expired(decide, "sweeper", dry_run=True)
        assert "may or may not" not in str(lost.value) and "nothing changed" in str(lost.value)
        assert e.get_job(a).status == "running"
    finally:
        e.close()


def test_statements_prepared_before_a_reconnect_are_prepared_again_on_the_new_session(pg_base, pg_schema):
    """A new session has no prepared statement: the engine's new connection starts with none
    known, so nothing EXECUTEs a name the server does not have (that would be a busy error)."""
    app = f"jt_prep_{pg_schema}"
    url = with_schema(pg_base, pg_schema)
    e = open_pg(named(url, app))
    try:
        ids = [i for i, _ in e.insert_jobs([new() for _ in range(6)], "x")]
        for i in range(3):
            job = e.claim(ClaimRequest("w", f"t{i}"))
            e.update_job(job.id, lambda j, now: Change("completed", {}, run="completed"), "w")
        assert e.conn._prepared  # the claim, the job's row
        sql(pg_base, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (app,))
        assert e.get_job(ids[0]).status == "completed"  # the read reconnects
        for i in range(3):  # every one of these would be EXECUTEd had the old names been kept
            job = e.claim(ClaimRequest("w", f"u{i}"))
            e.update_job(job.id, lambda j, now: Change("completed", {}, run="completed"), "w")
        assert {j.status for j in e.get_jobs(ids)} == {"completed"}
    finally:
        e.close()


# -- admission: the time is read after the lock's turn ------------------------------------------


def test_a_claim_under_limits_reads_the_time_after_its_turn_at_the_admission_lock(pg_base, pg_schema):
    """The claim's "now" (its claimed_at, the start its rate window counts) is read after the
    advisory lock was granted, not at the BEGIN: a claim that waited its turn for 0.5 s is dated
    after the wait."""
    from jobctl.engines.postgres import _key
    from jobctl.limits import Limits

    app = f"jt_adm_{pg_schema}"
    url = with_schema(pg_base, pg_schema)
    e = open_pg(named(url, app), busy_timeout=20)
    holder = pg_admin(pg_base)
    try:
        e.insert_jobs([new(type="api")], "x")
        holder.cursor().execute("BEGIN; SELECT pg_advisory_xact_lock(%s)", (_key("admission", pg_schema),))
        claiming = Thread(e.claim, ClaimRequest("w", "tok", limits=Limits(rates={"api": (5, 60_000)})))
        claiming.start()
        released = release_when_waited_on(holder, pg_base, app, "the claim to wait for its turn")
        claiming.join(20)
        assert claiming.error is None
        assert claiming.result.claimed_at >= released
    finally:
        holder.close()
        e.close()


# -- counts: exact under several processes, with folds running meanwhile ----------------------------

WORKLOAD = r"""
import hashlib, json, random, sys
from jobctl.engines.postgres import PostgresEngine
from jobctl.engines.base import Change, ClaimRequest, NewJob
url, seed = sys.argv[1], int(sys.argv[2])
rnd = random.Random(seed)
e = PostgresEngine.open(url, busy_timeout=30)
def new(queue):
    p = json.dumps({"s": seed, "r": rnd.random()})
    return NewJob(queue=queue, type="t", payload=p, payload_hash=hashlib.sha256(p.encode()).hexdigest(),
                  priority=10, max_attempts=2, backoff="fixed", timeout_ms=60_000)
for step in range(40):
    e.insert_jobs([new(rnd.choice("ab")) for _ in range(rnd.randint(1, 4))], "x")
    job = e.claim(ClaimRequest(f"w{seed}", f"t{seed}-{step}"))
    if job is not None:
        to = rnd.choice(["completed", "pending", "buried", "cancel_requested"])
        e.update_job(job.id, lambda j, now: Change(to, {"run_at": now} if to == "pending" else {}), "w")
    if step % 10 == 9:
        e.purge("completed", 0)
    if step % 7 == 0:
        e.stats_snapshot()
e.close()
"""


def test_counts_stay_exact_with_several_processes_changing_jobs_and_folding_at_once(pg_url, pg_base, pg_schema, tmp_path):
    script = tmp_path / "workload.py"
    script.write_text(WORKLOAD)
    e = open_pg(pg_url)
    try:
        procs = [subprocess.Popen([sys.executable, str(script), pg_url, str(seed)], stderr=subprocess.PIPE, text=True)
                 for seed in range(3)]
        folds = 0
        while any(p.poll() is None for p in procs):
            e.fold_counts()
            folds += 1
            time.sleep(0.02)
        errors = [p.communicate()[1] for p in procs]
        assert [p.returncode for p in procs] == [0, 0, 0], errors
        actual = {(q, s): n for q, s, n in sql(
            pg_base, f"SELECT queue, CASE WHEN status = 'pending' AND waiting_on > 0 THEN 'blocked' ELSE status END, "
                     f'count(*) FROM "{pg_schema}".jobs GROUP BY 1, 2')}
        with e._read() as c:
            kept = {(q, s): n for q, s, n in e._state_counts(c) if n}
        assert kept == actual and folds > 3
        e.fold_counts()
        with e._read() as c:
            assert {(q, s): n for q, s, n in e._state_counts(c) if n} == actual
        assert sql(pg_base, f'SELECT count(*) FROM "{pg_schema}".job_count_changes') == [(0,)]
    finally:
        e.close()


# -- migrate: every id sequence of a PostgreSQL target is above the copied ids ---------------------


@pytest.mark.parametrize("source_kind", ["sqlite", "postgres"])
def test_after_a_migrate_into_postgresql_new_events_runs_and_logs_never_collide(source_kind, tmp_path, pg_base):
    """Not only jobs: the events, runs and logs a new run writes take ids from their own sequences,
    which the copy must have moved past the copied rows (PostgreSQL to PostgreSQL too)."""
    import secrets

    from jobctl.engines.base import RunOutput
    from jobctl.queue import Queue

    schemas = [f"jt_{secrets.token_hex(6)}" for _ in range(2)]
    source = tmp_path / "old.db" if source_kind == "sqlite" else with_schema(pg_base, schemas[0])
    target = with_schema(pg_base, schemas[1])
    try:
        with Queue.open(source, create=True) as q:
            for i in range(3):
                q.enqueue("t", {"i": i})
                job = q.claim(worker="w")
                q.complete(job.id, token=job.token, output=RunOutput(b"out\n", b"", 0))
            q.enqueue("t", {"i": "left"})
        r = run_cli("--db", source, "migrate", "--to", target)
        assert r.exit_code == 0, r.output
        with Queue.open(target) as q:
            job = q.claim(worker="w2")
            q.fail(job.id, token=job.token, error="boom", retry_in=0, output=RunOutput(b"err\n", b"", 0))
            job = q.claim(worker="w2")
            q.complete(job.id, token=job.token, output=RunOutput(b"again\n", b"", 0))
            new_id = q.enqueue("t", {"i": "new"}).id
            assert new_id == 5
            assert q.get(job.id).status == "completed" and q.run_output(job.id, 2).head == b"again\n"
        counts = sql(pg_base, f'SELECT (SELECT count(*) FROM "{schemas[1]}".runs), '
                              f'(SELECT count(*) FROM "{schemas[1]}".job_logs)')
        assert counts == [(5, 5)]
    finally:
        for schema in schemas:
            sql(pg_base, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_a_crafted_source_file_cannot_inject_sql_into_the_migrate_target(tmp_path, pg_url, pg_base, pg_schema):
    """migrate names the source's columns in the target's INSERTs, and a PostgreSQL target runs a
    page as one query string: a SQLite file whose jobs table had a column named
    `on_cancelled) SELECT ...; CREATE TABLE ...; COMMIT; INSERT INTO jobs (on_cancelled` (one
    real column dropped to make room) ran that CREATE on the target server. Such a name is refused."""
    import sqlite3

    source = tmp_path / "crafted.db"
    assert run_cli("--db", source, "enqueue", "t").exit_code == 0
    pwned = f"{pg_schema}_pwned"
    evil = (f"on_cancelled) SELECT * FROM jobs WHERE false; CREATE TABLE public.{pwned} (i int); COMMIT; "
            "INSERT INTO jobs (on_cancelled")
    conn = sqlite3.connect(source)
    conn.execute("ALTER TABLE jobs DROP COLUMN on_cancelled")
    conn.execute(f'ALTER TABLE jobs ADD COLUMN "{evil}" TEXT')
    conn.commit()
    conn.close()
    try:
        r = run_cli("--db", source, "migrate", "--to", pg_url)
        assert r.exit_code == 8, r.output
        assert "not jobctl's" in r.one_error_line()
        assert sql(pg_base, "SELECT to_regclass(%s)", (f"public.{pwned}",)) == [(None,)]
        assert sql(pg_base, f'SELECT count(*) FROM "{pg_schema}".jobs') == [(0,)]
    finally:
        sql(pg_base, f"DROP TABLE IF EXISTS public.{pwned}")


def test_a_migrate_whose_source_connection_is_lost_names_the_source(pg_base):
    """The source's driver error surfaces inside the target's transaction first: the target rolls
    back, leaves the error alone (its own connection is fine), and the source names itself."""
    import secrets

    from jobctl.engines import transfer
    from jobctl.errors import ConnectionLost

    schemas = [f"jt_{secrets.token_hex(6)}" for _ in range(2)]
    app = f"jt_src_{schemas[0]}"
    source_url = named(with_schema(pg_base, schemas[0]), app)
    target_url = with_schema(pg_base, schemas[1])
    source = open_pg(source_url)
    target = open_pg(target_url)
    try:
        source.insert_jobs([new(payload=json.dumps({"i": i})) for i in range(transfer.PAGE_ROWS + 10)], "x")

        def cut(done, total):
            if done:
                sql(pg_base, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                    (app,))

        with pytest.raises(ConnectionLost) as lost:
            transfer.copy_database(source, target, on_progress=cut)
        assert schemas[0] in str(lost.value) and schemas[1] not in str(lost.value), str(lost.value)
        assert sql(pg_base, f'SELECT count(*) FROM "{schemas[1]}".jobs') == [(0,)]
    finally:
        source.close()
        target.close()
        for schema in schemas:
            sql(pg_base, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_a_change_to_a_job_is_dated_after_the_wait_for_its_row_lock(pg_base, pg_schema):
    """A completion's (or heartbeat's) first round trip reads the job's row FOR UPDATE and the
    server's time in one statement; the time was computed by the row's scan, below the lock, so
    a change that waited 0.5 s for the row was dated 0.5 s early (a heartbeat's lease that much
    shorter). It is read above the lock now."""
    app = f"jt_wait_{pg_schema}"
    url = with_schema(pg_base, pg_schema)
    e = open_pg(named(url, app), busy_timeout=20)
    holder = pg_admin(pg_base)
    try:
        [(jid, _)] = e.insert_jobs([new()], "x")
        for i in range(3):  # the statement is prepared by now, as a worker's is
            e.update_job(jid, lambda j, now: Change("pending", {"priority": 10 + i}), "x")
        holder.cursor().execute(f'BEGIN; SELECT 1 FROM "{pg_schema}".jobs WHERE id = %s FOR SHARE', (jid,))
        seen = {}
        changing = Thread(e.update_job, jid, lambda j, now: seen.setdefault("now", now) and None, "x")
        changing.start()
        released = release_when_waited_on(holder, pg_base, app, "the change to wait for the row")
        changing.join(20)
        assert changing.error is None
        assert seen["now"] >= released
    finally:
        holder.close()
        e.close()


@pytest.mark.parametrize("code, exit_code", [
    ("XX001", 8), ("XX002", 8), ("58030", 8),  # damaged data or index, an I/O error: unusable, as on SQLite
    ("55P03", 6), ("57014", 6), ("40P01", 6), ("40001", 6),  # busy: nothing changed, safe to retry
    ("25006", 8), ("53100", 8), ("53200", 8), ("42501", 8), ("42P01", 8),
    ("22P02", None), ("XX000", None),  # anything else: the driver's error as it is (an internal error), never busy
])
def test_errors_by_cause(pg_url, code, exit_code):
    import psycopg2

    class ServerError(psycopg2.DatabaseError):
        pgcode = code

    e = open_pg(pg_url)
    try:
        translated = e._translate(ServerError(f"ERROR: a server error {code}\n"))
        if exit_code is None:
            assert isinstance(translated, psycopg2.Error)
        else:
            assert translated.exit_code == exit_code and "\n" not in str(translated)
    finally:
        e.close()


def test_a_vanished_server_is_found_dead_within_a_minute_not_two_hours(pg_url):
    """A host or network that disappears without a reset leaves a TCP connection silent: the
    connection carries keepalive and user-timeout settings, so libpq gives up in about a minute;
    a URL that sets one of them keeps its own value."""
    e = open_pg(pg_url)
    try:
        params = e.conn.raw.get_dsn_parameters()
        assert (params["keepalives_idle"], params["keepalives_interval"], params["keepalives_count"],
                params["tcp_user_timeout"]) == ("30", "10", "3", "60000")
    finally:
        e.close()
    e = open_pg(pg_url + "&keepalives_idle=5")
    try:
        assert e.conn.raw.get_dsn_parameters()["keepalives_idle"] == "5"
    finally:
        e.close()
