"""doctor checks every table, column, index and trigger the schema version promises, on both
engines, and migrate refuses a source that doctor would not pass (damaged rows, columns that are not
jobctl's), naming the job, copying nothing."""

import json
import sqlite3

import pytest

from conftest import pg_sql, run_inproc


def drop(db, *statements: str) -> None:
    """Run DDL on the test's database behind jobctl's back (a SQLite file, or the test's schema)."""
    if str(db).startswith("postgresql://"):
        from urllib.parse import parse_qs, urlsplit

        schema = parse_qs(urlsplit(str(db)).query)["options"][0].split("=", 1)[1]
        base = str(db).split("?", 1)[0]
        for sql in statements:
            pg_sql(base, f"SET search_path = {schema}; {sql}")
    else:
        conn = sqlite3.connect(db)
        for sql in statements:
            conn.execute(sql)
        conn.commit()
        conn.close()


@pytest.mark.parametrize("ddl, named", [
    ("DROP TABLE events", "table events"),
    ("DROP INDEX jobs_ready_by_queue", "index jobs_ready_by_queue"),
    ("DROP TRIGGER jobs_count_delete{on}", "trigger jobs_count_delete"),
    ("ALTER TABLE events DROP COLUMN details", "column events.details"),
    ("DROP TABLE jobs", "table jobs"),
])
def test_doctor_names_what_the_schema_version_promises_and_is_missing(any_db, ddl, named):
    # `events` dropped: doctor said "schema ok" (and a dropped jobs table made doctor itself exit 8).
    assert run_inproc("enqueue", "t", db=any_db).exit_code == 0
    r = run_inproc("doctor", "--json", db=any_db)
    assert r.exit_code == 9 and json.loads(r.stdout)["checks"][1] == {  # (only the handler check fails)
        "check": "schema", "ok": True, "detail": json.loads(r.stdout)["checks"][1]["detail"]}, r.output
    pg = str(any_db).startswith("postgresql://")
    drop(any_db, ddl.format(on=" ON jobs" if pg else ""))
    r = run_inproc("doctor", db=any_db)
    assert r.exit_code == 9, r.output
    schema_line = next(line for line in r.stdout.splitlines() if line.startswith("schema"))
    assert "PROBLEM" in schema_line and named in schema_line, r.stdout
    assert "missing" in schema_line and "backup" in schema_line, schema_line
    r = run_inproc("doctor", "--json", db=any_db)
    assert r.exit_code == 9 and named in json.loads(r.stdout)["schema_missing"], r.output


def test_doctor_on_a_whole_schema_finds_nothing_missing(any_db):
    assert run_inproc("init", db=any_db).exit_code == 0
    r = run_inproc("doctor", "--json", db=any_db)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert "schema_missing" not in doc and doc["checks"][1]["check"] == "schema", doc


def test_the_promised_layout_comes_from_the_migrations_themselves():
    # One place: what the migrations create; a table or index added by a new step is expected by doctor.
    from jobctl.engines import pg_schema, schema

    lite, pg = schema.expected_layout(), pg_schema.expected_layout()
    for both in ("table events", "column events.details", "column jobs.cost_units", "index jobs_ready_by_type",
                 "index job_logs_run", "trigger jobs_count_update"):
        assert both in lite and both in pg, both
    assert "table history_log" in lite and "function jobs_counted_insert" in pg
    assert not any(x.startswith("column jobs.PRIMARY") or x.endswith(".PRIMARY") for x in pg)


# -- migrate from a crafted file: checked as doctor checks it, nothing copied ------------------------

@pytest.fixture(params=["sqlite", "postgres"])
def target(request, tmp_path):
    return tmp_path / "new" / "jobs.db" if request.param == "sqlite" else request.getfixturevalue("pg_url")


def crafted(tmp_path, *statements: str):
    """A source file with two jobs (the second after the first), then changed by hand."""
    source = tmp_path / "old" / "jobs.db"
    assert run_inproc("enqueue", "t", '{"a":1}', db=source).exit_code == 0
    assert run_inproc("enqueue", "t", '{"a":2}', "--after", "1", db=source).exit_code == 0
    drop(source, *statements)
    return source


def nothing_copied(target) -> None:
    r = run_inproc("list", "--json", db=target)
    assert r.exit_code in (0, 8) and r.stdout == "", r.output  # (8: a SQLite target never created)


@pytest.mark.parametrize("ddl, said", [
    ("UPDATE jobs SET status = 'bogus' WHERE id = 2", "holds a damaged job 2 (status holds 'bogus', not a state)"),
    ("UPDATE jobs SET cost_units = 'many' WHERE id = 1", "holds a damaged job 1 (cost_units holds 'many', not an integer)"),
    ("ALTER TABLE jobs ADD COLUMN extra TEXT", "has a column 'extra' in its jobs that is not jobctl's"),
    ("ALTER TABLE events ADD COLUMN note TEXT", "has a column 'note' in its events that is not jobctl's"),
])
def test_migrate_refuses_a_source_doctor_would_not_pass_naming_the_job_and_copies_nothing(tmp_path, target, ddl,
                                                                                          said):
    # It copied an unknown status silently, and blamed the target for a column only the source had.
    source = crafted(tmp_path, ddl)
    r = run_inproc("migrate", "--to", target, db=source)
    line = r.one_error_line()
    assert r.exit_code == 8, r.output
    assert f"{source} {said}" in line and "nothing was written" in line, line
    nothing_copied(target)


def test_migrate_of_a_row_the_server_refuses_is_exit_8_without_the_rows_data(tmp_path, pg_url):
    # It was exit 1 with the driver's message, which quotes a slice of the row.
    source = crafted(tmp_path, "UPDATE events SET at = 'secret-ish' WHERE id = 2")
    r = run_inproc("migrate", "--to", pg_url, db=source)
    line = r.one_error_line()
    assert r.exit_code == 8, r.output
    assert "holds a row that" in line and "a value of the wrong type" in line and "nothing was written" in line, line
    assert "secret-ish" not in line and "LINE 1" not in line, line
    nothing_copied(pg_url)


def test_migrate_of_a_nul_payload_to_postgresql_is_exit_2_naming_the_job(tmp_path, pg_url):
    source = tmp_path / "old" / "jobs.db"
    assert run_inproc("enqueue", "t", '{"a":1}', db=source).exit_code == 0
    assert run_inproc("enqueue", "t", '{"a":"x\\u0000y"}', db=source).exit_code == 0  # (SQLite keeps it)
    r = run_inproc("migrate", "--to", pg_url, db=source)
    line = r.one_error_line()
    assert r.exit_code == 2, r.output
    assert line.startswith("jobctl: error: job 2: invalid payload: it holds a NUL character (\\u0000)"), line
    assert "nothing was written" in line, line
    nothing_copied(pg_url)
    other = tmp_path / "other.db"  # SQLite to SQLite: kept as it is
    assert run_inproc("migrate", "--to", other, db=source).exit_code == 0
    r = run_inproc("show", "2", "--json", db=other)
    assert json.loads(r.stdout)["payload"] == {"a": "x\x00y"}, r.output
