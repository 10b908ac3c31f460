"""`jobctl work` when things go wrong, with real processes, real signals and real files: handlers
that escape their group, commands that vanish, result lines jobctl cannot keep, a damaged
database, a wall clock that jumps, systemd's way of stopping a service."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import JOBCTL, finish, run_cli, start_worker, wait_for
from test_worker import WORKER_CONF, alive, script, show, write_config  # noqa: F401  (the same helpers)

PY = sys.executable








# -- result lines and bury reasons ---------------------------------------------------------------


def test_a_result_line_jobctl_cannot_keep_completes_the_job_without_it(tmp_path, cli, db):
    # exit 0 is `completed`: a result line jobctl cannot read back (digits past Python's limit)
    # is left out and the log says why; running the job again would repeat its side effects.
    write_config(tmp_path, """
        [types.big]
        command = ["sh", "-c", "printf '1%.0s' $(seq 5000); echo"]
        max_attempts = 1
    """)
    job_id = int(cli("enqueue", "big").stdout)
    r = run_cli("work", "--stop-when-empty", db=db)
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.stderr
    job = show(db, job_id)
    assert job["status"] == "completed" and job["result"] is None, job
    assert "result line is not valid JSON" in r.stderr and "completes without a result" in r.stderr, r.stderr


def test_a_bury_by_exit_code_says_which_code_buried_it(tmp_path, cli, db):
    write_config(tmp_path, """
        [types.bad]
        command = ["sh", "-c", "exit 65"]
        bury_exit_codes = [65]
    """)
    job_id = int(cli("enqueue", "bad").stdout)
    assert run_cli("work", "--stop-when-empty", db=db).exit_code == 0
    job = show(db, job_id)
    buried = [e for e in job["events"] if e["to"] == "buried"]
    assert "exit code 65 is listed in bury_exit_codes" in buried[0]["message"], buried


# -- handlers that escape their group -------------------------------------------------------------

ESCAPER = """
    import os, sys, time
    if os.fork() == 0:
        os.setsid()  # out of the handler's process group
        with open(sys.argv[1], "w") as f:
            f.write(str(os.getpid()))
        time.sleep(600)
        os._exit(0)
    time.sleep(600)
"""


def test_a_handler_that_escapes_with_setsid_does_not_outlive_its_timeout(tmp_path, cli, db):
    handler = script(tmp_path, "escape.py", ESCAPER)
    pidfile = tmp_path / "escaped.pid"
    write_config(tmp_path, f"""
        [types.esc]
        command = {json.dumps([PY, handler, str(pidfile)])}
        timeout = "1s"
        max_attempts = 1
    """)
    job_id = int(cli("enqueue", "esc").stdout)
    r = run_cli("work", "--stop-when-empty", db=db)
    assert r.exit_code == 0, r.output
    assert show(db, job_id)["error"].startswith("timed out")
    escaped = int(pidfile.read_text())
    try:
        assert not alive(escaped), "the process that left the group outlived the run"
    finally:
        if alive(escaped):
            os.kill(escaped, signal.SIGKILL)


# -- commands that cannot be run -----------------------------------------------------------------


def test_a_command_that_vanishes_releases_the_jobs_instead_of_burying_them(tmp_path, cli, db):
    handler = script(tmp_path, "once.sh", """\
        #!/bin/sh
        rm -f "$0"
    """)
    write_config(tmp_path, f"""
        [types.once]
        command = ["{handler}"]
        max_attempts = 1
    """)
    ids = [int(x) for x in cli("enqueue", "--batch", "-", input='{"type": "once"}\n' * 3).stdout.split()]
    worker = start_worker(tmp_path, db)
    try:
        wait_for(lambda: "spawn-failed" in worker.log_path.read_text(), what="the spawn failure")
        time.sleep(1.0)
    finally:
        worker.send_signal(signal.SIGTERM)
        code, log = finish(worker)
    assert code == 0, log
    assert show(db, ids[0])["status"] == "completed"
    for job_id in ids[1:]:
        job = show(db, job_id)
        assert job["status"] == "pending" and job["attempts"] == 0, job
    assert "No such file or directory" in log and "this run does not count" in log, log
    assert log.count("spawn-failed") <= 3, log  # it backs off instead of spinning


def test_work_refuses_a_command_that_is_not_executable_and_doctor_reports_it(tmp_path, cli, db):
    handler = tmp_path / "handler.sh"
    handler.write_text("#!/bin/sh\n")
    handler.chmod(0o644)
    write_config(tmp_path, f"""
        [types.ok]
        command = ["true"]

        [types.broken]
        command = ["{handler}"]

        [types.nowhere]
        command = ["no-such-program-jobctl"]
    """)
    cli("enqueue", "ok")
    r = run_cli("work", "--stop-when-empty", db=db)
    assert r.exit_code == 2, r.output
    line = r.one_error_line()
    assert "type broken" in line and "not executable" in line and "type nowhere" in line, line
    r = run_cli("work", "--stop-when-empty", "--type", "ok", db=db)
    assert r.exit_code == 0, r.output  # only the types it runs are checked

    r = run_cli("doctor", "--json", db=db)
    assert r.exit_code == 9, r.output
    check = {c["check"]: c for c in json.loads(r.stdout)["checks"]}["handler commands"]
    assert not check["ok"] and "type broken" in check["detail"] and "not found on PATH" in check["detail"]


# -- an unusable database ------------------------------------------------------------------------


def test_a_dropped_column_stops_the_worker_with_exit_8_and_one_line(tmp_path, cli, db):
    write_config(tmp_path, """
        [types.t]
        command = ["true"]
    """)
    cli("init")
    worker = start_worker(tmp_path, db)
    wait_for(lambda: "started" in worker.log_path.read_text(), what="the worker to start")
    conn = sqlite3.connect(db)
    conn.execute("ALTER TABLE jobs DROP COLUMN progress")
    conn.close()
    started = time.monotonic()
    code, log = finish(worker, timeout=30)
    assert code == 8, log
    assert time.monotonic() - started < 30
    assert "Traceback" not in log
    unusable = [line for line in log.splitlines() if " unusable" in line]
    assert len(unusable) == 1 and "no such column: progress" in unusable[0], log


def test_a_dropped_column_under_a_running_handler_stops_it_and_logs_its_job(tmp_path, cli, db):
    handler = script(tmp_path, "nap.py", """
        import os, sys, time
        with open(sys.argv[1], "w") as f:
            f.write(str(os.getpid()))
        time.sleep(600)
    """)
    pidfile = tmp_path / "handler.pid"
    write_config(tmp_path, f"""
        [types.nap]
        command = {json.dumps([PY, handler, str(pidfile)])}
    """)
    job_id = int(cli("enqueue", "nap").stdout)
    worker = start_worker(tmp_path, db)
    wait_for(lambda: pidfile.exists() and pidfile.read_text(), what="the handler to start")
    conn = sqlite3.connect(db)
    conn.execute("ALTER TABLE jobs DROP COLUMN heartbeat_at")  # the next heartbeat fails
    conn.close()
    code, log = finish(worker, timeout=30)
    assert code == 8, log
    assert "Traceback" not in log
    assert len([line for line in log.splitlines() if " unusable" in line]) == 1, log
    assert f"unrecorded job {job_id}" in log, log  # its release could not be written either
    assert not alive(int(pidfile.read_text())), "the handler was left running"


# -- its own claims, whatever the wall clock says ----------------------------------------------

SHIFTED_WORKER = textwrap.dedent("""
    import os, sys, time
    real_time, real_ns, flag, jump = time.time, time.time_ns, sys.argv[1], float(sys.argv[2])
    # the wall clock (what the queue's timestamps use: time_ns on SQLite) jumps once the handler has started
    time.time = lambda: real_time() + (jump if os.path.exists(flag) else 0.0)
    time.time_ns = lambda: real_ns() + (int(jump * 1e9) if os.path.exists(flag) else 0)
    from jobctl.cli import main
    sys.argv = ["jobctl", *sys.argv[3:]]
    main()
""")


def test_a_worker_never_recovers_its_own_running_job_after_a_clock_jump(tmp_path, cli, db):
    flag = tmp_path / "jumped"
    write_config(tmp_path, f"""
        [types.nap]
        command = ["sh", "-c", "touch {flag}; sleep 2"]
        max_attempts = 1
    """, worker='lease = "30s"\nrecover_every = "100ms"\npoll = "100ms"')  # no heartbeat due for 5 s
    job_id = int(cli("enqueue", "nap").stdout)
    r = subprocess.run([PY, "-c", SHIFTED_WORKER, str(flag), "3600", "--db", str(db), "work", "--stop-when-empty"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "recovered" not in r.stderr and "lost" not in r.stderr, r.stderr
    job = show(db, job_id)
    assert job["status"] == "completed" and job["attempts"] == 1, job


# -- systemd: KillMode=mixed sends SIGTERM to the worker alone --------------------------------


def test_sigterm_to_the_worker_alone_lets_a_short_handler_finish(tmp_path, cli, db):
    write_config(tmp_path, """
        [types.nap]
        command = ["sleep", "1"]
    """)
    job_id = int(cli("enqueue", "nap").stdout)
    worker = start_worker(tmp_path, db, "--grace", "10s")
    wait_for(lambda: show(db, job_id)["status"] == "running", what="the handler to start")
    worker.send_signal(signal.SIGTERM)  # the worker's pid only, as systemd does with KillMode=mixed
    code, log = finish(worker)
    assert code == 0, log
    job = show(db, job_id)
    assert job["status"] == "completed" and job["attempts"] == 1, job


@pytest.mark.alone  # stops within 10 s
def test_sigterm_to_the_worker_alone_stops_a_long_handler_after_the_grace_and_releases_it(tmp_path, cli, db):
    handler = script(tmp_path, "stubborn.py", """
        import os, signal, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with open(sys.argv[1], "w") as f:
            f.write(str(os.getpid()))
        time.sleep(600)
    """)
    pidfile = tmp_path / "handler.pid"
    write_config(tmp_path, f"""
        [types.nap]
        command = {json.dumps([PY, handler, str(pidfile)])}
        max_attempts = 1
    """)
    job_id = int(cli("enqueue", "nap").stdout)
    worker = start_worker(tmp_path, db, "--grace", "1s")
    wait_for(lambda: pidfile.exists() and pidfile.read_text(), what="the handler to start")
    worker.send_signal(signal.SIGTERM)
    started = time.monotonic()
    code, log = finish(worker)
    assert code == 0, log
    assert time.monotonic() - started < 10
    assert not alive(int(pidfile.read_text()))
    job = show(db, job_id)
    assert job["status"] == "pending" and job["attempts"] == 0, job  # released: not charged
    held = run_cli("list", "--status", "running", "--json", db=db).stdout
    assert held.strip() == ""


def test_a_finished_jobs_outcome_that_cannot_be_written_is_logged(tmp_path, cli, db):
    flag = tmp_path / "go"
    write_config(tmp_path, f"""
        [types.t]
        command = ["sh", "-c", "while [ ! -e {flag} ]; do sleep 0.05; done"]
    """, worker='lease = "30s"\npoll = "100ms"')  # no heartbeat is due before the outcome
    job_id = int(cli("enqueue", "t").stdout)
    worker = start_worker(tmp_path, db)
    wait_for(lambda: show(db, job_id)["status"] == "running", what="the handler to start")
    conn = sqlite3.connect(db)
    conn.execute("ALTER TABLE jobs DROP COLUMN heartbeat_at")  # completing the job now fails
    conn.close()
    flag.touch()
    code, log = finish(worker, timeout=30)
    assert code == 8, log
    assert "Traceback" not in log
    [line] = [line for line in log.splitlines() if "unrecorded" in line]
    assert f"unrecorded job {job_id}" in line and "(completed)" in line, log


def test_a_handler_inherits_only_stdin_stdout_and_stderr(tmp_path, cli, db):
    handler = script(tmp_path, "fds.py", """
        import json, os
        open_fds = []
        for fd in range(3, 1024):
            try:
                os.fstat(fd)
                open_fds.append(fd)
            except OSError:
                pass
        print(json.dumps({"fds": open_fds}))
    """)
    write_config(tmp_path, f"""
        [types.t]
        command = {json.dumps([PY, handler])}
    """)
    # several jobs: the pipes of all but the first are made while the one before runs
    job_ids = [int(cli("enqueue", "t").stdout) for _ in range(3)]
    leak = os.open(os.devnull, os.O_RDONLY)  # an inheritable descriptor the worker is started with
    os.set_inheritable(leak, True)
    try:
        proc = subprocess.run([*JOBCTL, "--db", str(db), "work", "--stop-when-empty"], capture_output=True,
                              text=True, timeout=60, close_fds=False)
    finally:
        os.close(leak)
    assert proc.returncode == 0, proc.stderr
    assert [show(db, job_id)["result"] for job_id in job_ids] == [{"fds": []}] * 3


def test_output_of_a_process_that_outlives_its_run_never_lands_in_a_later_run(tmp_path, cli, db):
    # Job 1 leaves a process in a session of its own that writes to its stdout a second later;
    # job 2 runs meanwhile and prints nothing: its result must stay empty.
    handler = script(tmp_path, "h.py", """
        import os, sys, time
        if os.environ["JOBCTL_JOB_ID"] == "1":
            if os.fork() == 0:
                os.setsid()
                time.sleep(1)
                for fd in (1, 2):
                    os.write(fd, b'{"from": "the process left behind"}\\n')
                os._exit(0)
        else:
            time.sleep(2)
    """)
    write_config(tmp_path, f"""
        [types.t]
        command = {json.dumps([PY, handler])}
    """)
    first, second = (int(x) for x in cli("enqueue", "--batch", "-", input='{"type": "t"}\n' * 2).stdout.split())
    r = run_cli("work", "--stop-when-empty", db=db)
    assert r.exit_code == 0, r.output
    assert show(db, first)["status"] == "completed"
    job = show(db, second)
    assert job["status"] == "completed" and job["result"] is None, job
