"""Speed of `jobctl stats` on a large file (issue 4: under 150 ms on 1,000,000 jobs).

    python bench/bench_stats.py [--jobs 1000000] [--path /tmp/jobctl-stats-bench.db] [--rebuild]

Builds the file once (900k completed, 100k pending of which some scheduled and some blocked, a few
running, buried and cancelled; one run per finished job, spread over the last week, a few thousand
in the last hour), then times the snapshot read in-process and `jobctl stats --json` as a process.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

QUEUES = ["default", "billing", "email", "reports", "media"]


def build(path: Path, n: int, *, types: tuple[str, ...] = ("t",), spread_ms: int = 0,
          failed_one_in: int | None = None) -> None:
    """The file: 90% finished jobs, 10% pending, over QUEUES and `types` (five jobs in a row of each
    type); a finished job ran 5 s (plus up to spread_ms, by id); its run failed when it was buried,
    and also for one completed job in `failed_one_in` (by id) when given."""
    from jobctl.engines.sqlite import SQLiteEngine

    for suffix in ("", "-wal", "-shm"):
        try:
            os.unlink(f"{path}{suffix}")
        except FileNotFoundError:
            pass
    SQLiteEngine.open(path, create=True).close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")
    now = int(time.time() * 1000)
    rnd = random.Random(1)
    n_pending = n // 10
    n_done = n - n_pending
    conn.execute("BEGIN")

    def rows():
        for i in range(n):
            q = QUEUES[i % len(QUEUES)]
            t = types[(i // 5) % len(types)]
            created = now - rnd.randrange(7 * 86400_000)
            if i < n_done:
                status = "completed" if i % 1000 else ("buried" if i % 2000 else "cancelled")
                ended = created + 5000 + (i % spread_ms if spread_ms else 0)
                yield (q, t, "{}", "h", 10, status, 1, 3, "exponential", 600_000, created, 0,
                       created, ended, ended, None)
            else:
                k = i - n_done
                run_at = now + 3600_000 if k % 10 == 0 else created
                waiting = 1 if k % 50 == 1 else 0
                status = "running" if k % 5000 == 2 else "pending"
                yield (q, t, "{}", "h", 10 * (k % 3), status, 0, 3, "exponential", 600_000, run_at, waiting,
                       created, created, None, "w:1" if status == "running" else None)

    conn.executemany(
        "INSERT INTO jobs (queue, type, payload, payload_hash, priority, status, attempts, max_attempts, backoff,"
        " timeout_ms, run_at, waiting_on, created_at, updated_at, finished_at, worker) "
        "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows())
    from jobctl.engines.schema import COUNT_INSERTED  # (as jobctl counts its own inserts: no trigger does)

    conn.execute(COUNT_INSERTED, (0, 1 << 62))
    conn.execute("UPDATE jobs SET claimed_at = created_at, lease_expires_at = created_at + 600000, token = 'x' "
                 "WHERE status = 'running'")
    also_failed = f" AND id % {int(failed_one_in)} <> 7" if failed_one_in else ""
    conn.execute(
        "INSERT INTO runs (job_id, queue, type, worker, ready_at, started_at, ended_at, outcome) "
        "SELECT id, queue, type, 'w:1', created_at, created_at + 1000, finished_at, "
        f"CASE WHEN status = 'completed'{also_failed} THEN 'completed' ELSE 'failed' END FROM jobs "
        "WHERE status IN ('completed', 'buried')")
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    conn.close()


def build_once(path: Path, n: int, rebuild: bool = False, **variant) -> None:
    """build(), unless the file is there already (and not rebuild): a large file is built once."""
    if rebuild or not path.exists():
        t = time.perf_counter()
        build(path, n, **variant)
        print(f"built {n:,} jobs in {time.perf_counter() - t:.1f}s ({path.stat().st_size / 1e6:.0f} MB)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--path", default="/tmp/jobctl-stats-bench.db")
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--queue", "-q", action="append", help="also time `stats -q QUEUE` (repeatable)")
    args = ap.parse_args()
    path = Path(args.path)
    build_once(path, args.jobs, args.rebuild)

    from jobctl.engines.sqlite import SQLiteEngine
    from jobctl.stats import collect

    engine = SQLiteEngine.open(path)
    for queues in [None] + ([args.queue] if args.queue else []):
        times = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            collect(engine.stats_snapshot(queues=queues or None), queues=queues)
            times.append((time.perf_counter() - t) * 1000)
        what = f" (-q {' -q '.join(queues)})" if queues else ""
        print(f"snapshot in-process{what}: median {statistics.median(times):.1f} ms, min {min(times):.1f} ms")
    engine.close()
    for queues in [None] + ([args.queue] if args.queue else []):
        times = []
        narrow = [a for q in queues or [] for a in ("-q", q)]
        for _ in range(max(3, args.repeat // 2)):
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "jobctl", "--db", str(path), "stats", "--json", *narrow], check=True,
                           stdout=subprocess.DEVNULL)
            times.append((time.perf_counter() - t) * 1000)
        print(f"`jobctl stats --json {' '.join(narrow)}` process: median {statistics.median(times):.0f} ms (target < 150 ms)")


if __name__ == "__main__":
    main()
