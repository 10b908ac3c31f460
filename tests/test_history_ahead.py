"""History written ahead on SQLite (schema v8): the events and runs of transitions go first into
history_log, which has no index but its rowid, and are filed into events and runs in batches of
FILE_HISTORY_EVERY rows. A worker's step then writes one page of history instead of six; every
reader sees the same history as before, in the same order, filed or not."""

from __future__ import annotations

import ast
import json
import re
import sqlite3
import time
from pathlib import Path

import pytest

from conftest import file_history, on_db, run_inproc, types_settings
from jobctl.engines import sqlite as sqlite_engine
from jobctl.queue import Queue


@pytest.fixture
def small_batches(monkeypatch):
    monkeypatch.setattr(sqlite_engine, "FILE_HISTORY_EVERY", 7)


def raw(q, sql: str, params=()) -> list[tuple]:
    return [tuple(r) for r in q.engine.conn.execute(sql, params)]


def ahead(q) -> int:
    return raw(q, "SELECT count(*) FROM history_log")[0][0]


def test_a_workers_step_writes_its_history_ahead_and_reads_it_back(tmp_path):
    with Queue.open(tmp_path / "jobs.db", create=True) as q:
        first, second = q.enqueue("t", {"i": 1}).id, q.enqueue("t", {"i": 2}).id
        assert raw(q, "SELECT count(*) FROM events") == [(2,)]  # a new job's first event: straight in
        a = q.claim(worker="w")
        seen: list[str] = []
        q.engine.conn.set_trace_callback(lambda s: seen.append(" ".join(s.split())))
        q.complete_and_claim(a.id, token=a.token, worker="w", result={"ok": 1})
        q.engine.conn.set_trace_callback(None)
        writes = [s.split(" (")[0] for s in seen if s.startswith("INSERT")]
        assert writes == ["INSERT INTO history_log"] * 3, seen  # the run, its event, the next claim's event
        assert raw(q, "SELECT count(*) FROM events") == [(2,)] and raw(q, "SELECT count(*) FROM runs") == [(0,)]
        history = [(e.from_status, e.to_status, e.actor, e.message) for e in q.events(first)]
        assert history == [(None, "pending", history[0][2], "enqueued"), ("pending", "running", "w", "run 1 of 3"),
                           ("running", "completed", "w", "completed")]
        assert [(e.from_status, e.to_status) for e in q.events(second)] == [(None, "pending"), ("pending", "running")]


def test_history_is_filed_in_batches_in_the_order_it_was_written(tmp_path, small_batches):
    """Through many filings, a job's history reads back in the order its changes were made, events
    interleaved with changes made by other commands (a cancel request, a retry) alike."""
    with Queue.open(tmp_path / "jobs.db", create=True) as q:
        ids = [q.enqueue("t", {"i": i}).id for i in range(12)]
        job = q.claim(worker="w")
        for _ in range(5):
            job = q.complete_and_claim(job.id, token=job.token, worker="w")[1]
        cancelled_id = job.id
        q.cancel(job.id)  # running: a request, written ahead between the worker's steps
        q.fail(job.id, token=job.token, error="boom", actor="w")
        q.retry(job.id)
        peak = 0
        job = q.claim(worker="w")
        while job is not None:
            peak = max(peak, ahead(q))
            q.fail(job.id, token=job.token, error="again", bury=True, actor="w")
            job = q.claim(worker="w")
        assert peak < 7 + 3  # filed as soon as a write fills a batch
        filed = raw(q, "SELECT count(*) FROM events")[0][0]
        assert filed > 12  # some of it was filed, some is ahead
        for job_id in ids:
            states = [(e.from_status, e.to_status) for e in q.events(job_id)]
            assert states[0] == (None, "pending")
            for before, after in zip(states, states[1:]):
                assert after[0] == before[1], states  # each change starts where the one before ended
        cancelled = [e.to_status for e in q.events(cancelled_id)]
        assert cancelled[:6] == ["pending", "running", "cancel_requested", "buried", "pending", "running"], cancelled


def test_stats_runs_and_the_run_log_count_runs_not_filed_yet(tmp_path):
    with Queue.open(tmp_path / "jobs.db", create=True) as q:
        for i in range(3):
            q.enqueue("t", {"i": i})
        job = q.claim(worker="w")
        while job is not None:
            job = q.complete_and_claim(job.id, token=job.token, worker="w")[1]
        assert raw(q, "SELECT count(*) FROM runs") == [(0,)] and ahead(q) == 9
        snap = q.engine.stats_snapshot()
        assert sum(n for _minute, outcome, n in snap["runs_by_minute"] if outcome == "completed") == 3
        assert len(snap["run_ms"]) == 3


def test_the_run_log_says_how_an_unfiled_run_ended(tmp_path):
    from jobctl.engines.base import RunOutput

    with Queue.open(tmp_path / "jobs.db", create=True) as q:
        q.enqueue("t", {})
        job = q.claim(worker="w")
        q.complete(job.id, token=job.token, actor="w", output=RunOutput(b"out", b"", 0))
        assert ahead(q) == 3
        log = q.run_output(job.id)
        assert log is not None and log.outcome == "completed" and log.ended_at is not None


def test_a_rate_window_counts_runs_not_filed_yet(tmp_path):
    """Both the claim under a rate limit (it files first: it is a write) and the figures stats
    shows (a read: it reads what is ahead too) count the starts of runs that ended unfiled."""
    settings = types_settings(t={"rate_limit": (2, 3600.0)})
    with Queue.open(tmp_path / "jobs.db", create=True, settings=settings) as q:
        for i in range(4):
            q.enqueue("t", {"i": i})
        for _ in range(2):
            job = q.claim(worker="w", types=["t"])
            q.complete(job.id, token=job.token, actor="w")
        # (the second claim filed the first run: a claim under limits files what is ahead first)
        assert raw(q, "SELECT count(*) FROM runs") == [(1,)] and ahead(q) == 3
        figures = q.engine.limit_figures(q.limits)
        assert len(figures["starts"]["t"]) == 2, figures
        assert q.claim(worker="w", types=["t"]) is None  # 2 in the hour: shut
        assert ahead(q) == 0 and raw(q, "SELECT count(*) FROM runs") == [(2,)]  # filed by the claim


def test_purge_deletes_the_history_of_purged_jobs_filed_or_not(tmp_path):
    with Queue.open(tmp_path / "jobs.db", create=True) as q:
        q.enqueue("t", {})
        job = q.claim(worker="w")
        q.complete(job.id, token=job.token, actor="w")
        assert ahead(q) == 3
        time.sleep(0.01)  # (finished before the purge's "now", not in the same millisecond)
        assert q.purge(completed_older_than="0s")["completed"] == 1
        assert ahead(q) == 0
        assert raw(q, "SELECT count(*) FROM events UNION ALL SELECT count(*) FROM runs") == [(0,), (0,)]


def test_a_v7_file_gets_the_table_and_keeps_its_history(tmp_path):
    """A file of before history_log: migrated by the first command that writes; what it holds of
    events and runs stays, and the new history goes after it."""
    db = tmp_path / "jobs.db"
    with Queue.open(db, create=True) as q:
        job_id = q.enqueue("t", {}).id
        job = q.claim(worker="w")
        q.complete(job.id, token=job.token, actor="w")
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO events (job_id, at, from_status, to_status, actor, message) SELECT job_id, at, "
                 "from_status, to_status, actor, message FROM history_log WHERE outcome IS NULL ORDER BY id")
    conn.execute("DROP TABLE history_log")
    conn.execute("ALTER TABLE jobs RENAME COLUMN lease_boot_ms TO expiry_seen_at")  # (and v9 undone)
    conn.execute("ALTER TABLE jobs RENAME COLUMN lease_boot_id TO expiry_seen_hb")
    conn.execute("ALTER TABLE jobs DROP COLUMN progress_at")
    # (and v10 and v14 undone: the insert trigger as v1 made it, no index of pending jobs' keys)
    from jobctl.engines.schema import _COUNT_ADD

    conn.execute(f"CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs BEGIN {_COUNT_ADD} END")
    conn.execute("DROP INDEX jobs_pending_key")
    conn.execute("DROP TABLE workers")  # (and v11 undone)
    conn.execute("ALTER TABLE jobs DROP COLUMN claimed_boot_ms")  # (and v12 undone)
    conn.execute("DROP INDEX jobs_status")  # (and v13 undone: its indexes as v1 made them)
    conn.execute("CREATE INDEX jobs_status ON jobs (status, queue, finished_at)")
    conn.execute("CREATE INDEX jobs_unique ON jobs (unique_key) "
                 "WHERE unique_key IS NOT NULL AND status IN ('pending', 'running', 'cancel_requested')")
    conn.execute("PRAGMA user_version = 7")
    conn.execute("COMMIT")
    conn.close()
    with Queue.open(db) as q:
        assert [e.to_status for e in q.events(job_id)] == ["pending", "running", "completed"]
        assert raw(q, "PRAGMA user_version") == [(sqlite_engine.SCHEMA_VERSION,)]
        second = q.enqueue("t", {}).id
        job = q.claim(worker="w")
        q.complete(job.id, token=job.token, actor="w")
        assert [e.to_status for e in q.events(second)] == ["pending", "running", "completed"]


# -- claims skip the pause look-ups while no pause exists (SQLiteEngine._pauses_possible) -------


def test_a_pause_made_by_another_process_holds_the_next_claim(tmp_path):
    """A claim that found no pause at all picks without looking at pauses, until anyone else
    commits: a pause made meanwhile by another connection is seen at the next claim."""
    db = tmp_path / "jobs.db"
    with Queue.open(db, create=True) as q, Queue.open(db) as admin:
        for i in range(4):
            q.enqueue("t", {"i": i}, queue="mail" if i % 2 else "default")
        seen: list[str] = []
        q.engine.conn.set_trace_callback(seen.append)
        assert q.claim(worker="w") is not None
        assert q.claim(worker="w") is not None
        claims = [s for s in seen if s.startswith("UPDATE jobs SET status = 'running'")]
        assert claims and not any("paused_types" in s for s in claims), claims  # no pause: none looked up
        admin.pause("default")
        admin.pause("mail", type="t")
        assert q.claim(worker="w") is None  # both held: the pause of another connection is seen at once
        assert "paused_types" in [s for s in seen if s.startswith("UPDATE jobs SET status = 'running'")][-1]
        admin.resume("mail")
        job = q.claim(worker="w")
        assert job is not None and job.queue == "mail"


def test_a_pause_made_through_the_same_connection_holds_the_next_claim(tmp_path):
    with Queue.open(tmp_path / "jobs.db", create=True) as q:
        for i in range(3):
            q.enqueue("t", {"i": i})
        assert q.claim(worker="w") is not None
        q.pause("default", for_="1h")
        assert q.claim(worker="w") is None
        q.resume("default")
        assert q.claim(worker="w") is not None
        q.pause("default", type="t")
        assert q.claim(worker="w") is None


def test_pauses_copied_in_by_migrate_hold_the_next_claim_of_that_engine(tmp_path):
    """migrate's import writes pauses through the target's own connection (its data_version does
    not move): what that engine had seen of the pauses is forgotten."""
    from jobctl.engines.transfer import copy_database

    with Queue.open(tmp_path / "old.db", create=True) as old:
        old.enqueue("t", {})
        old.pause("default")
        with Queue.open(tmp_path / "new.db", create=True) as new:
            assert new.claim(worker="w") is None  # an empty file: no pause seen
            copy_database(old.engine, new.engine)
            assert new.get(1).status == "pending"
            assert new.claim(worker="w") is None  # the copied pause holds it
            new.resume("default")
            assert new.claim(worker="w") is not None


# -- one name for what readers read (SQLEngine.EVENTS_READ, RUNS_READ) --------------------------

# Where the history tables may be named in a read: the one place that says what readers read, and
# the filing that moves history_log into the tables.
ONE_PLACE = {"engines/sqlite.py": {"EVENTS_READ", "RUNS_READ", "_file_history"}}
READ_OF_HISTORY = re.compile(r"\b(?:FROM|JOIN)\s+(?:events|runs|history_log)\b")


def _reads_of_history(source: str, allowed: set[str]) -> tuple[list[str], list[str]]:
    """(lines outside `allowed` that name a history table in a read, lines inside that do)."""
    inside: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        named = (node.name if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else
                 node.targets[0].id if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) else None)
        if named in allowed:
            inside.update(range(node.lineno, node.end_lineno + 1))
    hits = [(n, line.strip()) for n, line in enumerate(source.splitlines(), 1) if READ_OF_HISTORY.search(line)]
    return [f"{n}: {line}" for n, line in hits if n not in inside], [line for n, line in hits if n in inside]


def test_no_reader_names_the_history_tables():
    """A new reader of events or runs written anywhere in jobctl reads EVENTS_READ or RUNS_READ,
    which on SQLite hold what is written ahead too; one that named the tables would not see a
    job's latest history on SQLite (the PostgreSQL tests would pass)."""
    import jobctl

    root = Path(jobctl.__file__).parent
    found, seen_in_place = {}, []
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root).as_posix()
        outside, inside = _reads_of_history(path.read_text(encoding="utf-8"), ONE_PLACE.get(name, set()))
        if outside:
            found[name] = outside
        seen_in_place += inside
    assert not found, f"read {{self.EVENTS_READ}} / {{self.RUNS_READ}} instead: {found}"
    assert len(seen_in_place) >= 5, seen_in_place  # (the scan does find the reads of the one place)


def test_the_scan_finds_a_reader_that_names_a_table():
    source = ('def recent(c):\n    return c.execute("SELECT at FROM events "\n'
              '                     "WHERE job_id = ?", (1,))\n'
              'X = "SELECT count(*) FROM runs JOIN jobs ON jobs.id = runs.job_id"\n'
              'Y = "INSERT INTO events (job_id) VALUES (?)"  # (a write)\n')
    outside, inside = _reads_of_history(source, set())
    assert [line.split(":")[0] for line in outside] == ["2", "4"] and inside == []
    outside, inside = _reads_of_history(source, {"recent", "X"})
    assert outside == [] and len(inside) == 2


def _history_ahead_file(tmp_path) -> tuple[Path, int, int]:
    """A file whose newest history is all still ahead: a job that ran once, printed and completed,
    and one whose run failed (to retry later). Nothing of either run is filed."""
    from jobctl.engines.base import RunOutput

    db = tmp_path / "jobs.db"
    with Queue.open(db, create=True) as q:  # (a claim under limits would file first)
        done, failed = q.enqueue("t", {"i": 1}).id, q.enqueue("t", {"i": 2}).id
        job = q.claim(worker="w")
        q.complete(job.id, token=job.token, actor="w", output=RunOutput(b"hello\n", b"", 0))
        job = q.claim(worker="w")
        q.fail(job.id, token=job.token, error="boom", actor="w")
        assert ahead(q) > 0 and raw(q, "SELECT count(*) FROM runs") == [(0,)]
    return db, done, failed


def _count(db, sql: str) -> int:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql).fetchone()[0]
    finally:
        conn.close()


CONFIG = '[types.t]\nrate_limit = [5, "1h"]\n'


def test_show_logs_stats_and_limits_read_the_same_history_filed_or_not(tmp_path):
    db, done, failed = _history_ahead_file(tmp_path)
    (tmp_path / "jobctl.toml").write_text(CONFIG)
    cli = on_db(run_inproc, db)

    def readings() -> dict:
        stats = json.loads(cli("--config", tmp_path / "jobctl.toml", "stats", "--json").stdout)
        return {
            "show": [json.loads(cli("show", i, "--json").stdout)["events"] for i in (done, failed)],
            "logs": [json.loads(cli("logs", i, *run, "--json").stdout) for i, run in ((done, ()), (failed, ("--run", "1")))],
            "throughput": {k: stats["throughput"]["60m"][k] for k in ("completed", "failed")},
            "runs": stats["throughput"]["run_time"]["runs"],
            "starts": stats["limits"]["types"]["t"]["starts_in_window"],
        }

    before = readings()
    assert _count(db, "SELECT count(*) FROM history_log") > 0  # (reading filed nothing)
    assert [e["to"] for e in before["show"][0]] == ["pending", "running", "completed"]
    assert [e["to"] for e in before["show"][1]] == ["pending", "running", "pending"]
    assert before["logs"][0]["outcome"] == "completed" and before["logs"][0]["text"] == "hello\n"
    assert before["logs"][0]["ended_at"] is not None
    assert before["logs"][1]["outcome"] == "failed" and before["logs"][1]["ended_at"] is not None
    assert before["throughput"] == {"completed": 1, "failed": 1} and before["runs"] == 2
    assert before["starts"] == 2
    file_history(db)
    assert _count(db, "SELECT count(*) FROM history_log") == 0
    assert readings() == before


def test_migrate_copies_history_not_filed_yet(tmp_path):
    db, done, failed = _history_ahead_file(tmp_path)
    cli = on_db(run_inproc, db)
    shown = [json.loads(cli("show", i, "--json").stdout)["events"] for i in (done, failed)]
    copied = json.loads(cli("migrate", "--to", tmp_path / "copy.db", "--json").stdout)
    assert copied["events"] == 6 and copied["runs"] == 2, copied
    assert [json.loads(cli("show", i, "--json", db=tmp_path / "copy.db").stdout)["events"]
            for i in (done, failed)] == shown


def test_purge_deletes_history_not_filed_yet(tmp_path):
    db, done, failed = _history_ahead_file(tmp_path)
    time.sleep(0.01)  # (finished before the purge's "now")
    purged = json.loads(run_inproc("purge", "--completed-older-than", "0s", "--json", db=db).stdout)
    assert purged["by_status"] == {"completed": 1}, purged
    for table in ("events", "runs", "history_log"):
        assert _count(db, f"SELECT count(*) FROM {table} WHERE job_id = {done}") == 0, table
    assert _count(db, "SELECT count(*) FROM history_log") == 0  # (the purge filed what was ahead)
    with Queue.open(db) as q:  # the other job keeps its history
        assert [e.to_status for e in q.events(failed)] == ["pending", "running", "pending"]


def test_the_reads_of_history_walk_their_indexes(tmp_path):
    """Read through the one name, a job's events still come by their index plus a scan of the few
    rows ahead; stats' latest runs walk runs_ended back and stop (not the whole hour sorted); a
    rate window's starts walk runs_type_started."""
    settings = types_settings(t={"rate_limit": (2, 3600.0)})
    with Queue.open(tmp_path / "jobs.db", create=True, settings=settings) as q:
        q.enqueue("t", {})
        seen: list[str] = []
        q.engine.conn.set_trace_callback(seen.append)
        q.events(1)
        q.engine.stats_snapshot()
        q.engine.limit_figures(q.limits)
        q.engine.conn.set_trace_callback(None)

        def plan(*marks: str) -> list[str]:
            sql = [s for s in seen if all(m in s for m in marks)]
            assert len(sql) == 1, (marks, seen)
            return [r[3] for r in q.engine.conn.execute("EXPLAIN QUERY PLAN " + sql[0])]

        events = plan("history_log", "ORDER BY id")
        assert "SEARCH events USING INDEX events_job (job_id=?)" in events and "SCAN history_log" in events, events
        latest = plan("history_log", "ORDER BY ended_at DESC")
        assert "MERGE (UNION ALL)" in latest, latest
        assert "SEARCH runs USING INDEX runs_ended (ended_at>? AND ended_at<?)" in latest, latest
        starts = plan("history_log", "ORDER BY started_at DESC")
        assert "SEARCH runs USING COVERING INDEX runs_type_started (type=? AND started_at>?)" in starts, starts
