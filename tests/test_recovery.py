"""Issue 2, test 7: recover. An expired lease goes back to pending, or to buried with no runs left,
or to cancelled when cancellation was requested; the old holder's token is then refused.
--older-than also catches silent workers; --dry-run changes nothing."""

import json
import subprocess
import time

import pytest

from conftest import Clock, JOBCTL, file_history, snapshot
from jobctl.queue import Queue


@pytest.fixture
def past(db):
    """A queue whose clock is an hour behind: leases taken through it have long expired."""
    with Queue.open(db, create=True, clock=Clock(time.time() - 3600)) as q:
        yield q


def lost_job(past, status="running", **options):
    """A job whose worker was lost an hour ago."""
    job_id = past.enqueue(f"t{time.monotonic_ns()}", **options).id
    job = past.claim(worker="w-lost", lease="1m", types=[past.get(job_id).type])
    assert job.id == job_id
    if status == "cancel_requested":
        past.cancel(job_id)
    return job_id, job.token


def recover(cli, *args):
    r = cli("recover", "--json", *args)
    assert r.exit_code == 0, r.output
    return [json.loads(line) for line in r.stdout.splitlines()]


def test_expired_with_runs_left_goes_back_to_pending(cli, db, past):
    job_id, token = lost_job(past, max_attempts=3)
    before = time.time()
    assert recover(cli) == [{"id": job_id, "action": "requeued"}]
    with Queue.open(db) as q:
        job = q.get(job_id)
        assert job.status == "pending" and job.attempts == 1  # the lost run counts
        assert before - 0.001 <= job.run_at / 1000 <= time.time()  # ready at once, no backoff
        assert job.token is None and job.worker is None and job.lease_expires_at is None
        assert "w-lost" in job.error and "lost" in job.error
        event = q.events(job_id)[-1]
        assert (event.from_status, event.to_status) == ("running", "pending") and "lost" in event.message
        file_history(db)
        run = q.engine.conn.execute("SELECT outcome, worker FROM runs WHERE job_id = ?", (job_id,)).fetchall()
        assert [tuple(r) for r in run] == [("lost", "w-lost")]
    # claimable again at once, under a new token; the old one is refused
    again = json.loads(cli("claim").stdout)
    assert again["id"] == job_id and again["attempt"] == 2 and again["token"] != token
    for args in (["complete", job_id, "--token", token], ["fail", job_id, "--token", token],
                 ["heartbeat", job_id, "--token", token]):
        r = cli(*args)
        assert r.exit_code == 4, r.output
    assert cli("complete", job_id, "--token", again["token"]).exit_code == 0


def test_expired_with_no_runs_left_is_buried(cli, db, past):
    job_id, token = lost_job(past, max_attempts=1)
    assert recover(cli) == [{"id": job_id, "action": "buried"}]
    job = json.loads(cli("show", job_id, "--json").stdout)
    assert job["status"] == "buried" and job["finished_at"] is not None
    assert "lost" in job["error"] and "lost" in job["events"][-1]["message"]
    r = cli("complete", job_id, "--token", token)
    assert r.exit_code == 4 and "buried" in r.stderr


def test_expired_with_cancellation_requested_is_cancelled(cli, db, past):
    job_id, token = lost_job(past, "cancel_requested", max_attempts=5)
    assert recover(cli) == [{"id": job_id, "action": "cancelled"}]
    assert json.loads(cli("show", job_id, "--json").stdout)["status"] == "cancelled"
    r = cli("cancel", job_id, "--token", token)
    assert r.exit_code == 4, r.output


def test_live_leases_are_left_alone(cli, db, past):
    lost, _ = lost_job(past)
    with Queue.open(db) as q:
        live = q.enqueue("live").id
        q.claim(worker="w-live", lease="10m", types=["live"])
        pending = q.enqueue("waiting").id
    assert recover(cli) == [{"id": lost, "action": "requeued"}]
    assert recover(cli) == []
    with Queue.open(db) as q:
        assert q.get(live).status == "running" and q.get(pending).status == "pending"


def test_older_than_catches_a_silent_worker(cli, db):
    with Queue.open(db, create=True, clock=Clock(time.time() - 600)) as q:
        silent = q.enqueue("t").id
        q.claim(worker="w-silent", lease="1h")  # ten minutes ago, lease still valid
        chatty = q.enqueue("t").id
        chatty_token = q.claim(worker="w-chatty", lease="1h").token
    with Queue.open(db) as q:
        q.heartbeat(chatty, token=chatty_token, extend="1h")  # just now
    assert recover(cli) == []
    assert recover(cli, "--older-than", "15m") == []
    assert recover(cli, "--older-than", "5m") == [{"id": silent, "action": "requeued"}]
    with Queue.open(db) as q:
        assert q.get(chatty).status == "running"
        assert "silent" in q.events(silent)[-1].message


def test_dry_run_changes_nothing(cli, db, past):
    a, _ = lost_job(past, max_attempts=3)
    b, _ = lost_job(past, max_attempts=1)
    c, _ = lost_job(past, "cancel_requested")
    before = snapshot(db)
    r = cli("recover", "--dry-run", "--json")
    assert r.exit_code == 0, r.output
    assert [json.loads(x) for x in r.stdout.splitlines()] == [
        {"id": a, "action": "requeued", "dry_run": True}, {"id": b, "action": "buried", "dry_run": True},
        {"id": c, "action": "cancelled", "dry_run": True}]
    r = cli("recover", "--dry-run")
    assert r.exit_code == 0 and "would be requeued" in r.stdout and "would be buried" in r.stdout
    assert snapshot(db) == before
    assert [x["action"] for x in recover(cli)] == ["requeued", "buried", "cancelled"]
    assert '"dry_run": true' in " ".join(cli("recover", "--help").stdout.split())  # the extra key is told


def test_human_output(cli, db, past):
    r = cli("recover")
    assert r.exit_code == 0 and "no expired leases" in r.stdout
    job_id, _ = lost_job(past)
    r = cli("recover")
    assert r.exit_code == 0, r.output
    assert str(job_id) in r.stdout and "w-lost" in r.stdout and "requeued" in r.stdout


def test_bad_older_than(cli, db, past):
    lost_job(past)
    before = snapshot(db)
    r = cli("recover", "--older-than", "a while")
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1
    assert snapshot(db) == before


def test_concurrent_sweeps_act_once(db, past):
    ids = [lost_job(past)[0] for _ in range(50)]
    procs = [subprocess.Popen([*JOBCTL, "--db", str(db), "recover", "--json"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    acted = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        acted += [json.loads(x)["id"] for x in out.splitlines()]
    assert sorted(acted) == ids
    file_history(db)
    with Queue.open(db) as q:
        assert q.engine.conn.execute("SELECT count(*) FROM runs WHERE outcome = 'lost'").fetchone()[0] == 50


def test_a_job_whose_worker_keeps_dying_ends_buried(db):
    clock = Clock(time.time())
    with Queue.open(db, create=True, clock=clock) as q:
        job_id = q.enqueue("t", max_attempts=3).id
        actions = []
        for _ in range(3):
            assert q.claim(worker="w", lease="1s").id == job_id
            clock.t += 2
            actions += [a for _, a in q.recover()]
        assert actions == ["requeued", "requeued", "buried"]
        assert q.get(job_id).attempts == 3


# -- recover --quiet, for cron ---------------------------------------------------------------------

def test_recover_quiet_prints_nothing_when_nothing_was_done(cli):
    cli("enqueue", "t")
    r = cli("recover")
    assert r.exit_code == 0 and r.stdout.strip() == "no expired leases"
    r = cli("recover", "--quiet")
    assert (r.exit_code, r.stdout, r.stderr) == (0, "", "")


def test_recover_quiet_still_reports_what_it_did(cli):
    cli("enqueue", "t")
    job = json.loads(cli("claim", "--lease", "1s").stdout)
    import time

    time.sleep(1.2)
    r = cli("recover", "--quiet")  # the first run acts, and says so
    assert r.exit_code == 0 and str(job["id"]) in r.stdout and "requeued" in r.stdout and not r.stderr, r.output
    r = cli("recover", "--quiet")  # nothing left: silent
    assert (r.exit_code, r.stdout, r.stderr) == (0, "", ""), r.output
