"""Errors are classified by their cause: only lock contention is "busy, safe to retry" (exit 6);
a damaged or foreign schema, a full disk, a read-only file are "cannot be used" (exit 8), so that
nobody retries them for ever; anything else is a bug (exit 1)."""

import sqlite3
import threading

import pytest

from conftest import open_pg, run_cli
from jobctl.cli import run
from jobctl.engines.sqlite import SQLiteEngine, translate
from jobctl.errors import DatabaseBusy, DatabaseUnusable, DiskFull


def test_a_dropped_column_is_exit_8_not_busy(cli, db):
    assert cli("enqueue", "t").exit_code == 0
    conn = sqlite3.connect(db)
    conn.execute("ALTER TABLE jobs DROP COLUMN progress")
    conn.commit()
    conn.close()
    r = cli("claim")
    line = r.one_error_line()
    assert r.exit_code == 8, r.output
    assert "not a usable jobctl database" in line and "jobctl doctor" in line and "busy" not in line


def test_a_missing_table_is_exit_8(cli, db):
    assert cli("enqueue", "t").exit_code == 0
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE events")
    conn.commit()
    conn.close()
    r = cli("enqueue", "t")
    assert r.exit_code == 8 and "not a usable jobctl database" in r.one_error_line()


def test_an_old_sqlite_is_refused_at_open_naming_both_versions(db, monkeypatch, capsys):
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 34, 1))
    assert run(["--db", str(db), "enqueue", "t"]) == 8
    err = capsys.readouterr().err
    assert "SQLite 3.34.1" in err and "3.35.0 or newer" in err and "Python" in err
    assert not db.exists()  # nothing was created


def test_postgresql_url_is_not_a_path(tmp_path):
    r = run_cli("--db", "postgresql://bob:hunter2@127.0.0.1:1/x", "list")
    line = r.one_error_line()
    assert r.exit_code == 8 and "PostgreSQL" in line, r.output
    assert "hunter2" not in line and "no database at" not in line
    assert not (tmp_path / "postgresql:").exists()


def test_sqlite_url_opens_the_file(tmp_path):
    db = tmp_path / "u.db"
    r = run_cli("--db", f"sqlite://{db}", "enqueue", "t")
    assert r.exit_code == 0 and db.exists(), r.output
    r = run_cli("--db", f"sqlite:{db}", "list", "--json")
    assert r.exit_code == 0 and '"id":1' in r.stdout


def test_an_unknown_url_scheme_is_a_usage_error():
    r = run_cli("--db", "mysql://root@127.0.0.1/x", "list")
    assert r.exit_code == 2 and "postgresql://" in r.one_error_line()


def test_busy_is_only_lock_contention(tmp_path):
    e = SQLiteEngine.open(tmp_path / "b.db", create=True, busy_timeout=0.05)
    holder = sqlite3.connect(tmp_path / "b.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(DatabaseBusy):
            e.set_paused("q", True)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        e.close()


def test_disk_full_and_read_only_are_unusable_not_busy(tmp_path):
    e = SQLiteEngine.open(tmp_path / "f.db", create=True)
    e.conn.execute("PRAGMA max_page_count = 30")  # a "disk" of 30 pages: SQLite's own SQLITE_FULL
    with pytest.raises(DiskFull):
        for i in range(100):
            e.set_paused(f"q{i}" + "x" * 3000, True)
    assert not e.conn.in_transaction  # the failed statement's transaction was rolled back
    e.close()
    ro = sqlite3.connect(f"file:{tmp_path / 'f.db'}?mode=ro", uri=True)
    with pytest.raises(sqlite3.OperationalError) as exc:
        ro.execute("DELETE FROM queues")
    err = translate(exc.value, "f.db", 5)
    assert isinstance(err, DatabaseUnusable) and not isinstance(err, DatabaseBusy) and "read-only" in str(err)
    ro.close()


def test_anything_else_is_left_as_it_is():
    err = sqlite3.IntegrityError("UNIQUE constraint failed")
    assert translate(err, "x.db", 5) is err  # exit 1 with the bug line, never "busy"


def test_a_failed_commit_is_rolled_back_and_the_lock_released(tmp_path):
    """A deferred foreign key fails at COMMIT, leaving SQLite's transaction open: it must be ended."""
    path = tmp_path / "c.db"
    e = SQLiteEngine.open(path, create=True, busy_timeout=0.1)
    e.conn.execute("PRAGMA foreign_keys = ON")
    e.conn.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    e.conn.execute("CREATE TABLE child (id INTEGER, p INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)")
    with pytest.raises(sqlite3.IntegrityError):
        with e._write() as (c, _now):
            c.execute("INSERT INTO child VALUES (1, 99)")
    assert not e.conn.in_transaction
    other = SQLiteEngine.open(path, busy_timeout=0.1)
    done = threading.Event()
    other.set_paused("q", True)  # would be busy if the first connection still held the write lock
    done.set()
    assert other.paused_queues() == {"q"}
    other.close()
    e.close()


# -- the [sqlite] table ---------------------------------------------------------------------------


def test_a_config_of_0_1_0_still_loads_with_a_note(tmp_path, db):
    cfg = tmp_path / "old.toml"
    cfg.write_text('busy_timeout = "7s"\nsynchronous = "normal"\n')
    r = run_cli("--config", cfg, "--db", db, "config", "show", "--sources")
    assert r.exit_code == 0, r.output
    assert "[sqlite]" in r.stdout and 'busy_timeout = "7s"' in r.stdout and 'synchronous = "normal"' in r.stdout
    notes = [line for line in r.stderr.splitlines() if line.startswith("jobctl: note:")]
    assert len(notes) == 2 and "[sqlite]" in notes[0], r.output


def test_the_top_level_synchronous_key_is_silent_in_the_commands_cron_runs(tmp_path, db):
    """`synchronous = "normal"` at the top of the config is how the short form reads (and how 0.1.0
    read it): it works, and cron, which mails stderr, gets no note on every enqueue for it; only
    `config show` (above) says where it now belongs."""
    cfg = tmp_path / "old.toml"
    cfg.write_text('synchronous = "normal"\nbusy_timeout = "7s"\n')
    assert run_cli("--db", db, "init").exit_code == 0
    for args in (["enqueue", "t"], ["claim"], ["list"], ["stats", "--json"]):
        r = run_cli("--config", cfg, "--db", db, *args)
        assert r.exit_code == 0, (args, r.output)
        assert "note" not in r.stderr and "[sqlite]" not in r.stderr, (args, r.stderr)


def test_the_sqlite_table(tmp_path, db):
    from jobctl.config import load_settings

    cfg = tmp_path / "new.toml"
    cfg.write_text('[sqlite]\nbusy_timeout = "2s"\nsynchronous = "normal"\nallow_network_fs = true\n')
    s = load_settings(str(cfg))
    assert (s.busy_timeout, s.synchronous, s.allow_network_fs, s.notes) == (2.0, "normal", True, [])
    cfg.write_text('busy_timeout = "1s"\n[sqlite]\nbusy_timeout = "2s"\n')
    r = run_cli("--config", cfg, "--db", db, "config", "show")
    assert r.exit_code == 2 and "both" in r.one_error_line()
    cfg.write_text('[sqlite]\nsynchronus = "full"\n')
    r = run_cli("--config", cfg, "--db", db, "config", "show")
    assert r.exit_code == 2 and "sqlite.synchronus" in r.one_error_line()


# -- PostgreSQL: errors by their SQLSTATE ----------------------------------------------------------

@pytest.mark.parametrize("code, exit_code", [
    ("XX001", 8), ("XX002", 8), ("58030", 8),  # damaged data or index, an I/O error: unusable, as on SQLite
    ("55P03", 6), ("40P01", 6), ("40001", 6),  # busy: nothing changed, safe to retry
    ("25006", 8), ("53100", 8), ("53200", 8), ("42501", 8), ("42P01", 8),
    ("22P05", 2),  # a character the database's encoding (not UTF8) cannot hold: input it cannot store
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


@pytest.mark.parametrize("message, exit_code", [
    ("canceling statement due to statement timeout", 6),  # busy: nothing changed, safe to retry
    ("canceling statement due to user request", 8),  # pg_cancel_backend: said as it is, never "busy"
])
def test_a_cancelled_statement_is_busy_only_after_its_timeout(pg_url, message, exit_code):
    import psycopg2

    class Cancelled(psycopg2.DatabaseError):
        pgcode = "57014"

    e = open_pg(pg_url)
    try:
        translated = e._translate(Cancelled(f"ERROR:  {message}\n"))
        assert translated.exit_code == exit_code, translated
        assert ("busy" in str(translated)) == (exit_code == 6), translated
    finally:
        e.close()
