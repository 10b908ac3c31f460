"""Issue 6, item 17, for the worker: handler timeouts are measured on the monotonic clock, so a
jump of the wall clock (an hour forward, or back) neither kills a handler early nor lets one
overrun its timeout.

The worker runs as a real process whose wall clock (time.time and time.time_ns, which the
database's timestamps use)
jumps by an hour half a second after it starts, while the handler is running; the monotonic clock
and the handler's own time are untouched, as in a real clock step (NTP, a VM resumed).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from .util import JOBCTL, jobctl, show_json

# Outcomes only: each check has room many times what a busy neighbour can take (a handler's
# timeout 10 s against its 1.5 s, a 30-minute lease against seconds, deadlines of 20 s and more),
# and a lease that ran out sooner than planned is one the tests allow for.
pytestmark = pytest.mark.shared

SHIFTED_WORKER = textwrap.dedent("""
    import sys, time
    real_time, real_ns, started = time.time, time.time_ns, time.monotonic()
    jump = float(sys.argv[1])
    shift = lambda: jump if time.monotonic() - started > 0.5 else 0.0  # noqa: E731
    time.time = lambda: real_time() + shift()
    time.time_ns = lambda: real_ns() + int(shift() * 1e9)  # the SQLite engine's clock
    from jobctl.cli import main
    sys.argv = ["jobctl", *sys.argv[2:]]
    main()
""")


def run_shifted_worker(tmp_path, jump: float, *, sleep: float, timeout: str) -> dict:
    db, config = tmp_path / "q.db", tmp_path / "jobctl.toml"
    config.write_text(f'[types.nap]\ncommand = ["sleep", "{sleep}"]\ntimeout = "{timeout}"\nmax_attempts = 1\n')
    r = jobctl("--config", config, "enqueue", "nap", db=db)
    assert r.exit_code == 0, r.output
    job_id = int(r.stdout)
    proc = subprocess.run(
        [sys.executable, "-c", SHIFTED_WORKER, str(jump), "--db", str(db), "--config", str(config), "work",
         "--stop-when-empty", "--grace", "5s"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return show_json(db, job_id)


@pytest.mark.parametrize("jump", [3600.0, -3600.0], ids=["forward", "back"])
def test_a_wall_clock_jump_does_not_cut_a_handler_short(tmp_path, jump):
    job = run_shifted_worker(tmp_path, jump, sleep=1.5, timeout="10s")
    assert job["status"] == "completed", job
    assert job["attempts"] == 1


@pytest.mark.parametrize("jump", [3600.0, -3600.0], ids=["forward", "back"])
def test_a_wall_clock_jump_does_not_let_a_handler_overrun(tmp_path, jump):
    job = run_shifted_worker(tmp_path, jump, sleep=30, timeout="1s")
    assert job["status"] == "buried", job
    assert job["error"].startswith("timed out after 1s"), job


# -- leases: recover in one run, whatever the wall clock does ---------------------------------

STEPPED = textwrap.dedent("""
    import sys, time
    real_time, real_ns = time.time, time.time_ns
    step = float(sys.argv[1])
    time.time = lambda: real_time() + step
    time.time_ns = lambda: real_ns() + int(step * 1e9)  # the SQLite engine's wall clock; the boot clock is not moved
    from jobctl.cli import main
    sys.argv = ["jobctl", *sys.argv[2:]]
    main()
""")


def stepped(step: float, db, *args) -> list[str]:
    """jobctl ARGS in a process whose wall clock is `step` seconds off."""
    return [sys.executable, "-c", STEPPED, str(step), "--db", str(db), *map(str, args)]


def claimed(db, lease: str) -> tuple[int, str]:
    r = jobctl("enqueue", "t", db=db)
    assert r.exit_code == 0, r.output
    r = jobctl("claim", "--worker", f"w-{lease}", "--lease", lease, db=db)
    assert r.exit_code == 0, r.output
    job = json.loads(r.stdout)
    return job["id"], job["token"]


@pytest.mark.slow
@pytest.mark.parametrize("step", [3600.0, -3600.0], ids=["forward", "back"])
def test_one_recover_from_a_host_whose_clock_stepped(any_db, step):
    """`recover` run where the wall clock is an hour off (SQLite: the same host's boot clock times
    leases; PostgreSQL: the server's clock): a 30-minute lease is left alone, a 1-second one that
    ran out is recovered by the first run after its end. (Whether the run before the sleep already
    finds it expired does not matter: the two runs together act on it exactly once; the hour's step
    is thousands of times either lease.)"""
    db = any_db
    live, _ = claimed(db, "30m")
    dead, _ = claimed(db, "1s")
    first = subprocess.run(stepped(step, db, "recover", "--json"), capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    assert live not in [json.loads(x)["id"] for x in first.stdout.splitlines()]
    time.sleep(1.2)
    r = subprocess.run(stepped(step, db, "recover", "--json"), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert [json.loads(x) for x in (first.stdout + r.stdout).splitlines()] == [{"id": dead, "action": "requeued"}]
    assert show_json(db, live)["status"] == "running" and show_json(db, dead)["status"] == "pending"


@pytest.mark.slow
@pytest.mark.parametrize("step", [3600.0, -3600.0], ids=["forward", "back"])
def test_a_worker_whose_clock_stepped_sweeps_as_before(any_db, tmp_path, step):
    """A worker's own sweeps where its wall clock is an hour off: the live lease of another worker
    is left alone, the dead one is recovered within a sweep or two of its end."""
    db = any_db
    config = tmp_path / "jobctl.toml"
    config.write_text('[worker]\nrecover_every = "200ms"\n\n[types.other]\ncommand = ["true"]\n')
    live, live_token = claimed(db, "30m")
    dead, _ = claimed(db, "1s")
    worker = subprocess.Popen(stepped(step, db, "--config", config, "work", "--queue", "elsewhere",
                                      "--worker", "sweeper"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while show_json(db, dead)["status"] != "pending":
            assert worker.poll() is None and time.monotonic() < deadline, "the dead lease was not recovered"
            time.sleep(0.3)
        time.sleep(0.5)  # a couple more sweeps
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    job = show_json(db, live)
    assert job["status"] == "running" and job["token"] == live_token
    assert any("sweeper" == e["actor"] and "lost" in (e["message"] or "") for e in show_json(db, dead)["events"])


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("faketime") is None, reason="libfaketime is not installed (apt-get install faketime)")
@pytest.mark.parametrize("step", ["+1h", "-1h"])
def test_recover_under_libfaketime(any_db, step):
    """The same with the process's whole wall clock stepped by libfaketime (every call that reads
    it, C library included). FAKETIME_DONT_FAKE_MONOTONIC=1: a real step of the clock does not
    move the monotonic and boot clocks, and by default libfaketime shifts those too."""
    db = any_db
    live, _ = claimed(db, "30m")
    dead, _ = claimed(db, "1s")
    env = {**os.environ, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}

    def recover() -> list[dict]:
        r = subprocess.run(["faketime", "-f", step, *JOBCTL, "--db", str(db), "recover", "--json"],
                           capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode == 0, r.stderr
        return [json.loads(x) for x in r.stdout.splitlines()]

    first = recover()
    assert live not in [a["id"] for a in first]
    time.sleep(1.2)
    assert first + recover() == [{"id": dead, "action": "requeued"}]
    assert show_json(db, live)["status"] == "running"


@pytest.mark.parametrize("step", [3600.0, -3600.0], ids=["forward", "back"])
def test_show_and_stats_judge_a_lease_as_recover_does(tmp_path, step):
    """Where the wall clock stepped, `show` and `stats` say a lease expired (the worker looks lost,
    `recover` requeues it) exactly when `recover` would act on it: never of a live 30-minute lease
    an hour "past" its wall-clock end, always of a dead one whose wall-clock end looks an hour away."""
    db = tmp_path / "q.db"
    live, _ = claimed(db, "30m")
    dead, _ = claimed(db, "1s")
    time.sleep(1.2)

    def run(*args) -> str:
        r = subprocess.run(stepped(step, db, *args), capture_output=True, text=True, timeout=60,
                           env={**os.environ, "COLUMNS": "300"})
        assert r.returncode == 0, r.stderr
        return r.stdout

    assert [json.loads(x)["id"] for x in run("recover", "--dry-run", "--json").splitlines()] == [dead]
    assert "looks lost" not in run("show", live)
    assert "looks lost" in run("show", dead)
    stuck = {j["id"]: j["stuck_reason"] for j in json.loads(run("stats", "--json"))["stuck"]}
    assert stuck[dead] == "lease expired"
    assert stuck.get(live, "not stuck") != "lease expired"
