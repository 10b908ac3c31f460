"""The benchmark harness must not rot: run it at toy sizes (a smoke run, not a measurement)."""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

# Smoke runs at toy sizes: the figures they print are checked against no bound, only that the
# harness runs and every job ran once (the scripts exit 1 on a duplicate or a missing job, not
# on a slow figure), so they run beside other tests.
pytestmark = pytest.mark.shared

RUN = [sys.executable, str(ROOT / "bench" / "run.py"), "--quick", "--rounds", "1", "--enqueue-calls", "2",
       "--batch-jobs", "300", "--claim-jobs", "60", "--work-jobs", "5", "--latency-sizes", "200,400",
       "--latency-claims", "20", "--stats-jobs", "2000"]
PEER_MODULES = ("huey", "persistqueue", "litequeue")


def run_bench(tmp_path, *args):
    out = tmp_path / "bench.json"
    proc = subprocess.run([*RUN, "--out", str(tmp_path), "--json", str(out), *args], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert (tmp_path / "latest.md").read_text().count("### ") >= 2, proc.stdout
    return json.loads(out.read_text())


@pytest.mark.slow
def test_jobctl_workloads_run_and_process_every_job_once(tmp_path):
    report = run_bench(tmp_path, "--no-peers")
    results = report["results"]
    assert set(results) == {"enqueue", "batch", "claim", "work", "latency", "stats"}
    for workload in ("enqueue", "batch", "claim", "latency"):
        rows = [r for r in results[workload] if r["role"] in ("ref", "jobctl")]
        assert rows, workload
        for r in rows:
            assert not r["errors"], (workload, r)
            assert r["median"] is not None and r["median"] > 0, (workload, r)
            assert (r["duplicates"], r["missing"]) == (0, 0), (workload, r)
            assert r["ratio"] is not None, (workload, r)
    for r in results["work"] + results["stats"]:  # measured once those commands exist, else skipped
        assert not r["errors"], r
    floors = [r for r in results["work"] if r["role"] == "floor"]
    assert len(floors) == 2
    for r in floors:  # the hand-written floor workers run every job once too
        assert r["median"] > 0 and (r["duplicates"], r["missing"]) == (0, 0), r
    assert any(t["target"].startswith("enqueue ≤ 1.2×") for t in report["targets"])


@pytest.mark.slow
def test_peer_workloads_run(tmp_path):
    missing = []
    for module in PEER_MODULES:
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        pytest.skip(f"the bench extra's peers are not installed ({', '.join(missing)}); "
                    "pip install -e '.[bench]' to run them")
    results = run_bench(tmp_path, "batch", "claim")["results"]
    peers = [r for w in ("batch", "claim") for r in results[w] if r["role"] == "peer"]
    assert len(peers) == 3 + 2 * 3
    for r in peers:
        assert not r["errors"] and not r["skipped"], r
        assert r["median"] > 0, r


@pytest.mark.slow
def test_postgres_workloads_run_and_process_every_job_once(tmp_path, pg_base):
    out = tmp_path / "postgres.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "postgres.py"), "--quick", "--claim-jobs", "40", "--enqueue-calls", "2",
         "--wakeup-tries", "2", "--stats-jobs", "500", "--out", str(tmp_path), "--json", str(out)],
        env={**os.environ, "JOBCTL_BENCH_POSTGRES_URL": pg_base}, capture_output=True, text=True,
        timeout=600)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert (tmp_path / "postgres.md").read_text().count("### ") == 5, proc.stdout
    report = json.loads(out.read_text())
    rows = report["results"]["claim"]["rows"]
    assert len(rows) == 9  # 3 implementations x 1, 2 and 4 processes
    for r in rows:
        assert not r["errors"] and r["median"] > 0 and r["ratio"] is not None, r
        assert (r["duplicates"], r["missing"]) == (0, 0), r
    for workload in ("enqueue", "wakeup", "stats"):
        result = report["results"][workload]
        assert result["postgres"]["median"] > 0 and result["sqlite"]["median"] > 0, (workload, result)
    targets = {t["target"] for t in report["targets"]}
    assert {"enqueue on PostgreSQL ≤ 1.6× SQLite", "wake-up on PostgreSQL: median < 100 ms"} <= targets


@pytest.mark.slow
@pytest.mark.shared  # (outcomes only: every job once, a ratio printed; no time bound)
def test_postgres_alternated_compares_two_codes_and_counts_every_job(tmp_path, pg_base):
    """The A/B of the worker's step, here with this checkout as its own base: both sides and the
    hand-written loop run, every job once (the script stops on a duplicate or a loss)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "postgres_alternated.py"), "--base", str(ROOT), "--procs", "2",
         "--rounds", "1", "--jobs", "40"],
        env={**os.environ, "JOBCTL_BENCH_POSTGRES_URL": pg_base}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "this ÷ reference" in proc.stdout and "(2 processes, 1 rounds)" in proc.stdout, proc.stdout


@pytest.mark.slow
def test_batch_memory_bench_runs(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "batch_memory.py"), "--lines", "3000",
                           "--speed-jobs", "500", "--rounds", "1"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    assert "3,000 lines:" in proc.stdout and "exit 0, 3,000 inserted" in proc.stdout, proc.stdout
    # jobctl's rate against both references: executemany into jobctl's table, and into a minimal one
    assert "× ref" in proc.stdout and "× minimal" in proc.stdout and "\n  minimal:" in proc.stdout, proc.stdout
