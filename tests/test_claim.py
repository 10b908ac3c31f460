"""SPEC §4 claim: the order (listed queues first, then priority, run_at, id), delayed jobs, --after
dependencies, paused queues, --type, --wait."""

import json
import os
import subprocess
import time

from conftest import JOBCTL


def drain(q, **options):
    ids = []
    while (job := q.claim(worker="w", **options)) is not None:
        ids.append(job.id)
    return ids


def test_priority_then_run_at_then_id(q, clock):
    low = q.enqueue("t", priority="low").id
    a = q.enqueue("t").id
    crit = q.enqueue("t", priority="critical").id
    b = q.enqueue("t").id
    clock.t -= 10  # enqueued "earlier": an earlier run_at than a and b, same priority
    early = q.enqueue("t").id
    clock.t += 10
    high = q.enqueue("t", priority=20).id
    neg = q.enqueue("t", priority=-1000).id
    top = q.enqueue("t", priority=1000).id
    assert drain(q) == [top, crit, high, early, a, b, low, neg]


def test_run_at_beats_id_at_equal_priority(q, clock):
    later = q.enqueue("t", delay="30s").id
    sooner = q.enqueue("t", delay="10s").id
    clock.t += 60
    assert drain(q) == [sooner, later]


def test_listed_queues_in_order_before_priority(q):
    b_crit = q.enqueue("t", queue="b", priority="critical").id
    a_low = q.enqueue("t", queue="a", priority="low").id
    c_job = q.enqueue("t", queue="c", priority="critical").id
    a_high = q.enqueue("t", queue="a", priority="high").id
    assert drain(q, queues=["a", "b"]) == [a_high, a_low, b_crit]
    assert drain(q) == [c_job]


def test_without_queues_every_queue_by_priority(q):
    x = q.enqueue("t", queue="x", priority="low").id
    y = q.enqueue("t", queue="y", priority="high").id
    assert drain(q) == [y, x]


def test_type_filter(q):
    a = q.enqueue("a").id
    b = q.enqueue("b", priority="high").id
    c = q.enqueue("c").id
    assert drain(q, types=["a", "c"]) == [a, c]
    assert drain(q) == [b]


def test_delayed_jobs_wait_for_their_time(q, clock):
    job_id = q.enqueue("t", delay="5m").id
    assert q.claim(worker="w") is None
    clock.t += 299.999
    assert q.claim(worker="w") is None
    clock.t += 0.001
    assert q.claim(worker="w").id == job_id


def test_at_in_the_future(q, clock):
    job_id = q.enqueue("t", at="2030-03-17T17:46:41Z").id  # T0 + 1 s
    assert q.claim(worker="w") is None
    clock.t += 1
    assert q.claim(worker="w").id == job_id


def test_after_blocks_until_every_dependency_completed(q):
    a = q.enqueue("t").id
    b = q.enqueue("t").id
    c = q.enqueue("t", after=[a, b], priority="critical").id
    ja = q.claim(worker="w")
    assert ja.id == a
    jb = q.claim(worker="w")
    assert jb.id == b
    assert q.claim(worker="w") is None  # c waits on both
    q.complete(a, token=ja.token)
    assert q.claim(worker="w") is None  # still waits on b
    q.complete(b, token=jb.token)
    jc = q.claim(worker="w")
    assert jc.id == c and jc.after == [a, b]


def test_after_a_completed_job_is_ready_at_once(q):
    a = q.enqueue("t").id
    q.complete(a, token=q.claim(worker="w").token)
    c = q.enqueue("t", after=[a]).id
    assert q.claim(worker="w").id == c


def test_a_failed_dependency_keeps_blocking(q, clock):
    a = q.enqueue("t", max_attempts=2, backoff="fixed").id
    c = q.enqueue("t", after=[a]).id
    q.fail(a, token=q.claim(worker="w").token)  # retried: not completed
    clock.t += 60
    assert q.claim(worker="w").id == a
    assert q.claim(worker="w") is None
    q.fail(a, token=q.get(a).token)  # buried
    assert q.claim(worker="w") is None
    q.cancel(a)
    assert q.claim(worker="w") is None
    assert q.get(c).status == "pending" and q.get(c).waiting_on == 1


def test_after_through_the_cli(cli):
    a = int(cli("enqueue", "t").stdout)
    c = int(cli("enqueue", "t", "--after", a).stdout)
    first = json.loads(cli("claim").stdout)
    assert first["id"] == a
    r = cli("claim")
    assert r.exit_code == 5 and r.stdout == ""
    assert cli("complete", a, "--token", first["token"]).exit_code == 0
    assert json.loads(cli("claim").stdout)["id"] == c


def test_paused_queue(q):
    a = q.enqueue("t", queue="a").id
    b = q.enqueue("t", queue="b", priority="low").id
    q.pause("a")
    q.pause("a")  # idempotent
    assert q.enqueue("t", queue="a").id  # enqueue still works
    assert drain(q) == [b]
    assert q.claim(worker="w", queues=["a"]) is None
    q.resume("a")
    assert drain(q, queues=["a"]) == [a, a + 2]


def test_pause_through_the_cli(cli):
    cli("enqueue", "t", "-q", "billing")
    assert cli("pause", "billing").exit_code == 0
    r = cli("claim")
    assert r.exit_code == 5 and r.stdout == "" and len(r.stderr.splitlines()) == 1
    assert cli("resume", "billing").exit_code == 0
    assert cli("claim").exit_code == 0
    assert cli("pause", "bad name").exit_code == 2


def test_nothing_to_claim_is_exit_5_with_nothing_on_stdout(cli):
    cli("init")
    r = cli("claim")
    assert r.exit_code == 5 and r.stdout == ""
    assert r.stderr.startswith("jobctl: error: ") and len(r.stderr.splitlines()) == 1


def test_claim_output_and_worker_id(cli, cli_process):
    job_id = int(cli("enqueue", "t", '{"k": [1, "two"]}').stdout)
    job = json.loads(cli("claim", env={"JOBCTL_WORKER_ID": "box:7"}).stdout)
    assert job["id"] == job_id and job["worker"] == "box:7" and job["payload"] == {"k": [1, "two"]}
    assert job["attempt"] == 1 and job["claimed_at"].endswith("Z") and job["lease_expires_at"].endswith("Z")
    cli("enqueue", "t")
    job = json.loads(cli_process("claim").stdout)  # a real process: its parent is this one
    host, _, pid = job["worker"].rpartition(":")
    assert host and pid == str(os.getpid())  # host:pid of the calling process's parent


def test_lease_defaults_to_the_timeout(q, clock):
    q.enqueue("t", timeout="2m")
    job = q.claim(worker="w")
    assert job.lease_expires_at - job.claimed_at == 120_000
    q.enqueue("t", timeout="2m")
    job = q.claim(worker="w", lease="15s")
    assert job.lease_expires_at - job.claimed_at == 15_000


def test_wait_returns_a_job_enqueued_meanwhile(cli, db):
    cli("init")
    start = time.monotonic()
    waiting = subprocess.Popen([*JOBCTL, "--db", str(db), "claim", "--wait", "20s"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    job_id = int(cli("enqueue", "t").stdout)
    out, err = waiting.communicate(timeout=30)
    assert waiting.returncode == 0, err
    assert json.loads(out)["id"] == job_id
    assert time.monotonic() - start < 20  # it did not sit out the whole wait


def test_wait_outlasts_a_lock_held_past_the_busy_timeout(cli, db):
    """`claim --wait 20s` polls for 20 s: another process holding the write lock for longer than
    the busy timeout (a purge, a bulk retry) is a moment to wait out, not exit 6 after 500 ms."""
    import sqlite3

    assert cli("enqueue", "t").exit_code == 0
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        waiting = subprocess.Popen([*JOBCTL, "--db", str(db), "--busy-timeout", "500ms", "claim", "--wait", "20s"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(2)  # four busy timeouts
        assert waiting.poll() is None, waiting.communicate()
    finally:
        holder.execute("COMMIT")
        holder.close()
    out, err = waiting.communicate(timeout=30)
    assert (waiting.returncode, err) == (0, ""), err
    assert json.loads(out)["id"] == 1


def test_wait_that_ends_while_the_lock_is_held_is_busy(cli, db):
    import sqlite3

    assert cli("enqueue", "t").exit_code == 0
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        r = cli("--busy-timeout", "200ms", "claim", "--wait", "1s")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert r.exit_code == 6 and "locked by another process" in r.one_error_line(), r.output


def test_wait_runs_out(cli):
    """It waits the whole time it was given (not a claim that gave up at once), then exits 5."""
    cli("init")
    start = time.monotonic()
    r = cli("claim", "--wait", "300ms")
    assert r.exit_code == 5 and r.stdout == "" and "300ms" in r.stderr
    assert time.monotonic() - start >= 0.3


def test_wait_for_a_delayed_job(cli):
    job_id = int(cli("enqueue", "t", "--delay", "3s").stdout)
    assert cli("claim").exit_code == 5
    r = cli("claim", "--wait", "20s")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["id"] == job_id


def test_bad_claim_options(cli):
    cli("init")
    for args in (["--wait", "soon"], ["--lease", "0"], ["--queue", "no spaces"], ["--type", "-x"]):
        r = cli("claim", *args)
        assert r.exit_code == 2, (args, r.output)


# -- pause, resume and claim of queues that do not exist or are not paused -------------------------

def test_resume_refuses_an_unknown_queue_and_creates_nothing(cli, db):
    import sqlite3

    cli("enqueue", "t", "-q", "billing")
    r = cli("resume", "bilnig")
    line = r.one_error_line()
    assert r.exit_code == 2 and "no queue named 'bilnig'" in line and "known queues: billing" in line
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT count(*) FROM queues").fetchone()[0] == 0
    finally:
        conn.close()


def test_resume_refuses_a_queue_that_is_not_paused(cli):
    cli("enqueue", "t", "-q", "billing")
    cli("enqueue", "t", "-q", "email")
    assert cli("pause", "email").exit_code == 0
    r = cli("resume", "billing")
    line = r.one_error_line()
    assert r.exit_code == 2 and "queue billing is not paused" in line and "paused queues: email" in line
    assert cli("resume", "email").exit_code == 0
    r = cli("resume", "email")  # twice: the second one has nothing to do
    assert r.exit_code == 2 and "not paused; paused queues: none" in r.one_error_line()


def test_pause_ahead_of_time_works_and_says_the_queue_has_no_jobs(cli):
    cli("enqueue", "t", "-q", "billing")
    r = cli("pause", "reports")
    assert r.exit_code == 0 and r.stdout == ""
    assert r.stderr == "jobctl: note: queue reports has no jobs yet; paused ahead of time (known queues: billing)\n"
    cli("enqueue", "t", "-q", "reports")
    assert cli("claim", "-q", "reports").exit_code == 5  # the pause holds for the jobs that come
    r = cli("pause", "billing")
    assert (r.exit_code, r.stdout, r.stderr) == (0, "", "")


def test_claim_of_a_paused_queue_says_it_is_paused(cli):
    cli("enqueue", "t", "-q", "billing")
    cli("pause", "billing")
    r = cli("claim", "--queue", "billing")
    assert r.exit_code == 5 and r.stdout == ""
    assert r.one_error_line() == "jobctl: error: no job is ready; queue billing is paused (`jobctl resume billing`)"
    r = cli("claim")  # without --queue: a paused queue is not the claimer's business
    assert r.exit_code == 5 and r.one_error_line() == "jobctl: error: no job is ready"
