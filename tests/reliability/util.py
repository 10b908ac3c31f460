"""Helpers shared by the reliability tests: jobctl as a real subprocess, raw looks at the database
(a SQLite file, or a PostgreSQL URL with the test's own schema), and helper processes that hold
SQLite locks."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
import textwrap
from collections import Counter, defaultdict
from pathlib import Path

from conftest import JOBCTL, Result, run_cli, run_inproc  # noqa: F401  (JOBCTL and run_inproc are re-exported)


def jobctl(*args, timeout=120, **kw) -> Result:
    """run_cli with a longer timeout: torture tests wait on locks and full disks."""
    return run_cli(*args, timeout=timeout, **kw)


def connect_ro(db) -> sqlite3.Connection:
    """A read-only look at the file from the test process (never the process under test)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    conn.row_factory = sqlite3.Row
    return conn


def is_postgres(db) -> bool:
    return str(db).startswith(("postgresql://", "postgres://"))


def _file_history(db) -> None:
    """SQLite writes history ahead and files it into events and runs in batches: file it now, so
    that SQL of a test's own reads all of it (skipped on a file jobctl cannot open: a damaged one)."""
    from conftest import file_history
    from jobctl.errors import JobctlError

    try:
        file_history(db)
    except JobctlError:
        pass


def rows(db, sql: str, params=()) -> list[dict]:
    """The rows of one read-only query, as dicts, on either engine. `?` marks parameters; write
    SQL that both engines read alike (times are integer ms on both)."""
    if is_postgres(db):
        return pg_rows(str(db), sql.replace("%", "%%").replace("?", "%s"), params)
    if " events" in sql or " runs" in sql:
        _file_history(db)
    conn = connect_ro(db)
    try:
        return [dict(r) for r in conn.execute(sql, params)]
    finally:
        conn.close()


def pg_rows(url: str, sql: str, params=()) -> list[dict]:
    """A query (psycopg2 placeholders) in its own connection to the schema the URL names."""
    import psycopg2
    import psycopg2.extras

    conn = psycopg2.connect(url)
    try:
        with conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
            cur.execute(sql, params)
            found = [dict(r) for r in cur.fetchall()] if cur.description else []
        conn.commit()
        return found
    finally:
        conn.close()


def json_value(text):
    """A JSON column as Python, whether the engine hands back its text or a decoded value."""
    return json.loads(text) if isinstance(text, (str, bytes)) else text


def jobs(db) -> dict[int, dict]:
    return {r["id"]: r for r in rows(db, "SELECT * FROM jobs")}


def assert_rescued_once(db, job_id: int, rescuer_pid: int, rescuer: str = "rescuer") -> list[dict]:
    """A job whose first worker lost it (frozen, cut off) ran twice and ended once, by the
    rescuer's run: the first worker's late result was refused, and the history says so. Returns
    the job's events."""
    runs = [r["outcome"] for r in rows(db, "SELECT outcome FROM runs WHERE job_id = ? ORDER BY id", (job_id,))]
    job = jobs(db)[job_id]
    assert job["status"] == "completed" and job["attempts"] == 2, job
    assert json_value(job["result"]) == {"by": str(rescuer_pid)}, "the first worker's late result was applied"
    events = rows(db, "SELECT to_status, actor, message FROM events WHERE job_id = ? ORDER BY id", (job_id,))
    assert [ev["to_status"] for ev in events] == ["pending", "running", "pending", "running", "completed"], events
    assert events[-1]["actor"] == rescuer
    assert sorted(runs) == ["completed", "lost"], runs
    return events


def assert_each_completed_once(db, ids: list[int]) -> None:
    """Every job completed at its first attempt with the handler's result, one run and one
    history each: none lost, none run twice."""
    table = jobs(db)
    assert sorted(table) == sorted(ids)
    assert {j["status"] for j in table.values()} == {"completed"}, {i: j["status"] for i, j in table.items()}
    assert {j["attempts"] for j in table.values()} == {1}
    assert {json.dumps(json_value(j["result"])) for j in table.values()} == {'{"ok": true}'}
    outcomes = Counter((r["job_id"], r["outcome"]) for r in rows(db, "SELECT job_id, outcome FROM runs"))
    assert outcomes == Counter({(job_id, "completed"): 1 for job_id in ids})
    history = defaultdict(list)
    for ev in rows(db, "SELECT job_id, to_status FROM events ORDER BY id"):
        history[ev["job_id"]].append(ev["to_status"])
    assert {job_id: h for job_id, h in history.items() if h != ["pending", "running", "completed"]} == {}


def schema(db) -> list[tuple]:
    return [tuple(r.values()) for r in rows(db, "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name")]


def integrity(db) -> str:
    """SQLite's own check of the file. A PostgreSQL server keeps its pages itself: there is no
    file of ours to check, so the answer there is "ok" by definition (the tests check rows)."""
    if is_postgres(db):
        return "ok"
    return ";".join(r["integrity_check"] for r in rows(db, "PRAGMA integrity_check"))


def files_state(folder: Path) -> dict[str, str]:
    """Every file in a folder with the sha256 of its bytes: 'unchanged' means this is equal."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(Path(folder).iterdir()) if p.is_file()}


HOLDER = textwrap.dedent("""
    import sqlite3, sys, time
    path, mode, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    if mode == "write":
        conn.execute("BEGIN IMMEDIATE")
    else:
        conn.execute("BEGIN")
        conn.execute("SELECT count(*) FROM jobs").fetchall()
    print("ready", flush=True)
    # stdin closing early (the test is done) ends the hold as well
    import select
    select.select([sys.stdin], [], [], seconds)
    conn.execute("ROLLBACK")
    conn.close()
""")


def hold(db, mode: str, seconds: float) -> subprocess.Popen:
    """Another process holding the write lock (mode='write') or a read snapshot (mode='read')."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(db), mode, str(seconds)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def release(proc: subprocess.Popen) -> None:
    try:
        proc.stdin.close()
    except OSError:
        pass
    proc.wait(timeout=30)


def show_json(db, job_id) -> dict:
    r = jobctl("show", job_id, "--json", db=db)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)
