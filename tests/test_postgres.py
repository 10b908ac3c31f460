"""What is PostgreSQL's own: the URL and its schema, identity, errors by cause through the real
CLI, the schema made by many processes at once, wake-ups by NOTIFY, reconnecting after the
server drops a connection, doctor, backup. The contract itself runs on PostgreSQL in
test_engine_contract.py (and the CLI tests with JOBCTL_TEST_ENGINE=postgres).

Each test works in a schema of its own (the pg_url fixture), dropped afterwards."""

import json
import os
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from urllib.parse import quote

import pytest

from conftest import (Clock, JOBCTL, finish, new_job, open_pg, pg_admin, pg_named, pg_sql, run_cli, start_worker, wait_for,
                      with_schema)
from jobctl.engines.base import Change, ClaimRequest
from jobctl.engines.pg_schema import SCHEMA_VERSION
from jobctl.errors import ConnectionLost, DatabaseBusy, InvalidState

T0 = 1_900_000_000.0


new = new_job
sql = pg_sql
named = pg_named


# -- URL, schema, identity --------------------------------------------------------------------


def test_the_url_names_the_schema_and_reopens_it_from_another_process(pg_url, pg_schema, pg_base):
    e = open_pg(pg_url)
    try:
        e.insert_jobs([new()], "me")
        assert e.url == pg_url and e.location == pg_url  # no password to hide here
        assert e.identity.endswith(f"/test/{pg_schema}")
        r = run_cli("--db", e.url, "list", "--json")
        assert r.exit_code == 0 and [json.loads(line)["id"] for line in r.stdout.splitlines()] == [1], r.output
        other = open_pg(pg_url, create=False)
        assert other.identity == e.identity
        other.close()
    finally:
        e.close()
    tables = {r[0] for r in sql(pg_base, "SELECT tablename FROM pg_tables WHERE schemaname = %s", (pg_schema,))}
    assert {"jobs", "events", "runs", "job_deps", "queues", "paused_types", "job_logs", "schema_version"} <= tables


def test_the_schema_can_come_from_the_config(tmp_path, pg_base, pg_schema):
    (tmp_path / "jobctl.toml").write_text(f'[postgres]\nschema = "{pg_schema}"\n')
    r = run_cli("--db", pg_base, "init")
    assert r.exit_code == 0 and r.stdout.strip() == with_schema(pg_base, pg_schema), r.output
    assert sql(pg_base, f'SELECT version FROM "{pg_schema}".schema_version') == [(SCHEMA_VERSION,)]
    # What a handler gets as JOBCTL_DB names the schema itself: it works without the config.
    os.unlink(tmp_path / "jobctl.toml")
    r = run_cli("--db", with_schema(pg_base, pg_schema), "list")
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("bad", ["Upper", "pg_catalog", "a-b", "x" * 49, "a,b"])
def test_a_bad_schema_name_is_a_usage_error(pg_base, tmp_path, bad):
    r = run_cli("--db", with_schema(pg_base, bad), "list")
    assert r.exit_code == 2 and "schema" in r.one_error_line(), r.output
    (tmp_path / "jobctl.toml").write_text(f'[postgres]\nschema = "{bad}"\n')
    r = run_cli("--db", pg_base, "list")
    assert r.exit_code == 2 and "postgres.schema" in r.one_error_line(), r.output


def test_the_default_schema_is_jobctl(pg_base):
    from jobctl.engines.pg_target import Target

    t = Target(pg_base)
    assert t.schema == "jobctl" and t.url == pg_base


def test_a_password_is_never_printed(pg_schema, pg_base):
    # Trust authentication ignores the password, so the URL works and every path can be seen.
    url = with_schema(pg_base.replace("postgres@", "postgres:Hunter2secret@"), pg_schema)
    outputs = []
    for args in (["init"], ["enqueue", "t"], ["list"], ["stats"], ["doctor", "--json"], ["show", "1"],
                 ["show", "99"], ["backup", "x.db"], ["config", "show"]):
        r = run_cli("--db", url, *args)
        outputs.append(r.stdout + r.stderr)
        assert r.exit_code in (0, 2, 3, 9), r.output
    refused = run_cli("--db", "postgresql://bob:Hunter2secret@127.0.0.1:1/x", "list")
    assert refused.exit_code == 8
    outputs.append(refused.stdout + refused.stderr)
    assert not any("Hunter2secret" in o for o in outputs), outputs
    e = open_pg(url)
    try:
        assert "Hunter2secret" in e.url and "Hunter2secret" not in e.location  # handlers get it, screens do not
    finally:
        e.close()


# -- errors by cause, through the real CLI -----------------------------------------------------


def test_a_refused_connection_is_exit_8(pg_schema):
    r = run_cli("--db", f"postgresql://postgres@127.0.0.1:1/test?options=-csearch_path%3D{pg_schema}", "list")
    line = r.one_error_line()
    assert r.exit_code == 8 and "Connection refused" in line and "is the server running" in line, r.output


def test_a_missing_database_is_exit_8(pg_base):
    url = pg_base.rsplit("/", 1)[0] + "/jobctl_no_such_database"
    r = run_cli("--db", url, "enqueue", "t")
    line = r.one_error_line()
    assert r.exit_code == 8 and "does not exist" in line and "createdb" in line, r.output


def test_an_unknown_user_is_exit_8(pg_base):
    url = pg_base.replace("postgres@", "jobctl_no_such_role@", 1)
    r = run_cli("--db", url, "list")
    line = r.one_error_line()
    assert r.exit_code == 8 and "jobctl_no_such_role" in line and "user" in line, r.output


def test_a_missing_schema_is_exit_8_for_commands_that_do_not_create(pg_url, pg_schema):
    r = run_cli("--db", pg_url, "list")
    line = r.one_error_line()
    assert r.exit_code == 8 and f"no jobctl schema '{pg_schema}'" in line and "init" in line, r.output
    assert run_cli("--db", pg_url, "enqueue", "t").exit_code == 0


def test_a_read_only_session_is_exit_8(pg_url):
    assert run_cli("--db", pg_url, "init").exit_code == 0
    read_only = pg_url + "%20-cdefault_transaction_read_only%3Don"
    r = run_cli("--db", read_only, "enqueue", "t")
    line = r.one_error_line()
    assert r.exit_code == 8 and "read-only" in line and "primary" in line, r.output
    for args in (["list"], ["stats"], ["doctor"]):  # reads still work
        r = run_cli("--db", read_only, *args)
        assert r.exit_code in (0, 9), r.output


def test_a_lock_held_past_the_busy_timeout_is_exit_6_and_changes_nothing(pg_url, pg_base, pg_schema):
    assert run_cli("--db", pg_url, "enqueue", "t").exit_code == 0
    holder = pg_admin(pg_base)
    try:
        cur = holder.cursor()
        cur.execute("BEGIN")
        cur.execute(f'SELECT * FROM "{pg_schema}".jobs WHERE id = 1 FOR UPDATE')
        r = run_cli("--db", pg_url, "--busy-timeout", "0.3", "cancel", "1")
        line = r.one_error_line()
        assert r.exit_code == 6 and "busy" in line and "safe to retry" in line, r.output
        cur.execute("ROLLBACK")
    finally:
        holder.close()
    r = run_cli("--db", pg_url, "show", "1", "--json")
    assert json.loads(r.stdout)["status"] == "pending"


def test_a_statement_cancelled_on_the_server_is_not_called_busy(pg_url, pg_base, pg_schema):
    """An administrator's pg_cancel_backend ends the statement at once with the SQLSTATE a statement
    timeout has (57014): it was reported as "busy: a statement ran past its time limit (waited up
    to 20s); safe to retry" (exit 6) after a second. It is said as it is, exit 8, nothing changed;
    a lock or statement timeout stays exit 6."""
    assert run_cli("--db", pg_url, "enqueue", "t").exit_code == 0
    app = f"jt_cancelled_{pg_schema}"
    holder = pg_admin(pg_base)
    try:
        cur = holder.cursor()
        cur.execute("BEGIN")
        cur.execute(f'SELECT * FROM "{pg_schema}".jobs WHERE id = 1 FOR UPDATE')
        proc = subprocess.Popen([*JOBCTL, "--db", pg_named(pg_url, app), "--busy-timeout", "20s", "cancel", "1"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: sql(pg_base, "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                                      "AND wait_event_type = 'Lock'", (app,)) == [(1,)], what="the cancel's lock wait")
        sql(pg_base, "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (app,))
        out, err = proc.communicate(timeout=30)
        cur.execute("ROLLBACK")
    finally:
        holder.close()
    assert proc.returncode == 8 and out == "" and "Traceback" not in err, err
    assert err.count("\n") == 1 and err.startswith("jobctl: error: "), err
    assert "cancelled" in err and "nothing changed" in err and "busy" not in err, err
    r = run_cli("--db", pg_url, "show", "1", "--json")
    assert json.loads(r.stdout)["status"] == "pending"


@pytest.mark.parametrize("command", [["retry", "--status", "buried"], ["retry-buried"]])
def test_an_action_stopped_by_a_lock_part_way_says_what_it_had_changed(pg_url, pg_base, pg_schema, command):
    """An action by filter commits in short transactions: when a later one gave up on a row lock,
    the error said "nothing changed, safe to retry" (exit 6) while the jobs of the earlier ones
    had been retried. It says how many were changed; the exit code stays 6 and running it again
    goes on with the rest."""
    lines = "".join('{"type": "t"}\n' for _ in range(1500))
    assert run_cli("--db", pg_url, "enqueue", "--quiet", "--batch", "-", input=lines).exit_code == 0
    sql(pg_base, f'UPDATE "{pg_schema}".jobs SET status = %s, finished_at = 0', ("buried",))
    holder = pg_admin(pg_base)
    try:
        cur = holder.cursor()
        cur.execute("BEGIN")
        cur.execute(f'SELECT * FROM "{pg_schema}".jobs WHERE id = 1500 FOR UPDATE')
        r = run_cli("--db", pg_url, "--busy-timeout", "0.1", *command)
        cur.execute("ROLLBACK")
    finally:
        holder.close()
    line = r.one_error_line()
    pending = sql(pg_base, f'SELECT count(*) FROM "{pg_schema}".jobs WHERE status = %s', ("pending",))[0][0]
    assert 0 < pending < 1500
    assert r.exit_code == 6 and "busy" in line, r.output
    assert f"retried {pending:,} of 1,500" in line and "nothing changed" not in line, line
    r = run_cli("--db", pg_url, *command)
    assert r.exit_code == 0 and r.stdout == f"{1500 - pending}\n", r.output


def test_a_database_that_is_not_utf8_is_refused_before_the_schema_is_made(pg_base):
    """A payload is any JSON value: in a LATIN1 database, a payload with an emoji was an internal
    error (exit 1) after `init` had made the schema without a word. jobctl makes its schema only in
    a UTF8 database (exit 8 naming the encoding, nothing created)."""
    import secrets
    from urllib.parse import urlsplit, urlunsplit

    name = f"jt_latin1_{secrets.token_hex(4)}"
    admin = pg_admin(pg_base)
    try:
        admin.cursor().execute(f"CREATE DATABASE {name} ENCODING 'LATIN1' TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'")
        url = urlunsplit(urlsplit(pg_base)._replace(path=f"/{name}"))
        for args in (["init"], ["enqueue", "t", '{"s": "\u00e9"}']):
            r = run_cli("--db", url, *args)
            line = r.one_error_line()
            assert r.exit_code == 8 and "LATIN1" in line and "UTF8" in line, r.output
        assert sql(url, "SELECT count(*) FROM pg_namespace WHERE nspname = 'jobctl'") == [(0,)]
    finally:
        admin.cursor().execute(f"DROP DATABASE IF EXISTS {name}")
        admin.close()


def test_without_the_driver_it_says_how_to_install_it(pg_url):
    code = ("import sys; sys.modules['psycopg2'] = None\n"
            "from jobctl.cli import main\n"
            f"sys.argv = ['jobctl', '--db', {pg_url!r}, 'list']\n"
            "main()\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 8, r.stderr
    # a command that works for the Python that runs jobctl (`jobctl` on the package index is
    # another project's name: the distribution is jobctl-queue)
    assert f"{sys.executable} -m pip install 'psycopg2-binary>=2.9.9'" in r.stderr, r.stderr
    assert "pip install '.[postgres]' in jobctl's checkout" in r.stderr and "jobctl[" not in r.stderr


def test_sqlite_commands_never_load_the_driver(tmp_path):
    code = ("import sys\n"
            "from jobctl.cli import run\n"
            f"assert run(['--db', {str(tmp_path / 'j.db')!r}, 'enqueue', 't']) == 0\n"
            "assert 'psycopg2' not in sys.modules\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# -- the schema -------------------------------------------------------------------------------

# The count functions and changes as schemas before v7 had them: the changes with an id, the
# functions setting search_path on every call.
BEFORE_V7 = """
ALTER TABLE {s}.job_count_changes ADD COLUMN id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY;
ALTER TABLE {s}.job_count_changes REPLICA IDENTITY DEFAULT;
CREATE OR REPLACE FUNCTION {s}.jobs_counted_update() RETURNS trigger LANGUAGE plpgsql
SET search_path = {s} AS $$ BEGIN
    INSERT INTO job_count_changes (queue, state, n) SELECT queue, state, sum(n) FROM (
        SELECT queue, status AS state, 1 AS n FROM new_rows UNION ALL SELECT queue, status, -1 FROM old_rows) AS c
    GROUP BY queue, state HAVING sum(n) <> 0;
    RETURN NULL;
END $$;
"""


def test_a_v1_schema_is_migrated_to_the_index_by_type_and_group(pg_url, pg_base, pg_schema):
    """v2 orders the ready jobs of a type by concurrency group first (a claim while a limit is full
    seeks each group that has room): a schema written by a v1 jobctl gets it when opened."""
    open_pg(pg_url).close()
    s = f'"{pg_schema}"'
    admin = pg_admin(pg_base)
    try:
        admin.cursor().execute(
            f"DROP INDEX {s}.jobs_ready_by_type; CREATE INDEX jobs_ready_by_type ON {s}.jobs (type, priority DESC, "
            "run_at, id, queue, cost_units, concurrency_group) WHERE status = 'pending' AND waiting_on = 0; "
            f"ALTER TABLE {s}.jobs RENAME COLUMN lease_boot_ms TO expiry_seen_at; "
            f"ALTER TABLE {s}.jobs RENAME COLUMN lease_boot_id TO expiry_seen_hb; "
            f"ALTER TABLE {s}.jobs DROP COLUMN progress_at; ALTER TABLE {s}.jobs DROP COLUMN claimed_boot_ms; "
            f"DROP TABLE {s}.workers; " + BEFORE_V7.format(s=s) +
            f"UPDATE {s}.schema_version SET version = 1")
    finally:
        admin.close()
    open_pg(pg_url).close()
    assert sql(pg_base, f"SELECT version FROM {s}.schema_version") == [(SCHEMA_VERSION,)]
    (definition,), = sql(pg_base, "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND indexname = %s",
                         (pg_schema, "jobs_ready_by_type"))
    assert "(type, concurrency_group, priority DESC, run_at, id, queue, cost_units)" in definition
    columns = {r[0] for r in sql(pg_base, "SELECT column_name FROM information_schema.columns "
                                          "WHERE table_schema = %s AND table_name = 'jobs'", (pg_schema,))}
    assert {"lease_boot_ms", "lease_boot_id", "progress_at", "claimed_boot_ms"} <= columns and "expiry_seen_at" not in columns


def test_a_v5_schema_gets_the_keys_of_its_live_jobs(pg_url, pg_base, pg_schema):
    """v6 writes a unique_key for every live job (before it, only --unique jobs had one), as
    engines/base.py computes it for a new job, so --unique finds any of them."""
    from hashlib import sha256

    from jobctl.engines.base import unique_key

    for payload in ('{"a": 1}', '{"b": "é"}', '{"c": 3}'):
        assert run_cli("--db", pg_url, "enqueue", "-q", "q-1", "t.x", payload).exit_code == 0
    s = f'"{pg_schema}"'
    hashes = dict(sql(pg_base, f"SELECT id, payload_hash FROM {s}.jobs ORDER BY id"))
    sql(pg_base, f"UPDATE {s}.jobs SET unique_key = NULL WHERE id = 1; "
                 f"UPDATE {s}.jobs SET unique_key = %s WHERE id = 2; "  # (a --unique job's key before v6)
                 f"UPDATE {s}.jobs SET unique_key = NULL, status = 'cancelled' WHERE id = 3; "
                 + BEFORE_V7.format(s=s) + f"UPDATE {s}.schema_version SET version = 5",
        (sha256(f"q-1\0t.x\0{hashes[2]}".encode()).hexdigest(),))
    open_pg(pg_url).close()
    assert sql(pg_base, f"SELECT version FROM {s}.schema_version") == [(SCHEMA_VERSION,)]
    assert sql(pg_base, f"SELECT id, unique_key FROM {s}.jobs ORDER BY id") == [
        (1, unique_key("q-1", "t.x", hashes[1])), (2, unique_key("q-1", "t.x", hashes[2])), (3, None)]
    r = run_cli("--db", pg_url, "enqueue", "--unique", "-q", "q-1", "t.x", '{"a": 1}', "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["id"] == 1, r.output


def test_a_v6_schema_appends_its_counts_without_an_id_or_a_search_path(pg_url, pg_base, pg_schema):
    """v7: the count functions name their table by schema (no SET search_path per call), and the
    changes have no id (no sequence, no index to write per append); the counts stay exact across
    the migration, with changes appended before it and after."""
    for i in range(3):
        assert run_cli("--db", pg_url, "enqueue", "t", json.dumps({"i": i})).exit_code == 0
    s = f'"{pg_schema}"'
    sql(pg_base, BEFORE_V7.format(s=s) + f"UPDATE {s}.schema_version SET version = 6")
    engine = open_pg(pg_url)
    try:
        assert engine.claim(ClaimRequest(worker="w", token="tk")) is not None
    finally:
        engine.close()
    assert sql(pg_base, f"SELECT version FROM {s}.schema_version") == [(SCHEMA_VERSION,)]
    assert sql(pg_base, "SELECT proname, proconfig FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                        "WHERE nspname = %s ORDER BY 1", (pg_schema,)) == [
        ("jobs_counted_delete", None), ("jobs_counted_insert", None), ("jobs_counted_update", None)]
    columns = sql(pg_base, "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
                           "AND table_name = 'job_count_changes' ORDER BY 1", (pg_schema,))
    assert columns == [("n",), ("queue",), ("state",)]
    assert sql(pg_base, "SELECT relreplident FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE nspname = %s AND relname = 'job_count_changes'", (pg_schema,)) == [("f",)]
    # a search_path that names another schema first changes nothing: the functions name their own
    other = f"{pg_schema}_other"
    sql(pg_base, f'CREATE SCHEMA "{other}"; CREATE TABLE "{other}".job_count_changes (queue text, state text, n bigint)')
    try:
        conn = pg_admin(pg_base)
        try:
            conn.cursor().execute(f'SET search_path = "{other}", {s}; UPDATE {s}.jobs SET status = \'cancelled\' '
                                  "WHERE id = 3")
            conn.commit()
        finally:
            conn.close()
        assert sql(pg_base, f'SELECT count(*) FROM "{other}".job_count_changes') == [(0,)]
    finally:
        sql(pg_base, f'DROP SCHEMA "{other}" CASCADE')
    r = run_cli("--db", pg_url, "stats", "--json")
    assert r.exit_code == 0, r.output
    totals = json.loads(r.stdout)["totals"]
    assert (totals["ready"], totals["running"], totals["cancelled"]) == (1, 1, 1), totals


def test_ten_processes_creating_the_schema_at_once_all_succeed(pg_url, pg_base, pg_schema):
    procs = [subprocess.Popen([*JOBCTL, "--db", pg_url, "enqueue", "t", json.dumps({"i": i})],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(10)]
    results = [(p.wait(timeout=60), p.stdout.read(), p.stderr.read()) for p in procs]
    assert all(code == 0 for code, _, _ in results), results
    assert sorted(int(out) for _, out, _ in results) == list(range(1, 11))
    assert sql(pg_base, f'SELECT version FROM "{pg_schema}".schema_version') == [(SCHEMA_VERSION,)]


def test_a_newer_schema_is_refused_and_left_alone(pg_url, pg_base, pg_schema):
    assert run_cli("--db", pg_url, "enqueue", "t").exit_code == 0
    sql(pg_base, f'UPDATE "{pg_schema}".schema_version SET version = 99')
    for args in (["list"], ["enqueue", "t"], ["init"]):
        r = run_cli("--db", pg_url, *args)
        line = r.one_error_line()
        assert r.exit_code == 8 and "newer jobctl" in line and "v99" in line, r.output
    assert sql(pg_base, f'SELECT count(*) FROM "{pg_schema}".jobs') == [(1,)]


def test_a_schema_holding_other_tables_is_not_taken_over(pg_url, pg_base, pg_schema):
    sql(pg_base, f'CREATE SCHEMA "{pg_schema}"; CREATE TABLE "{pg_schema}".theirs (x int)')
    r = run_cli("--db", pg_url, "init")
    line = r.one_error_line()
    assert r.exit_code == 8 and "not jobctl's" in line, r.output
    tables = [r[0] for r in sql(pg_base, "SELECT tablename FROM pg_tables WHERE schemaname = %s", (pg_schema,))]
    assert tables == ["theirs"]


def test_counts_stay_exact_through_changes_and_folds(pg_url):
    e = open_pg(pg_url, clock=Clock(T0))
    try:
        e.insert_jobs([new(queue="a") for _ in range(30)] + [new(queue="b")], "x")
        e.insert_jobs([new(queue="a", after=[1])], "x")
        for _ in range(5):
            e.claim(ClaimRequest("w", f"tok{_}", queues=["a"]))
        e.update_job(2, lambda j, now: Change("completed", {}, run="completed"), "w")
        e.purge("completed", -1_000)

        def counted():
            with e._read() as c:
                truth = {(r[0], r[1]): r[2] for r in c.execute(
                    "SELECT queue, CASE WHEN status = 'pending' AND waiting_on > 0 THEN 'blocked' ELSE status END, "
                    "count(*) FROM jobs GROUP BY 1, 2").fetchall()}
                kept = {(q, s): n for q, s, n in e._state_counts(c) if n}
            return truth, kept

        truth, kept = counted()
        assert kept == truth == {("a", "pending"): 25, ("a", "running"): 4, ("a", "blocked"): 1, ("b", "pending"): 1}
        e.fold_counts()
        assert counted()[1] == truth
        with e._read() as c:
            assert c.execute("SELECT count(*) FROM job_count_changes").fetchone()[0] == 0
        assert e.stats_snapshot()["counts"] == {"a": {"pending": 25, "running": 4, "blocked": 1}, "b": {"pending": 1}}
    finally:
        e.close()


def test_text_with_nul_characters_is_stored_with_a_replacement_character(pg_url):
    e = open_pg(pg_url)
    try:
        e.insert_jobs([new()], "x")
        e.update_job(1, lambda j, now: Change("buried", {"error": "bad\x00byte"}, message="m\x00"), "w")
        assert e.get_job(1).error == "bad\ufffdbyte"
        assert e.events(1)[-1].message == "m\ufffd"
    finally:
        e.close()


# -- wake-ups ---------------------------------------------------------------------------------


def test_an_idle_worker_starts_a_new_job_at_once_by_notification(tmp_path, pg_url, capsys):
    """The worker polls every 30 s here: a job that starts within a second was woken by NOTIFY.
    Prints the median delay from the enqueue's commit to the handler's start."""
    starts = tmp_path / "starts.txt"
    (tmp_path / "jobctl.toml").write_text(textwrap.dedent(f"""
        [types.t]
        command = ["sh", "-c", "date +%s.%N >> {starts}"]
        [worker]
        poll = "30s"
    """))
    e = open_pg(pg_url)
    worker = start_worker(tmp_path, pg_url, "--concurrency", "1")
    delays = []
    try:
        e.insert_jobs([new()], "warm-up")  # the worker is up and listening once this one has run
        wait_for(lambda: starts.exists() and len(starts.read_text().split()) == 1, what="the first job")
        for i in range(2, 12):  # ten wake-ups: their median is as clear a verdict as twenty gave
            time.sleep(0.3)  # idle again
            committed = time.time()
            e.insert_jobs([new()], "x")
            wait_for(lambda: len(starts.read_text().split()) == i, timeout=20, what=f"job {i} to start")
            delays.append(float(starts.read_text().split()[-1]) - committed)
    finally:
        worker.terminate()
        code, log = finish(worker)
        e.close()
    median = statistics.median(delays)
    with capsys.disabled():
        print(f"\nNOTIFY wake-up: enqueue commit -> handler start, median {median * 1000:.1f} ms over "
              f"{len(delays)} (min {min(delays) * 1000:.1f}, max {max(delays) * 1000:.1f})")
    assert median < 1.0, (delays, log)


# -- reconnecting -----------------------------------------------------------------------------


def terminate_backends(base, application_name):
    return sql(base, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
               (application_name,))


def test_a_terminated_connection_is_an_outage_then_reconnects(pg_base, pg_schema):
    app = f"jt_app_{pg_schema}"
    url = with_schema(pg_base, pg_schema) + f"&application_name={app}"
    e = open_pg(url)
    other = open_pg(with_schema(pg_base, pg_schema))
    try:
        e.insert_jobs([new(), new()], "x")
        job = e.claim(ClaimRequest("w", "tok-1", lease_ms=1))
        # The connection drops inside a write: an outage, never a commit. (The completion's
        # statements go in the COMMIT's round trip, so the engine cannot know the server did not
        # get them: it says the change may have been made.)
        def decide(j, now):
            terminate_backends(pg_base, app)
            return Change("completed", {}, run="completed")

        with pytest.raises(ConnectionLost) as lost:
            e.update_job(job.id, decide, "w")
        assert "may or may not have been made" in str(lost.value) and lost.value.exit_code == 8
        assert other.get_job(job.id).status == "running"
        # Meanwhile the lease is lost: another worker runs the job under a new claim.
        other.update_job(job.id, lambda j, now: Change("pending", {"token": None, "worker": None}), "sweeper")
        again = other.claim(ClaimRequest("w2", "tok-2", queues=None))
        assert again.id == job.id
        # The first engine reconnects on its next call; its old claim's report is refused by its token.
        def complete_with(token):
            def decide(j, now):
                if j.token != token:
                    raise InvalidState("stale token")
                return Change("completed", {}, run="completed")
            return decide

        with pytest.raises(InvalidState):
            e.update_job(job.id, complete_with("tok-1"), "w")
        assert e.update_job(job.id, complete_with("tok-2"), "w2").status == "completed"
        # Terminated while idle: the next call reconnects by itself, a read or a write (whose first
        # round trip carries the BEGIN, the job's row and the time).
        terminate_backends(pg_base, app)
        assert e.get_job(2).status == "pending"
        terminate_backends(pg_base, app)
        assert e.update_job(2, lambda j, now: Change("cancelled", {}), "x").status == "cancelled"
    finally:
        e.close()
        other.close()


def test_a_worker_survives_its_connections_being_terminated(tmp_path, pg_base, pg_schema):
    app = f"jt_app_{pg_schema}"
    url = with_schema(pg_base, pg_schema) + f"&application_name={app}"
    (tmp_path / "jobctl.toml").write_text(textwrap.dedent("""
        [types.t]
        command = ["sh", "-c", "sleep 0.2"]
        [worker]
        poll = "200ms"
    """))
    assert run_cli("--db", url, "enqueue", "t").exit_code == 0
    worker = start_worker(tmp_path, url, "--concurrency", "2")
    try:
        def done():
            r = run_cli("--db", url, "list", "--status", "completed", "--json")
            return len(r.stdout.splitlines())

        wait_for(lambda: done() == 1, what="the first job")
        stop = threading.Event()

        def keep_terminating():  # the worker's connections (and LISTEN) dropped again and again
            while not stop.wait(0.15):
                terminate_backends(pg_base, app)

        killer = threading.Thread(target=keep_terminating)
        killer.start()
        try:
            for _ in range(10):
                r = run_cli("--db", with_schema(pg_base, pg_schema), "enqueue", "t")
                assert r.exit_code == 0, r.output
                time.sleep(0.1)
            time.sleep(1.0)
        finally:
            stop.set()
            killer.join()
        wait_for(lambda: done() == 11, timeout=60, what="every job to complete")
        assert worker.poll() is None  # still working
    finally:
        worker.terminate()
        code, log = finish(worker)
    assert code == 0, log
    r = run_cli("--db", with_schema(pg_base, pg_schema), "list", "--json")
    assert {json.loads(line)["status"] for line in r.stdout.splitlines()} == {"completed"}, log


# -- doctor, backup, restore --------------------------------------------------------------------


def test_doctor_checks_the_server(pg_url):
    assert run_cli("--db", pg_url, "init").exit_code == 0
    r = run_cli("--db", pg_url, "doctor", "--json")
    assert r.exit_code == 0, r.output
    checks = {c["check"]: c for c in json.loads(r.stdout)["checks"]}
    assert {"connection", "schema", "long transactions", "dead rows", "expired leases", "job rows"} <= set(checks)
    assert all(c["ok"] for c in checks.values()), checks


def test_doctor_names_a_transaction_that_holds_back_vacuum(pg_url, pg_base, monkeypatch):
    from jobctl.engines import postgres

    monkeypatch.setattr(postgres, "LONG_TRANSACTION_S", 0)
    e = open_pg(pg_url)
    holder = pg_admin(pg_base)
    try:
        holder.cursor().execute("BEGIN; SELECT txid_current()")
        time.sleep(0.05)
        checks = {c.name: c for c in e.health_checks()}
        assert not checks["long transactions"].ok and "hold back vacuum" in checks["long transactions"].detail
    finally:
        holder.close()
        e.close()


def test_backup_points_to_pg_dump_and_restore_is_refused(pg_url, tmp_path):
    assert run_cli("--db", pg_url, "init").exit_code == 0
    r = run_cli("--db", pg_url, "backup", str(tmp_path / "b.db"))
    assert r.exit_code == 2 and "pg_dump" in r.one_error_line(), r.output
    assert not (tmp_path / "b.db").exists()
    (tmp_path / "some.db").write_bytes(b"")
    r = run_cli("--db", pg_url, "restore", str(tmp_path / "some.db"))
    assert r.exit_code == 2 and "restore" in r.one_error_line(), r.output


def test_busy_timeout_sets_the_sessions_timeouts(pg_url):
    e = open_pg(pg_url, busy_timeout=1.5)
    try:
        with e._read() as c:
            assert c.execute("SHOW lock_timeout").fetchone()[0] == "1500ms"
            assert c.execute("SHOW statement_timeout").fetchone()[0] == "31500ms"
    finally:
        e.close()


def test_a_deadlock_or_lock_timeout_is_busy(pg_url, pg_base, pg_schema):
    e = open_pg(pg_url, busy_timeout=0.2)
    holder = pg_admin(pg_base)
    try:
        e.insert_jobs([new()], "x")
        holder.cursor().execute(f'BEGIN; SELECT * FROM "{pg_schema}".jobs FOR UPDATE')
        with pytest.raises(DatabaseBusy):
            e.update_job(1, lambda j, now: Change("cancelled", {}), "x")
        holder.cursor().execute("ROLLBACK")
        assert e.get_job(1).status == "pending"
    finally:
        holder.close()
        e.close()


# -- the connection's round trips ---------------------------------------------------------------


def test_a_statement_the_server_cannot_prepare_runs_as_it_is(pg_url):
    e = open_pg(pg_url)
    try:
        for _ in range(3):  # the second run would be prepared: $1 IS NULL has no type to infer
            with e._write() as (c, _now):
                assert c.execute("SELECT ? IS NULL, ?", (None, 7)).fetchone()[:] == (True, 7)
                c.execute("INSERT INTO queues (name, paused, updated_at) VALUES (?, 0, ?) ON CONFLICT DO NOTHING",
                          ("q", 1))
        assert "SELECT ? IS NULL, ?" in e.conn._unpreparable
        assert e.queue_names() == ["q"]
    finally:
        e.close()


def test_a_deferred_statement_that_fails_rolls_the_whole_transaction_back(pg_url):
    from psycopg2 import IntegrityError

    e = open_pg(pg_url)
    try:
        e.insert_jobs([new()], "x")
        with pytest.raises(IntegrityError):
            with e._write() as (c, now):
                c.execute("UPDATE jobs SET priority = 99 WHERE id = ?", (1,))  # deferred
                c.execute("INSERT INTO events (job_id, at) VALUES (?, ?)", (1, now))  # deferred: NOT NULL fails
        assert e.get_job(1).priority == 10 and len(e.events(1)) == 1
        with e._write() as (c, _now):  # the connection is fine afterwards
            c.execute("UPDATE jobs SET priority = 11 WHERE id = ?", (1,))
        assert e.get_job(1).priority == 11
    finally:
        e.close()


def test_a_statement_that_once_timed_out_on_a_lock_runs_again_on_the_same_connection(pg_url):
    """A lock timeout can land on the round trip in which a statement is first prepared on the
    server: the prepared statement outlives that transaction's rollback (PREPARE is not undone by
    ROLLBACK), and the next try must still run, not trip over its own leftover. (From pgtest.)"""
    import psycopg2

    from jobctl.queue import Queue

    with Queue.open(pg_url, create=True, busy_timeout=0.3) as q:
        ids = [q.enqueue("t", {"i": i}).id for i in range(3)]  # one, then one per attempt
        job = q.claim(worker="w")  # the completion's statements run once on this connection:
        q.complete(job.id, token=job.token, actor="w")  # the next time they are prepared
        for attempt in range(2):
            job = q.claim(worker="w")
            holder = psycopg2.connect(pg_url)  # someone holds the job's row
            try:
                holder.cursor().execute("SELECT id FROM jobs WHERE id = %s FOR UPDATE", (job.id,))
                with pytest.raises(DatabaseBusy):
                    q.complete(job.id, token=job.token, actor="w")
            finally:
                holder.rollback()
                holder.close()
            q.complete(job.id, token=job.token, actor="w")  # the lock is gone: this goes through
        assert {j.status for j in q.get_many(ids)} == {"completed"}


def test_a_table_changed_under_prepared_statements_is_a_retry_not_a_driver_error(pg_url):
    """A newer jobctl migrating (here: a column added to jobs) while this connection holds
    statements prepared against the old table: one call is busy (nothing changed), the next
    prepares again and works. (After pgtest's test of it.)"""
    from jobctl.queue import Queue

    with Queue.open(pg_url, create=True) as q:
        ids = [q.enqueue("t", {"i": i}).id for i in range(6)]
        for _ in range(3):  # the claim's and completion's statements are prepared by now
            job = q.claim(worker="w")
            q.complete(job.id, token=job.token, actor="w")
        sql(pg_url, "ALTER TABLE jobs ADD COLUMN added_by_a_newer_jobctl TEXT")
        outcomes = []
        for _ in range(4):
            try:
                job = q.claim(worker="w")
                q.complete(job.id, token=job.token, actor="w")
                outcomes.append("done")
            except DatabaseBusy:
                outcomes.append("busy")
        assert outcomes.count("done") >= 2 and outcomes[-1] == "done", outcomes
        assert q.get(ids[-1]).status in ("completed", "running")


# -- row locks: taken in the order the statements need them ----------------------------------------

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


# -- the isolation level the engine relies on ------------------------------------------------------

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

    app = f"jt_rr_{pg_schema}"
    url = repeatable_read_url(pg_base, pg_schema, app)
    open_pg(url).close()
    unique_key = new(unique=True).unique_key
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
    ("postgresql://u@127.0.0.1:5432/test?sslpassword=pa%zzss", "zzss"),  # and in the client key's passphrase
    ("postgresql://u@127.0.0.1:5432/test?sslpassword=pa%00ss", "pa%00"),  # (libpq quotes this one too)
    ("postgresql://u@127.0.0.1:5432/test?pass%77ord=pa%zzss", "zzss"),  # libpq decodes a parameter's name
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
    # the passphrase of the client's TLS key is a password too (the top header, the worker's first line)
    assert display("postgresql://h/db?sslkey=/k&sslpassword=secret") == "postgresql://h/db?sslkey=/k&sslpassword=***"
    assert display("postgresql://h/db?SSLPassword=secret&x=1") == "postgresql://h/db?SSLPassword=***&x=1"
    # libpq percent-decodes a parameter's name: pass%77ord= is a password
    assert display("postgresql://h/db?pass%77ord=secret&x=1") == "postgresql://h/db?pass%77ord=***&x=1"
    assert display("postgresql://h/db?ssl%70assword=secret") == "postgresql://h/db?ssl%70assword=***"
    assert display("/var/lib/jobctl/a:b@c.db") == "/var/lib/jobctl/a:b@c.db"


# -- deferred statements: an error, or a lost connection, in the round trip that carries them ------

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


# -- a claim and a change are dated after their turn at a lock -------------------------------------

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


# -- counts: exact under several processes, with folds running meanwhile ---------------------------

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


# -- a vanished server is found dead ---------------------------------------------------------------

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
