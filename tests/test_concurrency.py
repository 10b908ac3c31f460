"""Issue 2, test 6: eight processes claim and complete 5,000 jobs from one database (a SQLite
file, and a PostgreSQL schema); every job is completed exactly once and no error but "nothing to
claim" surfaces. The same harness driving a deliberately naive SELECT-then-UPDATE claim must be
caught handing jobs out twice: proof that the check can fail."""

import json
import subprocess
import sys
import textwrap
from collections import Counter

import pytest

from jobctl.queue import Queue
from tests.reliability.util import json_value, rows

WORKER = textwrap.dedent(
    r"""
    import json, sqlite3, sys

    db, mode, name = sys.argv[1], sys.argv[2], sys.argv[3]
    claimed, errors = [], []

    if mode == "core":
        from jobctl.config import Settings
        from jobctl.errors import JobctlError
        from jobctl.queue import Queue

        # A generous busy timeout: SQLite's lock is not fair, and this test is about correctness,
        # not about how long one claim may wait behind seven others.
        q = Queue.open(db, Settings(synchronous="normal"), busy_timeout=60)  # durability is not under test
        while True:
            try:
                job = q.claim(worker=name)
                if job is None:
                    break  # "nothing to claim": the only way out
                claimed.append(job.id)
                q.complete(job.id, token=job.token, result={"by": name}, actor=name)
            except Exception as e:
                errors.append(f"{type(e).__name__}: {e}")
                break
    else:
        # The classic mistake: Python's implicit transaction starts only at the UPDATE, so the
        # SELECT that picked the job ran outside it and another process may have picked it too.
        conn = sqlite3.connect(db, timeout=60)
        conn.execute("PRAGMA synchronous = NORMAL")
        while True:
            try:
                row = conn.execute(
                    "SELECT id FROM jobs WHERE status = 'pending' ORDER BY priority DESC, run_at, id LIMIT 1"
                ).fetchone()
                if row is None:
                    break
                conn.execute("UPDATE jobs SET status = 'running', worker = ? WHERE id = ?", (name, row[0]))
                conn.commit()
                claimed.append(row[0])
                conn.execute("UPDATE jobs SET status = 'completed' WHERE id = ?", (row[0],))
                conn.commit()
            except Exception as e:
                errors.append(f"{type(e).__name__}: {e}")
                break
    print(json.dumps({"claimed": claimed, "errors": errors}))
    """
)


def run_workers(db, mode, n=8):
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(db), mode, f"w{i}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(n)]
    claimed, errors = Counter(), []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        report = json.loads(out)
        claimed.update(report["claimed"])
        errors += report["errors"]
    return claimed, errors


def fill(db, n):
    with Queue.open(db, create=True) as q:
        ids = [r.id for r in q.enqueue_batch([json.dumps({"type": "t", "payload": {"i": i}}) for i in range(n)])]
    return ids


@pytest.mark.slow
@pytest.mark.shared  # outcomes only: runs beside other tests
def test_eight_processes_complete_every_job_exactly_once(any_db):
    db = any_db
    ids = fill(db, 5000)
    claimed, errors = run_workers(db, "core")
    assert errors == []
    doubled = {i: c for i, c in claimed.items() if c > 1}
    assert doubled == {}
    assert sorted(claimed) == ids
    assert [tuple(r.values()) for r in rows(db, "SELECT status, count(*) AS n FROM jobs GROUP BY status")] == [
        ("completed", 5000)]
    assert rows(db, "SELECT count(*) AS n FROM jobs WHERE attempts != 1")[0]["n"] == 0
    # the history agrees: one claim and one completion per job, one finished run each
    transitions = {(r["from_status"], r["to_status"]): r["n"] for r in rows(
        db, "SELECT from_status, to_status, count(*) AS n FROM events GROUP BY from_status, to_status")}
    assert transitions == {(None, "pending"): 5000, ("pending", "running"): 5000,
                           ("running", "completed"): 5000}
    assert rows(db, "SELECT count(DISTINCT job_id) AS jobs, count(*) AS n FROM runs WHERE outcome = 'completed'"
                ) == [{"jobs": 5000, "n": 5000}]
    # the worker that claimed a job is the one that completed it
    assert rows(db, "SELECT count(*) AS n FROM events c JOIN events r ON r.job_id = c.job_id AND "
                    "r.to_status = 'running' WHERE c.to_status = 'completed' AND c.actor != r.actor")[0]["n"] == 0
    by_worker = Counter(json_value(r["result"])["by"] for r in rows(db, "SELECT result FROM jobs"))
    assert sum(by_worker.values()) == 5000 and len(by_worker) >= 2  # they really ran side by side


@pytest.mark.slow
@pytest.mark.shared  # outcomes only: runs beside other tests
def test_the_harness_catches_a_naive_claim(tmp_path):
    """Without this, the test above could pass by never looking. A naive claim doubles jobs."""
    for attempt in range(6):
        db = tmp_path / f"naive{attempt}.db"
        ids = fill(db, 2000)
        claimed, errors = run_workers(db, "naive")
        assert set(claimed) == set(ids)
        doubled = {i: c for i, c in claimed.items() if c > 1}
        if doubled:
            break
    assert doubled, "the naive SELECT-then-UPDATE claim never handed a job out twice in 6 runs"


# -- the same keys enqueued by eight processes at once ---------------------------------------------

ENQUEUER = textwrap.dedent(
    r"""
    import json, sys
    from jobctl.queue import Queue

    db, n = sys.argv[1], int(sys.argv[2])
    got, errors = {}, []
    with Queue.open(db, busy_timeout=60) as q:
        print("ready", flush=True)
        sys.stdin.readline()  # every process starts at once
        for i in range(n):
            try:
                keyed = q.enqueue("keyed", {"i": i}, key=f"k{i}").id
                unique = q.enqueue("single", {"i": i % 7}, unique=True).id
                got[i] = [keyed, unique]
            except Exception as e:
                errors.append(f"{type(e).__name__}: {e}")
    print(json.dumps({"got": got, "errors": errors}))
    """
)


@pytest.mark.slow
@pytest.mark.shared  # outcomes only: runs beside other tests
def test_eight_processes_enqueueing_the_same_keys_get_one_job_per_key(any_db):
    """An idempotency key, and a `unique` job that is pending, stand for one job however many
    processes enqueue them at the same moment: each gets that job's id, none an error."""
    db, n = any_db, 150
    fill(db, 0)  # the schema exists before the race
    procs = [subprocess.Popen([sys.executable, "-c", ENQUEUER, str(db), str(n)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(8)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        reports.append(json.loads(out))
    assert [e for r in reports for e in r["errors"]] == []
    for i in range(n):
        assert len({tuple(r["got"][str(i)]) for r in reports}) == 1, f"job {i}: processes got different ids"
    keyed = rows(db, "SELECT idempotency_key, count(*) AS n FROM jobs WHERE type = 'keyed' GROUP BY idempotency_key")
    assert len(keyed) == n and {r["n"] for r in keyed} == {1}
    single = rows(db, "SELECT payload, count(*) AS n FROM jobs WHERE type = 'single' GROUP BY payload")
    assert len(single) == 7 and {r["n"] for r in single} == {1}
    assert rows(db, "SELECT count(*) AS n FROM events")[0]["n"] == n + 7  # one enqueue event per job
