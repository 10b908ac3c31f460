"""The PostgreSQL worker's step of two codes and the hand-written loop, alternated in one run.

    .venv/bin/python bench/postgres_alternated.py --base FOLDER [--procs 4] [--rounds 12] [--jobs 5000]

FOLDER holds the jobctl package to compare with, e.g. an older commit:

    mkdir -p /tmp/old && git archive dde1af7 jobctl | tar -x -C /tmp/old
    .venv/bin/python bench/postgres_alternated.py --base /tmp/old

Each round runs bench/cases.py's claim case three times, in a rotating order: the hand-written
`SKIP LOCKED` loop, this checkout's worker path (`q.complete_and_claim()`) and the old code's,
each with `--procs` fresh worker processes on a fresh schema of its own (the old code's side with
FOLDER first on PYTHONPATH, so it creates and uses its own schema version). Prints each figure,
then the medians and the ratios. Every job is counted: a duplicate or a loss stops the run.
The server is JOBCTL_BENCH_POSTGRES_URL (default postgresql://postgres@127.0.0.1:5432/test).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from postgres import DEFAULT_URL, fresh_schema  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, metavar="FOLDER", help="a folder holding the jobctl package to compare with")
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--jobs", type=int, default=5000)
    args = ap.parse_args(argv)
    base_url = os.environ.get("JOBCTL_BENCH_POSTGRES_URL", DEFAULT_URL)
    sides = [("reference", None, "pg-raw"), ("this", None, "jobctl-pipelined"),
             ("base", str(Path(args.base).resolve()), "jobctl-pipelined")]
    figures: dict[str, list[float]] = {label: [] for label, _, _ in sides}
    for rnd in range(args.rounds):
        shift = rnd % len(sides)
        for label, path, impl in sides[shift:] + sides[:shift]:
            env = dict(os.environ)
            if path is not None:
                env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
            with fresh_schema(base_url) as url, tempfile.TemporaryDirectory() as workdir:
                case = {"db": url, "dir": workdir, "n": args.jobs, "procs": args.procs, "impl": impl}
                r = subprocess.run([sys.executable, str(BENCH / "cases.py"), "claim", json.dumps(case)],
                                   capture_output=True, cwd=workdir, env=env, timeout=1800)
            lines = r.stdout.decode(errors="replace").strip().splitlines()
            if r.returncode != 0 or not lines:
                raise SystemExit(f"{label}: exit {r.returncode}: {r.stderr.decode(errors='replace')[-500:]}")
            fig = json.loads(lines[-1])
            if fig["duplicates"] or fig["missing"]:
                raise SystemExit(f"{label}: {fig['duplicates']} duplicates, {fig['missing']} missing")
            figures[label].append(fig["value"])
            print(f"[{rnd + 1}/{args.rounds}] {label}: {fig['value']:,.0f} jobs/s", file=sys.stderr, flush=True)
    median = {label: statistics.median(v) for label, v in figures.items()}
    for label, values in figures.items():
        print(f"{label:9} {median[label]:8,.0f} jobs/s ({min(values):,.0f}–{max(values):,.0f})")
    print(f"this ÷ reference {median['this'] / median['reference']:.0%}, base ÷ reference "
          f"{median['base'] / median['reference']:.0%}, this ÷ base {median['this'] / median['base']:.3f} "
          f"({args.procs} processes, {args.rounds} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
