"""`jobctl stats` and `stats --json` with the health figures (held jobs, figures per type), against
the code of another checkout, side by side on the same database (ratios only).

    python bench/bench_health.py --base /tmp/base            # SQLite, 1,000,000 jobs, 20 types
    python bench/bench_health.py --base /tmp/base --postgres  # the same jobs on PostgreSQL too
    python bench/bench_health.py --base /tmp/base --config bench/bench_health_limits.toml
    python bench/bench_health.py --base /tmp/base --postgres --pg-schema health_bench --only postgres

--base is a folder holding the `jobctl` package of the code to compare with (e.g. `git archive
8ed1467 jobctl | tar -x -C /tmp/base`). Both sides run as whole processes through the same small
launcher, which puts the chosen folder first and leaves out the editable install's finder, so each
side really runs its own code; the calls alternate, medians are compared: wall time, and CPU time
(user + system of the process: on PostgreSQL the server's work is not in it).

The file: 900,000 finished jobs (completed, a few buried and cancelled), 100,000 pending (10%
scheduled, 2% blocked), a few running, spread over 20 types and 5 queues; one run per finished
job over the last week (a few thousand in the last hour, one in twenty of them failed). Built once.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
QUEUES = ["default", "billing", "email", "reports", "media"]
TYPES = [f"type-{i:02d}" for i in range(20)]
PG_URL = os.environ.get("JOBCTL_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")

LAUNCHER = """\
import sys
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
sys.path.insert(0, sys.argv.pop(1))
from jobctl.cli import main
sys.argv[0] = "jobctl"
sys.exit(main())
"""


def build(path: Path, n: int) -> None:
    sys.path.insert(0, str(ROOT))
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

    def rows():
        for i in range(n):
            q = QUEUES[i % len(QUEUES)]
            t = TYPES[(i // 5) % len(TYPES)]
            created = now - rnd.randrange(7 * 86400_000)
            if i < n_done:
                status = "completed" if i % 1000 else ("buried" if i % 2000 else "cancelled")
                yield (q, t, "{}", "h", 10, status, 1, 3, "exponential", 600_000, created, 0,
                       created, created + 5000 + i % 7000, created + 5000 + i % 7000, None)
            else:
                k = i - n_done
                run_at = now + 3600_000 if k % 10 == 0 else created
                waiting = 1 if k % 50 == 1 else 0
                status = "running" if k % 5000 == 2 else "pending"
                yield (q, t, "{}", "h", 10 * (k % 3), status, 0, 3, "exponential", 600_000, run_at, waiting,
                       created, created, None, "w:1" if status == "running" else None)

    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO jobs (queue, type, payload, payload_hash, priority, status, attempts, max_attempts, backoff,"
        " timeout_ms, run_at, waiting_on, created_at, updated_at, finished_at, worker) "
        "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows())
    conn.execute("UPDATE jobs SET claimed_at = created_at, lease_expires_at = created_at + 600000, token = 'x' "
                 "WHERE status = 'running'")
    conn.execute(
        "INSERT INTO runs (job_id, queue, type, worker, ready_at, started_at, ended_at, outcome) "
        "SELECT id, queue, type, 'w:1', created_at, created_at + 1000, finished_at, "
        "CASE WHEN status = 'completed' AND id % 20 <> 7 THEN 'completed' ELSE 'failed' END FROM jobs "
        "WHERE status IN ('completed', 'buried')")
    # (the job_counts triggers counted every row as it went in)
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    conn.close()


def copy_to_postgres(path: Path, url: str, launcher: Path) -> None:
    import psycopg2
    import psycopg2.extras

    subprocess.run([sys.executable, str(launcher), str(ROOT), "--db", url, "init"], check=True,
                   stdout=subprocess.DEVNULL)
    src = sqlite3.connect(path)
    conn = psycopg2.connect(url)
    try:
        with conn, conn.cursor() as cur:
            for table in ("jobs", "runs"):
                cur.execute("SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
                            "AND table_name = %s", (table,))
                theirs = {r[0] for r in cur.fetchall()}
                columns = [r[1] for r in src.execute(f"PRAGMA table_info({table})") if r[1] in theirs]
                psycopg2.extras.execute_values(
                    cur, f"INSERT INTO {table} ({', '.join(columns)}) OVERRIDING SYSTEM VALUE VALUES %s",
                    src.execute(f"SELECT {', '.join(columns)} FROM {table}"), page_size=5000)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("VACUUM ANALYZE jobs")
            cur.execute("VACUUM ANALYZE runs")
    finally:
        conn.close()
        src.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="a folder holding the jobctl package to compare with")
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--path", default="/tmp/health_bench/jobctl-health-bench.db")
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--postgres", action="store_true", help="also on PostgreSQL (a schema of its own, dropped after)")
    ap.add_argument("--pg-schema", help="with --postgres: use (or, when new, fill and keep) this schema instead")
    ap.add_argument("--only", choices=("sqlite", "postgres"), help="time one engine only")
    ap.add_argument("--config", help="a config file both sides read (limits, types)")
    ap.add_argument("--calls", type=int, default=9)
    args = ap.parse_args()
    path = Path(args.path)
    if args.rebuild or not path.exists():
        t = time.perf_counter()
        build(path, args.jobs)
        print(f"built {args.jobs:,} jobs in {time.perf_counter() - t:.1f}s ({path.stat().st_size / 1e6:.0f} MB)")
    tmp = Path(tempfile.mkdtemp(prefix="jobctl-health-bench-"))
    launcher = tmp / "launch.py"
    launcher.write_text(LAUNCHER)
    import compileall

    for folder in (Path(args.base) / "jobctl", ROOT / "jobctl"):
        compileall.compile_dir(str(folder), quiet=2)
    dbs = {"sqlite": str(path)}
    schema = None
    if args.postgres:
        import uuid

        import psycopg2

        name = args.pg_schema or f"bench_{uuid.uuid4().hex[:12]}"
        admin = psycopg2.connect(PG_URL)
        admin.autocommit = True
        cur = admin.cursor()
        cur.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (name,))
        url = f"{PG_URL}{'&' if '?' in PG_URL else '?'}options=-csearch_path%3D{name}"
        if cur.fetchone() is None:
            cur.execute(f"CREATE SCHEMA {name}")
            t = time.perf_counter()
            copy_to_postgres(path, url, launcher)
            print(f"copied to PostgreSQL in {time.perf_counter() - t:.1f}s", flush=True)
        schema = None if args.pg_schema else name  # a named schema is kept for the next run
        dbs["postgres"] = url
    if args.only:
        dbs = {args.only: dbs[args.only]}
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    env.pop("JOBCTL_CONFIG", None)
    config = ["--config", str(Path(args.config).resolve())] if args.config else []
    sides = {"base": str(Path(args.base).resolve()), "new": str(ROOT)}
    try:
        for engine, db in dbs.items():
            for what in (["stats"], ["stats", "--json"]):
                times: dict[str, list[float]] = {"base": [], "new": []}
                cpu: dict[str, list[float]] = {"base": [], "new": []}
                for i in range(args.calls + 1):
                    order = ["base", "new"] if i % 2 == 0 else ["new", "base"]
                    for side in order:
                        t = time.perf_counter()
                        before = resource.getrusage(resource.RUSAGE_CHILDREN)
                        subprocess.run([sys.executable, str(launcher), sides[side], *config, "--db", db, *what],
                                       check=True, stdout=subprocess.DEVNULL, env=env, cwd=tmp)
                        after = resource.getrusage(resource.RUSAGE_CHILDREN)
                        if i:  # the first round warms the caches of both
                            times[side].append((time.perf_counter() - t) * 1000)
                            cpu[side].append((after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000)
                for name, got in (("wall", times), ("CPU ", cpu)):  # CPU: user + system of the process alone
                    b, n = statistics.median(got["base"]), statistics.median(got["new"])
                    print(f"{engine:8} jobctl {' '.join(what):13} {name} base {b:6.0f} ms  new {n:6.0f} ms  "
                          f"ratio {n / b:.2f}  (base {min(got['base']):.0f}-{max(got['base']):.0f}, "
                          f"new {min(got['new']):.0f}-{max(got['new']):.0f})", flush=True)
    finally:
        if args.postgres:
            if schema is not None:
                admin.cursor().execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            admin.close()


if __name__ == "__main__":
    main()
