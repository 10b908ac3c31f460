"""Admission control with several real `jobctl work` processes at once: each handler logs when it
starts and ends, so the test can count overlaps (concurrency groups, cost units) and starts per
window (rate limits); the claims' own times come from the database."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from bench.limits import max_in_window  # the bench's check of the same rule
from tests.reliability.util import JOBCTL, rows

LOG = 'echo "start $JOBCTL_JOB_TYPE $JOBCTL_JOB_ID $(date +%s.%N)" >> {log}; sleep {secs}; ' \
      'echo "end $JOBCTL_JOB_TYPE $JOBCTL_JOB_ID $(date +%s.%N)" >> {log}'


def max_overlap(intervals: list[tuple[float, float, int]]) -> int:
    """The most cost units running at one moment, from (start, end, units)."""
    points = sorted([(s, u) for s, _, u in intervals] + [(e, -u) for _, e, u in intervals], key=lambda p: (p[0], p[1]))
    best = cur = 0
    for _, d in points:
        cur += d
        best = max(best, cur)
    return best


def intervals(log_path, type_) -> list[tuple[float, float]]:
    starts, ends = {}, {}
    for line in log_path.read_text().splitlines():
        kind, t, job, at = line.split()
        if t == type_:
            (starts if kind == "start" else ends)[job] = float(at)
    return [(starts[j], ends[j]) for j in starts if j in ends]


@pytest.mark.slow
def test_limits_hold_across_four_workers(any_db, tmp_path):
    db, cfg, log = any_db, tmp_path / "jobctl.toml", tmp_path / "handlers.log"
    sh = lambda secs: json.dumps(["/bin/sh", "-c", LOG.format(log=log, secs=secs)])  # noqa: E731
    cfg.write_text(f"""
[types.api]
command = {sh(0.05)}
rate_limit = [4, "1s"]

[types.render]
command = {sh(0.2)}
concurrency_group = "gpu"
concurrency_limit = 3
cost_units = 2

[types.thumb]
command = {sh(0.2)}
concurrency_group = "gpu"
concurrency_limit = 5

[types.free]
command = {sh(0.01)}

[worker]
poll = "1s"
concurrency = 3
""")
    lines = [json.dumps({"type": t, "payload": {"i": i}, "priority": "high" if t == "api" else "normal"})
             for i in range(16) for t in ("api", "render", "thumb", "free")]
    r = subprocess.run([*JOBCTL, "--db", str(db), "--config", str(cfg), "enqueue", "--batch", "-"],
                       input="\n".join(lines), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    t0 = time.monotonic()
    procs = [subprocess.Popen([*JOBCTL, "--db", str(db), "--config", str(cfg), "work", "--stop-when-empty",
                               "--max-time", "60s"], stderr=subprocess.PIPE, text=True) for _ in range(4)]
    # --stop-when-empty: a worker with only held jobs left is not "empty": it sleeps until admitted
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errs
    elapsed = time.monotonic() - t0
    statuses = {r["status"]: r["n"] for r in rows(db, "SELECT status, count(*) AS n FROM jobs GROUP BY status")}
    api_starts = [r["started_at"] for r in rows(db, "SELECT started_at FROM runs WHERE type = 'api'")]
    free_done = [r["ended_at"] for r in rows(db, "SELECT ended_at FROM runs WHERE type = 'free'")]
    assert statuses == {"completed": 64}, (statuses, errs)
    # rate: never more than 4 claims of api in any second, and close to the limit's pace
    assert len(api_starts) == 16 and max_in_window(api_starts, 1000) <= 4
    assert (max(api_starts) - min(api_starts)) / 1000 >= 3.0  # 16 starts at 4/s need 3 full windows
    # concurrency: never more than 3 units of the gpu group at once (render costs 2, thumb 1)
    gpu = [(s, e, 2) for s, e in intervals(log, "render")] + [(s, e, 1) for s, e in intervals(log, "thumb")]
    assert len(gpu) == 32 and max_overlap(gpu) <= 3
    # no head-of-line blocking: the free jobs did not wait for the throttled api ones
    assert max(free_done) - min(api_starts) < 3000, "free jobs waited behind the rate-limited type"
    assert elapsed < 60
