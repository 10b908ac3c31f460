"""`logs --follow` on a job whose worker died: it ends once the job's lease has expired (as
`jobctl recover` judges it), saying the worker was lost, exit 4, instead of waiting for ever.
A real worker killed with SIGKILL, and a claim by hand that is never renewed; both engines."""

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import JOBCTL, run_cli, run_inproc

HANDLER = """
    import os, sys, time
    open(sys.argv[1], "w").write(str(os.getpid()))
    print("started with password=hunter2", flush=True)
    time.sleep(300)
"""


def kill_group(pid_file):
    try:
        os.killpg(int(pid_file.read_text()), signal.SIGKILL)
    except (OSError, ValueError):
        pass


@pytest.mark.slow
def test_follow_ends_when_the_killed_workers_lease_expires(tmp_path, any_db):
    db = any_db
    handler, pid_file = tmp_path / "handler.py", tmp_path / "handler.pid"
    handler.write_text(textwrap.dedent(HANDLER))
    config = tmp_path / "jobctl.toml"
    config.write_text(f'[worker]\nlease = "1s"\npoll = "100ms"\n[types.t]\n'
                      f'command = [{json.dumps(sys.executable)}, {json.dumps(str(handler))}, {json.dumps(str(pid_file))}]\n')
    base = [*JOBCTL, "--db", str(db), "--config", str(config)]
    job = int(run_cli("--config", config, "enqueue", "t", db=db).stdout)
    worker = subprocess.Popen([*base, "work"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    follow = subprocess.Popen([*base, "logs", str(job), "--follow"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        ready, _, _ = select.select([follow.stdout], [], [], 30)
        assert ready, "nothing followed within 30 s"
        assert follow.stdout.readline() == "started with password=***\n"
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
        killed_at = time.monotonic()
        out, err = follow.communicate(timeout=30)  # before the fix: waits for ever
        took = time.monotonic() - killed_at
        assert follow.returncode == 4, err
        [line] = err.splitlines()
        assert line.startswith(f"jobctl: error: the worker of job {job} (") and "was lost" in line, line
        assert "lease expired at" in line and "`jobctl recover`" in line, line
        assert took < 15, took  # a 1 s lease, a look every 2 s
        shown = json.loads(run_cli("show", job, "--json", db=db).stdout)
        assert shown["status"] == "running"  # follow only reads: the job waits for recover
    finally:
        kill_group(pid_file)
        for p in (worker, follow):
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.slow
def test_follow_ends_for_a_claim_by_hand_that_is_never_renewed(tmp_path, any_db):
    db = any_db
    job = int(run_cli("enqueue", "t", db=db).stdout)
    claimed = run_cli("claim", "--lease", "1s", db=db)
    assert claimed.exit_code == 0, claimed.output
    started = time.monotonic()
    r = run_cli("logs", job, "--follow", db=db, timeout=30)  # no output at all: before the fix, for ever
    assert r.exit_code == 4, r.output
    assert "was lost: its lease expired at" in r.one_error_line()
    assert time.monotonic() - started < 15
    # --json: nothing on stdout (no output was kept), the same error
    r = run_cli("logs", job, "--follow", "--json", db=db, timeout=30)
    assert (r.exit_code, r.stdout) == (4, "") and "was lost" in r.one_error_line()


@pytest.mark.slow
def test_follow_of_a_renewed_claim_goes_on_and_ends_once_renewals_stop(tmp_path, any_db):
    db = any_db
    job = int(run_cli("enqueue", "t", db=db).stdout)
    token = json.loads(run_cli("claim", "--lease", "2s", db=db).stdout)["token"]
    follow = subprocess.Popen([*JOBCTL, "--db", str(db), "logs", str(job), "--follow", "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(4):  # renewed (in this process: no start-up eats into the lease): the follow goes on
            time.sleep(0.5)
            assert run_inproc("heartbeat", job, "--token", token, db=db).exit_code == 0
            assert follow.poll() is None
        out, err = follow.communicate(timeout=30)  # no more renewals: lost
        assert follow.returncode == 4 and "was lost" in err, err
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()


@pytest.mark.slow
@pytest.mark.shared  # outcomes only: runs beside other tests
def test_a_user_who_may_only_read_is_told_the_worker_was_lost_too(pg_base, pg_url, pg_schema):
    # A monitoring role with USAGE and SELECT may read `logs`: asking whether the worker is lost
    # must not need a row lock (UPDATE rights), or its --follow would fail with permission denied.
    import secrets as random_names
    from urllib.parse import urlsplit, urlunsplit

    from conftest import pg_admin

    job = int(run_cli("enqueue", "t", db=pg_url).stdout)
    assert run_cli("claim", "--lease", "1s", db=pg_url).exit_code == 0
    role = f"jt_role_{random_names.token_hex(4)}"
    conn = pg_admin(pg_base)
    cur = conn.cursor()
    cur.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'")
    try:
        cur.execute(f"GRANT USAGE ON SCHEMA {pg_schema} TO {role}")
        cur.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {pg_schema} TO {role}")
        parts = urlsplit(pg_url)
        url = urlunsplit(parts._replace(netloc=f"{role}:pw@{parts.netloc.rpartition('@')[2]}"))
        r = run_cli("logs", job, "--follow", db=url, timeout=30)
        assert r.exit_code == 4 and "was lost" in r.one_error_line(), r.output
        r = run_cli("recover", "--dry-run", db=url)  # the dry run itself, read-only too
        assert r.exit_code == 0, r.output
    finally:
        cur.execute(f"DROP OWNED BY {role}")
        cur.execute(f"DROP ROLE {role}")
        conn.close()
