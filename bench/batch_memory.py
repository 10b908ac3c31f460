"""Memory and speed of `jobctl enqueue --batch -`: peak memory must stay flat however many lines.

    python bench/batch_memory.py [--lines 1000000] [--speed-jobs 100000] [--rounds 3] [--src DIR ...]

1. Memory: the peak resident memory (ru_maxrss of the child, from wait4) of one `enqueue --batch -`
   of --lines NDJSON lines fed through a pipe, and of one of 1,000 lines, on a fresh database each.
2. Speed: --speed-jobs lines as bench/run.py's batch workload runs them (a file on stdin), against
   bench/ref_batch.py (the hand-written executemany into jobctl's own table, and with --minimal into a
   table of only the columns: no index, no trigger), in --rounds rounds whose order alternates.

--src DIR (repeatable) runs jobctl from another source tree (its `jobctl` package first on
PYTHONPATH), e.g. a `git archive` of an earlier commit, side by side with this one: "." is this tree.

--postgres URL: the speed of each --src on that PostgreSQL server too, in a schema named --pg-schema
(created empty for each run, dropped after it), in the same alternating rounds. The references are
SQLite's only; the CPU seconds are the child's, the client's: the server's own work is in the wall rate.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from cases import count_jobs, ensure_bytecode, ndjson  # noqa: E402


def jobctl(src: str) -> list[str]:
    """The command that runs jobctl from the source tree `src` ("." : this one), ahead of the
    editable install's finder, which would otherwise always load this tree."""
    root = BENCH.parent if src == "." else Path(src).resolve()
    code = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path if getattr(f, '__name__', '') != "
            f"'_EditableFinder']; sys.path.insert(0, {str(root)!r}); sys.argv[0] = 'jobctl'; "
            "from jobctl.cli import main; main()")
    return [sys.executable, "-c", code]


def run_child(cmd: list[str], env: dict | None, stdin) -> tuple[float, int, int, bytes, float]:
    """(seconds, peak RSS KiB, exit code, stderr, CPU seconds) of one child process, from wait4."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read()  # type: ignore[union-attr]
    _pid, status, usage = os.wait4(p.pid, 0)
    elapsed = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    return elapsed, usage.ru_maxrss, p.returncode, err, usage.ru_utime + usage.ru_stime


def feed_lines(n: int) -> subprocess.Popen:
    """A child that writes n NDJSON lines to a pipe (the input is never held whole anywhere)."""
    code = ("import sys\nw = sys.stdout.write\n"
            f"for i in range({n}):\n    w('{{\"type\":\"bench\",\"payload\":{{\"i\":%d}}}}\\n' % i)\n")
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)


def memory(src: str, tmp: Path, n: int) -> dict:
    db = tmp / f"mem-{n}.db"
    feeder = feed_lines(n)
    cmd = [*jobctl(src), "--db", str(db), "enqueue", "--batch", "-"]
    elapsed, rss, code, err, _cpu = run_child(cmd, None, feeder.stdout)
    feeder.stdout.close()  # type: ignore[union-attr]
    feeder.wait()
    inserted = count_jobs(str(db)) if db.exists() else 0
    for p in tmp.glob(f"mem-{n}.db*"):
        p.unlink()
    return {"lines": n, "seconds": elapsed, "peak_mib": rss / 1024, "exit": code, "inserted": inserted,
            "stderr": err.decode(errors="replace")[-300:]}


def speed(src: str, tmp: Path, n: int, impl: str, source: Path) -> tuple[float, float]:
    """(jobs per second of wall time, jobs per CPU second of the child: moves less with the load)."""
    db = tmp / f"speed-{impl}.db"
    subprocess.run([*jobctl(src), "--db", str(db), "init"], check=True, stdout=subprocess.DEVNULL)
    cmd = ([*jobctl(src), "--db", str(db), "enqueue", "--batch", "-"] if impl == "jobctl"
           else [sys.executable, str(BENCH / "ref_batch.py"), *(["--minimal"] if impl == "minimal" else []), str(db)])
    with open(source, "rb") as stdin:
        elapsed, _rss, code, err, cpu = run_child(cmd, None, stdin)
    if code != 0 or count_jobs(str(db), table="jobs_minimal" if impl == "minimal" else "jobs") != n:
        raise SystemExit(f"{impl} failed: {err.decode(errors='replace')[-500:]}")
    for p in tmp.glob(f"speed-{impl}.db*"):
        p.unlink()
    return n / elapsed, n / cpu


def pg_url(base: str, schema: str) -> str:
    return f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{schema}"


def pg_admin(base: str, sql: str, fetch: bool = False):
    import psycopg2

    conn = psycopg2.connect(base)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchone()[0] if fetch else None
    finally:
        conn.close()


def speed_pg(src: str, base: str, schema: str, n: int, source: Path) -> tuple[float, float]:
    """As speed(), on PostgreSQL, in a fresh schema of the name `schema`."""
    pg_admin(base, f"DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}")
    try:
        url = pg_url(base, schema)
        subprocess.run([*jobctl(src), "--db", url, "init"], check=True, stdout=subprocess.DEVNULL)
        with open(source, "rb") as stdin:
            elapsed, _rss, code, err, cpu = run_child([*jobctl(src), "--db", url, "enqueue", "--batch", "-"], None, stdin)
        if code != 0 or pg_admin(base, f"SELECT count(*) FROM {schema}.jobs", fetch=True) != n:
            raise SystemExit(f"jobctl on PostgreSQL failed: {err.decode(errors='replace')[-500:]}")
    finally:
        pg_admin(base, f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return n / elapsed, n / cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--speed-jobs", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--src", action="append", metavar="DIR", help="a jobctl source tree to run (default: this one)")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--postgres", metavar="URL", help="also measure the speed on this PostgreSQL server")
    ap.add_argument("--pg-schema", default="batch_memory_bench", help="the schema of those runs (dropped after each)")
    args = ap.parse_args()
    srcs = args.src or ["."]
    ensure_bytecode()
    with tempfile.TemporaryDirectory(prefix="jobctl-batch-") as d:
        tmp = Path(d)
        if not args.skip_memory:
            print("peak memory of one `enqueue --batch -` (ru_maxrss of the child), NDJSON through a pipe:")
            for src in srcs:
                for n in (1_000, args.lines):
                    m = memory(src, tmp, n)
                    print(f"  {src}: {n:>9,} lines: {m['peak_mib']:7.1f} MiB peak, {m['seconds']:6.1f} s, "
                          f"exit {m['exit']}, {m['inserted']:,} inserted"
                          + (f"; stderr: {m['stderr'].strip()}" if m["exit"] else ""))
        if args.speed_jobs:
            source = tmp / "speed.ndjson"
            source.write_bytes(ndjson(args.speed_jobs))
            rates: dict[str, list[tuple[float, float]]] = {}
            order = [(src, "jobctl") for src in srcs] + [(".", "ref"), (".", "minimal")]
            order += [(src, "postgres") for src in srcs] if args.postgres else []
            for r in range(args.rounds):
                for src, impl in (order if r % 2 == 0 else order[::-1]):
                    rates.setdefault(f"{impl} {src}" if impl in ("jobctl", "postgres") else impl, []).append(
                        speed_pg(src, args.postgres, args.pg_schema, args.speed_jobs, source) if impl == "postgres"
                        else speed(src, tmp, args.speed_jobs, impl, source))
            ref, floor = ([statistics.median(v[i] for v in rates[name]) for i in (0, 1)] for name in ("ref", "minimal"))
            print(f"enqueue --batch of {args.speed_jobs:,} jobs (a file on stdin), median of {args.rounds} round(s); "
                  "ref: executemany into jobctl's table, minimal: into a table of only the columns:")
            for name, values in rates.items():
                wall, cpu = (statistics.median(v[i] for v in values) for i in (0, 1))
                if name.startswith("postgres"):  # SQLite's references say nothing of it: against the first --src
                    first = [statistics.median(v[i] for v in rates[f"postgres {srcs[0]}"]) for i in (0, 1)]
                    print(f"  {name}: {wall:,.0f} jobs/s ({wall / first[0]:.2f}× postgres {srcs[0]}), {cpu:,.0f} jobs "
                          f"per CPU second of the client ({cpu / first[1]:.2f}×); rounds: "
                          + ", ".join(f"{v[0]:,.0f}" for v in values))
                    continue
                print(f"  {name}: {wall:,.0f} jobs/s ({wall / ref[0]:.2f}× ref, {wall / floor[0]:.2f}× minimal), "
                      f"{cpu:,.0f} jobs per CPU second ({cpu / ref[1]:.2f}× ref, {cpu / floor[1]:.2f}× minimal); "
                      "rounds: " + ", ".join(f"{v[0]:,.0f}" for v in values))

if __name__ == "__main__":
    main()
