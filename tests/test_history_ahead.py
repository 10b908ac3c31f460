"""History written ahead on SQLite (schema v8): the events and runs of transitions go first into
history_log, which has no index but its rowid, and are filed into events and runs in batches of
FILE_HISTORY_EVERY rows. A worker's step then writes one page of history instead of six; every
reader sees the same history as before, in the same order, filed or not."""

from __future__ import annotations

import sqlite3
import time

import pytest

from conftest import types_settings
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
