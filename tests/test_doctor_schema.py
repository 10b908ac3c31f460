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
    ("DROP TRIGGER jobs_count_insert{on}", "trigger jobs_count_insert"),
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
