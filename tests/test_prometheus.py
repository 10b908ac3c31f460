"""`stats --format prometheus` passes Prometheus's own checker, promtool (`promtool check metrics`).

promtool comes with Debian's `prometheus` package:
    apt-get install -y --no-install-recommends prometheus
"""

import shutil
import subprocess
import time

import pytest

from conftest import Clock
from jobctl.queue import Queue
from jobctl.stats import prometheus

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (apt-get install -y --no-install-recommends prometheus)")


def promtool_check(text: str) -> tuple[int, str]:
    p = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


def busy_database(db, t0):
    """Several queues, a paused one with no jobs, ready, scheduled, buried, stuck jobs and runs."""
    clock = Clock(t0)
    q = Queue.open(db, create=True, clock=clock)
    for queue in ("billing", "email", "media.big:1"):
        for n in range(3):
            q.enqueue("t", {"n": n}, queue=queue)
    q.enqueue("t", {}, queue="billing", delay="1h")
    clock.t = t0 + 5
    for queue in ("billing", "email"):
        job = q.claim(queues=[queue])
        clock.t += 2
        q.complete(job.id, token=job.token)
        job = q.claim(queues=[queue])
        q.fail(job.id, token=job.token, error="boom", bury=True)
    q.claim(queues=["media.big:1"], lease="1s")  # stuck once the clock moves on
    q.pause("later")
    clock.t = t0 + 60
    return q


@needs_promtool
def test_promtool_accepts_the_output_of_an_empty_database(cli):
    assert cli("init").exit_code == 0
    r = cli("stats", "--format", "prometheus")
    assert r.exit_code == 0, r.output
    code, out = promtool_check(r.stdout)
    assert code == 0 and out == "", out


@needs_promtool
def test_promtool_accepts_the_output_of_a_busy_database(cli, db):
    busy_database(db, time.time() - 60).close()
    r = cli("stats", "--format", "prometheus")
    assert r.exit_code == 0, r.output
    code, out = promtool_check(r.stdout)
    assert code == 0 and out == "", out + r.stdout
    r = cli("stats", "--format", "prometheus", "-q", "billing")
    code, out = promtool_check(r.stdout)
    assert code == 0 and out == "", out + r.stdout


def test_no_quantile_label_on_gauges_and_a_generated_at_timestamp(db):
    q = busy_database(db, 1_900_000_000.0)
    with q:
        text = prometheus(q.stats()[0])
    assert "quantile=" not in text
    assert "# TYPE jobctl_stats_generated_timestamp_seconds gauge\njobctl_stats_generated_timestamp_seconds 1900000060.0\n" in text
    assert "jobctl_run_duration_median_seconds 1.0\n" in text and "jobctl_run_duration_p95_seconds 2.0\n" in text
    assert "jobctl_run_duration_runs 4\n" in text
    assert 'jobctl_jobs{queue="media.big:1",state="running"} 1' in text
    assert 'jobctl_queue_paused{queue="later"} 1' in text
    assert "jobctl_stuck_jobs 1\n" in text
