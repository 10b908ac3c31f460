"""`jobctl work` of two codes and the hand-written floor worker, job by job, alternated in one run.

    .venv/bin/python bench/work_alternated.py --base FOLDER [--jobs 1000] [--rounds 10]
                                              [--callgrind 400 --repeats 3] [--out result.json]

FOLDER holds the jobctl package to compare with, e.g. an older release:

    mkdir -p /tmp/old && git archive bddc082 jobctl | tar -x -C /tmp/old
    .venv/bin/python bench/work_alternated.py --base /tmp/old

Each round runs, in turn, the old code's `jobctl work --stop-when-empty`, this checkout's, and the
floor worker (bench/cases.py's `floor_worker_run`, mode "sequential": one commit per job, nothing
else), each over the same number of `true` jobs on a fresh file of its own (built by that side's
own code before the clock starts). Each side runs its own code: a launcher puts the side's folder
first on sys.path and drops the editable install's finder (as bench/bench_health.py does).

Figures per job, whole process (start-up included), as medians over the rounds with the spread:
  - CPU time (user + sys) of the worker process and of its children (the handlers, and whatever
    else it waited for), from os.wait4 on the worker, which a loaded machine moves much less than
    wall time, reported beside it.
With --callgrind N (0: skip), the instructions of the worker process alone under
`valgrind --tool=callgrind --trace-children=no` (handlers and helper processes run natively, not
counted), twice per side, over N/4 and over N + N/4 jobs: the difference divided by N is the
instructions per job without start-up, which no neighbour's load moves; --repeats such pairs
per side, alternated, give their median and spread. Python runs ~50x slower
under valgrind: a pair for N = 400 took ~30 s here.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PY = sys.executable

LAUNCHER = """\
import sys
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
sys.path.insert(0, sys.argv.pop(1))
mode = sys.argv.pop(1)
if mode == "fixture":  # DB CONFIG N: a fresh file with N jobs of type noop, by this side's code
    from jobctl.config import load_settings
    from jobctl.queue import Queue
    db, cfg, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with Queue.open(db, load_settings(cfg), create=True) as q:
        q.enqueue_batch([f'{{"type":"noop","payload":{{"i":{i}}}}}' for i in range(n)])
    import jobctl
    print(jobctl.__file__)
    sys.exit(0)
from jobctl.cli import main
sys.argv[0] = "jobctl"
sys.exit(main())
"""


def fresh(tmp: Path, side: str, root: Path, n: int, launcher: Path) -> tuple[str, str]:
    """A fresh folder with a file of n pending `true` jobs; the side's own code builds it (the
    floor's file is this checkout's, as bench/cases.py's floor worker case does)."""
    folder = tmp / side
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(mode=0o700, parents=True)
    db, cfg = folder / "work.db", folder / "work.toml"
    cfg.write_text('[types.noop]\ncommand = ["true"]\n')
    r = subprocess.run([PY, str(launcher), str(root), "fixture", str(db), str(cfg), str(n)],
                       capture_output=True, text=True, check=True)
    where = Path(r.stdout.strip()).resolve().parent
    if where != (root / "jobctl").resolve():
        raise SystemExit(f"{side}: the fixture imported {where}, not {root / 'jobctl'}")
    return str(db), str(cfg)


def command(side: str, root: Path, db: str, cfg: str, launcher: Path) -> list[str]:
    if side == "floor":
        return [PY, str(BENCH / "cases.py"), "floor_worker_run", json.dumps({"db": db, "mode": "sequential"})]
    return [PY, str(launcher), str(root), "cli", "--db", db, "--config", cfg, "work", "--stop-when-empty"]


def completed(db: str, n: int) -> None:
    conn = sqlite3.connect(db)
    done = conn.execute("SELECT count(*) FROM jobs WHERE status = 'completed'").fetchone()[0]
    conn.close()
    if done != n:
        raise SystemExit(f"{db}: {done} of {n} jobs completed")


def timed(cmd: list[str]) -> tuple[float, float]:
    """(CPU seconds of the process and its reaped children, wall seconds)."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:4]} failed ({proc.returncode}): {err.decode(errors='replace')[-500:]}")
    return usage.ru_utime + usage.ru_stime, wall


def instructions(cmd: list[str], out: Path) -> int:
    """Instructions of the process itself under callgrind (children not traced)."""
    for old in out.parent.glob(out.name + ".*"):
        old.unlink()
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--trace-children=no",
                             f"--callgrind-out-file={out}.%p", *cmd],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.communicate()[1]
    # the valgrind process execs into the worker: same pid
    if proc.returncode != 0:
        raise SystemExit(f"callgrind of {cmd[:4]} failed: {err.decode(errors='replace')[-800:]}")
    text = Path(f"{out}.{proc.pid}").read_text()
    m = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
    if m is None:
        raise SystemExit(f"no total in {out}.{proc.pid}")
    return int(m.group(1))


def spread(values: list[float]) -> str:
    return f"{min(values):.3f}–{max(values):.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="a folder holding the jobctl package to compare with")
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--callgrind", type=int, default=0, help="jobs per side under callgrind (0: skip)")
    ap.add_argument("--repeats", type=int, default=3, help="callgrind runs per side")
    ap.add_argument("--tmp", default="/tmp/work_alternated")
    ap.add_argument("--out", help="write every figure to this JSON file")
    args = ap.parse_args()
    tmp = Path(args.tmp)
    tmp.mkdir(parents=True, exist_ok=True)
    launcher = tmp / "launcher.py"
    launcher.write_text(LAUNCHER)
    roots = {"old": Path(args.base).resolve(), "new": ROOT, "floor": ROOT}
    for folder in (roots["old"] / "jobctl", ROOT / "jobctl", BENCH):
        compileall.compile_dir(str(folder), quiet=2)  # as an install would; no side compiles at start
    sides = ("old", "new", "floor")
    n = args.jobs
    result: dict = {"jobs": n, "rounds": args.rounds, "load_before": os.getloadavg(),
                    "cpu": {s: [] for s in sides}, "wall": {s: [] for s in sides}}
    for r in range(args.rounds):
        for side in sides:
            db, cfg = fresh(tmp, side, roots[side], n, launcher)
            cpu, wall = timed(command(side, roots[side], db, cfg, launcher))
            completed(db, n)
            result["cpu"][side].append(cpu / n * 1000)
            result["wall"][side].append(wall / n * 1000)
        print(f"round {r + 1}: " + ", ".join(
            f"{s} {result['cpu'][s][-1]:.3f} ms CPU / {result['wall'][s][-1]:.3f} ms wall" for s in sides),
              flush=True)
    result["load_after"] = os.getloadavg()
    if args.callgrind:
        small = max(args.callgrind // 4, 1)
        result["instructions"] = {s: [] for s in sides}
        for r in range(args.repeats):
            for side in sides:  # alternated too, though nothing but the code moves these
                counts = {}
                for k in (small, small + args.callgrind):
                    db, cfg = fresh(tmp, side, roots[side], k, launcher)
                    counts[k] = instructions(command(side, roots[side], db, cfg, launcher), tmp / f"cg-{side}")
                    completed(db, k)
                per_job = (counts[small + args.callgrind] - counts[small]) / args.callgrind
                result["instructions"][side].append(per_job)
                print(f"callgrind {r + 1}, {side}: {per_job:,.0f} instructions per job ({counts})", flush=True)

    print(f"\nper job, {args.rounds} rounds of {n:,} jobs, old/new/floor alternated; "
          f"load {result['load_before'][0]:.2f} before, {result['load_after'][0]:.2f} after")
    med = {k: {s: statistics.median(result[k][s]) for s in sides} for k in ("cpu", "wall")}
    for k, label in (("cpu", "CPU (user+sys, worker + children), ms"), ("wall", "wall, ms")):
        print(f"{label}: " + "; ".join(f"{s} {med[k][s]:.3f} ({spread(result[k][s])})" for s in sides))
        paired = [result[k]["new"][i] / result[k]["old"][i] for i in range(args.rounds)]
        print(f"  new ÷ old {med[k]['new'] / med[k]['old']:.3f} (round by round {statistics.median(paired):.3f}, "
              f"{min(paired):.3f}–{max(paired):.3f}); floor ÷ old {med[k]['floor'] / med[k]['old'] * 100:.1f}%, "
              f"floor ÷ new {med[k]['floor'] / med[k]['new'] * 100:.1f}% (the target's share: ≥ 90%)")
        for s in ("old", "new"):
            share = [result[k]["floor"][i] / result[k][s][i] for i in range(args.rounds)]
            print(f"  floor ÷ {s} round by round: median {statistics.median(share) * 100:.1f}%, "
                  f"{min(share) * 100:.1f}–{max(share) * 100:.1f}%")
    if "instructions" in result:
        ins = {s: statistics.median(result["instructions"][s]) for s in sides}
        print("instructions per job (worker process alone, start-up taken out), median of "
              f"{args.repeats}: " + "; ".join(
                  f"{s} {ins[s]:,.0f} ({min(result['instructions'][s]):,.0f}–{max(result['instructions'][s]):,.0f})"
                  for s in sides))
        print(f"  new ÷ old {ins['new'] / ins['old']:.3f}; floor ÷ old {ins['floor'] / ins['old'] * 100:.1f}%, "
              f"floor ÷ new {ins['floor'] / ins['new'] * 100:.1f}%")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
