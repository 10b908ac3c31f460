"""The worker on a full disk and an idle worker's wake-ups, with real processes (slow: seconds each)."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from .test_worker_torture import wait_for
from .util import hold, integrity, jobs, release


@pytest.fixture
def tmpfs(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(mnt)]).returncode:
        pytest.skip("cannot mount a tmpfs here (not root?)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill_command(filler):
    return ["/bin/sh", "-c",
            f'echo "$JOBCTL_JOB_ID $JOBCTL_ATTEMPT $$" >> "$RUNLOG"; dd if=/dev/zero of={filler} bs=4k 2>/dev/null; exit 0']


@pytest.mark.slow
def test_a_worker_stuck_on_a_full_disk_leaves_at_the_third_signal_and_names_the_job(env, tmpfs):
    e = env(command=fill_command(tmpfs / "filler"), lease="1h")
    e.db = tmpfs / "jobs.db"
    [job_id] = e.enqueue(1)
    e.env["JOBCTL_BUSY_TIMEOUT"] = "300ms"
    reader = hold(e.db, "read", 60)  # the worker's checkpoint cannot give the WAL's space back
    try:
        w = e.worker("full", "--stop-when-empty", "--grace", "1h")
        wait_for(lambda: "full disk" in w.log.read_text(), what="the worker to meet the full disk")
        for _ in range(3):
            w.send_signal(signal.SIGTERM)
            time.sleep(0.3)
        started = time.monotonic()
        try:
            code = w.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pytest.fail("the worker ignored three signals:\n" + w.log.read_text())
        assert time.monotonic() - started < 15
        log = w.log.read_text()
        assert code == 8, log
        assert "third signal" in log, log
        assert f"unrecorded job {job_id}" in log and "(completed)" in log, log
        assert "Traceback" not in log
    finally:
        release(reader)
    assert jobs(e.db)[job_id]["status"] == "running"  # left for its lease to recover


@pytest.mark.slow
@pytest.mark.shared  # outcomes only: runs beside other tests
def test_on_a_full_disk_the_worker_checkpoints_its_own_wal_and_carries_on(env, tmpfs):
    e = env(command=fill_command(tmpfs / "filler"), lease="1h")
    e.db = tmpfs / "jobs.db"
    [job_id] = e.enqueue(1)
    w = e.worker("full", "--stop-when-empty")
    assert w.wait(timeout=60) == 0, w.log.read_text()
    assert (tmpfs / "filler").exists()  # nobody freed any space: the truncated WAL gave it back
    job = jobs(e.db)[job_id]
    assert job["status"] == "completed" and job["attempts"] == 1
    assert integrity(e.db) == "ok"


@pytest.mark.slow
def test_an_idle_worker_starts_a_new_job_well_before_its_poll_interval(env):
    e = env()
    w = e.worker("idle", "--poll", "30s")
    time.sleep(8)  # idle long enough for its claim delay to have grown to several seconds
    enqueued = time.monotonic()
    [job_id] = e.enqueue(1)
    wait_for(lambda: job_id in e.runs(), timeout=30, what="the job to run")
    latency = time.monotonic() - enqueued
    w.send_signal(signal.SIGTERM)
    assert w.wait(timeout=30) == 0
    assert latency < 2.0, f"the job waited {latency:.1f}s"
    log = w.log.read_text()
    assert "Traceback" not in log
