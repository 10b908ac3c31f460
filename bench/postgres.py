"""jobctl on PostgreSQL, measured side by side with a reference in the same run (ratios only).

    .venv/bin/python bench/postgres.py                   # every workload (about 10 minutes here)
    .venv/bin/python bench/postgres.py claim wakeup      # only these workloads
    .venv/bin/python bench/postgres.py --quick           # toy sizes: checks the harness, measures nothing
    .venv/bin/python bench/postgres.py --json out.json   # also write every raw figure

The server is JOBCTL_BENCH_POSTGRES_URL (default postgresql://postgres@127.0.0.1:5432/test). Every
case runs in a fresh schema of its own, dropped afterwards; nothing else on the server is touched.

claim:   N jobs claimed and completed by 1, 2 and 4 fresh worker processes (bench/cases.py's
         claim case): jobctl's core path, q.claim() + q.complete() and q.complete_and_claim(),
         against a hand-written psycopg2 loop on a table of its own with a partial index
         (UPDATE ... WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING, then an
         UPDATE to complete; one statement, one round trip and one commit each). Every job counted.
enqueue: one `jobctl enqueue` process per job on PostgreSQL and on SQLite, the calls alternating.
wakeup:  an idle `jobctl work` (poll 5 s, so polling cannot be what wakes it) on each engine; the
         time from the start of an enqueue to its handler's start (median of the tries).
stats:   `jobctl stats --json` as a whole process on the same ~200,000 jobs (90% finished) on each
         engine, calls alternating (informational).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import random
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PY = sys.executable
sys.path.insert(0, str(BENCH))

from cases import ensure_bytecode, jobctl_cmd, percentile  # noqa: E402

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
CLAIM_CASES = [  # (label, bench/cases.py worker implementation, role)
    ("hand-written psycopg2: UPDATE … SKIP LOCKED RETURNING, then UPDATE", "pg-raw", "ref"),
    ("jobctl core: q.claim() + q.complete()", "jobctl", "jobctl"),
    ("jobctl core: q.complete_and_claim() (the worker's path)", "jobctl-pipelined", "jobctl"),
]
PROCS = (1, 2, 4)


# -- schemas of our own -----------------------------------------------------------------------------

def with_schema(base: str, name: str) -> str:
    return f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{name}"


@contextlib.contextmanager
def fresh_schema(base: str):
    """A URL naming a new, empty schema of this run's own; the schema is dropped afterwards."""
    import psycopg2

    name = f"bench_{uuid.uuid4().hex[:12]}"
    admin = psycopg2.connect(base)
    admin.autocommit = True
    try:
        with admin.cursor() as cur:
            cur.execute(f"CREATE SCHEMA {name}")
        yield with_schema(base, name)
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        admin.close()


def jobctl(db, *args, check=True, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run([*jobctl_cmd(), "--db", str(db), *map(str, args)], capture_output=True, **kw)
    if check and r.returncode != 0:
        raise SystemExit(f"jobctl {args[0]} on {db} failed ({r.returncode}): {r.stderr[-500:]!r}")
    return r


def summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "p90": percentile(values, 90), "n": len(values)}


# -- claim + complete ---------------------------------------------------------------------------------

def bench_claim(base: str, n: int, rounds: int, tmp: Path) -> dict:
    """{procs: {impl: [figures of each round]}}; each case a fresh process on a fresh schema."""
    raw: dict = {p: {impl: [] for _, impl, _ in CLAIM_CASES} for p in PROCS}
    order = [impl for _, impl, _ in CLAIM_CASES]
    for rnd in range(rounds):
        for procs in PROCS:
            shift = (rnd + procs) % len(order)
            for impl in order[shift:] + order[:shift]:  # a rotating order: noise hurts all alike
                with fresh_schema(base) as url:
                    casedir = tmp / f"claim-{rnd}-{procs}-{impl}"
                    casedir.mkdir()
                    args = {"db": url, "dir": str(casedir), "n": n, "procs": procs, "impl": impl}
                    r = subprocess.run([PY, str(BENCH / "cases.py"), "claim", json.dumps(args)], capture_output=True,
                                       cwd=casedir, timeout=1800)
                lines = r.stdout.decode(errors="replace").strip().splitlines()
                if r.returncode != 0 or not lines:
                    tail = (r.stderr.decode(errors="replace").strip().splitlines() or ["(no output)"])[-1]
                    fig = {"error": f"exit {r.returncode}: {tail}"}
                else:
                    fig = json.loads(lines[-1])
                raw[procs][impl].append(fig)
                shown = fig.get("error") or f"{fig['value']:,.0f} jobs/s"
                print(f"[claim {rnd + 1}/{rounds}] {impl} / {procs} process(es): {shown}", file=sys.stderr, flush=True)
    return raw


def claim_rows(raw: dict) -> list[dict]:
    rows = []
    for procs in PROCS:
        ref = None
        for label, impl, role in CLAIM_CASES:
            figs = raw[procs][impl]
            ok = [f for f in figs if "error" not in f]
            values = [f["value"] for f in ok]
            row = {"procs": procs, "case": label, "impl": impl, "role": role,
                   **(summary(values) if values else {"median": None}),
                   "duplicates": sum(f.get("duplicates", 0) for f in ok), "missing": sum(f.get("missing", 0) for f in ok),
                   "busy": sum(f.get("busy_retries", 0) for f in ok), "errors": [f["error"] for f in figs if "error" in f]}
            if role == "ref":
                ref = row["median"]
            row["ratio"] = row["median"] / ref if ref and row["median"] else None
            rows.append(row)
    return rows


# -- one-shot enqueue -----------------------------------------------------------------------------

def bench_enqueue(base: str, calls: int, rounds: int, tmp: Path) -> dict:
    """Median wall time of a whole `jobctl enqueue` process on each engine, the calls alternating."""
    times: dict[str, list[float]] = {"postgres": [], "sqlite": []}
    wrong = 0
    for rnd in range(rounds):
        with fresh_schema(base) as url:
            dbs = {"postgres": url, "sqlite": str(tmp / f"enqueue-{rnd}.db")}
            for db in dbs.values():
                jobctl(db, "init")
            for i in range(calls):
                engines = ["postgres", "sqlite"] if (i + rnd) % 2 == 0 else ["sqlite", "postgres"]
                for engine in engines:
                    t = time.perf_counter()
                    jobctl(dbs[engine], "enqueue", "bench", f'{{"i":{i}}}')
                    times[engine].append((time.perf_counter() - t) * 1000)
            wrong += abs(count_jobs(url) - calls) + abs(count_jobs(dbs["sqlite"]) - calls)
        print(f"[enqueue {rnd + 1}/{rounds}] postgres {statistics.median(times['postgres']):.1f} ms, "
              f"sqlite {statistics.median(times['sqlite']):.1f} ms", file=sys.stderr, flush=True)
    return {"postgres": summary(times["postgres"]), "sqlite": summary(times["sqlite"]), "wrong": wrong,
            "ratio": statistics.median(times["postgres"]) / statistics.median(times["sqlite"]),
            "raw": times}


def count_jobs(db: str, where: str = "") -> int:
    sql = f"SELECT count(*) FROM jobs {where}"
    if db.startswith("postgresql://"):
        import psycopg2

        conn = psycopg2.connect(db)
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                return cur.fetchone()[0]
        finally:
            conn.close()
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql).fetchone()[0]
    finally:
        conn.close()


# -- wake-up latency ------------------------------------------------------------------------------

def bench_wakeup(base: str, tries: int, tmp: Path) -> dict:
    """An idle `jobctl work` on each engine; a job enqueued (in this process, through the core API)
    at a random moment; from the start of that enqueue to the start of its handler."""
    from jobctl.config import load_settings
    from jobctl.queue import Queue

    config = tmp / "wakeup.toml"
    starts = {e: tmp / f"wakeup-{e}.log" for e in ("postgres", "sqlite")}
    # the handler appends its start time (date: wall clock, as time.time() here) to its engine's file
    config.write_text('[types.wake]\ncommand = ["/bin/sh", "-c", "date +%s.%N >> \\"$STARTS\\""]\n\n'
                      '[worker]\npoll = "5s"\nrecover_every = "1h"\n')
    settings = load_settings(str(config))
    latencies: dict[str, list[float]] = {"postgres": [], "sqlite": []}
    with fresh_schema(base) as url:
        dbs = {"postgres": url, "sqlite": str(tmp / "wakeup.db")}
        queues = {e: Queue.open(db, settings, create=True) for e, db in dbs.items()}
        workers = {e: subprocess.Popen([*jobctl_cmd(), "--db", db, "--config", str(config), "work"],
                                       stdout=subprocess.DEVNULL, stderr=open(tmp / f"wakeup-{e}.worker.log", "wb"),
                                       env={**os.environ, "STARTS": str(starts[e])})
                   for e, db in dbs.items()}
        try:
            rng = random.Random(7)

            def one(engine: str, i: int) -> float:
                seen = len(lines(starts[engine]))
                time.sleep(rng.uniform(0.3, 0.6))  # idle: the worker is waiting, not claiming
                t0 = time.time()
                queues[engine].enqueue("wake", {"i": i})
                deadline = time.monotonic() + 30
                while len(lines(starts[engine])) == seen:
                    if time.monotonic() > deadline or workers[engine].poll() is not None:
                        raise SystemExit(f"the {engine} worker did not start job {i}: "
                                         + (tmp / f"wakeup-{engine}.worker.log").read_text()[-500:])
                    time.sleep(0.002)
                return (float(lines(starts[engine])[-1]) - t0) * 1000

            for engine in dbs:  # the first job of each worker: it has started and gone idle
                one(engine, -1)
            for i in range(tries):
                for engine in (["postgres", "sqlite"] if i % 2 == 0 else ["sqlite", "postgres"]):
                    latencies[engine].append(one(engine, i))
        finally:
            for w in workers.values():
                w.send_signal(signal.SIGTERM)
            for w in workers.values():
                w.wait(timeout=60)
            for q in queues.values():
                q.close()
    print(f"[wakeup] postgres {statistics.median(latencies['postgres']):.1f} ms, "
          f"sqlite {statistics.median(latencies['sqlite']):.1f} ms", file=sys.stderr, flush=True)
    return {"postgres": summary(latencies["postgres"]), "sqlite": summary(latencies["sqlite"]),
            "ratio": statistics.median(latencies["postgres"]) / statistics.median(latencies["sqlite"]),
            "raw": latencies}


def lines(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except FileNotFoundError:
        return []


# -- stats ------------------------------------------------------------------------------------------

def copy_jobs(sqlite_path: Path, url: str) -> None:
    """The same jobs and runs, row for row, into a jobctl schema just created on PostgreSQL (untimed)."""
    import psycopg2
    import psycopg2.extras

    src = sqlite3.connect(sqlite_path)
    conn = psycopg2.connect(url)
    try:
        with conn, conn.cursor() as cur:
            for table in ("jobs", "runs"):
                cur.execute("SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
                            "AND table_name = %s", (table,))
                theirs = {r[0] for r in cur.fetchall()}
                columns = [r[1] for r in src.execute(f"PRAGMA table_info({table})") if r[1] in theirs]
                rows = src.execute(f"SELECT {', '.join(columns)} FROM {table}")
                psycopg2.extras.execute_values(
                    cur, f"INSERT INTO {table} ({', '.join(columns)}) OVERRIDING SYSTEM VALUE VALUES %s", rows,
                    page_size=5000)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("VACUUM ANALYZE jobs")  # as autovacuum leaves a table at rest
            cur.execute("VACUUM ANALYZE runs")
    finally:
        conn.close()
        src.close()


def bench_stats(base: str, n: int, calls: int, tmp: Path) -> dict:
    from bench_stats import build

    path = tmp / "stats.db"
    build(path, n)
    times: dict[str, list[float]] = {"postgres": [], "sqlite": []}
    with fresh_schema(base) as url:
        t = time.perf_counter()
        jobctl(url, "init")
        copy_jobs(path, url)
        print(f"[stats] copied {n:,} jobs to PostgreSQL in {time.perf_counter() - t:.1f}s", file=sys.stderr, flush=True)
        dbs = {"postgres": url, "sqlite": str(path)}
        answers = {e: json.loads(jobctl(db, "stats", "--json").stdout) for e, db in dbs.items()}
        for i in range(calls):
            for engine in (["postgres", "sqlite"] if i % 2 == 0 else ["sqlite", "postgres"]):
                t = time.perf_counter()
                jobctl(dbs[engine], "stats", "--json")
                times[engine].append((time.perf_counter() - t) * 1000)
    same = counts_of(answers["postgres"]) == counts_of(answers["sqlite"])
    print(f"[stats] postgres {statistics.median(times['postgres']):.0f} ms, sqlite "
          f"{statistics.median(times['sqlite']):.0f} ms; the same counts: {same}", file=sys.stderr, flush=True)
    return {"postgres": summary(times["postgres"]), "sqlite": summary(times["sqlite"]), "same_counts": same,
            "ratio": statistics.median(times["postgres"]) / statistics.median(times["sqlite"]), "raw": times}


STATES = ("ready", "scheduled", "blocked", "running", "cancel_requested", "buried", "completed", "cancelled")


def counts_of(stats: dict) -> dict:
    """The jobs per queue and state of a `stats --json` answer (not the ages, which move)."""
    return {queue: {state: figures.get(state) for state in STATES} for queue, figures in stats["queues"].items()}


# -- report ---------------------------------------------------------------------------------------

def spread(s: dict, fmt: str) -> str:
    return f"{fmt.format(s['min'])}–{fmt.format(s['max'])}"


def report(results: dict, meta: dict) -> tuple[str, list[tuple[str, str, bool | None]]]:
    out = [meta["head"], ""]
    checks: list[tuple[str, str, bool | None]] = []
    if "claim" in results:
        rows = results["claim"]["rows"]
        out += [f"### claim: claim + complete {results['claim']['n']:,} jobs through the core API, PostgreSQL", "",
                "| processes | case | median | rate ÷ hand-written | spread of rounds | duplicated | lost | notes |",
                "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            notes = "; ".join((["reference"] if r["role"] == "ref" else []) + ([f"busy {r['busy']}"] if r["busy"] else [])
                              + [f"error: {e}" for e in r["errors"][:1]])
            if r["median"] is None:
                out.append(f"| {r['procs']} | {r['case']} | - | - | - | - | - | {notes} |")
                continue
            out.append(f"| {r['procs']} | {r['case']} | {r['median']:,.0f} jobs/s | {r['ratio'] * 100:.0f}% | "
                       f"{spread(r, '{:,.0f}')} | {r['duplicates']} | {r['missing']} | {notes} |")
        out.append("")
        by = {(r["procs"], r["impl"]): r for r in rows}
        for procs in PROCS:
            for _, impl, role in CLAIM_CASES:
                r = by[(procs, impl)]
                if role == "ref":
                    continue
                name = f"{'q.claim + q.complete' if impl == 'jobctl' else 'q.complete_and_claim'} ≥ 80% of " \
                       f"hand-written ({procs} process{'es' if procs > 1 else ''})"
                checks.append((name, "not measured", None) if r["ratio"] is None else
                              (name, f"{r['ratio'] * 100:.0f}%", r["ratio"] >= 0.8))
        for _, impl, _ in CLAIM_CASES:
            medians = [by[(p, impl)]["median"] for p in PROCS]
            if all(medians):
                shown = " → ".join(f"{m:,.0f}" for m in medians)
                checks.append((f"{impl}: throughput grows with processes (1 → 2 → 4)", shown,
                               all(b > a for a, b in zip(medians, medians[1:]))))
        wrong = [f"{r['case']} ({r['procs']})" for r in rows if r["duplicates"] or r["missing"] or r["errors"]]
        checks.append(("claim: every job exactly once, no errors", "; ".join(wrong) or "yes", not wrong))
    for key, title, unit, target in (
            ("enqueue", "one `jobctl enqueue` process per job", "ms/call", ("PostgreSQL ≤ 1.6× SQLite", 1.6)),
            ("wakeup", "an idle `jobctl work`: enqueue to the handler's start", "ms", None),
            ("stats", "`jobctl stats --json` on the same jobs", "ms", None)):
        if key not in results:
            continue
        res = results[key]
        extra = {"enqueue": f" ({res.get('calls')} calls a round, {res.get('rounds')} rounds)",
                 "wakeup": f" ({res.get('tries')} tries each)", "stats": f" ({res.get('jobs', 0):,} jobs)"}[key]
        out += [f"### {key}: {title}{extra}", "",
                "| engine | median | p90 | spread | PostgreSQL ÷ SQLite |", "|---|---|---|---|---|"]
        for engine in ("sqlite", "postgres"):
            s = res[engine]
            versus = "1.00× (reference)" if engine == "sqlite" else f"{res['ratio']:.2f}×"
            out.append(f"| {engine} | {s['median']:.1f} {unit} | {s['p90']:.1f} {unit} | {spread(s, '{:.1f}')} | "
                       f"{versus} |")
        out.append("")
        if key == "enqueue":
            checks.append(("enqueue on PostgreSQL ≤ 1.6× SQLite", f"{res['ratio']:.2f}×", res["ratio"] <= target[1]))
            checks.append(("enqueue: every job stored once", "yes" if not res["wrong"] else f"{res['wrong']} off",
                           not res["wrong"]))
        elif key == "wakeup":
            checks.append(("wake-up on PostgreSQL: median < 100 ms", f"{res['postgres']['median']:.1f} ms",
                           res["postgres"]["median"] < 100))
        else:
            checks.append(("stats on PostgreSQL ÷ SQLite (informational)", f"{res['ratio']:.2f}×", None))
            checks.append(("stats: both engines count the same", "yes" if res["same_counts"] else "no",
                           res["same_counts"]))
    out += ["### targets", "", "| target | measured | met |", "|---|---|---|"]
    for name, shown, ok in checks:
        out.append(f"| {name} | {shown} | {'-' if ok is None else 'yes' if ok else '**no**'} |")
    return "\n".join(out + [""]), checks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workloads", nargs="*", metavar="WORKLOAD", help="claim, enqueue, wakeup, stats (default: all)")
    ap.add_argument("--quick", action="store_true", help="toy sizes: a smoke run, not a measurement")
    ap.add_argument("--rounds", type=int, help="rounds of the claim and enqueue cases (default 3; 1 with --quick)")
    ap.add_argument("--claim-jobs", type=int)
    ap.add_argument("--enqueue-calls", type=int)
    ap.add_argument("--wakeup-tries", type=int)
    ap.add_argument("--stats-jobs", type=int)
    ap.add_argument("--json", metavar="PATH", help="also write every raw figure here")
    ap.add_argument("--out", default=str(BENCH / "results"), metavar="DIR",
                    help="where postgres.md (the tables) is written (default bench/results)")
    args = ap.parse_args(argv)
    names = ["claim", "enqueue", "wakeup", "stats"]
    for name in args.workloads:
        if name not in names:
            ap.error(f"unknown workload {name!r}; choose from {', '.join(names)}")
    chosen = args.workloads or names
    q = args.quick
    rounds = args.rounds or (1 if q else 3)
    base = os.environ.get("JOBCTL_BENCH_POSTGRES_URL") or DEFAULT_URL
    try:
        import psycopg2

        psycopg2.connect(base, connect_timeout=3).close()
    except ImportError:
        print("bench/postgres.py: psycopg2 is not installed (pip install '.[postgres]')", file=sys.stderr)
        return 2
    except psycopg2.OperationalError as e:
        print(f"bench/postgres.py: no PostgreSQL server at {base}: {str(e).strip()}", file=sys.stderr)
        return 2

    ensure_bytecode()
    load = os.getloadavg()
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    server = psycopg2.connect(base)
    version = server.server_version
    server.close()
    tmp = Path(tempfile.mkdtemp(prefix="jobctl-bench-pg-"))
    results: dict = {}
    try:
        if "claim" in chosen:
            n = args.claim_jobs or (200 if q else 5_000)
            raw = bench_claim(base, n, rounds, tmp)
            results["claim"] = {"n": n, "rows": claim_rows(raw), "raw": raw}
        if "enqueue" in chosen:
            calls = args.enqueue_calls or (4 if q else 30)
            results["enqueue"] = {**bench_enqueue(base, calls, rounds, tmp), "calls": calls, "rounds": rounds}
        if "wakeup" in chosen:
            tries = args.wakeup_tries or (3 if q else 20)
            results["wakeup"] = {**bench_wakeup(base, tries, tmp), "tries": tries}
        if "stats" in chosen:
            n = args.stats_jobs or (2_000 if q else 200_000)
            results["stats"] = {**bench_stats(base, n, 3 if q else 7, tmp), "jobs": n}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    head = (f"jobctl ({commit}) on PostgreSQL {version // 10000}.{version % 10000}, python "
            f"{sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}, psycopg2 "
            f"{psycopg2.__version__.split()[0]}; {os.cpu_count()} cpus; {rounds} round(s)"
            f"{' (--quick)' if q else ''}; load {load[0]:.1f} → {os.getloadavg()[0]:.1f}; {started}")
    text, checks = report(results, {"head": head})
    print(text)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "postgres.md").write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"head": head, "results": results, "targets": [{"target": n, "measured": s, "met": ok}
                                                           for n, s, ok in checks]}, indent=1))
    correct = all(ok is not False for name, _, ok in checks if "exactly once" in name or "stored once" in name
                  or "count the same" in name)
    return 0 if correct else 1


if __name__ == "__main__":
    sys.exit(main())
