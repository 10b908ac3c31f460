"""CPU cost of `jobctl stats --watch` (issue 4: under 25% of a core at a 1 s interval on 1M jobs).

    python bench/watch_cpu.py [--path /tmp/jobctl-stats-bench.db] [--seconds 20] [--jobs 1000000]

Builds the file with bench_stats.build if it is missing, runs the live view under a real
pseudo-terminal for the given time, stops it with SIGINT (as Ctrl-C would), and prints the CPU
time the view used as a share of one core.
"""

from __future__ import annotations

import argparse
import os
import pty
import resource
import select
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def measure(path: Path, seconds: float, interval: str = "1s") -> dict:
    pid, fd = pty.fork()
    if pid == 0:  # the child: the live view on the terminal's side of the pty
        os.environ.update(COLUMNS="120", LINES="50")
        os.execv(sys.executable, [sys.executable, "-m", "jobctl", "--db", str(path), "stats", "--watch",
                                  "--interval", interval])
    start, drawn = time.monotonic(), 0
    while time.monotonic() - start < seconds:
        if select.select([fd], [], [], 0.2)[0]:
            try:
                drawn += len(os.read(fd, 65536))
            except OSError:
                break
    os.kill(pid, signal.SIGINT)
    while select.select([fd], [], [], 2)[0]:  # let it restore the terminal and exit
        try:
            if not os.read(fd, 65536):
                break
        except OSError:
            break
    _, status = os.waitpid(pid, 0)
    elapsed = time.monotonic() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime
    return {"exit": os.waitstatus_to_exitcode(status), "bytes_drawn": drawn, "cpu_s": round(cpu, 3),
            "elapsed_s": round(elapsed, 1), "core_share": round(cpu / elapsed, 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--path", type=Path, default=Path("/tmp/jobctl-stats-bench.db"))
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--jobs", type=int, default=1_000_000)
    args = ap.parse_args()
    if not args.path.exists():
        from bench_stats import build

        build(args.path, args.jobs)
    r = measure(args.path, args.seconds)
    print(f"stats --watch --interval 1s: {r['cpu_s']}s of CPU over {r['elapsed_s']}s = "
          f"{100 * r['core_share']:.1f}% of a core (target < 25%); exit {r['exit']}; {r['bytes_drawn']} bytes drawn")


if __name__ == "__main__":
    main()
