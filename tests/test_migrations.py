"""A database written by jobctl 0.1.0 (schema v1) is migrated forward, in one transaction, by the
first command that may write, with every job kept."""

import json
import sqlite3
import time

import sqlite_utils

from conftest import run_cli
from jobctl.engines import schema


def make_v1(path):
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("BEGIN IMMEDIATE")
    schema.MIGRATIONS[1](sqlite_utils.Database(conn))
    conn.execute("PRAGMA user_version = 1")
    conn.execute(f"PRAGMA application_id = {schema.APPLICATION_ID}")
    now = int(time.time() * 1000) - 1000
    for i, status in enumerate(("pending", "running", "completed"), 1):
        conn.execute(
            "INSERT INTO jobs (queue, type, payload, payload_hash, priority, status, attempts, max_attempts, backoff, "
            "timeout_ms, run_at, created_at, updated_at, worker, token, lease_expires_at, claimed_at, finished_at) "
            "VALUES ('default', 't', ?, ?, 10, ?, ?, 3, 'exponential', 60000, ?, ?, ?, ?, ?, ?, ?, ?)",
            (json.dumps({"i": i}, separators=(",", ":")), _hash({"i": i}), status, 0 if status == "pending" else 1,
             now, now, now, "w" if status == "running" else None, "tok" if status == "running" else None,
             now + 60_000 if status == "running" else None, now if status != "pending" else None,
             now if status == "completed" else None))
        conn.execute("INSERT INTO events (job_id, at, from_status, to_status, actor, message) "
                     "VALUES (?, ?, NULL, 'pending', 'me', 'enqueued')", (i, now))
    conn.execute("COMMIT")
    conn.close()


def _hash(payload):
    from jobctl import payloads

    return payloads.canonical_hash(payload)


def insert_job(conn, payload: dict, **columns) -> None:
    """A job row as an older version wrote it: a pending job of type t in the default queue, at
    now, with `payload`, unless `columns` say otherwise (only the columns that version had)."""
    now = int(time.time() * 1000)
    row = {"queue": "default", "type": "t", "payload": json.dumps(payload, separators=(",", ":")),
           "payload_hash": _hash(payload), "priority": 10, "status": "pending", "attempts": 0, "max_attempts": 3,
           "backoff": "exponential", "timeout_ms": 60000, "run_at": now, "created_at": now, "updated_at": now,
           **columns}
    conn.execute(f"INSERT INTO jobs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", tuple(row.values()))


def test_a_0_1_0_database_is_migrated_and_keeps_every_job(tmp_path):
    db = tmp_path / "old.db"
    make_v1(db)
    r = run_cli("--db", db, "list", "--json")
    assert r.exit_code == 0, r.output
    jobs = {j["id"]: j for j in map(json.loads, r.stdout.splitlines())}
    assert {i: j["status"] for i, j in jobs.items()} == {1: "pending", 2: "running", 3: "completed"}
    assert jobs[1]["cost_units"] == 1 and jobs[1]["concurrency_group"] is None and jobs[1]["on_buried"] is None
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
    conn.close()
    claimed = json.loads(run_cli("--db", db, "claim").stdout)
    assert claimed["id"] == 1
    assert run_cli("--db", db, "complete", 2, "--token", "tok").exit_code == 0
    checks = {c["check"]: c for c in json.loads(run_cli("--db", db, "doctor", "--json").stdout)["checks"]}
    assert all(checks[name]["ok"] for name in ("integrity", "schema", "journal mode", "job rows")), checks


def file_at_version(db, n: int) -> sqlite3.Connection:
    """A new file made by migrations 1 to n, as jobctl's version n left it; the connection is
    inside the transaction that made it (the caller adds rows, then commits)."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("BEGIN IMMEDIATE")
    for version in range(1, n + 1):
        schema.MIGRATIONS[version](sqlite_utils.Database(conn))
    conn.execute(f"PRAGMA user_version = {n}")
    conn.execute(f"PRAGMA application_id = {schema.APPLICATION_ID}")
    return conn


def test_a_v8_database_with_a_sighted_lease_keeps_its_live_job(tmp_path):
    """v9 times leases on the boot clock in the columns where v2-v8 kept the first sighting of an
    expired lease: a sighting left there is cleared, not read as a lease of another boot."""
    db = tmp_path / "v8.db"
    conn = file_at_version(db, 8)
    now = int(time.time() * 1000)
    insert_job(conn, {}, status="running", attempts=1, worker="w", token="tok", lease_expires_at=now + 600_000,
               claimed_at=now, heartbeat_at=now, expiry_seen_at=now - 5_000, expiry_seen_hb=now - 60_000)
    conn.execute("COMMIT")
    conn.close()
    r = run_cli("--db", db, "recover", "--json")
    assert (r.exit_code, r.stdout) == (0, ""), r.output  # its lease runs 10 more minutes
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
    assert conn.execute("SELECT status, lease_boot_ms, lease_boot_id, progress_at, claimed_boot_ms FROM jobs").fetchall() == [
        ("running", None, None, None, None)]  # (its run is judged on the wall clock, as its lease)
    conn.close()


def test_a_v12_database_gets_the_keys_that_unique_enqueues_find(tmp_path):
    """v13 gives every job a unique_key: the live jobs of an older file get theirs (a --unique
    job's 64-digit one is written anew), a buried one gets its key when it is retried."""
    from hashlib import sha256

    from jobctl.engines.base import unique_key

    db = tmp_path / "v12.db"
    conn = file_at_version(db, 12)
    now = int(time.time() * 1000)
    for i, (status, was_unique, type_) in enumerate((("pending", False, "t"), ("running", True, "t"),
                                                     ("buried", False, "t"), ("completed", True, "t"),
                                                     ("buried", False, "u")), 1):
        h = _hash({"i": i})
        old_key = sha256(f"default\0t\0{h}".encode()).hexdigest() if was_unique else None
        conn.execute(
            "INSERT INTO jobs (queue, type, payload, payload_hash, priority, status, attempts, max_attempts, backoff, "
            "timeout_ms, run_at, created_at, updated_at, worker, token, lease_expires_at, claimed_at, finished_at, "
            "unique_key) VALUES ('default', ?, ?, ?, 10, ?, 1, 3, 'exponential', 60000, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (type_, json.dumps({"i": i}, separators=(",", ":")), h, status, now, now, now,
             "w" if status == "running" else None, "tok" if status == "running" else None,
             now + 600_000 if status == "running" else None, now, now if status in ("buried", "completed") else None,
             old_key))
    conn.execute("COMMIT")
    conn.close()

    def unique(i, type_="t"):
        r = run_cli("--db", db, "enqueue", "--unique", type_, json.dumps({"i": i}), "--json")
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)["id"], json.loads(r.stdout)["created"]

    assert unique(1) == (1, False)  # pending, enqueued without --unique
    assert unique(2) == (2, False)  # running, its key written anew
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
    keys = dict(conn.execute("SELECT id, unique_key FROM jobs WHERE id <= 4").fetchall())
    assert keys == {1: unique_key("default", "t", _hash({"i": 1})), 2: unique_key("default", "t", _hash({"i": 2})),
                    3: None, 4: sha256(f"default\0t\0{_hash({'i': 4})}".encode()).hexdigest()}
    conn.close()
    assert run_cli("--db", db, "retry", 3).exit_code == 0
    assert unique(3) == (3, False)  # retried: live again, with its key
    assert run_cli("--db", db, "retry", "-t", "u", "--yes").exit_code == 0  # (by a filter: another path)
    assert unique(5, "u") == (5, False)
    assert unique(4) == (6, True)  # completed: a new job
    checks = {c["check"]: c for c in json.loads(run_cli("--db", db, "doctor", "--json").stdout)["checks"]}
    assert all(checks[name]["ok"] for name in ("integrity", "schema", "journal mode", "job rows")), checks


def test_a_v13_database_counts_its_inserts_without_the_insert_trigger(tmp_path):
    """v14 drops the trigger that counted inserted jobs (and v10's table that let a batch skip it):
    the engine counts its inserts itself. The counts a v13 file kept stay, and new jobs add to them;
    its pending job's key, moved to an index of pending jobs, still finds it."""
    db = tmp_path / "v13.db"
    conn = file_at_version(db, 13)
    from jobctl.engines.base import unique_key

    insert_job(conn, {}, unique_key=unique_key("default", "t", _hash({})))  # (counted by v13's trigger)
    conn.execute("COMMIT")
    conn.close()
    r = run_cli("--db", db, "enqueue", "--batch", "-", input='{"type": "t", "payload": {"i": 1}}\n{"type": "u"}\n')
    assert r.exit_code == 0, r.output
    assert run_cli("--db", db, "enqueue", "t", "--after", "1").exit_code == 0
    assert run_cli("--db", db, "enqueue", "t", "--unique").stdout.strip() == "1"  # (its key in the new index)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
    assert conn.execute("SELECT name FROM sqlite_master WHERE name IN ('jobs_count_insert', 'job_counts_deferred')"
                        ).fetchall() == []
    assert dict(conn.execute("SELECT state, n FROM job_counts WHERE n > 0").fetchall()) == {"pending": 3, "blocked": 1}
    conn.close()
