"""What keeping handlers' output costs the worker.

    python bench/logs.py [--jobs 300] [--rss-jobs 1000] [--handler sh|python]

1. Throughput: `jobctl work --stop-when-empty` over N jobs whose handler prints 1 MiB of text lines
   (kept by the worker: the first 64 KiB and the last 1 MiB of each run go to the database), against
   the same handler sending its output to /dev/null itself. Both run through `sh -c`, so they differ
   only in where the output goes. Required: at least 80% of the /dev/null throughput. The handler
   is `head -c 1MiB FILE` (the cheapest handler there is: ~7 ms a run here, so the cost of keeping
   the output weighs most), or with --handler python a Python script that writes the same bytes
   (~25 ms a run, what most handlers cost at least).
2. Memory: the worker's RSS (VmRSS) over --rss-jobs such runs, sampled every 0.2 s: it must stay flat.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from worker_rss import completed, rss_kib  # noqa: E402

MIB = 1024 * 1024


def run(tmp: Path, name: str, shell: str, n: int, sample: bool = False) -> tuple[float, list[tuple[int, int]], int]:
    """(seconds for n jobs, RSS samples, database size after) for one handler."""
    db, config = tmp / f"{name}.db", tmp / f"{name}.toml"
    config.write_text(f"[types.print]\ncommand = [\"sh\", \"-c\", {json.dumps(shell)}]\n")
    base = [sys.executable, "-m", "jobctl", "--db", str(db), "--config", str(config)]
    lines = "".join(json.dumps({"type": "print", "payload": {"i": i}}) + "\n" for i in range(n))
    subprocess.run([*base, "enqueue", "--batch", "-"], input=lines, text=True, check=True, capture_output=True)
    start = time.perf_counter()
    worker = subprocess.Popen([*base, "work", "--stop-when-empty"], stderr=subprocess.DEVNULL)
    samples: list[tuple[int, int]] = []
    while worker.poll() is None:
        if sample:
            rss = rss_kib(worker.pid)
            if rss is not None:
                samples.append((completed(db), rss))
            time.sleep(0.2)
        else:
            time.sleep(0.01)
    took = time.perf_counter() - start
    done = completed(db)
    assert done == n, f"{name}: {done} of {n} completed"
    conn = sqlite3.connect(db)
    kept = conn.execute("SELECT count(*), sum(length(head) + length(tail)) FROM job_logs").fetchone()
    conn.close()
    return took, samples, kept[1] or 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--rss-jobs", type=int, default=1000)
    ap.add_argument("--handler", choices=("sh", "python"), default="sh")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="jobctl-logs-") as tmp_name:
        tmp = Path(tmp_name)
        text = tmp / "mib.txt"
        line = b"a line of a handler's output, as a chatty handler would print it ...........\n"  # 80 bytes
        text.write_bytes((line * (MIB // len(line) + 1))[:MIB])
        cmd = f"head -c {MIB} {text}"
        if args.handler == "python":
            cmd = (f"{sys.executable} -S -c 'import sys; "
                   f"sys.stdout.buffer.write(open(\"{text}\", \"rb\").read())'")
        printing = cmd
        quiet = f"{cmd} >/dev/null 2>&1"
        results = {}
        for name, shell in (("devnull", quiet), ("kept", printing), ("devnull2", quiet), ("kept2", printing)):
            took, _, kept = run(tmp, name, shell, args.jobs)
            results[name] = (took, kept)
            print(f"{name:9} {args.jobs} jobs in {took:.2f} s: {args.jobs / took:.1f} jobs/s; "
                  f"{kept / MIB:.1f} MiB of output kept in the database")
        null = args.jobs / min(results["devnull"][0], results["devnull2"][0])
        kept = args.jobs / min(results["kept"][0], results["kept2"][0])
        print(f"output kept: {kept:.1f} jobs/s = {kept / null:.0%} of {null:.1f} jobs/s with output to /dev/null "
              f"(best of two runs each; required: at least 80%)")
        _, samples, _ = run(tmp, "rss", printing, args.rss_jobs, sample=True)
    n = args.rss_jobs
    early = next((r for c, r in samples if c >= n * 0.05), samples[0][1])
    late = samples[-1][1]
    marks = [next((r for c, r in samples if c >= n * q), late) for q in (0.25, 0.5, 0.75)]
    print(f"worker RSS over {n} runs of 1 MiB each: {early / 1024:.1f} MiB after 5%, "
          + ", ".join(f"{r / 1024:.1f}" for r in marks) + f" MiB at 25/50/75%, {late / 1024:.1f} MiB at the end "
          f"({(late - early) / 1024:+.1f} MiB), peak {max(r for _, r in samples) / 1024:.1f} MiB")


if __name__ == "__main__":
    main()
