"""`jobctl workers`: the registry of worker processes on both engines. A worker killed with -9
turns lost after three renewal periods and its jobs are recovered as before; `workers drain` and
`workers stop --now` from another process are noticed within 2 s; a row deleted by hand is
written again. Short leases (1 s: a renewal every second, the shortest) keep these few real processes fast."""

import json
import os
import signal
import sqlite3
import time

import pytest

from conftest import finish, on_db, run_inproc, start_worker, wait_for
from jobctl import workers as registry

WORKER_CFG = '[worker]\nlease = "1s"\nkill_grace = "200ms"\nrecover_every = "200ms"\npoll = "100ms"\n'


def config(tmp_path, command: str) -> None:
    (tmp_path / "jobctl.toml").write_text(f"[types.t]\ncommand = {json.dumps(['sh', '-c', command])}\n\n{WORKER_CFG}")


def entries(cli, *args) -> dict:
    r = cli("workers", "--json", *args)
    assert r.exit_code == 0, r.output
    return {e["worker"]: e for e in map(json.loads, r.stdout.splitlines())}


def delete_rows(db) -> None:
    if str(db).startswith("postgresql"):
        import psycopg2

        conn = psycopg2.connect(str(db))
        conn.autocommit = True
        conn.cursor().execute("DELETE FROM workers")
        conn.close()
    else:
        conn = sqlite3.connect(db, timeout=5)
        with conn:
            conn.execute("DELETE FROM workers")
        conn.close()


@pytest.mark.alone  # lost within 8 s of the kill
def test_a_killed_worker_turns_lost_and_its_job_is_recovered(tmp_path, any_db):
    cli = on_db(run_inproc, any_db)
    # The first run hangs (its worker is killed), the second completes.
    config(tmp_path, "if [ -e ran ]; then exit 0; fi; touch ran; exec sleep 30")
    assert cli("enqueue", "t").exit_code == 0
    a = start_worker(tmp_path, any_db, "--worker", "wa", name="a")
    seen = wait_for(lambda: (e := entries(cli).get("wa")) and e["jobs"] and e, what="wa running job 1")
    assert seen["state"] == "running" and seen["jobs"] == [{"id": 1, "type": "t"}] and seen["pid"] == a.pid
    assert seen["queues"] is None and seen["done"] == 0 and seen["failed"] == 0
    assert "database " in a.log_path.read_text().splitlines()[0]  # the first line names the database
    # The registry lists the job as soon as it is claimed, before its handler has run `touch ran`:
    # killed before that, the first run leaves no mark and the second sleeps its 30 s too (the
    # worker that recovers it then times out in finish()).
    wait_for(lambda: (tmp_path / "ran").exists(), what="the first run's handler to start")
    a.send_signal(signal.SIGKILL)
    a.wait()
    killed = time.monotonic()
    lost = wait_for(lambda: (e := entries(cli)["wa"])["state"] == "lost" and e, timeout=10, what="wa lost")
    assert time.monotonic() - killed < 8  # three renewal periods of 1 s, and a second of slack
    assert lost["jobs"] == [{"id": 1, "type": "t"}]  # still under it until recovered
    r = cli("stats", "--json")
    assert json.loads(r.stdout)["workers"] == {"alive": 0, "lost": 1}
    r = cli("stats", "--check", "--min-workers", "1")
    assert r.exit_code == 9 and "0 worker(s) alive, 1 lost (min 1)" in r.stdout, r.output
    # A lost worker cannot be told anything: named, it is exit 3 saying so, never "draining"; with
    # --host or --all it is not among the workers told.
    for order in (("drain", "wa"), ("stop", "wa", "--now")):
        r = cli("workers", *order)
        assert r.exit_code == 3 and "wa is lost" in r.one_error_line() and "draining" not in r.stdout, r.output
    r = cli("workers", "drain", "--host", os.uname().nodename)
    assert r.exit_code == 3 and "lost" in r.one_error_line(), r.output
    r = cli("workers", "stop", "--now", "--all", "--json")
    assert (r.exit_code, r.stdout) == (0, ""), r.output
    assert entries(cli)["wa"]["request"] is None
    # Another worker recovers the job (its lease expired) and runs it again, as before.
    b = start_worker(tmp_path, any_db, "--worker", "wb", "--stop-when-empty", name="b")
    code, log = finish(b)
    assert code == 0 and "recovered" in log, log
    job = json.loads(cli("show", "1", "--json").stdout)
    assert job["status"] == "completed" and job["attempts"] == 2
    after = entries(cli, "--all")
    assert after["wb"]["state"] == "stopped" and after["wb"]["done"] == 1 and after["wa"]["jobs"] == []
    assert "wb" not in entries(cli)  # stopped: only with --all


@pytest.mark.alone  # each worker hears its order within 2 s
def test_drain_and_stop_from_another_process(tmp_path, any_db):
    cli = on_db(run_inproc, any_db)
    config(tmp_path, "sleep 1.5")
    assert cli("enqueue", "t").exit_code == 0 and cli("enqueue", "t").exit_code == 0
    a = start_worker(tmp_path, any_db, "--worker", "wa", name="a")
    b = start_worker(tmp_path, any_db, "--worker", "wb", name="b")
    wait_for(lambda: all(e["jobs"] for e in entries(cli).values()) and len(entries(cli)) == 2,
             what="each worker running a job")
    b_job = entries(cli)["wb"]["jobs"][0]["id"]
    r = cli("workers", "drain", "wa")
    assert r.exit_code == 0 and "wa (" in r.stdout, r.output
    wait_for(lambda: "`jobctl workers drain` received" in a.log_path.read_text(), timeout=2.0, what="wa draining")
    r = cli("workers", "stop", "--now", "--host", os.uname().nodename, "--json")
    assert r.exit_code == 0 and {json.loads(x)["worker"] for x in r.stdout.splitlines()} == {"wa", "wb"}, r.output
    wait_for(lambda: "`jobctl workers stop --now` received" in b.log_path.read_text(), timeout=2.0, what="wb stopping")
    for proc in (a, b):
        code, log = finish(proc)
        assert code == 0, log
    # wa was told to stop too, after its drain: its job may have finished or been released;
    # wb's was released without using a run.
    job = json.loads(cli("show", str(b_job), "--json").stdout)
    assert job["status"] == "pending" and job["attempts"] == 0
    states = {w: e["state"] for w, e in entries(cli, "--all").items()}
    assert states == {"wa": "stopped", "wb": "stopped"}
    r = cli("workers", "drain", "nobody")
    assert r.exit_code == 3 and "no running worker nobody" in r.one_error_line()
    r = cli("workers", "stop")  # the message names the command given, not the order it sends
    assert r.exit_code == 2 and "name the workers to stop:" in r.one_error_line(), r.output


def test_a_worker_whose_row_was_deleted_registers_again(tmp_path, any_db):
    cli = on_db(run_inproc, any_db)
    config(tmp_path, "true")
    assert cli("init").exit_code == 0
    a = start_worker(tmp_path, any_db, "--worker", "wa", name="a")
    first = wait_for(lambda: entries(cli).get("wa"), what="wa registered")
    delete_rows(any_db)
    again = wait_for(lambda: entries(cli).get("wa"), timeout=5, what="wa registered again")
    assert again["started_at"] == first["started_at"] and again["state"] == "running"
    a.send_signal(signal.SIGTERM)
    code, log = finish(a)
    assert code == 0 and "registered again" in log, log


def test_jobs_claimed_by_a_script_show_under_their_worker_id(tmp_path, any_db):
    cli = on_db(run_inproc, any_db)
    assert cli("enqueue", "t").exit_code == 0
    assert cli("claim", "--worker", "cron-7").exit_code == 0
    (e,) = entries(cli).values()
    assert e == {**e, "worker": "cron-7", "host": None, "pid": None, "state": None, "jobs": [{"id": 1, "type": "t"}]}
    r = cli("workers", "stop", "cron-7", "--now")
    assert r.exit_code == 3 and "claimed by a script" in r.one_error_line()
    r = cli("workers")
    assert r.exit_code == 0 and "cron-7" in r.stdout and "1 t" in r.stdout, r.output


def test_no_running_worker_says_where_the_stopped_ones_are(tmp_path, db):
    cli = on_db(run_inproc, db)
    assert cli("init").exit_code == 0
    r = cli("workers")
    assert (r.exit_code, r.stdout) == (0, "no workers (none has run on this database in the last day)\n"), r.output
    config(tmp_path, "true")
    r = cli("--config", str(tmp_path / "jobctl.toml"), "work", "--stop-when-empty", "--worker", "w-done")  # a real process
    assert r.exit_code == 0, r.output
    r = cli("workers")  # it said "none has run on this database in the last day" of a worker stopped just now
    assert (r.exit_code, r.stdout) == (0, "no worker is running; 1 stopped in the last day (`jobctl workers "
                                          "--all` lists them)\n"), r.output
    assert "stopped" in cli("workers", "--all").stdout and cli("workers", "--json").stdout == ""
    # told to drain, it is exit 3 saying that it stopped (the help promises to say which), not "no running worker"
    r = cli("workers", "drain", "w-done")
    assert r.exit_code == 3 and r.one_error_line().startswith("jobctl: error: worker w-done stopped already ("), r.output
    r = cli("workers", "stop", "--now", "--host", registry_host(cli))
    assert r.exit_code == 3 and " has stopped (the last " in r.one_error_line(), r.output


def registry_host(cli) -> str:
    return json.loads(cli("workers", "--all", "--json").stdout.splitlines()[0])["host"]


def test_an_empty_worker_id_or_host_is_a_usage_error(tmp_path, any_db):
    cli = on_db(run_inproc, any_db)
    assert cli("init").exit_code == 0
    for args in (("drain", ""), ("stop", "--now", "wa", ""), ("drain", "--host", "")):
        r = cli("workers", *args)
        assert r.exit_code == 2 and "empty" in r.one_error_line(), r.output


def test_states_from_the_renewal_period():
    row = {"state": "running", "last_seen": 10_000, "renew_ms": 1000, "request": None, "stopped_at": None}
    assert registry.state_of(row, 13_000) == "running"
    assert registry.state_of(row, 13_001) == "lost"
    assert registry.state_of({**row, "request": "drain"}, 11_000) == "draining"
    assert registry.state_of({**row, "state": "stopped"}, 99_000) == "stopped"


def test_listing_workers_costs_the_same_statements_for_ten_or_a_hundred(tmp_path):
    """`jobctl workers` reads the registry and the jobs each worker runs in a fixed number of
    statements, whatever the number of workers (no query per worker): its cost is a process start
    (figures in docs/performance.md, measured in bench/, not timed here)."""
    from jobctl.queue import Queue

    statements = {}
    for n in (10, 100):
        db = tmp_path / f"q{n}.db"
        with Queue.open(db, create=True) as q:
            for i in range(n):
                q.engine.register_worker(f"i{i}", {"worker": f"host-{i % 7}:{1000 + i}", "host": f"host-{i % 7}",
                                                   "pid": 1000 + i, "version": "0", "queues": ["a", "b"],
                                                   "types": ["t"], "concurrency": 4, "renew_ms": 10_000,
                                                   "state": "running"})
                q.enqueue("t", {"i": i})
                q.claim(worker=f"host-{i % 7}:{1000 + i}")
            seen: list[str] = []
            q.engine.conn.set_trace_callback(seen.append)
            listed, _ = q.workers()
            q.engine.conn.set_trace_callback(None)
        assert len(listed) == n and sum(len(w["jobs"]) for w in listed) == n
        statements[n] = len(seen)
    assert statements[10] == statements[100], statements


def test_doctor_checks_the_workers_table_on_both_engines():
    from jobctl.engines import pg_schema, schema

    for layout in (schema.expected_layout(), pg_schema.expected_layout()):
        assert {"table workers", "column workers.last_seen", "column workers.request", "index workers_worker"} <= layout


def test_the_first_log_line_names_the_database_without_its_password(tmp_path, pg_url):
    from urllib.parse import urlsplit, urlunsplit

    config(tmp_path, "true")
    parts = urlsplit(pg_url)
    url, secret = pg_url, parts.password
    if secret is None:  # (trust authentication takes any password)
        secret = "s3cret-pw"
        url = urlunsplit(parts._replace(netloc=f"{parts.username}:{secret}@{parts.netloc.split('@', 1)[-1]}"))
    code, log = finish(start_worker(tmp_path, url, "--stop-when-empty", name="a"))
    first = log.splitlines()[0]
    assert code == 0 and f"started: database postgresql://{parts.username}:***@" in first, log
    assert f"config {tmp_path / 'jobctl.toml'};" in first and secret not in log


@pytest.mark.parametrize("step", [3600, -3600], ids=["forward", "back"])
def test_a_step_of_the_wall_clock_makes_no_worker_lost_and_none_alive(tmp_path, step):
    """On SQLite a worker's renewals are timed on the boot clock too: the wall clock stepped an
    hour (either way) leaves a live worker running (workers, stats' alive count, drain), and a
    dead one turns lost after three renewal periods all the same; a row of an earlier boot is lost."""
    from conftest import Clock, T0
    from jobctl.engines.sqlite import boot_id
    from jobctl.queue import Queue

    if boot_id() is None:
        pytest.skip("no boot clock here (Linux only)")
    wall, boot = Clock(T0), Clock(1000.0)
    with Queue.open(tmp_path / "jobs.db", create=True, clock=wall) as q:
        q.engine.boot_clock = boot
        for name in ("alive", "dead"):
            q.engine.register_worker(name, {"worker": name, "host": "h", "pid": 1, "version": "0", "queues": None,
                                            "types": ["t"], "concurrency": 1, "renew_ms": 10_000, "state": "running"})
        wall.t += step  # no time passes
        assert {e["worker"]: e["state"] for e in q.workers()[0]} == {"alive": "running", "dead": "running"}
        assert q.worker_summary() == {"alive": 2, "lost": 0}
        for _ in range(4):  # 40 s: the live one renews every 10 s, the dead one does not
            wall.t += 10
            boot.t += 10
            q.engine.renew_worker("alive", "running", 0, 0)
        assert {e["worker"]: e["state"] for e in q.workers()[0]} == {"alive": "running", "dead": "lost"}
        assert [r["worker"] for r in q.order_workers("drain")] == ["alive"]
        q.engine.conn.execute("UPDATE workers SET seen_boot_id = seen_boot_id + 1")  # the host rebooted since
        assert q.worker_summary() == {"alive": 0, "lost": 2}
