"""Health: held jobs (ready, but a pause or a limit holds them back) counted apart from the jobs that
wait for a worker; figures per type and the checks on them; enqueue's warnings and its refusal of
a job that costs more than its limit. On both engines where storage is involved."""

import json
import os
import subprocess
import sys

import pytest

from conftest import JOBCTL, T0, Clock, open_queues, run_inproc, types_settings
from jobctl.config import Settings
from jobctl.stats import check, prometheus

settings = types_settings


@pytest.fixture
def make_any(any_db):
    yield from open_queues(any_db)


def ready_ids(q) -> set[int]:
    return {j.id for j in q.list_jobs(statuses=["pending"], limit=0) if not j.waiting_on and j.run_at <= q.now()}


# Each case: the config's types, what to do once the jobs are enqueued, the types held.
HOLDS = {
    "rate limit": (dict(api=dict(rate_limit=(1, 3600.0))), "claim", {"api"}),
    "type concurrency": (dict(api=dict(concurrency_limit=1)), "claim", {"api"}),
    "group concurrency": (dict(api=dict(concurrency_group="g", concurrency_limit=1),
                               api2=dict(concurrency_group="g")), "claim", {"api", "api2"}),
    "cost units": (dict(api=dict(concurrency_limit=3, cost_units=2)), "claim", {"api"}),
    "paused queue": ({}, "pause queue", {"api"}),
    "paused type": ({}, "pause type", {"api"}),
}


@pytest.mark.parametrize("case", list(HOLDS))
def test_held_jobs_under_each_kind_of_limit_and_pause(make_any, case):
    types, action, held_types = HOLDS[case]
    clock = Clock(T0)
    q = make_any(settings(**types, other={}), clock)
    for name in ("api", "api", "api", *(["api2"] if "api2" in types else [])):
        q.enqueue(name, queue="work")
    clock.t = T0 + 60
    q.enqueue("other", queue="work")  # nothing holds it: the one job that waits for a worker
    clock.t = T0 + 100
    if action == "claim":
        assert q.claim(worker="w", types=["api"]) is not None  # the limit is now reached
    elif action == "pause queue":
        q.pause("work")
    else:
        q.pause("work", type="api")
    clock.t = T0 + 300
    s = q.stats()[0]
    work = s["queues"]["work"]
    expected_held = len(ready_ids(q)) - 1 if action != "pause queue" else len(ready_ids(q))
    assert work["held"] == expected_held, (case, work)
    assert work["ready"] == len(ready_ids(q))  # held jobs still count as ready
    assert work["oldest_held_age"] == 300.0
    if action == "pause queue":  # nothing of the queue waits for a worker
        assert work["oldest_ready_age"] is None and s["aging"] == []
    else:
        assert work["oldest_ready_age"] == 240.0, work  # the `other` job, not the older held ones
        assert [j["type"] for j in s["aging"]] == ["other"]
    other_held = 1 if action == "pause queue" else 0  # a paused queue holds every type in it
    assert sum(s["types"][t]["held"] for t in held_types) == expected_held - other_held
    assert s["types"]["other"]["held"] == other_held and s["types"]["other"]["ready"] == 1
    assert s["totals"]["held"] == expected_held
    # A ready-age check is not crossed by jobs held on purpose
    ok, line = check(s, max_ready_age=250.0)
    assert ok, line
    # the same jobs as a claim skips: whatever is claimable now is never counted held
    if action != "pause queue":
        job = q.claim(worker="w2")
        assert job is not None and job.type == "other"
        assert q.claim(worker="w2") is None


# Each case: the config's types; the jobs to enqueue, in order: (type, queue, options); what to do
# then (claims of these types, in order, and pauses); held jobs are those of "held" among them.
PARTS = {
    "rate limit": (dict(api=dict(rate_limit=(1, 3600.0)), other={}),
                   [("api", "a", {}), ("api", "b", {}), ("other", "a", {})], ["api"], {}),
    "type limit full": (dict(api=dict(concurrency_limit=1), other={}),
                        [("api", "a", {}), ("api", "b", {}), ("api", "a", {"group": "elsewhere"})], ["api"], {}),
    "type limit, a job's cost over the room": (
        dict(api=dict(concurrency_limit=3), other={}),
        [("api", "a", {"cost": "2"}), ("api", "a", {"cost": "2"}), ("api", "b", {}), ("api", "a", {"cost": "3"})],
        ["api"], {}),
    "type limit, the type's cost over the room": (
        dict(api=dict(concurrency_limit=3, cost_units=2), other={}),
        [("api", "a", {}), ("api", "a", {}), ("api", "b", {"cost": "1"})], ["api"], {}),
    "group full, by type and by job": (
        dict(api=dict(concurrency_group="g", concurrency_limit=1), api2=dict(concurrency_group="g"), other={}),
        [("api", "a", {}), ("api2", "a", {}), ("other", "b", {"group": "g"}), ("other", "b", {}),
         ("api2", "b", {"group": "elsewhere"})], ["api"], {}),
    "group with room, a job's cost over it": (
        dict(api=dict(concurrency_group="g", concurrency_limit=3, cost_units=2), other={},
             big=dict(concurrency_limit=4, cost_units=5)),
        [("api", "a", {}), ("api", "a", {}), ("other", "b", {"group": "g", "cost": "2"}),
         ("other", "b", {"group": "g"}), ("big", "a", {"cost": "1"})], ["api"], {}),
    "paused queue, limits besides": (
        dict(api=dict(rate_limit=(1, 3600.0)), api2=dict(concurrency_limit=1), other={}),
        [("api", "a", {}), ("api", "b", {}), ("api2", "a", {}), ("other", "a", {}), ("other", "b", {})],
        ["api"], {"a": None}),
    "paused type, limits besides": (
        dict(api=dict(rate_limit=(1, 3600.0)), other={}),
        [("api", "a", {}), ("api", "a", {}), ("other", "a", {}), ("other", "b", {})], ["api"], {"b": "other"}),
}


@pytest.mark.parametrize("case", list(PARTS))
def test_the_held_count_by_type_agrees_with_the_held_filter(make_any, case):
    """stats counts held jobs per type, each against its own limits only, in parts (held_back's
    of_types); the filters test every term on every job (held_where): both find the same jobs."""
    from jobctl.engines.sql import READY

    types, jobs, claims, pauses = PARTS[case]
    clock = Clock(T0)
    q = make_any(settings(**types), clock)
    for type_, queue, options in jobs:
        q.enqueue(type_, queue=queue, **options)
    for type_ in claims:
        assert q.claim(worker="w", types=[type_]) is not None
    for queue, type_ in pauses.items():
        q.pause(queue, type=type_)
    clock.t = T0 + 60
    where, params = q.engine.held_filter(q.limits)
    with q.engine._read() as c:
        held = sorted(r[0] for r in c.execute(f"SELECT id FROM jobs WHERE {where}", params))
        hold = q.engine.held_back(c, q.now(), q.limits)
        found: list[int] = []
        for sql, part_params, _index, _kind in hold.of_types(sorted(types)):
            found += [r[0] for r in c.execute(f"SELECT id FROM jobs WHERE {READY} AND +run_at <= ? AND {sql}",
                                              [hold.now, *part_params])]
        rows = c.execute(f"SELECT type, queue FROM jobs WHERE {where}", params).fetchall()
    assert held, case  # (each case holds some jobs, and leaves others ready)
    assert sorted(found) == held, case  # the parts are disjoint, and find every held job
    assert len(ready_ids(q)) > len(held)
    s = q.stats()[0]
    assert s["totals"]["held"] == len(held)
    assert {t: e["held"] for t, e in s["types"].items() if e["held"]} == {
        t: [r[0] for r in rows].count(t) for t in {r[0] for r in rows}}
    assert {name: e["held"] for name, e in s["queues"].items() if e["held"]} == {
        name: [r[1] for r in rows].count(name) for name in {r[1] for r in rows}}


@pytest.mark.parametrize("queues", [3, 12])
def test_held_jobs_by_queue_with_few_queues_and_many(make_any, queues):
    """stats counts the held jobs of a few queues in one row per type, of more by queue and type."""
    clock = Clock(T0)
    q = make_any(settings(api=dict(rate_limit=(1, 3600.0)), other={}), clock)
    for i in range(queues):
        for _ in range(i % 3 + 1):
            q.enqueue("api", queue=f"q{i}")
            clock.t += 1
        q.enqueue("other", queue=f"q{i}")
    assert q.claim(worker="w", types=["api"]).queue == "q0"
    clock.t += 60
    s = q.stats()[0]
    assert {name: e["held"] for name, e in s["queues"].items()} == {
        f"q{i}": i % 3 + 1 - (i == 0) for i in range(queues)}
    assert s["queues"]["q1"]["oldest_held_age"] == clock.t - (T0 + 1)  # (its first job, enqueued after q0's two)
    assert s["types"]["api"]["held"] == sum(i % 3 + 1 for i in range(queues)) - 1


def test_an_ended_pause_and_a_limit_with_room_hold_nothing(make_any):
    clock = Clock(T0)
    q = make_any(settings(api=dict(concurrency_limit=5, rate_limit=(10, 60.0))), clock)
    q.enqueue("api")
    q.enqueue("api")
    q.pause("default", for_="30s")
    clock.t = T0 + 60  # the pause ended by itself
    assert q.claim(worker="w") is not None
    s = q.stats()[0]
    assert s["queues"]["default"]["held"] == 0 and s["queues"]["default"]["oldest_held_age"] is None
    assert s["queues"]["default"]["oldest_ready_age"] == 60.0


def run(q, type_, seconds, clock, fail=False):
    q.enqueue(type_)
    job = q.claim(worker="w", types=[type_])
    clock.t += seconds
    if fail:
        q.fail(job.id, token=job.token, error="boom", bury=True)
    else:
        q.complete(job.id, token=job.token)


def test_figures_per_type(make_any):
    clock = Clock(T0)
    q = make_any(settings(send=dict(), idle=dict()), clock)
    run(q, "send", 1, clock)
    run(q, "send", 3, clock)
    run(q, "send", 2, clock, fail=True)
    clock.t = T0 + 30 * 60  # those runs ended 30 minutes ago: in the hour, not in the last 15 minutes
    run(q, "send", 10, clock)
    run(q, "report", 5, clock, fail=True)
    q.enqueue("send")
    q.enqueue("send", delay="1h")  # scheduled: not ready
    clock.t += 5
    s = q.stats()[0]
    send = s["types"]["send"]
    assert send["ready"] == 1 and send["held"] == 0 and send["running"] == 0 and send["buried"] == 1
    assert send["runs"] == {"15m": {"completed": 1, "failed": 0}, "60m": {"completed": 3, "failed": 1}}
    assert send["failure_rate"] == 0.0
    assert (send["p50"], send["p95"]) == (2.5, 10.0)  # (runs of 1, 2, 3 and 10 s: the median is 2.5 s)
    report = s["types"]["report"]
    assert report["failure_rate"] == 1.0 and report["buried"] == 1 and report["p95"] == 5.0
    # a type the config declares, with no job and no run: listed, its rates null
    assert s["types"]["idle"] == {"ready": 0, "held": 0, "running": 0, "cancel_requested": 0, "buried": 0,
                                  "runs": {"15m": {"completed": 0, "failed": 0}, "60m": {"completed": 0, "failed": 0}},
                                  "failure_rate": None, "p50": None, "p95": None, "stuck": 0}
    text = prometheus(s)
    assert 'jobctl_type_jobs{type="send",state="ready"} 1' in text
    assert 'jobctl_type_runs{type="send",outcome="completed",window="60m"} 3' in text
    assert 'jobctl_type_failure_ratio{type="report"} 1.0' in text
    assert 'jobctl_type_failure_ratio{type="idle"}' not in text  # no runs: no rate, not a rate of 0
    assert 'jobctl_type_run_duration_p95_seconds{type="send"} 10.0' in text
    # the failure-rate and p95 checks, each type alone, and scoped by --type
    ok, line = check(s, max_failure_rate=0.5)
    assert not ok and "100% of type report" in line, line
    assert check(s, max_failure_rate=0.5, types=["send"])[0]
    ok, line = check(s, max_p95=8.0, types=["send", "report"])
    assert not ok and "10s of type send" in line, line
    assert check(s, max_p95=8.0, types=["report"])[0]
    assert check(s, max_buried=0, types=["idle"])[0] and not check(s, max_buried=0, types=["send"])[0]


def test_a_job_being_cancelled_counts_in_its_type_as_in_its_queue(make_any):
    """A running job whose cancellation was asked is no longer in RUN: its type shows it under
    STOPPING (table, --watch screen, --json, Prometheus), as its queue and the totals do."""
    from jobctl import stats_view

    clock = Clock(T0)
    q = make_any(settings(send=dict()), clock)
    for _ in range(2):
        q.enqueue("send", queue="mail")
    stopping = q.claim(worker="w", types=["send"])
    q.claim(worker="w", types=["send"])
    q.cancel(stopping.id)
    s, now = q.stats()
    assert s["totals"]["cancel_requested"] == s["queues"]["mail"]["cancel_requested"] == 1
    assert (s["types"]["send"]["running"], s["types"]["send"]["cancel_requested"]) == (1, 1)
    assert 'jobctl_type_jobs{type="send",state="cancel_requested"} 1' in prometheus(s)
    for lines in ([line.plain for line in stats_view.screen_lines(s, now, width=120, by="type")],
                  [line.plain for line in stats_view.type_lines(s, 80)]):
        header = lines[0].split()
        row = next(line for line in lines if line.startswith("send")).split()
        assert header[:5] == ["TYPE", "READY", "HELD", "RUN", "STOPPING"], lines
        assert row[:5] == ["send", "0", "0", "1", "1"], lines


def test_the_p50_of_a_type_is_the_median_of_the_run_times(make_any):
    """With one type, its p50 and the run time median of the throughput are one figure (an even
    number of runs: the mean of the middle two), as the table, --json and Prometheus give them."""
    clock = Clock(T0)
    q = make_any(settings(send=dict()), clock)
    for seconds in (1, 2, 4, 10):
        run(q, "send", seconds, clock)
    s = q.stats()[0]
    assert s["types"]["send"]["p50"] == s["throughput"]["run_time"]["median"] == 3.0
    assert 'jobctl_type_run_duration_median_seconds{type="send"} 3.0' in prometheus(s)


def test_stats_by_type_and_check_on_the_command_line(tmp_path):
    db = tmp_path / "q" / "jobs.db"
    cli = lambda *a, **kw: run_inproc(*a, db=db, **kw)  # noqa: E731
    assert cli("enqueue", "send").exit_code == 0
    assert cli("claim", "--worker", "w").exit_code == 0
    assert cli("fail", "1", "--bury", "--error", "boom").exit_code == 0
    assert cli("enqueue", "send").exit_code == 0
    r = cli("stats", "--by", "type")
    assert r.exit_code == 0, r.output
    header, row = r.stdout.splitlines()[:2]
    assert header.split()[:6] == ["TYPE", "READY", "HELD", "RUN", "STOPPING", "BURIED"], r.stdout
    assert row.split()[:6] == ["send", "1", "0", "0", "0", "1"] and "100.0%" in row, r.stdout
    r = cli("stats", "--json")
    assert json.loads(r.stdout)["types"]["send"]["failure_rate"] == 1.0
    r = cli("stats", "--check", "--max-failure-rate", "50%")
    assert r.exit_code == 9 and r.stdout.startswith("CRITICAL: failure rate over 15m 100% of type send"), r.output
    r = cli("stats", "--check", "--max-ready-age", "1h", "--type", "send", "--type", "other")
    assert r.exit_code == 0 and "oldest ready of type send, other " in r.stdout, r.output
    r = cli("stats", "--check", "--max-ready-age", "0", "--type", "send")
    assert r.exit_code == 9 and "in type send (max 0ms)" in r.stdout, r.output
    r = cli("stats", "--check", "--max-p95", "1h", "--type", "send")
    assert r.exit_code == 0 and r.stdout.startswith("OK: p95 run time over 60m of type send"), r.output
    assert cli("stats", "--check", "--max-failure-rate", "150").exit_code == 2
    assert cli("stats", "--type", "send").exit_code == 2  # a scope of --check
    assert "types" in json.loads(cli("stats", "--by", "type", "--json").stdout)  # (the JSON has both)
    assert cli("stats", "--by", "owner").exit_code == 2
    config = tmp_path / "c.toml"
    config.write_text('[types.send]\ncommand = "true"\n')
    config.chmod(0o600)
    r = cli("--config", config, "stats", "--check", "--max-buried", "0", "--type", "sned")
    assert r.exit_code == 2 and "no type named sned" in r.stderr, r.output
    # without [types], a type no job has passes, and the check says what it saw (a typo or a quiet type)
    r = cli("stats", "--check", "--max-buried", "0", "--type", "sned")
    assert r.exit_code == 0 and "warning: no job of type sned is waiting, running, buried or ran" in r.stderr, r.output
    r = cli("stats", "--check", "--max-buried", "0", "--type", "sned", "--quiet")
    assert (r.exit_code, r.stdout, r.stderr) == (0, "", ""), r.output
    assert "warning" not in cli("stats", "--check", "--max-ready-age", "1h", "--type", "send").stderr


def test_a_misspelled_type_is_refused_by_every_threshold_of_check(tmp_path):
    """--max-ready-age asks for the oldest waiting job of each --type: a type without one must
    still be a typo (exit 2) when the config declares [types], and a warning without them."""
    db = tmp_path / "q" / "jobs.db"
    cli = lambda *a, **kw: run_inproc(*a, db=db, **kw)  # noqa: E731
    assert cli("enqueue", "send").exit_code == 0
    config = tmp_path / "c.toml"
    config.write_text('[types.send]\ncommand = "true"\n')
    config.chmod(0o600)
    for threshold in (["--max-ready-age", "1h"], ["--max-buried", "0"], ["--max-ready-age", "1h", "--max-stuck", "0"]):
        r = cli("--config", config, "stats", "--check", *threshold, "--type", "sned")
        assert r.exit_code == 2 and "no type named sned" in r.stderr, r.output
        r = cli("stats", "--check", *threshold, "--type", "sned")
        assert r.exit_code == 0 and "warning: no job of type sned is waiting" in r.stderr, r.output
    r = cli("--config", config, "stats", "--check", "--max-ready-age", "1h", "--type", "send")
    assert r.exit_code == 0 and "oldest ready of type send " in r.stdout and not r.stderr, r.output


def test_a_paused_queue_does_not_cross_max_ready_age_on_the_command_line(tmp_path):
    import time

    from jobctl.queue import Queue

    db = tmp_path / "q" / "jobs.db"
    with Queue.open(db, create=True, clock=Clock(time.time() - 3600)) as q:  # an hour ago
        q.enqueue("t", queue="billing")
        q.pause("billing")
    r = run_inproc("stats", "--check", "--max-ready-age", "10m", db=db)
    assert r.exit_code == 0 and "oldest ready none" in r.stdout, r.output
    r = run_inproc("stats", "--json", db=db)
    billing = json.loads(r.stdout)["queues"]["billing"]
    assert billing["held"] == 1 and billing["oldest_held_age"] >= 3600 and billing["oldest_ready_age"] is None
    r = run_inproc("stats", "--format", "prometheus", db=db)
    assert 'jobctl_held_jobs{queue="billing"} 1' in r.stdout


# -- list: why a held job is held ------------------------------------------------------------------

HELD = ('[types.api]\ncommand = "true"\nrate_limit = [1, "1h"]\n'
        '[types.thumb]\ncommand = "true"\nconcurrency_group = "gpu"\nconcurrency_limit = 1\n'
        '[types.other]\ncommand = "true"\n')


def held_fixture(db, tmp_path):
    """Jobs 1 (api) and 3 (thumb) run; 2 held by api's rate, 4 by the full group gpu, 5 by its paused
    queue billing, 6 by the pause of its type in queue reports; 7 waits for a worker. The config's path."""
    config = tmp_path / "held.toml"
    config.write_text(HELD)
    config.chmod(0o600)
    for args in (["api"], ["api"], ["thumb"], ["thumb"], ["other", "-q", "billing"], ["other", "-q", "reports"],
                 ["other"]):
        assert run_inproc("--config", config, "enqueue", *args, db=db).exit_code == 0
    for args in (["claim", "--type", "api"], ["claim", "--type", "thumb"], ["pause", "billing"],
                 ["pause", "reports", "--type", "other", "--for", "2h"]):
        r = run_inproc("--config", config, *args, db=db)
        assert r.exit_code == 0, r.output
    return config


def test_list_says_why_each_held_job_is_held(any_db, tmp_path):
    """`list` shows a held job as "pending (held)" and why in its last column, in a few words (`show`
    says it in full); `--json` prints the job objects as ever."""
    config = held_fixture(any_db, tmp_path)
    cli = lambda *a, **kw: run_inproc("--config", config, *a, db=any_db, **kw)  # noqa: E731
    r = cli("list")
    assert r.exit_code == 0, r.output
    rows = {line.split()[0]: line for line in r.stdout.splitlines()[1:]}
    why = {"2": "rate limit 1/1h: next in ", "4": "group gpu full: 1/1 units",
           "5": "queue billing paused", "6": "type other paused ("}
    for job_id, reason in why.items():
        assert " pending (held) " in rows[job_id] and reason in rows[job_id], r.stdout
    assert " pending " in rows["7"] and "held" not in rows["7"] and rows["7"].endswith("{}"), r.stdout
    assert " running " in rows["1"] and " running " in rows["3"], r.stdout
    r = cli("list", "--status", "held")
    assert [line.split()[0] for line in r.stdout.splitlines()[1:]] == ["6", "5", "4", "2"], r.stdout
    assert r.stdout.count("pending (held)") == 4, r.stdout
    assert "type api reached its rate limit 1/1h" in cli("show", "2").stdout  # the whole sentence
    listed = [json.loads(line) for line in cli("list", "--status", "held", "--json").stdout.splitlines()]
    shown = json.loads(cli("show", "2", "--json").stdout)
    assert [j["id"] for j in listed] == [6, 5, 4, 2] and set(listed[-1]) == set(shown) - {"events"}


# -- enqueue: warnings and the cost refusal -------------------------------------------------------

LIMITED = '[types.send]\ncommand = "true"\nconcurrency_group = "g"\nconcurrency_limit = 2\n[types.other]\ncommand = "true"\n'


def test_a_cost_over_its_limit_is_refused_on_the_command_line_in_a_batch_and_in_a_chain(tmp_path):
    db = tmp_path / "q" / "jobs.db"
    config = tmp_path / "c.toml"
    config.write_text(LIMITED + '[types.solo]\ncommand = "true"\nconcurrency_limit = 1\ncost_units = 2\n')
    config.chmod(0o600)
    cli = lambda *a, **kw: run_inproc("--config", config, *a, db=db, **kw)  # noqa: E731
    r = cli("enqueue", "send", "--cost", "3")
    assert r.exit_code == 2 and "more than the concurrency limit of concurrency group g (2)" in r.one_error_line()
    assert not db.exists()  # refused before the file was made
    r = cli("enqueue", "other", "--group", "g", "--cost", "5")
    assert r.exit_code == 2, r.output
    r = cli("enqueue", "solo")  # its type's cost is over its type's limit
    assert r.exit_code == 2 and "type solo (1)" in r.one_error_line()
    assert cli("enqueue", "send", "--cost", "2").exit_code == 0
    for flag in ("--batch", "--chain"):
        r = cli("enqueue", flag, "-", input='{"type": "send"}\n{"type": "send", "cost": 4}\n')
        assert r.exit_code == 2 and "line 2: " in r.one_error_line() and "nothing was enqueued" in r.stderr
    r = cli("enqueue", "--batch", "-", "--cost", "3", input='{"type": "send"}\n')
    assert r.exit_code == 2 and "line 1: " in r.one_error_line()
    assert run_inproc("stats", "--json", db=db).stdout.count('"ready":1') >= 1


def cron(*args, cwd, extra_env=None):
    """jobctl as cron runs it: a real process with an almost empty environment (env -i)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "LOGNAME": "cron", **(extra_env or {})}
    return subprocess.run(["env", "-i", *(f"{k}={v}" for k, v in env.items()), *JOBCTL, *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=60)


def test_enqueue_warnings_reach_cron_mail_and_quiet_silences_them(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text(LIMITED)
    config.chmod(0o600)
    db = tmp_path / "data" / "jobs.db"
    env = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # this checkout's jobctl, as installed
    p = cron("--config", config, "--db", db, "enqueue", "send", cwd=tmp_path, extra_env=env)
    assert p.returncode == 0 and p.stdout == "1\n", p.stderr
    assert p.stderr.startswith(f"jobctl: warning: created a new database {db}: there was none"), p.stderr
    assert len(p.stderr.splitlines()) == 1
    p = cron("--config", config, "--db", db, "enqueue", "sned", cwd=tmp_path, extra_env=env)
    assert p.returncode == 0 and p.stdout == "2\n"
    assert p.stderr == (f"jobctl: warning: the config ({config}) declares [types], but none named sned; no worker "
                        "of this config runs it (a misspelling? declared: other, send)\n")
    p = cron("--config", config, "--db", db, "enqueue", "send", cwd=tmp_path, extra_env=env)
    assert (p.returncode, p.stdout, p.stderr) == (0, "3\n", "")  # an existing file, a declared type: silence
    p = cron("--config", config, "--db", tmp_path / "other" / "jobs.db", "enqueue", "sned", "--quiet", cwd=tmp_path,
             extra_env=env)
    assert (p.returncode, p.stdout, p.stderr) == (0, "1\n", "")


def test_enqueue_warnings_of_a_batch_and_without_types(tmp_path):
    db = tmp_path / "q" / "jobs.db"
    r = run_inproc("enqueue", "anything", db=db)
    assert r.exit_code == 0 and "created a new database" in r.stderr  # (no config: no type warning)
    assert "declares" not in r.stderr
    config = tmp_path / "c.toml"
    config.write_text(LIMITED)
    config.chmod(0o600)
    r = run_inproc("--config", config, "enqueue", "--batch", "-", db=db,
                   input='{"type": "send"}\n{"type": "x"}\n{"type": "x"}\n{"type": "y"}\n')
    assert r.exit_code == 0 and r.stdout.split() == ["2", "3", "4", "5"], r.output
    assert [line.split(": ")[2] for line in r.stderr.splitlines()] == ["line 2", "line 4"], r.stderr
    r = run_inproc("--config", config, "enqueue", "--chain", "-", "--quiet", db=db, input='{"type": "x"}\n')
    assert r.exit_code == 0 and r.stderr == ""


def test_enqueue_warns_when_it_creates_the_schema_on_postgres(pg_url):
    r = run_inproc("enqueue", "t", db=pg_url)
    assert r.exit_code == 0 and r.stderr.startswith("jobctl: warning: created jobctl's schema in "), r.output
    assert "created" not in run_inproc("enqueue", "t", db=pg_url).stderr


def test_settings_without_types_never_warn_or_refuse():
    from jobctl import jobspec

    job = jobspec.prepare(Settings(), "t", cost=1_000)
    assert job.cost_units == 1_000


def test_a_reaction_over_its_limit_does_not_refuse_the_transition_that_enqueues_it(make_any):
    clock = Clock(T0)
    q = make_any(settings(alarm=dict(concurrency_limit=1, cost_units=2), job=dict(on_buried="alarm")), clock)
    job_id = q.enqueue("job").id
    job = q.claim(worker="w")
    q.fail(job.id, token=job.token, error="boom", bury=True)  # the reaction is enqueued, not refused
    assert q.get(job_id).status == "buried"
    assert [j.type for j in q.list_jobs(statuses=["pending"])] == ["alarm"]


def test_held_filter_selects_exactly_the_held_jobs(make_any):
    """The one definition of held, as a filter for commands that select jobs (list --status held)."""
    clock = Clock(T0)
    q = make_any(settings(api=dict(rate_limit=(1, 3600.0)), other={}), clock)
    for t in ("api", "api", "other", "other"):
        q.enqueue(t, queue="a" if t == "api" else "b")
    q.enqueue("other", queue="c")
    q.claim(worker="w", types=["api"])
    q.pause("b", type="other")
    where, params = q.engine.held_filter(q.limits)
    with q.engine._read() as c:
        ids = sorted(r[0] for r in c.execute(f"SELECT id FROM jobs WHERE {where}", params))
    assert ids == [2, 3, 4]  # the second api job (its rate is used up) and the paused type's jobs in b
    where, params = q.engine.held_filter(None)
    with q.engine._read() as c:
        ids = sorted(r[0] for r in c.execute(f"SELECT id FROM jobs WHERE {where}", params))
    assert ids == [3, 4]  # without limits: the pauses alone
