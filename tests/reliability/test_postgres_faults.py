"""PostgreSQL faults under a running worker: connections cut from under it with
`pg_terminate_backend` of the server processes that serve one `jobctl work` (found by the client
ports of that worker's own sockets, so no other test's connection is touched) while its handlers
run, and a table lock held by someone else.

The worker must reconnect, record each outcome exactly once and lose nothing; a claim whose lease
expired while its worker could not reach the server is recovered by another worker, and the late
report of the first is refused by its token. A lock is waited out, without spinning."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from .test_worker_torture import RECORD, SLOW_RECORD, rescue_while_frozen, cpu_seconds, drain, wait_for
from .util import assert_each_completed_once, assert_rescued_once, jobs, pg_rows, rows, run_cli


# -- finding and cutting one process's connections ------------------------------------------------

def server_port(url: str) -> int:
    return urlsplit(url).port or 5432


def client_ports(pid: int, port: int) -> set[int]:
    """The local ports of the TCP connections that process `pid` holds to the server's `port`."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
    except FileNotFoundError:
        return set()
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            local, remote, inode = fields[1], fields[2], fields[9]
            if inode in inodes and int(remote.rsplit(":", 1)[1], 16) == port:
                ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


def terminate(url: str, pid: int, *, spare: frozenset[int] | set[int] = frozenset()) -> int:
    """pg_terminate_backend of every server process serving `pid`'s connections (but those from
    the client ports in `spare`); how many."""
    ports = client_ports(pid, server_port(url)) - spare
    if not ports:
        return 0
    found = pg_rows(url, "SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity "
                         "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                         "AND client_port = ANY(%s)", (sorted(ports),))
    return sum(1 for r in found if r["ok"])


def connections(url: str, pid: int) -> int:
    ports = client_ports(pid, server_port(url))
    if not ports:
        return 0
    return pg_rows(url, "SELECT count(*) AS n FROM pg_stat_activity WHERE client_port = ANY(%s)",
                   (sorted(ports),))[0]["n"]


# -- the core API: a connection killed between two calls ------------------------------------------

@pytest.mark.shared  # outcomes only: runs beside other tests
def test_a_queue_whose_connection_was_killed_fails_retryably_then_reconnects_and_records_once(pg_url):
    from jobctl.errors import DatabaseBusy, JobctlError
    from jobctl.queue import Queue

    ours_before = client_ports(os.getpid(), server_port(pg_url))  # the test's own admin connection
    q = Queue.open(pg_url, create=True)
    try:
        job_id = q.enqueue("t", {"i": 1}).id
        job = q.claim(worker="w")
        assert job is not None and job.id == job_id
        assert terminate(pg_url, os.getpid(), spare=ours_before) >= 1
        try:
            q.complete(job_id, token=job.token, result={"ok": 1}, actor="w")
        except JobctlError as e:
            # nothing was written: the caller (the worker) waits and tries again
            assert isinstance(e, DatabaseBusy), f"a dropped connection must be a retryable outage: {e!r}"
            assert q.get(job_id).status == "running"
            q.complete(job_id, token=job.token, result={"ok": 1}, actor="w")
        assert q.get(job_id).status == "completed"
        assert [ev.to_status for ev in q.events(job_id)] == ["pending", "running", "completed"]
        # and the connection it made again serves the next calls
        assert q.claim(worker="w") is None
    finally:
        q.close()


# -- a worker's connections killed while its handler runs -----------------------------------------

# Each run records its start, then waits until the test lets it finish (a file per job), so the
# test knows the handler is running while it cuts the worker's connections.
GATED = RECORD + '; while [ ! -e "$RUNLOG.go.$JOBCTL_JOB_ID" ]; do sleep 0.02; done; echo \'{"ok": true}\''


@pytest.mark.slow
@pytest.mark.shared  # outcomes only: runs beside other tests
def test_worker_reconnects_when_its_connections_are_killed_mid_run_and_records_each_job_once(pg_url, env):
    e = env(db=pg_url, command=["/bin/sh", "-c", GATED], lease="30s")
    ids = e.enqueue(6)
    w = e.worker("cut", "--stop-when-empty", "--poll", "200ms")
    go = lambda job_id: Path(f"{e.runlog}.go.{job_id}").touch()  # noqa: E731
    cuts = 0
    for n, job_id in enumerate(ids[:4]):
        wait_for(lambda: job_id in e.runs(), what=f"job {job_id} to start")
        assert w.poll() is None, w.log.read_text()
        cuts += terminate(pg_url, w.pid)
        if n == 1:
            # the handler outlives a heartbeat on the dead connection (a third of the lease is
            # 10 s: too long to wait, so give it a moment and let the completion meet it instead)
            time.sleep(0.5)
        if n == 2:
            # jobs enqueued while the worker's connections are down still reach it
            ids += e.enqueue(3)
        go(job_id)
    for job_id in ids[4:]:
        go(job_id)
    assert w.wait(timeout=120) == 0, w.log.read_text()[-3000:]
    assert cuts >= 4, f"only {cuts} server processes were terminated"

    log = w.log.read_text()
    assert "Traceback" not in log, log
    runs = e.runs()
    assert sorted(runs) == sorted(ids), "a job never ran"
    assert {job_id: a for job_id, a in runs.items() if a != [1]} == {}, "a job ran twice"
    # each outcome was recorded exactly once: one run, one claim and one completion per job
    assert_each_completed_once(e.db, ids)


@pytest.mark.slow
def test_a_lease_that_expired_while_the_worker_was_cut_off_is_recovered_and_its_late_report_refused(pg_url, env):
    # The worker is frozen (SIGSTOP) with its handler running and its connections killed: when it
    # wakes, it finds them dead, reconnects, and learns that its claim is no longer its own.
    e = env(db=pg_url, command=["/bin/sh", "-c", SLOW_RECORD], lease="1s", recover_every="200ms")
    [job_id] = e.enqueue(1)
    a = e.worker("cut-off", "--max-jobs", "1")

    def cut_off():
        assert terminate(pg_url, a.pid) >= 1
        wait_for(lambda: connections(pg_url, a.pid) == 0, what="the server to drop the connections")

    b = rescue_while_frozen(e, job_id, a, during=cut_off)
    events = assert_rescued_once(e.db, job_id, b.pid)
    assert "cut-off" in events[2]["message"] and "lost" in events[2]["message"]
    log = a.log.read_text()
    assert f"lost job {job_id}" in log and ("not recorded" in log or "no longer ours" in log), log
    assert "Traceback" not in log


@pytest.mark.slow
@pytest.mark.shared  # outcomes only (a 30 s lease, 10 s for a start that takes well under 1): runs beside other tests
def test_an_idle_worker_whose_connections_were_killed_still_wakes_on_new_jobs(pg_url, env):
    # (whether it listens again is checked on the engine itself, below: the worker's own idle
    # claims, whose pace slows towards the poll interval, would find the jobs anyway)
    e = env(db=pg_url, command=["/bin/sh", "-c", RECORD], lease="30s", recover_every="1h")
    e.enqueue(1)
    w = e.worker("idle", "--poll", "30s")
    wait_for(lambda: len(e.runs()) == 1, what="the first job")
    for n in range(2, 5):
        wait_for(lambda: connections(pg_url, w.pid) >= 1, what="the worker to be connected")
        time.sleep(0.5)  # idle, waiting for news
        assert terminate(pg_url, w.pid) >= 1
        time.sleep(0.5)
        e.enqueue(1)
        wait_for(lambda: len(e.runs()) == n, timeout=10, what=f"job {n} to start before the next poll")
    assert w.poll() is None, w.log.read_text()
    w.send_signal(signal.SIGTERM)
    assert w.wait(timeout=60) == 0, w.log.read_text()
    assert {j["status"] for j in jobs(e.db).values()} == {"completed"}
    assert "Traceback" not in w.log.read_text()


@pytest.mark.shared  # outcomes only: runs beside other tests
def test_the_listening_connection_killed_is_replaced_and_listens_again(pg_url):
    from jobctl.queue import Queue

    ours_before = client_ports(os.getpid(), server_port(pg_url))  # the test's own, if any
    with Queue.open(pg_url, create=True) as q:
        q.has_changed()  # opens the listening connection
        q.has_changed()
        assert terminate(pg_url, os.getpid(), spare=ours_before) >= 1
        q.wait_for_change(0.5)  # finds it dead and listens again (which counts as news)
        q.has_changed()
        other = threading.Timer(0.3, lambda: run_cli("enqueue", "t", "{}", db=pg_url))  # another process
        other.start()
        try:
            # True: a notification came before the timeout ran out
            assert q.wait_for_change(20) is True, "no notification after the listening connection was replaced"
        finally:
            other.join()


# -- connections killed at random moments, two workers, many short jobs -------------------------

@pytest.mark.slow
@pytest.mark.shared  # outcomes only: runs beside other tests
def test_connections_killed_at_random_moments_lose_nothing_and_complete_each_job_once(pg_url, env):
    """A kill can land anywhere, a commit included: if a claim's COMMIT reached the server but its
    answer did not reach the worker, the job stays running until its lease expires and then runs
    again (attempt 2, its lost run on record). Never twice for one attempt, never completed twice."""
    e = env(db=pg_url, command=["/bin/sh", "-c", RECORD + "; sleep 0.01"], lease="2s", recover_every="300ms")
    ids = e.enqueue(600)
    workers = [e.worker(f"cut-{i}", "--poll", "100ms") for i in range(2)]
    rng = random.Random(os.environ.get("JOBCTL_TEST_SEED", "5"))
    stop = threading.Event()
    cuts = []

    def killer():
        while not stop.is_set():
            time.sleep(rng.uniform(0.02, 0.2))
            victim = rng.choice(workers)
            if victim.poll() is None:
                cuts.append(terminate(pg_url, victim.pid))

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    try:
        wait_for(lambda: rows(e.db, "SELECT count(*) AS n FROM jobs WHERE status = 'completed'")[0]["n"] >= len(ids)
                 or any(p.poll() is not None for p in workers), timeout=180, what="the jobs to be done")
    finally:
        stop.set()
        t.join()
    for p in workers:
        assert p.poll() is None, f"{p.name} died:\n" + p.log.read_text()[-3000:]
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 0, p.log.read_text()[-3000:]
    drain(e)
    assert sum(cuts) >= 10, f"only {sum(cuts)} server processes were terminated"

    table = jobs(e.db)
    assert {j["status"] for j in table.values()} == {"completed"}, Counter(j["status"] for j in table.values())
    runs = e.runs()
    history = defaultdict(list)
    for r in rows(e.db, "SELECT job_id, outcome FROM runs ORDER BY id"):
        history[r["job_id"]].append(r["outcome"])
    again = 0
    for job_id in ids:
        attempts = table[job_id]["attempts"]
        observed = runs.get(job_id, [])
        assert history[job_id].count("completed") == 1, (job_id, history[job_id])
        assert len(observed) == len(set(observed)), f"job {job_id}: one attempt ran twice"
        assert attempts in observed, f"job {job_id}: the completing run left no trace"
        # a claim that did not end in this job's completion was lost (its lease expired)
        assert history[job_id] == ["lost"] * (attempts - 1) + ["completed"], (job_id, history[job_id])
        again += attempts > 1
    for p in workers:
        assert "Traceback" not in p.log.read_text()
    print(f"{sum(cuts)} server processes terminated; {again} jobs claimed again after a lost answer")


# -- a one-shot command whose connection is killed ---------------------------------------------------

@pytest.mark.slow
def test_enqueue_batch_whose_connection_is_killed_is_all_or_nothing_with_one_error_line(pg_url, tmp_path):
    from conftest import JOBCTL, Result

    n = 6_000  # the batch's insert runs for about a second: long enough to be cut in any of its phases
    batch = tmp_path / "batch.ndjson"
    batch.write_text("".join(json.dumps({"type": "t", "payload": {"n": i, "pad": "x" * 40}}) + "\n" for i in range(n)))
    assert run_cli("init", db=pg_url).exit_code == 0
    started = time.monotonic()
    r = run_cli("enqueue", "--batch", batch, db=pg_url, timeout=120)
    took = time.monotonic() - started
    assert r.exit_code == 0 and len(r.stdout.split()) == n, r.output
    rng = random.Random(os.environ.get("JOBCTL_TEST_SEED", "3"))
    stored, cut = n, 0
    for attempt in range(8):
        p = subprocess.Popen([*JOBCTL, "--db", pg_url, "enqueue", "--batch", str(batch)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        # cut at a random moment of its run: while it reads the batch, inserts, commits, or after
        # (not in its first fifth: the process has not connected yet, and a cut there cuts nothing)
        time.sleep(rng.uniform(0.2 * took, took))
        cut += terminate(pg_url, p.pid) > 0
        out, err = p.communicate(timeout=120)
        r = Result(subprocess.CompletedProcess(p.args, p.returncode, out, err))
        now = rows(pg_url, "SELECT count(*) AS n FROM jobs")[0]["n"]
        if r.exit_code == 0:
            stored += n
            assert len(out.split()) == n, r.output
        else:
            assert r.exit_code in (6, 8), r.output
            r.one_error_line()
            assert out == "", "ids were printed for a batch that is not stored"
        assert now == stored, f"attempt {attempt}: {now} jobs stored, expected {stored} (a partial batch?)"
    assert cut >= 3, f"only {cut} of 8 batches were cut"
    assert rows(pg_url, "SELECT count(*) AS n FROM events")[0]["n"] == stored


@pytest.mark.shared  # outcomes only: runs beside other tests
def test_a_table_changed_under_a_running_queue_is_met_with_a_jobctl_error_not_a_driver_error(pg_url):
    """A newer jobctl migrating the schema (here: a column added to jobs) while this one's
    connection holds statements prepared against the old table: the next call must not surface
    the driver's "cached plan must not change result type" as a raw exception (a worker would die
    with a traceback); jobctl's own error, or a call that simply works, is fine."""
    import psycopg2

    from jobctl.errors import JobctlError
    from jobctl.queue import Queue

    with Queue.open(pg_url, create=True) as q:
        ids = [q.enqueue("t", {"i": i}).id for i in range(6)]
        for _ in range(3):  # the claim's and completion's statements are prepared by now
            job = q.claim(worker="w")
            q.complete(job.id, token=job.token, actor="w")
        admin = psycopg2.connect(pg_url)
        admin.autocommit = True
        try:
            admin.cursor().execute("ALTER TABLE jobs ADD COLUMN added_by_a_newer_jobctl TEXT")
        finally:
            admin.close()
        try:
            job = q.claim(worker="w")
            q.complete(job.id, token=job.token, actor="w")
        except JobctlError:
            return
        assert q.get(ids[3]).status == "completed"


# -- a lock held by someone else -------------------------------------------------------------------

@pytest.mark.slow
def test_worker_waits_out_a_locked_jobs_table_without_spinning_then_continues(pg_url, env):
    import psycopg2

    # each handler takes 100 ms, so the worker is still busy when the lock is taken however fast it gets
    e = env(db=pg_url, lease="30s", command=["/bin/sh", "-c", RECORD + "; sleep 0.1"])
    ids = e.enqueue(20)
    e.env["JOBCTL_BUSY_TIMEOUT"] = "500ms"  # the lock outlasts the worker's lock timeout many times
    w = e.worker("patient", "--stop-when-empty", "--poll", "100ms")
    wait_for(lambda: len(e.runs()) >= 1, what="the first job")
    holder = psycopg2.connect(pg_url)  # as a migration or a careless operator would: the whole table
    try:
        holder.cursor().execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
        wait_for(lambda: "db-busy" in w.log.read_text(), what="the worker to notice the lock")
        before = cpu_seconds(w.pid)
        time.sleep(1)  # (half a core at most, as 1 s of CPU over 2 s was: a spinning worker takes all of one)
        assert w.poll() is None, "the worker died on a locked table:\n" + w.log.read_text()
        assert cpu_seconds(w.pid) - before < 0.5, "the worker spins while the table is locked"
    finally:
        holder.rollback()
        holder.close()
    assert w.wait(timeout=120) == 0, w.log.read_text()
    assert sorted(e.runs()) == ids and all(a == [1] for a in e.runs().values())
    table = jobs(e.db)
    assert {j["status"] for j in table.values()} == {"completed"} and {j["attempts"] for j in table.values()} == {1}
    log = w.log.read_text()
    assert "Traceback" not in log and "db-ok" in log, log


# -- hosts whose clocks disagree -----------------------------------------------------------------------

# A worker whose host clock is `shift` seconds off (time.time and time.time_ns: what a host clock
# engine would stamp leases with); its monotonic clock, and the server's, are true.
SHIFTED_WORKER = textwrap.dedent("""
    import sys, time
    real_time, real_ns, shift = time.time, time.time_ns, float(sys.argv[1])
    time.time = lambda: real_time() + shift
    time.time_ns = lambda: real_ns() + int(shift * 1e9)
    from jobctl.cli import main
    sys.argv = ["jobctl", *sys.argv[2:]]
    main()
""")


@pytest.mark.slow
@pytest.mark.parametrize("holder_shift, sweeper_shift", [(-3600, 0), (0, 3600)], ids=["holder-behind", "sweeper-ahead"])
def test_hosts_whose_clocks_disagree_do_not_expire_each_others_leases(pg_url, env, holder_shift, sweeper_shift):
    # The holder's handler runs 2.5 s on a 1 s lease (renewed every third of it: its lease would
    # have run out twice over without them); the sweeper, started once the run has, recovers
    # expired leases every 200 ms, some ten sweeps meanwhile. By the server's clock the lease
    # never runs out. (4 s proved no more.)
    e = env(db=pg_url, command=["/bin/sh", "-c", RECORD + "; sleep 2.5"], lease="1s", recover_every="200ms")
    [job_id] = e.enqueue(1)

    def worker(name, shift, *args):
        p = subprocess.Popen([sys.executable, "-c", SHIFTED_WORKER, str(shift), "--db", str(e.db), "--config",
                              str(e.config), "work", "--worker", name, *args], env=e.env,
                             stdout=subprocess.DEVNULL, stderr=open(e.dir / f"{name}.log", "ab"))
        p.name, p.log = name, e.dir / f"{name}.log"
        e.procs.append(p)
        return p

    holder = worker("holder", holder_shift, "--max-jobs", "1")
    wait_for(lambda: e.runs().get(job_id), what="the run to start")
    sweeper = worker("sweeper", sweeper_shift, "--poll", "100ms")
    assert holder.wait(timeout=60) == 0, holder.log.read_text()
    assert sweeper.poll() is None, sweeper.log.read_text()
    sweeper.send_signal(signal.SIGTERM)
    assert sweeper.wait(timeout=60) == 0, sweeper.log.read_text()
    assert e.runs()[job_id] == [1], "the job ran again: a lease was judged by a host's clock"
    job = jobs(e.db)[job_id]
    assert job["status"] == "completed" and job["attempts"] == 1, job
    assert [r["outcome"] for r in rows(e.db, "SELECT outcome FROM runs WHERE job_id = ?", (job_id,))] == ["completed"]
    # and the times on record are the server's, not the holder's
    now_ms = time.time() * 1000
    assert abs(job["claimed_at"] - now_ms) < 600_000 and abs(job["finished_at"] - now_ms) < 600_000, job
