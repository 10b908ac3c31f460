"""Find and act at scale: filtered `list` and a `retry` of 100,000 matched jobs over 1,000,000 jobs,
on SQLite and on PostgreSQL, with a worker claiming and completing jobs beside the retry.

    .venv/bin/python bench/filters.py                      # SQLite, 1,000,000 jobs
    .venv/bin/python bench/filters.py --pg postgresql://postgres@127.0.0.1:5432/test
    .venv/bin/python bench/filters.py --jobs 100000        # smaller, quicker

Targets: the first page of a filtered `list` in under 1 s (the whole command, start-up included);
`retry` of 100,000 matched jobs in under 20 s; the worker's longest wait for the write lock (its
longest claim or completion) under 200 ms. The database is filled with SQL (not timed): a tenth
of the jobs buried with a timeout (the retry's 100,000), a tenth buried otherwise, a twentieth
pending, the rest completed; updated_at spread over the last day or so.

The worker beside the retry claims and completes jobs in a loop, 2 ms per job (what starting a
handler takes at least): its longest claim or completion call is its longest wait for the write
lock (the call itself takes ~1 ms). A loop with no pause at all takes the lock back before a
waiting process wakes (SQLite's lock is not fair), which no `jobctl work` does.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))

from cases import jobctl_cmd  # noqa: E402

# Keys sorted and compact: the text is its own canonical form, hashed as jobctl hashes it.
PAYLOAD = "('{{\"tenant\":\"t' || (i % 100){cast} || '\",\"user\":{{\"id\":' || i{cast} || '}}}}')"
COLUMNS = ("queue, type, payload, payload_hash, priority, status, attempts, max_attempts, backoff, timeout_ms, "
           "run_at, idempotency_key, error, created_at, updated_at, finished_at")


def _select(now: int, n: int, cast: str = "", hash_of: str = "sha256_hex({})") -> str:
    """The rows of job i (1..n) as SQL over a column i: the same text on both engines."""
    t = f"({now} - ({n} - i) * 100)"  # one job every 100 ms, the newest now
    kind = "(i % 20)"
    return (
        "SELECT 'default', "
        f"CASE WHEN {kind} IN (0, 10) THEN 'send-email' WHEN {kind} IN (5, 15) THEN 'import' "
        "WHEN i % 3 = 0 THEN 'report' ELSE 'send-email' END, "
        f"{PAYLOAD.format(cast=cast)}, {hash_of.format(PAYLOAD.format(cast=cast))}, 10, "
        f"CASE WHEN {kind} IN (0, 10, 5, 15) THEN 'buried' WHEN {kind} = 1 THEN 'pending' ELSE 'completed' END, "
        f"CASE WHEN {kind} = 1 THEN 0 ELSE 1 + i % 3 END, 3, 'exponential', 600000, {t}, "
        f"CASE WHEN i % 4 = 0 THEN 'k-' || i{cast} END, "
        f"CASE WHEN {kind} IN (0, 10) THEN 'smtp timeout after 30s' WHEN {kind} IN (5, 15) "
        "THEN 'HTTP 500 from partner' END, "
        f"{t}, {t}, CASE WHEN {kind} = 1 THEN NULL ELSE {t} END FROM s")


def fill_sqlite(path: str, n: int) -> None:
    subprocess.run([*jobctl_cmd(), "--db", path, "init"], check=True, capture_output=True)
    conn = sqlite3.connect(path, isolation_level=None)
    import hashlib

    conn.create_function("sha256_hex", 1, lambda t: hashlib.sha256(t.encode()).hexdigest(), deterministic=True)
    now = int(time.time() * 1000)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(f"INSERT INTO jobs ({COLUMNS}) WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s "
                 f"WHERE i < {n}) " + _select(now, n))
    from jobctl.engines.schema import COUNT_INSERTED  # (as jobctl counts its own inserts: no trigger does)

    conn.execute(COUNT_INSERTED, (0, 1 << 62))
    # The runs of the buried jobs: eight workers took turns.
    conn.execute("INSERT INTO runs (job_id, queue, type, worker, ready_at, started_at, ended_at, outcome) "
                 "SELECT id, queue, type, 'w-' || (id % 8), run_at, updated_at - 1000, updated_at, 'failed' "
                 "FROM jobs WHERE status = 'buried'")
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    conn.close()


def fill_postgres(url: str, n: int) -> None:
    import psycopg2

    subprocess.run([*jobctl_cmd(), "--db", url, "init"], check=True, capture_output=True)
    conn = psycopg2.connect(url)
    now = int(time.time() * 1000)
    with conn, conn.cursor() as cur:
        cur.execute(f"INSERT INTO jobs ({COLUMNS}) WITH s(i) AS (SELECT generate_series(1, {n})) "
                    + _select(now, n, cast="::text", hash_of="encode(sha256(convert_to({}, 'UTF8')), 'hex')"))
        cur.execute("INSERT INTO runs (job_id, queue, type, worker, ready_at, started_at, ended_at, outcome) "
                    "SELECT id, queue, type, 'w-' || (id % 8), run_at, updated_at - 1000, updated_at, 'failed' "
                    "FROM jobs WHERE status = 'buried'")
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("VACUUM ANALYZE")
    conn.close()


LISTS = [
    ["--type", "send-email", "--status", "buried", "--error", "timeout", "--since", "1h"],
    ["--error", "timeout"],
    ["--payload", "tenant=t42"],
    ["--payload", "user.id=40"],  # one job among all: the rarest filter, every row read
    ["--worker", "w-3"],
    ["--key", "k-400000"],
    ["--status", "pending", "--min-attempts", "1"],
    ["--status", "scheduled"],
    ["--before", "20h", "--status", "buried", "--type", "import"],
]


def cli(db: str, *args: str, check: bool = True) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    r = subprocess.run([*jobctl_cmd(), "--db", db, *args], capture_output=True, text=True)
    took = time.perf_counter() - started
    if check and r.returncode != 0:
        raise SystemExit(f"jobctl {' '.join(args)}: exit {r.returncode}: {r.stderr[-400:]}")
    return took, r


def _query_seconds(db: str, filters: list[str]) -> tuple[float, float]:
    """The list's two queries in this process (the first page, and the count of all that match,
    which `list` runs when the page is full): seconds each, start-up left out."""
    from jobctl.cli.filters import selection
    from jobctl.queue import Queue

    opts: dict = {}
    for flag, value in zip(filters[::2], filters[1::2]):
        name = flag[2:].replace("-", "_")
        opts.setdefault(name, []).append(value)
    for one in ("since", "before", "min_attempts"):
        if one in opts:
            opts[one] = opts[one][0]
    sel = selection(**opts)
    with Queue.open(db) as q:
        started = time.perf_counter()
        jobs = q.list_jobs(selection=sel, limit=50)
        page = time.perf_counter() - started
        started = time.perf_counter()
        if len(jobs) >= 50:
            q.count_jobs(selection=sel)
        return page, time.perf_counter() - started


def bench_lists(db: str, rounds: int = 3) -> list[dict]:
    rows = []
    for filters in LISTS:
        times = [cli(db, "list", *filters)[0] for _ in range(rounds)]
        _, r = cli(db, "list", *filters, "--json")
        page, count = _query_seconds(db, filters)
        rows.append({"filters": " ".join(filters), "seconds": statistics.median(times), "max": max(times),
                     "shown": len(r.stdout.splitlines()), "page_query": page, "count_query": count})
        print(f"  list {' '.join(filters)}: {statistics.median(times):.3f} s (max {max(times):.3f}), "
              f"{rows[-1]['shown']} shown; queries: page {page:.3f} s, count {count:.3f} s", file=sys.stderr, flush=True)
    return rows


WORKER = r"""
import json, os, sys, time
sys.path.insert(0, {root!r})
from jobctl.queue import Queue
q = Queue.open({db!r})
waits, done, calls = [], 0, 0
ready, start, stop = {ready!r}, {start!r}, {stop!r}
while not os.path.exists(stop):
    timed = os.path.exists(start)  # (the calls before the retry starts warm the worker up: not counted)
    t = time.perf_counter()
    job = q.claim(worker="bench-worker")
    if timed:
        waits.append(time.perf_counter() - t)
    calls += 1
    if calls == 50:
        open(ready, "w").close()
    if job is None:
        time.sleep(0.005)
        continue
    time.sleep(0.002)  # the job's handler: a worker spends at least this long starting one
    t = time.perf_counter()
    q.complete(job.id, token=job.token)
    if timed:
        waits.append(time.perf_counter() - t)
        done += 1
q.close()
waits.sort()
print(json.dumps({{"max": waits[-1], "p99": waits[int(len(waits) * 0.99)], "median": waits[len(waits) // 2],
                   "calls": len(waits), "completed": done, "slowest": waits[-5:]}}))
"""


def bench_retry(db: str, tmp: Path) -> dict:
    ready, start, stop = tmp / "ready", tmp / "start", tmp / "stop"
    worker = subprocess.Popen([sys.executable, "-c", WORKER.format(root=str(ROOT), db=db, ready=str(ready),
                                                                  start=str(start), stop=str(stop))],
                              stdout=subprocess.PIPE, text=True)
    while not ready.exists():  # the worker is claiming
        time.sleep(0.05)
    start.touch()
    took, r = cli(db, "retry", "--type", "send-email", "--error", "timeout", "--yes")
    stop.touch()
    out, _ = worker.communicate(timeout=60)
    w = json.loads(out.strip().splitlines()[-1])
    result = {"seconds": took, "retried": int(r.stdout.strip() or 0), "report": r.stderr.strip(), "worker": w}
    print(f"  retry of {result['retried']:,} jobs: {took:.2f} s; the worker beside it: longest call "
          f"{w['max'] * 1000:.0f} ms, p99 {w['p99'] * 1000:.1f} ms, {w['completed']:,} jobs completed "
          f"(slowest calls: {', '.join(f'{x * 1000:.0f}' for x in w['slowest'])} ms)", file=sys.stderr, flush=True)
    return result


def enqueue_cost(db: str, n: int = 2000) -> float:
    """ms per `Queue.enqueue` (one transaction each) on the filled database."""
    from jobctl.queue import Queue

    with Queue.open(db) as q:
        started = time.perf_counter()
        for i in range(n):
            q.enqueue("send-email", {"tenant": f"t{i % 100}", "user": {"id": i}})
        return (time.perf_counter() - started) * 1000 / n


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--pg", help="a PostgreSQL URL: run there (in a schema of this run's own) instead of SQLite")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--retry-only", action="store_true", help="leave out the lists")
    ap.add_argument("--keep", help="SQLite: fill this file once and keep it (later runs reuse a copy)")
    a = ap.parse_args()
    figures: dict = {"jobs": a.jobs}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        if a.pg:
            from postgres import fresh_schema

            with fresh_schema(a.pg) as url:
                started = time.perf_counter()
                fill_postgres(url, a.jobs)
                print(f"postgresql: filled {a.jobs:,} jobs in {time.perf_counter() - started:.0f} s", file=sys.stderr)
                figures.update(engine="postgresql", lists=[] if a.retry_only else bench_lists(url),
                               retry=bench_retry(url, tmp),
                               enqueue_ms=enqueue_cost(url))
        else:
            db = str(tmp / "jobs.db")
            started = time.perf_counter()
            if a.keep and os.path.exists(a.keep):
                src = sqlite3.connect(a.keep)
                dst = sqlite3.connect(db)
                src.backup(dst)
                src.close()
                dst.close()
                os.chmod(db, 0o600)
            else:
                fill_sqlite(db, a.jobs)
                if a.keep:
                    src = sqlite3.connect(db)
                    dst = sqlite3.connect(a.keep)
                    src.backup(dst)
                    src.close()
                    dst.close()
            print(f"sqlite: {a.jobs:,} jobs ready in {time.perf_counter() - started:.0f} s", file=sys.stderr)
            figures.update(engine="sqlite", lists=[] if a.retry_only else bench_lists(db), retry=bench_retry(db, tmp),
                           enqueue_ms=enqueue_cost(db))
        print(f"  enqueue: {figures['enqueue_ms']:.2f} ms per job", file=sys.stderr)
    if a.json:
        Path(a.json).write_text(json.dumps(figures, indent=1))
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
