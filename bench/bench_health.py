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
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))  # this checkout's jobctl builds the file

from bench_stats import build_once  # noqa: E402
from postgres import copy_jobs  # noqa: E402

TYPES = [f"type-{i:02d}" for i in range(20)]
# bench_stats' file over 20 types, jobs finished 5 to 12 s after their creation, one completed run in twenty failed
DATASET = {"types": tuple(TYPES), "spread_ms": 7000, "failed_one_in": 20}
PG_URL = os.environ.get("JOBCTL_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")

LAUNCHER = """\
import sys
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
sys.path.insert(0, sys.argv.pop(1))
from jobctl.cli import main
sys.argv[0] = "jobctl"
sys.exit(main())
"""


def copy_to_postgres(path: Path, url: str, launcher: Path) -> None:
    """The same jobs into a new schema on PostgreSQL, created by this checkout's jobctl."""
    subprocess.run([sys.executable, str(launcher), str(ROOT), "--db", url, "init"], check=True,
                   stdout=subprocess.DEVNULL)
    copy_jobs(path, url)


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
    build_once(path, args.jobs, args.rebuild, **DATASET)
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
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)  # the launcher's folder (the built file is kept: --path)
        if args.postgres:
            if schema is not None:
                admin.cursor().execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            admin.close()


if __name__ == "__main__":
    main()
