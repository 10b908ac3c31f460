"""Issue 6, item 17, for the worker: handler timeouts are measured on the monotonic clock, so a
jump of the wall clock (an hour forward, or back) neither kills a handler early nor lets one
overrun its timeout.

The worker runs as a real process whose wall clock (time.time and time.time_ns, which the
database's timestamps use)
jumps by an hour half a second after it starts, while the handler is running; the monotonic clock
and the handler's own time are untouched, as in a real clock step (NTP, a VM resumed).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from .util import jobctl, show_json

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
