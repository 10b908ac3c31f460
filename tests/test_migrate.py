"""jobctl migrate --to: every job in every state, with its history, runs, output (bytes exactly),
pauses and ids, arrives in the target as it was, seen the same through every command; the target
is written all or nothing, and refused when it holds anything already."""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from conftest import (JOBCTL, file_history, new_job, open_pg, pg_admin, pg_named, pg_sql, run_cli, run_inproc, run_on_pty,
                      snapshot, with_schema)
from jobctl.engines.base import RunOutput
from jobctl.queue import Queue

new = new_job
sql = pg_sql
named = pg_named

BINARY = bytes(range(256)) + b"\xff\xfe not UTF-8 \x00\x80"


def build_source(url) -> dict:
    """A database with a job in every state and view, and everything that goes with them.
    Returns the ids by name, and the id of the newest job, purged (so the largest id ever handed
    out is not in the file)."""
    ids: dict = {}
    with Queue.open(url, create=True) as q:
        e = q.enqueue
        ids["pending"] = e("t", {"n": 1, "text": "é ☃ \u2028", "password": "hunter2"}, queue="work", priority=20,
                           key="key-1", cost=2, group="g", max_attempts=5, backoff="10,30", timeout="90s").id
        ids["scheduled"] = e("t", {"n": 2}, queue="work", delay="1h").id
        ids["blocked"] = e("t", {"n": 3}, queue="work", after=[ids["pending"]]).id
        ids["unique"] = e("t", {"n": 4}, queue="work", unique=True).id
        for name, type_ in (("running", "run"), ("completed", "done"), ("retried", "flaky"), ("buried", "bad"),
                            ("cancel_requested", "stop")):
            ids[name] = e(type_, {"name": name}, queue="work", on_buried="alert" if name == "buried" else None).id
        ids["cancelled"] = e("t", {"n": 5}, queue="other").id
        ids["report"] = e("report", {}, queue="reports").id

        def claim(type_):
            job = q.claim(worker=f"host-a:{type_}", types=[type_], lease="10m")
            assert job is not None
            return job

        job = claim("run")
        q.progress(job.id, token=job.token, message="half way", percent=50)
        q.heartbeat(job.id, token=job.token, output=RunOutput(b"started\n\x00\xff", b"", 0))
        job = claim("done")
        q.complete(job.id, token=job.token, result={"ok": True, "rows": [1, 2, 3]},
                   output=RunOutput(BINARY, b"tail\xfe\n", 12345))
        job = claim("flaky")
        q.fail(job.id, token=job.token, error="exit 1: boom", output=RunOutput(b"try 1\n", b"", 0))
        job = claim("bad")
        q.fail(job.id, token=job.token, error="exit 65: bad input", bury=True)
        job = claim("stop")
        q.cancel(job.id, reason="not needed any more")
        # The newest job is purged: its id must not be handed out again on the target either.
        purged = e("t", {"n": 6}, queue="other").id
        q.cancel(purged)
        time.sleep(0.05)
        assert q.purge(cancelled_older_than="20ms") == {"cancelled": 1}
        q.cancel(ids["cancelled"], reason="duplicate")
        q.pause("reports", for_="2h")
        q.pause("work", type="send", for_="1h")
        q.pause("work", type="digest")
        ids["alert"] = max(j.id for j in q.list_jobs(limit=0, type="alert"))
        states = {j.status for j in q.list_jobs(limit=0)}
    assert states == {"pending", "running", "completed", "buried", "cancelled", "cancel_requested"}
    return {"ids": ids, "purged": purged}


def ok(r):
    assert r.exit_code == 0, r.output
    return r.stdout


def views(url, ids) -> dict:
    """What every command shows of the database, minus what depends on the moment it is asked."""
    out = {"list": ok(run_inproc("list", "--json", "--limit", 0, db=url))}
    for i in ids:
        out[f"show {i}"] = json.loads(ok(run_inproc("show", "--json", i, db=url)))
        r = run_inproc("logs", "--json", i, db=url)
        out[f"logs {i}"] = (r.exit_code, r.stdout)
    stats = json.loads(ok(run_inproc("stats", "--json", db=url)))
    for figures in [*stats["queues"].values(), stats["totals"]]:
        figures.pop("oldest_ready_age")
        figures.pop("oldest_held_age")
    out["stats"] = {k: stats[k] for k in ("queues", "totals", "buried")}
    out["throughput"] = {k: stats["throughput"]["60m"][k] for k in ("completed", "failed")}
    return out


def raw_output(url, ids) -> dict:
    """Every stored run's output, as bytes."""
    found = {}
    with Queue.open(url) as q:
        for i in ids:
            run = 1
            while (log := q.run_output(i, run)) is not None:
                if log.kept:  # (a run that printed nothing has no output to copy)
                    found[(i, run)] = (log.head, log.tail, log.dropped, log.started_at, log.ended_at, log.outcome)
                run += 1
    return found


DIRECTIONS = ["sqlite-sqlite", "sqlite-postgres", "postgres-sqlite"]


@pytest.fixture(params=DIRECTIONS)
def pair(request, tmp_path):
    """(source, target): a SQLite file, or a PostgreSQL URL with a schema of its own."""
    def place(kind: str, name: str):
        return tmp_path / name / "jobs.db" if kind == "sqlite" else request.getfixturevalue("pg_url")

    source, target = request.param.split("-")
    return place(source, "old"), place(target, "new")


@pytest.fixture
def files(tmp_path):
    """(source, target) SQLite files, for what only a file can show."""
    return tmp_path / "old" / "jobs.db", tmp_path / "new" / "jobs.db"


def location(url) -> str:
    with Queue.open(url) as q:
        return q.location


def job_ids(url) -> list[int]:
    lines = ok(run_inproc("list", "--json", "--limit", 0, db=url)).split("\n")  # not splitlines(): U+2028
    return sorted(json.loads(line)["id"] for line in lines if line)


def test_everything_arrives_as_it_was(pair):
    source, target = pair
    built = build_source(source)
    ids = job_ids(source)
    assert len(ids) == 12
    seen = views(source, ids)
    logs = raw_output(source, ids)
    assert len(logs) == 3 and any(head == BINARY for head, *_ in logs.values())
    if isinstance(source, Path):
        file_history(source)  # (migrate files it first: the source's content is the same, filed)
    rows = snapshot(source) if isinstance(source, Path) else None
    r = run_inproc("migrate", "--to", target, db=source)
    assert r.exit_code == 0, r.output
    assert r.stdout == (f"copied 12 jobs (22 events, 3 runs, 3 logs, 3 pauses) from {location(source)} "
                        f"to {location(target)}\n")
    assert "2 jobs were running; their workers still report to the old database" in r.stderr
    assert views(source, ids) == seen and raw_output(source, ids) == logs  # the source is only read
    assert rows is None or snapshot(source) == rows

    assert views(target, ids) == seen
    assert raw_output(target, ids) == logs
    # Derived data came out right: the counts kept by triggers, and the sequence of job ids.
    checks = json.loads(run_inproc("doctor", "--json", db=target).stdout)["checks"]
    assert all(c["ok"] for c in checks if c["check"] != "handlers"), checks  # no handlers configured here
    new_id = int(ok(run_inproc("enqueue", "t", db=target)))
    assert new_id > max(ids) and new_id > built["purged"]


def test_json_counts(pair):
    source, target = pair
    build_source(source)
    to = f"sqlite://{target}" if isinstance(target, Path) else target
    out = json.loads(ok(run_inproc("migrate", "--to", to, "--json", db=source)))
    assert out == {"jobs": 12, "dependencies": 1, "events": 22, "runs": 3, "logs": 3, "pauses": 3, "queues": 2,
                   "paused_types": 2, "running": 2, "from": location(source), "to": location(target)}


def test_a_target_that_holds_anything_is_refused_and_left_alone(pair):
    source, target = pair
    build_source(source)
    ok(run_inproc("enqueue", "t", db=target))
    before = views(target, job_ids(target))
    r = run_inproc("migrate", "--to", target, db=source)
    assert r.exit_code == 2, r.output
    assert "is not empty (it holds 1 job, 1 event)" in r.one_error_line()
    assert views(target, job_ids(target)) == before


def test_a_target_with_a_pause_alone_is_refused_too(files):
    # a pause is data too: merging it with the source's would be a guess
    source, target = files
    build_source(source)
    ok(run_inproc("init", db=target))
    ok(run_inproc("pause", "reports", db=target))
    r = run_inproc("migrate", "--to", target, db=source)
    assert r.exit_code == 2, r.output
    assert "it holds 1 queue setting" in r.one_error_line()


def test_the_same_database_is_refused(files, tmp_path):
    source, _ = files
    build_source(source)
    before = snapshot(source)
    link = tmp_path / "link.db"
    link.symlink_to(source)
    for same in (source, f"sqlite://{source}", link):
        r = run_inproc("migrate", "--to", same, db=source)
        assert r.exit_code == 2, r.output
        assert "the source and the target are the same database" in r.one_error_line()
    assert snapshot(source) == before


def test_a_failed_copy_leaves_the_target_empty(files):
    source, target = files
    build_source(source)
    ok(run_inproc("init", db=target))
    # A target that refuses the last rows of the copy (a trigger of its own): nothing of the
    # copy may stay behind, not even the jobs written before the failure.
    with sqlite3.connect(target) as conn:
        conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON paused_types BEGIN SELECT RAISE(ABORT, 'no'); END")
    r = run_inproc("migrate", "--to", target, db=source)
    assert r.exit_code != 0, r.output
    r.one_error_line()
    with sqlite3.connect(target) as conn:
        assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM job_counts WHERE n != 0").fetchone()[0] == 0


def test_counts_that_do_not_match_fail_loudly_and_keep_nothing(files):
    source, target = files
    build_source(source)
    ok(run_inproc("init", db=target))
    with sqlite3.connect(target) as conn:  # a target that loses rows as they arrive
        conn.execute("CREATE TRIGGER lose AFTER INSERT ON events WHEN NEW.id = 3 BEGIN DELETE FROM events WHERE id = 3; END")
    r = run_inproc("migrate", "--to", target, db=source)
    assert r.exit_code == 8, r.output
    line = r.one_error_line()
    assert "does not match" in line and "events: 22 read, 21 written" in line and "nothing was written" in line
    with sqlite3.connect(target) as conn:
        assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0


def test_derived_counts_that_do_not_match_fail_loudly(files):
    source, target = files
    build_source(source)
    ok(run_inproc("init", db=target))
    with sqlite3.connect(target) as conn:  # a target whose kept counts drift from its rows
        conn.execute("CREATE TRIGGER drift AFTER INSERT ON jobs WHEN NEW.id = 2 BEGIN INSERT INTO job_counts "
                     "(queue, state, n) VALUES (NEW.queue, 'pending', 1) ON CONFLICT DO UPDATE SET n = n + 1; END")
    r = run_inproc("migrate", "--to", target, db=source)
    assert r.exit_code == 8, r.output
    assert "job counts of queue work (pending): 5 kept, 4 rows" in r.one_error_line()
    assert job_ids(target) == []


def test_the_same_postgresql_schema_is_refused(pg_url, tmp_path):
    build_source(pg_url)
    r = run_inproc("migrate", "--to", pg_url, db=pg_url)
    assert r.exit_code == 2, r.output
    assert "the source and the target are the same database" in r.one_error_line()


def test_a_failed_copy_leaves_a_postgresql_target_empty(files, pg_base, pg_schema, pg_url):
    source, _ = files
    build_source(source)
    Queue.open(pg_url, create=True).close()
    conn = pg_admin(pg_base)
    try:
        conn.cursor().execute(
            f'CREATE FUNCTION "{pg_schema}".refuse() RETURNS trigger LANGUAGE plpgsql AS $$ '
            "BEGIN RAISE EXCEPTION 'no'; END $$; "
            f'CREATE TRIGGER refuse BEFORE INSERT ON "{pg_schema}".paused_types FOR EACH ROW '
            f'EXECUTE FUNCTION "{pg_schema}".refuse()')
    finally:
        conn.close()
    r = run_inproc("migrate", "--to", pg_url, db=source)
    assert r.exit_code != 0, r.output
    r.one_error_line()
    assert job_ids(pg_url) == []
    stats = json.loads(ok(run_inproc("stats", "--json", db=pg_url)))
    assert stats["queues"] == {} or all(not any(v for k, v in q.items() if isinstance(v, int))
                                        for q in stats["queues"].values()), stats


def test_a_damaged_row_stops_the_copy_with_one_clear_line(files):
    source, target = files
    ids = build_source(source)["ids"]
    with sqlite3.connect(source) as conn:  # bytes that are not UTF-8, as a bad disk leaves them
        conn.execute("UPDATE jobs SET error = CAST(x'6f6b20ff' AS TEXT) WHERE id = ?", (ids["buried"],))
    r = run_inproc("migrate", "--to", target, db=source)
    assert r.exit_code == 8, r.output
    line = r.one_error_line()
    assert f"holds a damaged job {ids['buried']} (error holds" in line and "jobctl doctor" in line, line
    assert not target.exists()  # (the file it had created is removed again)


def test_a_missing_source_is_not_created(files):
    source, target = files
    r = run_inproc("migrate", "--to", target, db=source)
    assert r.exit_code == 8, r.output
    assert not source.exists() and not target.exists()


def test_one_job_is_one_job_and_a_missing_postgresql_database_is_not_created(files, pg_base):
    source, target = files
    assert run_cli("--db", source, "enqueue", "t").exit_code == 0
    r = run_inproc("migrate", "--to", target, db=source)
    assert r.exit_code == 0 and r.stdout.startswith("copied 1 job (1 event, 0 runs, 0 logs, 0 pauses) from "), r.output
    # a server database is not created: it must exist (jobctl creates its schema in it)
    missing = pg_base.rsplit("/", 1)[0] + "/jobctl_no_such_database"
    r = run_inproc("migrate", "--to", missing, db=source)
    assert r.exit_code == 8 and 'database "jobctl_no_such_database" does not exist' in r.one_error_line()


def test_a_worker_runs_the_jobs_on_the_target(pair, tmp_path):
    source, target = pair
    ids = build_source(source)["ids"]
    ok(run_inproc("migrate", "--to", target, db=source))
    config = tmp_path / "jobctl.toml"
    handler = [sys.executable, "-c", "import sys; sys.stdin.read(); print('{\"done\": true}')"]
    config.write_text("".join(f"[types.{t}]\ncommand = {json.dumps(handler)}\n" for t in ("t", "alert")))
    r = run_cli("--config", config, "work", "--stop-when-empty", db=target, timeout=120)
    assert r.exit_code == 0, r.output
    with Queue.open(target) as q:
        for name in ("pending", "blocked", "unique", "alert"):  # blocked: after `pending` completed here
            job = q.get(ids[name])
            assert (job.status, json.loads(job.result)) == ("completed", {"done": True}), name
        assert q.get(ids["scheduled"]).status == "pending"
    with Queue.open(source) as q:  # the old database is untouched
        assert {q.get(ids[n]).status for n in ("pending", "blocked", "unique", "alert")} == {"pending"}


def test_a_progress_bar_on_a_terminal_and_nothing_on_a_pipe(files):
    source, target = files
    with Queue.open(source, create=True) as q:
        q.insert([q.prepare("t", {"n": i}) for i in range(3000)])
    code, seen, _ = run_on_pty([*JOBCTL, "--db", source, "migrate", "--to", target])
    assert code == 0, seen
    assert "copying" in seen and "rows" in seen
    assert f"copied 3000 jobs (3000 events, 0 runs, 0 logs, 0 pauses) from {source} to {target}" in seen
    r = run_cli("migrate", "--to", target.parent / "again.db", db=source)
    assert r.exit_code == 0 and r.stderr == "", r.output


# -- a PostgreSQL target: ids past the copied ones, no SQL from a crafted source, a lost source named ---

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
        assert sql(pg_base, "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (pg_schema,)) == [(0,)]
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


# -- a refused copy leaves the target as it found it ----------------------------------------------

def _nul_source(path) -> None:
    """A SQLite file holding a job whose payload holds NUL (which PostgreSQL cannot store)."""
    assert run_cli("--db", path, "enqueue", "t", '{"a": "x\\u0000y"}').exit_code == 0


def test_a_refused_copy_into_postgresql_drops_the_schema_it_created(files, pg_base, pg_schema, pg_url):
    """The copy was refused (exit 2, naming the job, "nothing was written") but the new empty
    schema it had created stayed behind."""
    source, _ = files
    _nul_source(source)
    r = run_inproc("migrate", "--to", pg_url, db=source)
    assert r.exit_code == 2, r.output
    line = r.one_error_line()
    assert line.startswith("jobctl: error: job 1: invalid payload") and "nothing was written" in line, line
    assert sql(pg_base, "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (pg_schema,)) == [(0,)]


def test_a_refused_copy_into_an_empty_postgresql_schema_keeps_the_schema(files, pg_base, pg_schema, pg_url):
    source, _ = files
    _nul_source(source)
    sql(pg_base, f'CREATE SCHEMA "{pg_schema}"; CREATE FUNCTION "{pg_schema}".mine() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$')
    r = run_inproc("migrate", "--to", pg_url, db=source)
    assert r.exit_code == 2, r.output
    assert sql(pg_base, "SELECT count(*) FROM pg_tables WHERE schemaname = %s", (pg_schema,)) == [(0,)]
    assert sql(pg_base, "SELECT proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                        "WHERE nspname = %s", (pg_schema,)) == [("mine",)]


def test_a_refused_copy_into_a_new_file_removes_the_file(files, tmp_path):
    source, target = files
    ids = build_source(source)["ids"]
    with sqlite3.connect(source) as conn:  # a damaged job: refused with exit 8
        conn.execute("UPDATE jobs SET error = CAST(x'6f6b20ff' AS TEXT) WHERE id = ?", (ids["buried"],))
    deep = tmp_path / "a" / "b" / "jobs.db"  # the folders made for it go too
    r = run_inproc("migrate", "--to", deep, db=source)
    assert r.exit_code == 8 and "nothing was written" in r.one_error_line(), r.output
    assert not (tmp_path / "a").exists()
    target.parent.mkdir(mode=0o700)  # a folder that was there stays
    r = run_inproc("migrate", "--to", target, db=source)
    assert r.exit_code == 8 and "nothing was written" in r.one_error_line(), r.output
    assert sorted(p.name for p in target.parent.iterdir()) == []
    empty = tmp_path / "new" / "empty.db"  # an empty file made a database: emptied again, kept
    empty.touch(mode=0o600)
    r = run_inproc("migrate", "--to", empty, db=source)
    assert r.exit_code == 8, r.output
    assert empty.stat().st_size == 0 and sorted(p.name for p in target.parent.iterdir()) == ["empty.db"]


def test_a_refused_copy_into_an_existing_empty_database_leaves_it(files):
    source, target = files
    _nul_source(source)
    ok(run_inproc("init", db=target))
    before = snapshot(target)
    with sqlite3.connect(source) as conn:
        conn.execute("UPDATE jobs SET error = CAST(x'6f6b20ff' AS TEXT)")
    r = run_inproc("migrate", "--to", target, db=source)
    assert r.exit_code == 8, r.output
    assert target.exists() and snapshot(target) == before


def test_a_new_file_that_another_process_has_open_is_left_and_said(tmp_path):
    """When the new file cannot be removed safely (another connection has it open), the error says
    what was left instead of "nothing was written"."""
    from jobctl import engines

    target = tmp_path / "new" / "jobs.db"
    engine = engines.open(str(target), create=True)
    other = sqlite3.connect(target)
    try:
        other.execute("SELECT count(*) FROM jobs").fetchone()
        assert engine.created and engine._transfer_undo_create() == (
            f"{target} was left as a new empty jobctl database (another process has it open)")
        assert target.exists()
    finally:
        other.close()
    assert engine._transfer_undo_create() is None and not target.exists() and not target.parent.exists()
    engine.close()


def test_a_new_postgresql_schema_another_process_wrote_to_is_left_and_said(pg_base, pg_schema, pg_url):
    from jobctl import engines

    engine = engines.open(pg_url, create=True)
    try:
        assert engine.created and engine.created_schema
        with Queue.open(pg_url) as q:
            q.enqueue("t", {})
        assert engine._transfer_undo_create() == (
            f"the schema {pg_schema} in {engine.location} was left as it is: another process wrote to it meanwhile")
        assert sql(pg_base, f'SELECT count(*) FROM "{pg_schema}".jobs') == [(1,)]
    finally:
        engine.close()


def test_a_migrate_interrupted_by_ctrl_c_drops_the_schema_it_created(files, pg_base, pg_schema, pg_url):
    import signal
    import subprocess

    source, _ = files
    with Queue.open(source, create=True) as q:
        q.insert([q.prepare("t", {"n": i}) for i in range(50_000)])
    p = subprocess.Popen([*JOBCTL, "--db", str(source), "migrate", "--to", pg_url], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not sql(
            pg_base, "SELECT count(*) FROM pg_tables WHERE schemaname = %s AND tablename = 'jobs'", (pg_schema,))[0][0]:
        time.sleep(0.02)
    time.sleep(0.2)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130 and out == "", (p.returncode, out, err)
    assert err.startswith("jobctl: error: interrupted; nothing was copied to postgresql://") and err.count("\n") == 1, err
    assert sql(pg_base, "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (pg_schema,)) == [(0,)]


def test_a_refused_copy_from_postgresql_removes_the_new_file(tmp_path, pg_base, pg_schema, pg_url):
    with Queue.open(pg_url, create=True) as q:
        q.enqueue("t", {"a": 1})
    sql(pg_base, f'UPDATE "{pg_schema}".jobs SET payload = %s', ('{"a":2}',))  # no longer its hash: damaged
    target = tmp_path / "new" / "jobs.db"
    r = run_inproc("migrate", "--to", target, db=pg_url)
    assert r.exit_code == 8 and "holds a damaged job 1" in r.one_error_line(), r.output
    assert not target.parent.exists()
