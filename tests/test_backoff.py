"""SPEC §2 backoff: the exact delay after each failed run for all four strategies, with an injected
clock; max_attempts=1 buries at once; retry keeps attempts, --reset-attempts clears them."""

import json
import time

import pytest

from jobctl.config import Settings
from jobctl.durations import parse_time
from jobctl.queue import Queue, backoff_delay


def _delays(q, clock, backoff, runs):
    job_id = q.enqueue("t", backoff=backoff, max_attempts=runs + 1).id
    delays = []
    for n in range(1, runs + 1):
        job = q.claim(worker="w")
        assert job is not None and job.id == job_id and job.attempts == n
        failed = q.fail(job_id, token=job.token, error=f"run {n}")
        assert failed.status == "pending" and failed.attempts == n
        delays.append((failed.run_at - q.now()) / 1000)
        clock.t = failed.run_at / 1000 - 0.001
        assert q.claim(worker="w") is None, "claimable before its run_at"
        clock.t = failed.run_at / 1000
    return delays


@pytest.mark.parametrize("backoff,expected", [
    ("exponential", [60, 120, 240, 480, 960, 1920, 3600, 3600, 3600]),
    ("linear", [60, 120, 180, 240, 300, 360]),
    ("fixed", [60, 60, 60, 60]),
    ("10,30,60", [10, 30, 60, 60, 60]),
    ([5, 7], [5, 7, 7]),
    ("2m,1h", [120, 3600, 3600]),
])
def test_exact_delays(q, clock, backoff, expected):
    assert _delays(q, clock, backoff, len(expected)) == expected


def test_default_strategy_is_exponential(q, clock):
    assert _delays(q, clock, None, 3) == [60, 120, 240]
    assert json.loads(json.dumps(q.get(1).to_dict()))["backoff"] == "exponential"


def test_backoff_function_far_out():
    assert backoff_delay("exponential", 1000) == 3600
    assert backoff_delay("linear", 100) == 6000
    assert backoff_delay("1,2", 50) == 2


def test_list_backoff_is_a_list_in_json(q):
    job_id = q.enqueue("t", backoff="10,30,60").id
    assert q.get(job_id).to_dict()["backoff"] == [10, 30, 60]


def test_retry_in_overrides_the_backoff(q, clock):
    job_id = q.enqueue("t", backoff="fixed").id
    job = q.claim(worker="w")
    failed = q.fail(job_id, token=job.token, retry_in="5s")
    assert failed.run_at - q.now() == 5000


def test_delays_with_the_real_clock_through_the_cli(cli, db):
    job_id = int(cli("enqueue", "t", "--backoff", "linear", "--max-attempts", "5").stdout)
    for expected in (60, 120):
        token = json.loads(cli("claim").stdout)["token"]
        before = time.time()
        r = cli("fail", job_id, "--token", token, "--json")
        after = time.time()
        assert r.exit_code == 0, r.output
        run_at = parse_time(json.loads(r.stdout)["run_at"]) / 1000
        assert before + expected - 0.001 <= run_at <= after + expected + 0.001
        assert cli("claim").exit_code == 5  # not before its backoff
        with Queue.open(db) as q:  # make it ready now instead of waiting a minute
            q.engine.conn.execute("UPDATE jobs SET run_at = 0 WHERE id = ?", (job_id,))


def test_max_attempts_1_buries_on_the_first_failure(q):
    job_id = q.enqueue("t", max_attempts=1).id
    job = q.claim(worker="w")
    failed = q.fail(job_id, token=job.token, error="nope")
    assert failed.status == "buried" and failed.attempts == 1 and failed.finished_at == q.now()


def test_last_run_buries(q, clock):
    job_id = q.enqueue("t", max_attempts=3, backoff="fixed").id
    for n in (1, 2, 3):
        job = q.claim(worker="w")
        assert job.attempts == n
        failed = q.fail(job_id, token=job.token)
        clock.t += 60
    assert failed.status == "buried" and failed.attempts == 3


def test_retry_keeps_attempts_so_one_more_failure_buries(q, clock):
    job_id = q.enqueue("t", max_attempts=2, backoff="fixed").id
    for _ in range(2):
        job = q.claim(worker="w")
        q.fail(job_id, token=job.token)
        clock.t += 60
    assert q.get(job_id).status == "buried"
    retried = q.retry(job_id)
    assert retried.status == "pending" and retried.attempts == 2 and retried.run_at == q.now()
    job = q.claim(worker="w")
    assert job.attempts == 3
    assert q.fail(job_id, token=job.token).status == "buried"


def test_reset_attempts_gives_all_runs_again(q, clock):
    job_id = q.enqueue("t", max_attempts=2, backoff="fixed").id
    job = q.claim(worker="w")
    q.fail(job_id, token=job.token, bury=True)
    retried = q.retry(job_id, reset_attempts=True)
    assert retried.attempts == 0
    job = q.claim(worker="w")
    assert job.attempts == 1
    failed = q.fail(job_id, token=job.token)
    assert failed.status == "pending" and failed.run_at - q.now() == 60_000


def test_retry_buried_keeps_or_resets_attempts(q):
    ids = []
    for _ in range(2):
        job_id = q.enqueue("t", max_attempts=1).id
        job = q.claim(worker="w")
        q.fail(job_id, token=job.token)
        ids.append(job_id)
    assert [j.attempts for j in q.retry_buried()] == [1, 1]
    for job_id in ids:
        job = q.claim(worker="w")
        q.fail(job_id, token=job.token)
    assert [j.attempts for j in q.retry_buried(reset_attempts=True)] == [0, 0]


def test_retry_via_the_cli(cli):
    job_id = int(cli("enqueue", "t", "--max-attempts", "1").stdout)
    token = json.loads(cli("claim").stdout)["token"]
    assert cli("fail", job_id, "--token", token).stdout == "buried\n"
    assert cli("retry", job_id).exit_code == 0
    assert json.loads(cli("show", job_id, "--json").stdout)["attempts"] == 1
    token = json.loads(cli("claim").stdout)["token"]
    assert cli("fail", job_id, "--token", token).stdout == "buried\n"
    assert cli("retry", job_id, "--reset-attempts").exit_code == 0
    assert json.loads(cli("show", job_id, "--json").stdout)["attempts"] == 0


def test_jitter_stays_within_its_bounds(db, clock):
    settings = Settings(backoff_jitter=0.5)
    with Queue.open(db, settings, create=True, clock=clock) as q:
        seen = set()
        for _ in range(20):
            job_id = q.enqueue("t", backoff="fixed").id
            job = q.claim(worker="w")
            delay = (q.fail(job_id, token=job.token).run_at - q.now()) / 1000
            assert 30 <= delay <= 90
            seen.add(delay)
        assert len(seen) > 1
