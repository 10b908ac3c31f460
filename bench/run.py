"""jobctl's benchmark: every workload side by side with its reference and its peers, in one run.

    .venv/bin/python bench/run.py                  # everything, full size (about 15 minutes here)
    .venv/bin/python bench/run.py --quick          # small sizes, one minute: a smoke run
    .venv/bin/python bench/run.py claim latency    # only these workloads
    .venv/bin/python bench/run.py --json out.json  # also write every raw figure

Each case runs in a fresh process on a fresh database file (the latency and stats fixtures, which
take a while to build, are built once per run and shared by their cases), several rounds in a
rotating order, so a noisy neighbour hurts every case alike. A machine shared with other work is
noisy: only the ratio to the reference measured in the same run means anything, so that is what
the targets are written in. Peers come from the `bench` extra (`pip install -e '.[bench]'`); a
missing one is skipped with a note. Every case counts the jobs it lost and the jobs it processed
twice: a fast wrong answer is not a result.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PY = sys.executable
sys.path.insert(0, str(BENCH))

from cases import build_pending, jobctl_cmd  # noqa: E402

JOBCTL_FULL = "WAL, synchronous=FULL (jobctl's default)"
JOBCTL_NORMAL = "WAL, synchronous=NORMAL (settable)"
RAW_FULL = "WAL, synchronous=FULL"
RAW_NORMAL = "WAL, synchronous=NORMAL"
PEERS = {
    # what each peer does when used as shipped: its defaults and the durability it promises
    "huey": ("huey", "SqliteHuey defaults: WAL, synchronous=FULL (SQLite's default); dequeue deletes the "
                     "row, no ack (at most once)"),
    "persist-queue": ("persistqueue", "SQLiteAckQueue defaults: WAL, synchronous=FULL (SQLite's default); "
                                      "get = SELECT then UPDATE, no write lock; ack()"),
    "litequeue": ("litequeue", "LiteQueue defaults: WAL, synchronous=NORMAL (loses the last commits on "
                               "power loss); BEGIN IMMEDIATE + UPDATE…RETURNING; done()"),
}


@dataclass
class Case:
    label: str
    role: str  # "ref" (the denominator of its group), "jobctl", "floor" or "peer"
    func: str  # a CASES entry of bench/cases.py
    args: dict
    durability: str
    group: str = ""
    needs_module: str | None = None
    needs_binary: str | None = None

    def missing(self) -> str | None:
        if self.needs_module:
            try:
                __import__(self.needs_module)
            except ImportError:
                return f"{self.needs_module} is not installed (pip install -e '.[bench]')"
        if self.needs_binary and shutil.which(self.needs_binary) is None:
            return f"`{self.needs_binary}` is not installed"
        return None


@dataclass
class Workload:
    name: str
    title: str
    unit: str
    better: str  # "lower" or "higher"
    cases: list[Case]
    note: str = ""
    fixtures: dict = field(default_factory=dict)  # db path -> (builder, size)
    skipped: str | None = None


def command_exists(name: str) -> str | None:
    """None when `jobctl NAME` exists, else why the workload is skipped."""
    r = subprocess.run([*jobctl_cmd(), name, "--help"], capture_output=True)
    return None if r.returncode == 0 else f"`jobctl {name}` does not exist yet"


def workloads(args, tmp: Path) -> list[Workload]:
    q = args.quick
    n_enqueue = args.enqueue_calls or (5 if q else 30)
    n_batch = args.batch_jobs or (2_000 if q else 100_000)
    n_peer = min(n_batch, 1_000 if q else 20_000)
    n_claim = args.claim_jobs or (300 if q else 20_000)
    n_work = args.work_jobs or (30 if q else 1_000)
    sizes = [int(s) for s in args.latency_sizes.split(",")] if args.latency_sizes else (
        [1_000, 10_000] if q else [10_000, 100_000, 1_000_000])
    k_latency = args.latency_claims or (100 if q else 1_000)
    n_stats = args.stats_jobs or (20_000 if q else 1_000_000)

    out = []
    enq = [
        Case("bare typer app + sqlite3 insert", "ref", "enqueue", {"impl": "typer", "n": n_enqueue}, RAW_FULL),
        Case("jobctl enqueue", "jobctl", "enqueue", {"impl": "jobctl", "n": n_enqueue}, JOBCTL_FULL),
        Case("plain python + sqlite3 insert", "floor", "enqueue", {"impl": "plain", "n": n_enqueue}, RAW_FULL),
        Case("sqlite3 CLI insert", "peer", "enqueue", {"impl": "sqlite3-cli", "n": n_enqueue}, RAW_FULL,
             needs_binary="sqlite3"),
        Case("tsp (task-spooler) true", "peer", "enqueue", {"impl": "tsp", "n": n_enqueue},
             "its own spool, no fsync", needs_binary="tsp"),
    ]
    out.append(Workload("enqueue", f"one `jobctl enqueue` process per job ({n_enqueue} calls a round)",
                        "ms/call", "lower", enq))

    batch = [
        Case("hand-written executemany (NDJSON on stdin)", "ref", "batch_cli", {"impl": "ref", "n": n_batch}, RAW_FULL),
        Case("jobctl enqueue --batch - (NDJSON on stdin)", "jobctl", "batch_cli", {"impl": "jobctl", "n": n_batch},
             JOBCTL_FULL),
        Case("executemany into a minimal table (the columns only: no index, no trigger)", "floor", "batch_cli",
             {"impl": "minimal", "n": n_batch}, RAW_FULL),
    ]
    for peer, (module, defaults) in PEERS.items():
        batch.append(Case(f"{peer} put() loop ({n_peer} jobs)", "peer", "batch_peer", {"impl": peer, "n": n_peer},
                          defaults, needs_module=module))
    out.append(Workload(
        "batch", f"enqueue {n_batch:,} jobs in one go", "jobs/s", "higher", batch,
        note="jobctl and the reference: a whole process, start-up included, one transaction. Peers have no "
             "batch insert: their enqueue loop (one commit per job), timed in-process."))

    claim = []
    for procs in (1, 4):
        g = f"{procs} process{'es' if procs > 1 else ''}"
        base = {"n": n_claim, "procs": procs}
        claim += [
            Case("hand-written BEGIN IMMEDIATE + UPDATE…RETURNING, then UPDATE", "ref", "claim",
                 {**base, "impl": "raw"}, RAW_FULL, group=g),
            Case("jobctl core: q.claim() + q.complete()", "jobctl", "claim", {**base, "impl": "jobctl"}, JOBCTL_FULL,
                 group=g),
            Case("jobctl core: q.complete_and_claim() (the worker's path)", "jobctl", "claim",
                 {**base, "impl": "jobctl-pipelined"}, JOBCTL_FULL, group=g),
            Case("hand-written, NORMAL", "floor", "claim", {**base, "impl": "raw", "synchronous": "normal"},
                 RAW_NORMAL, group=g),
            Case("jobctl core, synchronous=normal", "floor", "claim",
                 {**base, "impl": "jobctl", "synchronous": "normal"}, JOBCTL_NORMAL, group=g),
        ]
        for peer, (module, defaults) in PEERS.items():
            claim.append(Case(peer, "peer", "claim", {**base, "impl": peer}, defaults, group=g, needs_module=module))
    out.append(Workload(
        "claim", f"claim + complete {n_claim:,} jobs through the core API", "jobs/s", "higher", claim,
        note="Fresh worker processes, timed from the go signal to the last report; a worker retries a busy "
             "database after 1 ms (counted as `busy`)."))

    work = [
        Case("python loop: spawn and reap `true`", "ref", "spawn", {"n": n_work}, "-"),
        Case("jobctl work --stop-when-empty, handler `true`", "jobctl", "work", {"n": n_work}, JOBCTL_FULL),
        Case("jobctl work --concurrency 2", "jobctl", "work", {"n": n_work, "concurrency": 2}, JOBCTL_FULL),
        Case("floor: hand-written worker, one commit per job, nothing else", "floor", "floor_worker",
             {"n": n_work, "mode": "sequential"}, RAW_FULL),
        Case("floor: the same, claiming the next job while one runs", "floor", "floor_worker",
             {"n": n_work, "mode": "ahead"}, RAW_FULL),
    ]
    out.append(Workload("work", f"`jobctl work` running {n_work:,} jobs whose handler is `true`", "jobs/s",
                        "higher", work, skipped=command_exists("work")))

    lat, fixtures = [], {}
    for sync, durability in (("full", JOBCTL_FULL), ("normal", JOBCTL_NORMAL)):
        for i, size in enumerate(sizes):
            db = str(tmp / f"pending-{size}.db")
            # enough extra pending jobs that every round still finds `size` of them
            fixtures[db] = (build_pending, size + (k_latency + 1) * 2 * args.rounds)
            lat.append(Case(f"jobctl claim, {size:,} pending", "ref" if i == 0 else "jobctl", "latency",
                            {"db": db, "k": k_latency, "synchronous": sync}, durability, group=f"synchronous={sync}"))
    out.append(Workload(
        "latency", f"claim latency ({k_latency} core claims a round; p99)", "ms p99", "lower", lat, fixtures=fixtures,
        note="The reference is the same claim on the smallest file. Each claim is one BEGIN IMMEDIATE "
             "transaction, fsync included at FULL."))

    stats_db = str(tmp / "stats.db")
    stats_fixture = {}
    reason = command_exists("stats")
    if reason is None:
        try:
            from bench_stats import build as build_stats  # the fixture issue 4 defined: 90% completed

            stats_fixture = {stats_db: (build_stats, n_stats)}
        except ImportError:
            reason = "bench/bench_stats.py (the stats fixture) is missing"
    k_stats = 2 if q else 5
    stats = [
        Case("python + GROUP BY status, queue on the covering index", "ref", "stats",
             {"impl": "ref", "db": stats_db, "k": k_stats}, "read only"),
        Case("jobctl stats --json", "jobctl", "stats", {"impl": "jobctl", "db": stats_db, "k": k_stats}, "read only"),
    ]
    out.append(Workload("stats", f"`jobctl stats --json` on {n_stats:,} jobs (90% completed)", "ms", "lower", stats,
                        fixtures=stats_fixture, skipped=reason,
                        note="Both a whole process (start-up included), median of the calls of a round."))
    return out


def run_case(case: Case, tmp: Path, index: int, timeout: float) -> dict:
    casedir = tmp / f"case-{index}"
    casedir.mkdir()
    args = {"db": str(casedir / "queue.db"), "dir": str(casedir), **case.args}
    try:
        r = subprocess.run([PY, str(BENCH / "cases.py"), case.func, json.dumps(args)], capture_output=True,
                           timeout=timeout, cwd=casedir)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g}s"}
    finally:
        shutil.rmtree(casedir, ignore_errors=True)
    lines = r.stdout.decode(errors="replace").strip().splitlines()
    if r.returncode != 0 or not lines:
        tail = (r.stderr.decode(errors="replace").strip().splitlines() or ["(no output)"])[-1]
        return {"error": f"exit {r.returncode}: {tail}"}
    return json.loads(lines[-1])


def summarise(w: Workload, raw: dict[str, list[dict]]) -> list[dict]:
    rows = []
    refs = {}
    for c in w.cases:
        figures = raw.get(c.label + c.group, [])
        ok = [f for f in figures if "error" not in f]
        row = {"case": c.label, "group": c.group, "role": c.role, "durability": c.durability,
               "rounds": len(ok), "median": statistics.median([f["value"] for f in ok]) if ok else None,
               "duplicates": sum(f.get("duplicates", 0) for f in ok), "missing": sum(f.get("missing", 0) for f in ok),
               "errors": [f["error"] for f in figures if "error" in f], "skipped": raw.get("skip:" + c.label + c.group),
               "by_round": {f["round"]: f["value"] for f in ok if "round" in f}}
        for extra in ("p90", "cpu", "median", "min", "busy_retries"):
            vals = [f[extra] for f in ok if extra in f]
            if vals and extra != "median":
                row[extra] = statistics.median(vals)
            elif vals:
                row["claim_median"] = statistics.median(vals)
        if c.role == "ref":
            refs[c.group] = row["median"]
        rows.append(row)
    for row in rows:
        ref = refs.get(row["group"])
        row["ratio"] = row["median"] / ref if ref and row["median"] is not None else None
    return rows


def fmt_value(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "jobs/s":
        return f"{v:,.0f} jobs/s"
    return f"{v:.3f} {unit}" if v < 1 else f"{v:.1f} {unit}"


def fmt_ratio(r: float | None, better: str) -> str:
    if r is None:
        return "-"
    return f"{r:.2f}×" if better == "lower" else f"{r * 100:.0f}%"


def table(w: Workload, rows: list[dict]) -> str:
    lines = [f"### {w.name}: {w.title}", ""]
    if w.skipped:
        return "\n".join(lines + [f"Skipped: {w.skipped}.", ""])
    vs = "time ÷ reference" if w.better == "lower" else "rate ÷ reference"
    lines += [f"| case | durability, shipped defaults | median | {vs} | duplicated | lost | notes |",
              "|---|---|---|---|---|---|---|"]
    group = None
    for row in rows:
        if row["group"] != group and row["group"]:
            group = row["group"]
            lines.append(f"| **{group}** | | | | | | |")
        notes = []
        if row["role"] == "ref":
            notes.append("reference")
        if row.get("p90") is not None:
            notes.append(f"p90 {row['p90']:.1f} ms")
        if row.get("cpu") is not None:
            notes.append(f"CPU {row['cpu']:.2f} ms/job" if w.unit == "jobs/s" else f"CPU {row['cpu']:.1f} ms")
        if row.get("claim_median") is not None:
            notes.append(f"median {row['claim_median']:.3f} ms")
        if row.get("min") is not None:
            notes.append(f"fastest {row['min']:.0f} ms")
        if row.get("busy_retries"):
            notes.append(f"busy {row['busy_retries']:.0f}")
        if row["skipped"]:
            notes.append(f"skipped: {row['skipped']}")
        notes += [f"error: {e}" for e in row["errors"][:1]]
        wrong = row["duplicates"] or row["missing"]
        lines.append(
            f"| {row['case']} | {row['durability']} | {fmt_value(row['median'], w.unit)} | "
            f"{fmt_ratio(row['ratio'], w.better)} | {row['duplicates'] if row['rounds'] else '-'}"
            f"{' ✗' if wrong else ''} | {row['missing'] if row['rounds'] else '-'} | {'; '.join(notes)} |")
    if w.note:
        lines += ["", w.note]
    return "\n".join(lines + [""])


def targets(results: dict[str, list[dict]]) -> list[tuple[str, str, bool | None]]:
    """(target, what was measured, met?) for the targets of issue 5; None when not measured."""
    out = []

    def row(workload, case, group=""):
        for r in results.get(workload, []):
            if r["case"] == case and r["group"] == group:
                return r
        return None

    def check(name, r, ok_fn, shown):
        if r is None or r["median"] is None or r["ratio"] is None:
            out.append((name, "not measured", None))
        else:
            out.append((name, shown(r), ok_fn(r)))

    enq, plain = row("enqueue", "jobctl enqueue"), row("enqueue", "plain python + sqlite3 insert")
    check("enqueue ≤ 1.2× the bare typer app", enq, lambda r: r["ratio"] <= 1.2, lambda r: f"{r['ratio']:.2f}×")
    if enq and plain and enq["median"] and plain["median"]:
        ratio = enq["median"] / plain["median"]
        out.append(("enqueue ≤ 5× plain python + sqlite3", f"{ratio:.2f}×", ratio <= 5))
    check("enqueue --batch ≥ 40% of executemany", row("batch", "jobctl enqueue --batch - (NDJSON on stdin)"),
          lambda r: r["ratio"] >= 0.4, lambda r: f"{r['ratio'] * 100:.0f}%")
    batch, floor = (row("batch", case) for case in (
        "jobctl enqueue --batch - (NDJSON on stdin)",
        "executemany into a minimal table (the columns only: no index, no trigger)"))
    if batch and floor and batch["median"] and floor["median"]:
        ratio = batch["median"] / floor["median"]
        out.append(("enqueue --batch ≥ 0.4× executemany into a minimal table", f"{ratio:.2f}×", ratio >= 0.4))
    for g in ("1 process", "4 processes"):
        # Issue 5 names both: the core's claim + complete, and "completing a job and claiming the
        # next in one transaction in the worker". Each is scored on its own line.
        two = row("claim", "jobctl core: q.claim() + q.complete()", g)
        one = row("claim", "jobctl core: q.complete_and_claim() (the worker's path)", g)
        check(f"claim + complete ≥ 80% of hand-written, two transactions ({g})", two, lambda r: r["ratio"] >= 0.8,
              lambda r: f"{r['ratio'] * 100:.0f}%")
        check(f"claim + complete ≥ 80% of hand-written, the worker's one transaction ({g})", one,
              lambda r: r["ratio"] >= 0.8, lambda r: f"{r['ratio'] * 100:.0f}%")
        for path, r in (("q.claim + q.complete", two), ("q.complete_and_claim", one)):
            if not (r and r["median"]):
                continue
            peers = [p for p in results.get("claim", []) if p["role"] == "peer" and p["group"] == g
                     and p["median"] and not p["duplicates"] and not p["missing"]]
            beaten = [p["case"] for p in peers if p["median"] < r["median"]]
            ahead = [p["case"] for p in peers if p["median"] >= r["median"]]
            out.append((f"{path} ahead of every correct peer ({g})",
                        f"ahead of {', '.join(beaten) or 'none'}" + (f"; behind {', '.join(ahead)}" if ahead else ""),
                        not ahead if peers else None))
    work1, work2 = row("work", "jobctl work --stop-when-empty, handler `true`"), row("work", "jobctl work --concurrency 2")
    floors = [row("work", "floor: hand-written worker, one commit per job, nothing else"),
              row("work", "floor: the same, claiming the next job while one runs")]
    if work1 and floors[0] and work1["median"] and floors[0]["median"]:
        # The target as decided after 0.1.0: against the floor worker (one commit per job, the same
        # durability, no claiming ahead), not against a bare spawn loop that writes nothing.
        share = work1["median"] / floors[0]["median"]
        out.append(("work ≥ 90% of the hand-written floor worker", f"{share * 100:.0f}%", share >= 0.9))
        paired = [(work1["by_round"][n], floors[0]["by_round"][n])
                  for n in work1.get("by_round", {}) if n in floors[0].get("by_round", {})]
        if len(paired) > 1:
            # Each round runs the two within seconds of each other: the ratio of each pair moves
            # less with the machine's drift over a run than the ratio of the two medians.
            ratios = sorted(w / f for w, f in paired)
            out.append(("(the same round by round: median of each round's ratio, and its range)",
                        f"{statistics.median(ratios) * 100:.0f}% ({ratios[0] * 100:.0f}–{ratios[-1] * 100:.0f}%)", None))
        if work1.get("cpu") and floors[0].get("cpu"):
            # CPU time (the worker's and its handlers') moves far less with a neighbour's load than
            # wall time: a second look at the same ratio on a busy machine.
            out.append(("(the same by CPU time per job: floor's ÷ work's)",
                        f"{floors[0]['cpu'] / work1['cpu'] * 100:.0f}%", None))
    if all(f and f["ratio"] for f in floors):
        out.append(("(what a worker doing nothing but claim and complete reaches on this file)",
                    f"{floors[0]['ratio'] * 100:.0f}%; {floors[1]['ratio'] * 100:.0f}% claiming ahead", None))
    if work1 and work2 and work1["median"] and work2["median"]:
        out.append(("work --concurrency 2 faster than 1", f"{work2['median'] / work1['median']:.2f}×",
                    work2["median"] > work1["median"]))
    lat = [r for r in results.get("latency", []) if r["group"] == "synchronous=full"]
    if len(lat) >= 2:
        check(f"claim p99 at {lat[-1]['case'].split(', ')[1]} ≤ 1.5× p99 at {lat[0]['case'].split(', ')[1]}",
              lat[-1], lambda r: r["ratio"] <= 1.5, lambda r: f"{r['ratio']:.2f}×")
    st = row("stats", "jobctl stats --json")
    check("stats ≤ 1.5× the covering-index GROUP BY", st, lambda r: r["ratio"] <= 1.5, lambda r: f"{r['ratio']:.2f}×")
    check("stats under 150 ms", st, lambda r: r["median"] < 150, lambda r: f"{r['median']:.0f} ms")
    wrong = [f"{w}: {r['case']} {r['group']}".strip() for w, rows in results.items() for r in rows
             if r["role"] in ("jobctl", "ref") and (r["duplicates"] or r["missing"])]
    out.append(("jobctl and the references: every job exactly once", "; ".join(wrong) or "yes", not wrong))
    return out


def versions() -> dict:
    v = {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version, "cpus": os.cpu_count(),
         "machine": platform.machine(), "kernel": platform.release()}
    for dist in ("jobctl", "typer", "huey", "persist-queue", "litequeue"):
        try:
            v[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            v[dist] = None
    try:
        v["commit"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                     text=True).stdout.strip() or None
    except OSError:
        v["commit"] = None
    return v


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workloads", nargs="*", metavar="WORKLOAD",
                    help="enqueue, batch, claim, work, latency, stats (default: all)")
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke run, not a measurement")
    ap.add_argument("--rounds", type=int, default=None, help="rounds of every case (default 3; 1 with --quick)")
    ap.add_argument("--json", nargs="?", const=str(BENCH / "results" / "latest.json"), metavar="PATH",
                    help="write the raw figures of every round (default path bench/results/latest.json)")
    ap.add_argument("--no-peers", action="store_true", help="skip the other queues and binaries")
    ap.add_argument("--enqueue-calls", type=int)
    ap.add_argument("--batch-jobs", type=int)
    ap.add_argument("--claim-jobs", type=int)
    ap.add_argument("--work-jobs", type=int)
    ap.add_argument("--latency-sizes", metavar="N,N,...")
    ap.add_argument("--latency-claims", type=int)
    ap.add_argument("--stats-jobs", type=int)
    ap.add_argument("--out", default=str(BENCH / "results"), metavar="DIR",
                    help="where latest.md (the tables) is written (default bench/results)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds one case may take")
    args = ap.parse_args(argv)
    args.rounds = args.rounds or (1 if args.quick else 3)

    tmp = Path(tempfile.mkdtemp(prefix="jobctl-bench-"))
    all_workloads = workloads(args, tmp)
    names = [w.name for w in all_workloads]
    for name in args.workloads:
        if name not in names:
            ap.error(f"unknown workload {name!r}; choose from {', '.join(names)}")
    chosen = [w for w in all_workloads if not args.workloads or w.name in args.workloads]

    meta = {"started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "argv": sys.argv[1:] if argv is None else argv, "rounds": args.rounds, "quick": args.quick,
            "versions": versions(), "load_before": os.getloadavg()}
    print(f"jobctl bench: {len(chosen)} workload(s), {args.rounds} round(s); python {meta['versions']['python']}, "
          f"sqlite {meta['versions']['sqlite']}, {meta['versions']['cpus']} cpus, load {meta['load_before'][0]:.2f}",
          file=sys.stderr)

    raw: dict[str, dict[str, list[dict]]] = {}
    results: dict[str, list[dict]] = {}
    report = []
    try:
        for w in chosen:
            raw[w.name] = {}
            if w.skipped:
                print(f"[{w.name}] skipped: {w.skipped}", file=sys.stderr)
                results[w.name] = []
                report.append(table(w, []))
                continue
            runnable = []
            for c in w.cases:
                why = c.missing() or ("--no-peers" if args.no_peers and c.role == "peer" else None)
                if why:
                    raw[w.name]["skip:" + c.label + c.group] = why
                else:
                    runnable.append(c)
            for db, (build, size) in w.fixtures.items():
                t = time.perf_counter()
                build(db, size)
                print(f"[{w.name}] built {Path(db).name}: {size:,} jobs in {time.perf_counter() - t:.1f}s, "
                      f"{Path(db).stat().st_size / 1e6:.0f} MB", file=sys.stderr)
            for rnd in range(args.rounds):
                shift = rnd % max(len(runnable), 1)
                for i, c in enumerate(runnable[shift:] + runnable[:shift]):
                    t = time.perf_counter()
                    fig = run_case(c, tmp, rnd * 1000 + i, args.timeout)
                    fig["round"] = rnd
                    raw[w.name].setdefault(c.label + c.group, []).append(fig)
                    shown = fig.get("error") or fmt_value(fig.get("value"), w.unit)
                    print(f"[{w.name} {rnd + 1}/{args.rounds}] {c.label}{' / ' + c.group if c.group else ''}: {shown}"
                          f" ({time.perf_counter() - t:.1f}s)", file=sys.stderr)
            for db in w.fixtures:
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{db}{suffix}").unlink(missing_ok=True)
            results[w.name] = summarise(w, raw[w.name])
            report.append(table(w, results[w.name]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    meta["load_after"] = os.getloadavg()
    meta["finished"] = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    v = meta["versions"]
    head = (f"jobctl {v['jobctl']} ({v['commit']}), python {v['python']}, SQLite {v['sqlite']}, typer {v['typer']}, "
            f"huey {v['huey']}, persist-queue {v['persist-queue']}, litequeue {v['litequeue']}; {v['cpus']} cpus; "
            f"{args.rounds} round(s){' (--quick)' if args.quick else ''}; load {meta['load_before'][0]:.1f} → "
            f"{meta['load_after'][0]:.1f}; {meta['started']}")
    checks = targets(results)
    lines = ["| target | measured | met |", "|---|---|---|"]
    for name, shown, ok in checks:
        lines.append(f"| {name} | {shown} | {'-' if ok is None else 'yes' if ok else '**no**'} |")
    text = "\n".join([head, "", *report, "### targets", "", *lines, ""])
    print(text)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "latest.md").write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"meta": meta, "results": results, "raw": raw,
             "targets": [{"target": n, "measured": s, "met": ok} for n, s, ok in checks]}, indent=1))
        print(f"raw figures written to {args.json}", file=sys.stderr)
    correct = all(ok is not False for name, _, ok in checks if name.startswith("jobctl and the references"))
    return 0 if correct else 1


if __name__ == "__main__":
    sys.exit(main())
