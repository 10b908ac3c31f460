"""A reaction is never lost and never doubled: workers are killed with SIGKILL at random moments
while their jobs get buried (a handler that exits 1, one run allowed), then restarted; jobs of the
killed workers are buried by lease recovery instead. At the end every buried job has exactly one
reaction job, because the reaction is inserted in the same transaction as the burial."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from .util import JOBCTL, integrity, jobctl, rows

JOBS, WORKERS = 400, 3


def start(db, config: Path, name: str, log: Path, *args) -> subprocess.Popen:
    return subprocess.Popen([*JOBCTL, "--db", str(db), "--config", str(config), "work", "--worker", name,
                             "--concurrency", "2", *args],
                            stdout=subprocess.DEVNULL, stderr=open(log, "ab"))


@pytest.mark.slow
@pytest.mark.shared  # outcomes only: runs beside other tests
def test_every_buried_job_has_exactly_one_reaction_despite_kill_9(any_db, tmp_path):
    db = any_db
    config = tmp_path / "jobctl.toml"
    config.write_text(
        '[types.flaky]\ncommand = ["/bin/sh", "-c", "sleep 0.0$(($$ % 5)); exit 1"]\nmax_attempts = 1\n'
        'on_buried = "alert"\n\n'
        '[types.alert]\nqueue = "alerts"\n\n'  # no command: the workers here never run the reactions
        '[worker]\nlease = "1s"\nrecover_every = "300ms"\npoll = "100ms"\nkill_grace = "1s"\n')
    lines = "".join(json.dumps({"type": "flaky", "payload": {"n": i}}) + "\n" for i in range(JOBS))
    r = jobctl("--config", config, "enqueue", "--batch", "-", db=db, input=lines)
    assert r.exit_code == 0, r.output
    ids = [int(x) for x in r.stdout.split()]
    log = tmp_path / "workers.log"
    rng = random.Random(int(os.environ.get("JOBCTL_TEST_SEED", "0")) or None)
    procs = [start(db, config, f"w{i}", log) for i in range(WORKERS)]
    kills = 0
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(0.05, 0.6))
            i = rng.randrange(WORKERS)
            os.kill(procs[i].pid, signal.SIGKILL)
            procs[i].wait()
            kills += 1
            procs[i] = start(db, config, f"w{i}-{kills}", log)
            left = rows(db, "SELECT count(*) AS n FROM jobs WHERE type = 'flaky' AND status != 'buried'")[0]["n"]
            if left == 0:
                break
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    assert kills >= 5
    # A last worker, restarted until the jobs of the killed ones are recovered (buried) too.
    deadline = time.monotonic() + 120
    while rows(db, "SELECT count(*) AS n FROM jobs WHERE type = 'flaky' AND status != 'buried'")[0]["n"]:
        assert time.monotonic() < deadline, "jobs were left unfinished"
        p = start(db, config, f"drain-{time.monotonic_ns()}", log, "--stop-when-empty")
        p.wait(timeout=120)
        time.sleep(0.3)

    buried = {r["id"] for r in rows(db, "SELECT id FROM jobs WHERE type = 'flaky' AND status = 'buried'")}
    assert buried == set(ids)
    reactions = rows(db, "SELECT payload, queue, status FROM jobs WHERE type = 'alert'")
    per_job = Counter(json.loads(r["payload"])["job"]["id"] for r in reactions)
    assert set(per_job) == buried, "a buried job has no reaction"
    assert set(per_job.values()) == {1}, "a buried job has more than one reaction"
    assert {json.loads(r["payload"])["job"]["status"] for r in reactions} == {"buried"}
    assert {(r["queue"], r["status"]) for r in reactions} == {("alerts", "pending")}
    lost = rows(db, "SELECT count(*) AS n FROM runs WHERE outcome = 'lost'")[0]["n"]
    print(f"{kills} kills, {lost} jobs buried by lease recovery")
    assert integrity(db) == "ok"
