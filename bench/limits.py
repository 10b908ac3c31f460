"""Admission control measured: rate accuracy under real workers, claim latency and stats time
with limits against the same without them, side by side in one run.

    .venv/bin/python bench/limits.py                 # all three (a few minutes)
    .venv/bin/python bench/limits.py rate            # only the rate accuracy
    .venv/bin/python bench/limits.py latency stats   # the 1M-job figures
    .venv/bin/python bench/limits.py --quick         # small sizes: a smoke run

rate:    4 `jobctl work` processes flat out on one type limited to R starts per window W; every
         start is read back from the database: the most starts in any window of W (must be <= R)
         and the achieved rate as a share of R per W (the target is at least 90%).
latency: claim p99 on a file of 1,000,000 jobs (100,000 ready, spread over 10 limited types and
         one free type), through Queue.claim with the limits of a config, against the same claims
         with no limits configured. Each claim is rolled back, so every sample sees the same file.
stats:   `jobctl stats --json` on that file, with and without limits configured (median of runs).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))

TYPES = [f"api{i}" for i in range(10)]


def jobctl(*args, db, config=None, **kw):
    argv = [sys.executable, "-m", "jobctl", "--db", str(db), *(["--config", str(config)] if config else []), *args]
    return subprocess.run(argv, capture_output=True, text=True, **kw)


# -- rate accuracy ------------------------------------------------------------------------------


def max_in_window(starts: list[int], window_ms: int) -> int:
    """The most starts that any window of `window_ms` holds (half-open, as the claim counts)."""
    starts = sorted(starts)
    best, lo = 0, 0
    for hi, s in enumerate(starts):
        while starts[lo] <= s - window_ms:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def bench_rate(rate: int, window_s: float, seconds: float, workers: int = 4) -> dict:
    with tempfile.TemporaryDirectory() as d:
        db, cfg = Path(d) / "rate.db", Path(d) / "jobctl.toml"
        cfg.write_text(f'[types.api]\ncommand = ["true"]\nrate_limit = [{rate}, "{window_s}s"]\n'
                       f'[worker]\npoll = "1s"\n')
        n = int(rate * seconds / window_s * 1.5) + rate
        lines = "".join(json.dumps({"type": "api", "payload": {"i": i}}) + "\n" for i in range(n))
        assert jobctl("enqueue", "--batch", "-", db=db, config=cfg, input=lines).returncode == 0
        procs = [subprocess.Popen([sys.executable, "-m", "jobctl", "--db", str(db), "--config", str(cfg), "work",
                                   "--max-time", f"{seconds}s"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for _ in range(workers)]
        for p in procs:
            p.wait(timeout=seconds + 120)
        conn = sqlite3.connect(db)
        starts = [r[0] for r in conn.execute(
            "SELECT started_at FROM runs WHERE type = 'api' UNION ALL "
            "SELECT started_at FROM history_log WHERE type = 'api' AND outcome IS NOT NULL UNION ALL "  # (not filed yet)
            "SELECT claimed_at FROM jobs WHERE status IN ('running', 'cancel_requested')")]
        conn.close()
    window_ms = int(window_s * 1000)
    first = min(starts)
    # whole windows from the first start, so the ramp-up of the processes is not counted against it
    span = max(starts) - first
    windows = max(int(span // window_ms), 1)
    in_span = sum(1 for s in starts if s < first + windows * window_ms)
    return {"rate": rate, "window_s": window_s, "workers": workers, "starts": len(starts),
            "max_in_any_window": max_in_window(starts, window_ms), "windows": windows,
            "achieved_share": in_span / (rate * windows)}


# -- the 1M-job file ----------------------------------------------------------------------------


def build_file(path: Path, total: int, ready: int) -> None:
    """`total` jobs: `ready` pending over TYPES and "free", the rest completed (untimed)."""
    from jobctl.engines.sqlite import SQLiteEngine

    SQLiteEngine.open(path, create=True).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA synchronous = OFF")
    now = int(time.time() * 1000)
    h = hashlib.sha256(b"{}").hexdigest()
    kinds = [*TYPES, "free"]

    def rows():
        for i in range(total):
            status = "pending" if i < ready else "completed"
            yield ("default", kinds[i % len(kinds)], "{}", h, 10, status, 1 if status == "completed" else 0, 3,
                   "exponential", 600_000, now - 1000 - i, now, now, now if status == "completed" else None)

    conn.executemany(
        "INSERT INTO jobs (queue, type, payload, payload_hash, priority, status, attempts, max_attempts, backoff, "
        "timeout_ms, run_at, created_at, updated_at, finished_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows())
    from jobctl.engines.schema import COUNT_INSERTED  # (as jobctl counts its own inserts: no trigger does)

    conn.execute(COUNT_INSERTED, (0, 1 << 62))
    conn.commit()
    conn.execute("ANALYZE")
    conn.close()


def settings(limited: bool):
    from jobctl.config import Settings, TypeConfig

    types = {t: TypeConfig(t, command=["true"], rate_limit=(1000, 60.0) if limited else None,
                           concurrency_limit=50 if limited else None) for t in TYPES}
    types["free"] = TypeConfig("free", command=["true"])
    return Settings(types=types)


def claim_latencies(path: Path, limited: bool, n: int) -> list[float]:
    from jobctl.queue import Queue

    q = Queue.open(path, settings(limited))
    types = [*TYPES, "free"]
    engine = q.engine
    out = []
    try:
        for _ in range(n):
            request = q._claim_request("bench", None, types, None)
            t = time.perf_counter()
            engine.conn.execute("BEGIN IMMEDIATE")
            engine._claim(engine.conn, request, engine.now())
            out.append(time.perf_counter() - t)
            engine.conn.execute("ROLLBACK")  # every sample sees the same file
    finally:
        q.close()
    return out


def p99(values: list[float]) -> float:
    values = sorted(values)
    return values[int(len(values) * 0.99) - 1]


def bench_latency(path: Path, n: int, rounds: int) -> dict:
    plain, limited = [], []
    for _ in range(rounds):  # alternate, so a noisy moment hurts both alike
        plain += claim_latencies(path, False, n)
        limited += claim_latencies(path, True, n)
    return {"median_ms_without": statistics.median(plain) * 1000, "median_ms_with": statistics.median(limited) * 1000,
            "p99_ms_without": p99(plain) * 1000, "p99_ms_with": p99(limited) * 1000,
            "ratio": p99(limited) / p99(plain)}


def bench_stats(path: Path, rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        cfg = Path(d) / "limits.toml"
        cfg.write_text("".join(f'[types.{t}]\ncommand = ["true"]\nrate_limit = [1000, "60s"]\nconcurrency_limit = 50\n'
                               for t in TYPES))
        plain, limited = [], []
        for _ in range(rounds):
            for out, config in ((plain, None), (limited, cfg)):
                t = time.perf_counter()
                r = jobctl("stats", "--json", db=path, config=config)
                out.append(time.perf_counter() - t)
                assert r.returncode == 0, r.stderr
    return {"median_s_without": statistics.median(plain), "median_s_with": statistics.median(limited),
            "ratio": statistics.median(limited) / statistics.median(plain)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="*", default=["rate", "latency", "stats"])
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    results = {}
    if "rate" in a.what:
        results["rate"] = bench_rate(rate=20, window_s=2, seconds=8 if a.quick else 30)
        print("rate", json.dumps(results["rate"]), flush=True)
    if {"latency", "stats"} & set(a.what):
        total, ready = (100_000, 10_000) if a.quick else (1_000_000, 100_000)
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "big.db"
            build_file(path, total, ready)
            if "latency" in a.what:
                results["latency"] = bench_latency(path, 200 if a.quick else 1000, 2 if a.quick else 3)
                print("latency", json.dumps(results["latency"]), flush=True)
            if "stats" in a.what:
                results["stats"] = bench_stats(path, 3 if a.quick else 5)
                print("stats", json.dumps(results["stats"]), flush=True)


if __name__ == "__main__":
    main()
