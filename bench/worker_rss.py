"""Worker memory over many jobs (issue 3: RSS must stay flat over 10,000 jobs).

    python bench/worker_rss.py [--jobs 10000]

Enqueues N jobs whose handler is `true` into a fresh database, runs `jobctl work --stop-when-empty`,
samples the worker's resident memory (VmRSS from /proc) every 0.2 s, and prints it after the
first 5% of the jobs and at the end.
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


def rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def completed(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT count(*) FROM jobs WHERE status = 'completed'").fetchone()[0]
    finally:
        conn.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    n = ap.parse_args().jobs
    with tempfile.TemporaryDirectory(prefix="jobctl-rss-") as tmp:
        db, config = Path(tmp) / "q.db", Path(tmp) / "jobctl.toml"
        config.write_text('[types.noop]\ncommand = ["true"]\n')
        base = [sys.executable, "-m", "jobctl", "--db", str(db), "--config", str(config)]
        lines = "".join(json.dumps({"type": "noop", "payload": {"i": i}}) + "\n" for i in range(n))
        subprocess.run([*base, "enqueue", "--batch", "-"], input=lines, text=True, check=True, capture_output=True)
        worker = subprocess.Popen([*base, "work", "--stop-when-empty"], stderr=subprocess.DEVNULL)
        samples: list[tuple[int, int]] = []  # (jobs completed, RSS KiB)
        while worker.poll() is None:
            rss = rss_kib(worker.pid)
            if rss is not None:
                samples.append((completed(db), rss))
            time.sleep(0.2)
        done = completed(db)
    early = next((r for c, r in samples if c >= n * 0.05), samples[0][1])
    late = samples[-1][1]
    marks = [next((r for c, r in samples if c >= n * q), late) for q in (0.25, 0.5, 0.75)]
    print("RSS at 25%, 50%, 75% of the jobs: " + ", ".join(f"{r / 1024:.1f} MiB" for r in marks))
    print(f"jobctl work, {done} of {n} jobs completed: RSS {early / 1024:.1f} MiB after the first 5%, "
          f"{late / 1024:.1f} MiB at the end ({(late - early) / 1024:+.1f} MiB), peak "
          f"{max(r for _, r in samples) / 1024:.1f} MiB; worker exit {worker.returncode}")


if __name__ == "__main__":
    main()
