"""A real PostgreSQL server restart under jobctl: `pg_ctl restart -m fast` (sessions ended, a
clean shutdown) and `-m immediate` (every server process killed at once, as in a crash), and a
server that stays down for a while.

These tests stop and start a server, so they run on a private cluster (pgcluster.py), never on
the shared test server. The worker must reconnect and record each outcome exactly once; a claim
whose lease expired while the server was down is recovered after the restart, and the late report
of its first worker is refused by its token; one-shot commands meet a stopped server with exit 8
and one line; an idle worker listens again and wakes for jobs enqueued after the restart."""

from __future__ import annotations

import os
import secrets
import signal
import time
from pathlib import Path

import pytest

from conftest import with_schema

from .pgcluster import ClusterError, PrivateCluster
from .test_postgres_faults import GATED
from .test_worker_torture import RECORD, SLOW_RECORD, rescue_while_frozen, wait_for
from .util import assert_each_completed_once, assert_rescued_once, jobs, pg_rows, run_cli

MODES = ["fast", "immediate"]


def _cannot(why: str):
    """Skip, or in CI (JOBCTL_TEST_POSTGRES_URL set: the PostgreSQL half must run) fail."""
    if os.environ.get("JOBCTL_TEST_POSTGRES_URL"):
        pytest.fail(f"JOBCTL_TEST_POSTGRES_URL is set, but {why}")
    pytest.skip(f"PostgreSQL restart: {why}")


@pytest.fixture(scope="module")
def cluster():
    """A private PostgreSQL cluster for this module's tests, stopped and deleted at the end."""
    why = PrivateCluster.unavailable()
    if why is None:
        try:
            import psycopg2  # noqa: F401
        except ImportError:
            why = "the psycopg2 driver is not installed (pip install '.[postgres]')"
    if why is not None:
        _cannot(why)
    try:
        c = PrivateCluster.create()
    except (ClusterError, OSError) as e:
        _cannot(f"a private PostgreSQL cluster could not be started: {' '.join(str(e).split())[:2000]}")
    try:
        yield c
    finally:
        c.destroy()


@pytest.fixture
def url(cluster):
    """The private cluster in a schema of this test's own, the server up (a test that failed
    while it was down leaves it down)."""
    cluster.ensure_running()
    return with_schema(cluster.url, f"jt_{secrets.token_hex(6)}")


def listening(url: str) -> int:
    """How many jobctl connections of this schema's server wait on LISTEN (the worker's listener)."""
    return pg_rows(url, "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'jobctl' "
                        "AND query LIKE 'LISTEN %%' AND pid <> pg_backend_pid()")[0]["n"]


def log_lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


# -- (1) a restart while a handler runs ----------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.shared  # outcomes only: runs beside other tests
def test_worker_survives_a_server_restart_while_its_handler_runs_and_records_each_job_once(cluster, url, env,
                                                                                          mode):
    # The lease is 3 s (a heartbeat every second), so heartbeats meet the restarted server too.
    e = env(db=url, command=["/bin/sh", "-c", GATED], lease="3s", recover_every="1h")
    ids = e.enqueue(3)
    w = e.worker("survivor", "--stop-when-empty", "--poll", "200ms")
    go = lambda job_id: Path(f"{e.runlog}.go.{job_id}").touch()  # noqa: E731

    # job 1: the server restarts while the handler runs; the handler ends after a heartbeat on
    # the new server
    wait_for(lambda: ids[0] in e.runs(), what="the first job to start")
    cluster.restart(mode)
    time.sleep(1.5)
    assert w.poll() is None, w.log.read_text()
    go(ids[0])

    # job 2: the server goes down while the handler runs, and the handler ends while it is down:
    # the outcome waits until the server is back, then is written once
    wait_for(lambda: ids[1] in e.runs(), what="the second job to start")
    cluster.stop(mode)
    go(ids[1])
    wait_for(lambda: "db-busy" in w.log.read_text(), what="the worker to meet the stopped server")
    time.sleep(1.0)
    assert w.poll() is None, w.log.read_text()
    cluster.start()

    # job 3: nothing special, the worker goes on as before
    wait_for(lambda: ids[2] in e.runs(), timeout=30, what="the third job to start")
    go(ids[2])
    assert w.wait(timeout=60) == 0, w.log.read_text()

    runs = e.runs()
    assert sorted(runs) == ids and {job_id: a for job_id, a in runs.items() if a != [1]} == {}, runs
    assert_each_completed_once(e.db, ids)

    lines = log_lines(w.log)
    text = "\n".join(lines)
    assert "Traceback" not in text, text
    # What happened is said in a line, or two for an outage (its start and its end), each time:
    # the restart of job 1 was either found by the engine before any call failed (it reconnected
    # and says so), or met by a call while the server was down; the outage of job 2 was met.
    events = [line.split()[2].rstrip(":") for line in lines]
    assert set(events) <= {"started", "start", "done", "db-reconnected", "db-busy", "db-ok", "stopped"}, text

    def during(job_id) -> list[str]:
        first = next(n for n, line in enumerate(lines) if f" start job {job_id} " in line)
        last = next(n for n, line in enumerate(lines) if f" done job {job_id} " in line)
        return [ev for ev in events[first + 1:last] if ev.startswith("db-")]

    assert during(ids[0]) in (["db-reconnected"], ["db-busy", "db-ok"]), text
    assert during(ids[1]) == ["db-busy", "db-ok"], text
    assert during(ids[2]) == [], text
    assert [ev for ev in events if ev.startswith("db-")] == [*during(ids[0]), *during(ids[1])], text
    reconnected = [line for line in lines if " db-reconnected: " in line]
    assert all("reconnected, no write was cut off" in line for line in reconnected), text
    busy = [line for line in lines if " db-busy: " in line]
    assert busy and all("connection lost" in line for line in busy), text


# -- (2) down for longer than the lease ---------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_a_lease_that_expired_while_the_server_was_down_is_recovered_after_the_restart_and_the_late_report_refused(
        cluster, url, env, mode):
    # The lease is judged by the server's clock (clock_timestamp(): the database host's wall
    # clock), and only a sweep can act on it, so nothing happens while the server is down: the
    # first sweep after the restart finds the lease expired. The holder is frozen (SIGSTOP) from
    # before the outage until the rescuer has run the job again, so that it cannot renew its lease
    # after the restart: when it wakes, its connections are dead and its claim is no longer its own.
    e = env(db=url, command=["/bin/sh", "-c", SLOW_RECORD], lease="1s", recover_every="200ms")
    [job_id] = e.enqueue(1)
    a = e.worker("holder", "--max-jobs", "1")

    def outage():
        cluster.stop(mode)
        # longer than the 1 s lease, which ran out at most 1 s after the holder was frozen, just
        # before the stop (2.5 s proved no more)
        time.sleep(1.5)
        cluster.start()

    b = rescue_while_frozen(e, job_id, a, during=outage)
    events = assert_rescued_once(e.db, job_id, b.pid)
    assert events[2]["actor"] == "rescuer" and "holder" in events[2]["message"] and "lost" in events[2]["message"]
    log = a.log.read_text()
    assert "Traceback" not in log and "Traceback" not in b.log.read_text(), log
    lost = [line for line in log.splitlines() if f"lost job {job_id}" in line]
    assert len(lost) == 1 and ("not recorded" in lost[0] or "no longer ours" in lost[0]), log
    assert f"done job {job_id}" not in log, "the refused report was also logged as done"


# -- (3) one-shot commands against a stopped server --------------------------------------------

@pytest.mark.shared  # outcomes only: runs beside other tests
def test_commands_against_a_stopped_server_exit_8_with_one_line_naming_postgresql_and_no_password(cluster, url):
    assert run_cli("init", db=url).exit_code == 0
    secret = "s3cret-pw"
    with_password = url.replace("postgresql://postgres@", f"postgresql://postgres:{secret}@")
    assert run_cli("enqueue", "t", "{}", db=with_password).exit_code == 0  # (trust: any password will do)
    cluster.stop("fast")
    try:
        for args in (["enqueue", "t", "{}"], ["claim", "--worker", "w"], ["enqueue", "--batch", "-"]):
            r = run_cli(*args, db=with_password, input='{"type": "t"}\n')
            assert r.exit_code == 8, (args, r.output)
            line = r.one_error_line()
            assert "PostgreSQL" in line and secret not in line, (args, line)
            assert r.stdout == "", (args, r.output)
    finally:
        cluster.start()
    assert [j["status"] for j in jobs(url).values()] == ["pending"], "a command changed the queue while refused"


# -- (4) an idle worker listening while the server restarts -------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.shared  # outcomes only: runs beside other tests
def test_an_idle_worker_listening_through_a_server_restart_still_wakes_for_a_new_job(cluster, url, env, mode):
    poll = 10.0  # the fallback: a job is found by the next poll at worst
    e = env(db=url, command=["/bin/sh", "-c", RECORD], lease="30s", recover_every="1h")
    e.enqueue(1)
    w = e.worker("idle", "--poll", f"{poll:g}s")
    wait_for(lambda: len(e.runs()) == 1, what="the first job")
    wait_for(lambda: listening(url) == 1, what="the worker to listen")
    time.sleep(0.5)  # idle, waiting for news
    cluster.restart(mode)
    started = time.monotonic()
    e.enqueue(1)
    wait_for(lambda: len(e.runs()) == 2, timeout=poll + 30, what="the job enqueued after the restart to run")
    took = time.monotonic() - started
    # and it listens again, so the next job needs no poll
    wait_for(lambda: listening(url) == 1, timeout=poll + 30, what="the worker to listen again")
    assert w.poll() is None, w.log.read_text()
    w.send_signal(signal.SIGTERM)
    assert w.wait(timeout=60) == 0, w.log.read_text()
    assert {j["status"] for j in jobs(e.db).values()} == {"completed"}
    assert "Traceback" not in w.log.read_text()
    print(f"the job enqueued after a restart -m {mode} started {took:.2f}s later")
