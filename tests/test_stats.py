"""`jobctl stats` (SPEC §6): figures, tables, --watch, --json, --format prometheus, --check."""

import json
import time

import pytest

from conftest import JOBCTL, Clock, run_on_pty
from jobctl import output, stats_view
from jobctl.config import Settings
from jobctl.queue import Queue
from jobctl.stats import check, prometheus

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def build_known(db, t0=T0):
    """Jobs in every state and view, at known times after t0 (see each comment); the clock is left
    at t0 + 10 min. Returns (queue, clock). Give t0 = time.time() - 600 for the command line."""
    T0 = t0
    clock = Clock(t0)
    q = Queue.open(db, create=True, clock=clock)
    q.enqueue("t1", {"n": 1}, queue="billing")                      # 1 ready
    q.enqueue("t2", {"n": 2}, queue="billing", priority="high")     # 2 ready
    q.enqueue("t3", {"n": 3}, queue="billing", delay="1h")          # 3 scheduled
    q.enqueue("t4", {}, queue="default")                            # 4 completed after a 2 s run
    q.enqueue("t6", {}, queue="default")                            # 5 ready (job 6's dependency)
    q.enqueue("t5", {}, queue="default", after=[5])                 # 6 blocked by 5
    for t in ("t7", "t8", "t9", "t10", "t11"):                      # 7..11 in email
        q.enqueue(t, {"password": "hunter2"}, queue="email")
    clock.t = T0 + 10
    j4 = q.claim(types=["t4"])
    j7 = q.claim(types=["t7"])
    clock.t = T0 + 12
    q.complete(j4.id, token=j4.token)                               # run 2 s, waited 10 s
    clock.t = T0 + 15
    q.complete(j7.id, token=j7.token)                               # run 5 s, waited 10 s
    clock.t = T0 + 20
    j8 = q.claim(types=["t8"])
    clock.t = T0 + 21
    q.fail(j8.id, token=j8.token, error="bad [red]input[/red]\x1b[2J", bury=True)  # run 1 s, waited 20 s
    clock.t = T0 + 30
    q.claim(types=["t9"], lease="30s", worker="host:99")            # stuck: lease expires at T0+60
    j10 = q.claim(types=["t10"], lease="1h", worker="host:100")
    clock.t = T0 + 31
    q.cancel(j10.id)                                                # cancel_requested, lease fine
    q.cancel(11)                                                    # pending -> cancelled
    q.pause("idle")                                                 # a paused queue with no jobs
    clock.t = T0 + 600
    return q, clock


def test_stats_figures_of_a_known_database(db):
    q, clock = build_known(db)
    with q:
        s = q.stats()[0]
    assert s["generated_at"] == "2027-01-15T08:10:00.000Z"
    zero = dict.fromkeys(("ready", "scheduled", "blocked", "running", "cancel_requested", "buried", "completed",
                          "cancelled"), 0)
    zero.update(paused_until=None, paused_types={}, held=0, oldest_held_age=None)  # no pause ends by itself
    assert s["queues"] == {
        "billing": {**zero, "ready": 2, "scheduled": 1, "oldest_ready_age": 600.0, "paused": False},
        "default": {**zero, "ready": 1, "blocked": 1, "completed": 1, "oldest_ready_age": 600.0, "paused": False},
        "email": {**zero, "running": 1, "cancel_requested": 1, "buried": 1, "completed": 1, "cancelled": 1,
                  "oldest_ready_age": None, "paused": False},
        "idle": {**zero, "oldest_ready_age": None, "paused": True},
    }
    assert s["totals"]["stuck"] == 1 and s["totals"]["ready"] == 3 and s["totals"]["oldest_ready_age"] == 600.0
    assert [j["id"] for j in s["stuck"]] == [9]
    assert s["stuck"][0]["stuck_reason"] == "lease expired" and s["stuck"][0]["running_for"] == 570.0
    assert [j["id"] for j in s["buried"]] == [8] and s["buried"][0]["error"].startswith("bad [red]")
    # oldest run_at first; the three ready jobs were all enqueued at T0, so then by id
    assert [(j["id"], j["waiting_for"]) for j in s["aging"]] == [(1, 600.0), (2, 600.0), (5, 600.0)]
    t = s["throughput"]
    assert t["1m"] == {"completed": 0, "failed": 0, "completed_per_minute": 0.0, "failed_per_minute": 0.0}
    assert t["15m"] == {"completed": 2, "failed": 1, "completed_per_minute": 0.13, "failed_per_minute": 0.07}
    assert t["60m"]["completed"] == 2 and t["60m"]["failed"] == 1
    assert t["run_time"] == {"median": 2.0, "p95": 5.0, "runs": 3}
    assert t["wait"] == {"median": 10.0}
    assert sum(t["completed_by_minute"]) == 2 and t["completed_by_minute"][-10] == 2  # 9.x minutes ago


def test_throughput_counts_runs_inside_each_window(db):
    clock = Clock(T0)
    with Queue.open(db, create=True, clock=clock) as q:
        now = T0 + 7200
        ends = {"a": now - 7200, "b": now - 50 * 60, "c": now - 10 * 60, "d": now - 30, "e": now - 30}
        for name, end in ends.items():
            clock.t = end - 1
            q.enqueue(name, {})
            job = q.claim(types=[name])
            clock.t = end
            if name == "e":
                q.fail(job.id, token=job.token, error="boom")  # retried: still a failed run
            else:
                q.complete(job.id, token=job.token)
        clock.t = now
        t = q.stats()[0]["throughput"]
    assert (t["1m"]["completed"], t["1m"]["failed"]) == (1, 1)
    assert (t["15m"]["completed"], t["15m"]["failed"]) == (2, 1)
    assert (t["60m"]["completed"], t["60m"]["failed"]) == (3, 1)
    assert t["run_time"]["runs"] == 4  # the run that ended 2 h ago is outside the hour


def test_stats_json_from_the_command_line(cli, db):
    build_known(db, time.time() - 600)[0].close()
    r = cli("stats", "--json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert set(s) >= {"generated_at", "queues", "stuck", "buried", "aging", "throughput"}
    assert set(s["queues"]) == {"billing", "default", "email", "idle"}
    assert set(s["queues"]["billing"]) == {"ready", "scheduled", "blocked", "running", "cancel_requested", "buried",
                                           "completed", "cancelled", "oldest_ready_age", "paused", "paused_until",
                                           "paused_types", "held", "oldest_held_age"}
    # payloads in --json exactly as enqueued, never masked
    assert s["buried"][0]["payload"] == {"password": "hunter2"}
    r = cli("stats", "--json", "-q", "email")
    assert list(json.loads(r.stdout)["queues"]) == ["email"]
    assert cli("stats", "--format", "yaml").exit_code == 2


def test_missing_database_is_exit_8(cli, db):
    r = cli("stats")
    assert r.exit_code == 8, r.output
    assert not db.exists()


EXPECTED_TABLES = """\
QUEUE          READY  HELD  SCHED  BLOCKED  RUN  STOPPING  BURIED  DONE  CANCELLED  OLDEST
billing            2     0      1        0    0         0       0     0          0     10m
default            1     0      0        1    0         0       0     1          0     10m
email              0     0      0        0    1         1       1     1          1       -
idle (paused)      0     0      0        0    0         0       0     0          0       -
(all)              3     0      1        1    1         1       1     2          1     10m
paused: queue idle

stuck
ID  QUEUE  TYPE  WORKER   RUNNING FOR  WHY
 9  email  t9    host:99        9m30s  lease expired

buried, by error
BURIED  QUEUE  TYPE  LATEST    AGO  ERROR
     1  email  t8         8  9m39s  bad [red]input[/red]\\x1b[2J

aging (ready jobs waiting longest)
ID  QUEUE    TYPE  PRI  WAITING
 1  billing  t1     10      10m
 2  billing  t2     20      10m
 5  default  t6     10      10m

RUNS/MIN     1m   15m   60m
completed  0.00  0.13  0.03
failed     0.00  0.07  0.02
run time (last hour, 3 runs): median 2s, p95 5s
wait from ready to start: median 10s

workers 0 alive
"""


def render(renderable, width=80) -> str:
    con = output.console(width=width)
    with con.capture() as cap:
        con.print(renderable)
    return "\n".join(line.rstrip() for line in cap.get().splitlines()) + "\n"


def test_rendered_tables_of_a_known_database(db):
    q, clock = build_known(db)
    with q:
        s = q.stats()[0]
    expected = "\n".join(line.rstrip() for line in EXPECTED_TABLES.splitlines()) + "\n"
    assert render(stats_view.render(s, q.now()), width=100) == expected  # (a pipe's lines are whole)


def test_empty_sections_say_so_in_one_line(cli, db):
    assert cli("init").exit_code == 0
    r = cli("stats")
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[:7] == [
        "queues: no jobs yet", "", "stuck: none", "", "buried: none", "", "aging (ready jobs waiting longest): no ready jobs",
    ]


def test_prometheus_output_parses_and_names_the_same_counts(cli, db):
    parser = pytest.importorskip("prometheus_client.parser")
    build_known(db, time.time() - 600)[0].close()
    r = cli("stats", "--format", "prometheus")
    assert r.exit_code == 0, r.output
    families = {f.name: f for f in parser.text_string_to_metric_families(r.stdout)}
    jobs = {(s.labels["queue"], s.labels["state"]): s.value for s in families["jobctl_jobs"].samples}
    assert jobs[("billing", "ready")] == 2 and jobs[("billing", "scheduled")] == 1
    assert jobs[("default", "blocked")] == 1 and jobs[("email", "buried")] == 1 and jobs[("idle", "ready")] == 0
    assert families["jobctl_stuck_jobs"].samples[0].value == 1
    paused = {s.labels["queue"]: s.value for s in families["jobctl_queue_paused"].samples}
    assert paused == {"billing": 0, "default": 0, "email": 0, "idle": 1}
    runs = {(s.labels["outcome"], s.labels["window"]): s.value for s in families["jobctl_runs"].samples}
    assert (runs[("completed", "60m")], runs[("failed", "60m")], runs[("completed", "1m")]) == (2, 1, 0)
    assert all(f.type == "gauge" for f in families.values())


def test_prometheus_is_a_pure_function_of_the_figures(db):
    q, _ = build_known(db)
    with q:
        s = q.stats()[0]
    text = prometheus(s)
    assert 'jobctl_oldest_ready_age_seconds{queue="billing"} 600.0' in text
    assert "jobctl_run_duration_p95_seconds 5.0" in text
    assert text.endswith("\n")


@pytest.mark.parametrize("args, code", [
    (["--max-buried", "1"], 0), (["--max-buried", "0"], 9),
    (["--max-stuck", "1"], 0), (["--max-stuck", "0"], 9),
    (["--max-ready-age", "1h"], 0), (["--max-ready-age", "5m"], 9),
    (["--max-buried", "5", "--max-stuck", "0"], 9),
])
def test_check_exits_0_or_9_on_either_side_of_each_threshold(cli, db, args, code):
    build_known(db, time.time() - 600)[0].close()  # ready jobs waiting 10 min, 1 buried, 1 stuck
    r = cli("stats", "--check", *args)
    assert r.exit_code == code, r.output
    lines = r.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("OK: " if code == 0 else "CRITICAL: ")


def test_check_names_what_was_crossed(db):
    q, _ = build_known(db)
    with q:
        s = q.stats()[0]
    ok, line = check(s, max_ready_age=300, max_buried=0, max_stuck=5)
    assert not ok
    assert "10m in queue billing" in line and "1 buried (max 0: email 1)" in line and "ok: 1 stuck (max 5)" in line
    ok, line = check(s, max_ready_age=3600)
    assert ok and line == "OK: oldest ready 10m (max 1h)"


def test_a_crossed_duration_never_reads_as_equal_to_its_threshold(db):
    """Rounded to the same text, "5s (max 5s)" would not say why the check failed: both are then
    given to the millisecond."""
    q, _ = build_known(db)
    with q:
        s = q.stats()[0]
    ok, line = check(s, max_p95=4.9)  # type t7's one run took 5 s
    assert not ok and "5s of type t7 (max 4.9s)" in line, line
    ok, line = check(s, max_ready_age=599.5)  # billing's oldest ready job waited 600 s
    assert not ok and "waited 600s in queue billing (max 599.5s)" in line, line
    ok, line = check(s, max_ready_age=300, max_p95=2)
    assert not ok and "waited 10m in queue billing (max 5m)" in line and "5s of type t7 (max 2s)" in line, line


def test_check_needs_a_threshold_and_thresholds_need_check(cli, db):
    assert cli("init").exit_code == 0
    assert cli("stats", "--check").exit_code == 2
    assert cli("stats", "--max-buried", "0").exit_code == 2


def test_an_option_that_would_do_nothing_is_a_usage_error(cli_process, db):
    """-i without --watch, --by or --limit with --check, --limit with Prometheus text: each was
    accepted and dropped; now exit 2 with one line naming the option and what it needs."""
    cli = cli_process
    assert cli("init").exit_code == 0
    for args, said in ((["-i", "5s"], "--interval"), (["--interval", "5s", "--json"], "--interval"),
                       (["--by", "type", "--check", "--max-buried", "0"], "--by"),
                       (["--by", "queue", "--check", "--max-buried", "0"], "--by"),
                       (["-n", "3", "--check", "--max-buried", "0"], "--limit"),
                       (["--limit", "3", "--format", "prometheus"], "--limit")):
        r = cli("stats", *args)
        assert r.exit_code == 2 and r.stdout == "", (args, r.exit_code, r.stdout, r.stderr)
        line = r.stderr.strip()
        assert "\n" not in line and line.startswith(f"jobctl: error: {said} "), (args, r.stderr)
        assert "Traceback" not in r.stderr
    for args in (["-w", "-i", "1s"], ["--by", "type"], ["--by", "type", "--json"], ["-n", "3", "--json"],
                 ["--check", "--max-buried", "0"], ["--format", "prometheus"]):
        assert cli("stats", *args).exit_code == 0, args  # (piped, --watch prints one snapshot)


def test_check_help_names_every_threshold_that_exits_9(cli, db):
    """--min-workers fails a check too (exit 9), and --type does not scope it (workers serve any type)."""
    assert cli("init").exit_code == 0
    r = cli("stats", "--min-workers", "1", "--check")
    assert r.exit_code == 9, r.output
    import re

    text = re.sub(r"\s+", " ", cli("stats", "--help", env={"COLUMNS": "200"}).stdout).split(" Options: ", 1)[1]
    check_help = text.split("--check ", 1)[1].split(" --max-ready-age", 1)[0]
    assert "exit 9 when a threshold" in check_help and "--min-workers" in check_help, check_help
    assert "except --min-workers" in text.split("--type TYPE ", 1)[1].split(" --by ", 1)[0], text


def test_watch_piped_prints_one_snapshot_and_exits(cli, db):
    build_known(db, time.time() - 600)[0].close()
    r = cli("stats", "--watch", "--interval", "1s", timeout=20)
    assert r.exit_code == 0, r.output
    assert r.stdout.count("RUNS/MIN") == 1 and "refreshed" not in r.stdout


@pytest.mark.slow
@pytest.mark.shared  # outcomes only (two frames drawn, exit 0 on Ctrl-C): runs beside other tests
def test_watch_on_a_terminal_redraws_and_exits_0_on_sigint(db):
    build_known(db, time.time() - 600)[0].close()
    code, drawn, _ = run_on_pty([*JOBCTL, "--db", db, "stats", "--watch", "--interval", "1s"],
                                until=b"refreshed", times=2, timeout=20)
    assert drawn.count("refreshed") >= 2, drawn[-2000:]
    assert code == 0
    assert "Traceback" not in drawn and "jobctl: error" not in drawn


def test_sparkline_scales_to_the_largest_value():
    assert stats_view.sparkline([0, 0, 0]) == "▁▁▁"
    assert stats_view.sparkline([0, 4, 8]) == "▁▅█"


def test_jobs_buried_by_hand_say_so_where_their_error_would_be(cli):
    """A job buried by hand before any run failed has no error: the buried groups of the table and
    of top say "buried by hand" in its place (not an empty cell); --json keeps the error as stored."""
    from jobctl.top.widgets import tab_row

    cli("enqueue", "t")
    cli("enqueue", "t", '{"a": 1}')
    assert cli("bury", "1", "--reason", "poison payload").exit_code == 0
    job = json.loads(cli("claim").stdout)
    cli("fail", job["id"], "--bury", "--error", "boom")
    table = cli("stats").stdout
    rows = table[table.index("buried, by error"):].splitlines()[2:4]
    assert sorted(r.rstrip().rsplit("  ", 1)[-1].strip() for r in rows) == ["boom", "buried by hand"], table
    groups = json.loads(cli("stats", "--json").stdout)["buried_by_error"]
    assert sorted((g["latest_id"], g["error"]) for g in groups) == [(1, None), (2, "boom")]
    by_hand = next(g for g in groups if g["error"] is None)
    _, cells = tab_row("buried", by_hand, 0, True)
    assert cells[-1].plain == "buried by hand" and cells[-1].style == "dim"


# -- --check --quiet for cron; -q narrows everything and an unknown queue is a usage error ---------

def test_stats_check_quiet_is_silent_only_when_all_holds(cli):
    cli("enqueue", "t")
    r = cli("stats", "--check", "--max-buried", "0", "--quiet")
    assert (r.exit_code, r.stdout, r.stderr) == (0, "", "")
    r = cli("stats", "--check", "--max-buried", "0")
    assert r.exit_code == 0 and r.stdout.startswith("OK: ")
    job = json.loads(cli("claim").stdout)
    cli("fail", job["id"], "--bury", "--error", "boom")
    r = cli("stats", "--check", "--max-buried", "0", "--quiet")
    assert r.exit_code == 9 and r.stdout.startswith("CRITICAL: 1 buried"), r.output
    r = cli("stats", "--quiet")
    assert r.exit_code == 2 and "--check" in r.one_error_line()


def test_stats_queue_narrows_throughput_and_run_times(cli):
    for queue, n in (("billing", 2), ("email", 3)):
        for _ in range(n):
            cli("enqueue", "t", "-q", queue)
            job = json.loads(cli("claim", "-q", queue).stdout)
            assert cli("complete", job["id"]).exit_code == 0
    everything = json.loads(cli("stats", "--json").stdout)["throughput"]
    assert everything["60m"]["completed"] == 5 and everything["run_time"]["runs"] == 5
    billing = json.loads(cli("stats", "--json", "-q", "billing").stdout)["throughput"]
    assert billing["60m"]["completed"] == 2 and billing["run_time"]["runs"] == 2
    assert sum(billing["completed_by_minute"]) == 2


def test_stats_of_an_unknown_queue_is_a_usage_error(cli, tmp_path):
    cli("enqueue", "t", "-q", "billing")
    r = cli("stats", "--check", "-q", "biling", "--max-ready-age", "10m")
    line = r.one_error_line()
    assert r.exit_code == 2 and "no queue named biling" in line and "known queues: billing" in line
    assert r.stdout == ""
    assert cli("stats", "--json", "-q", "biling").exit_code == 2
    # a queue of the config, or the default one, exists before its first job
    config = tmp_path / "jobctl.toml"
    config.write_text('[types.report]\ncommand = ["true"]\nqueue = "reports"\n')
    r = cli("--config", config, "stats", "--check", "-q", "reports", "-q", "default", "--max-buried", "0")
    assert r.exit_code == 0 and r.stdout.startswith("OK"), r.output
    # a queue whose jobs were all purged is still known
    job = json.loads(cli("claim", "-q", "billing").stdout)
    cli("complete", job["id"])
    assert cli("purge", "--completed-older-than", "0s").stdout.strip() == "1"
    r = cli("stats", "--check", "-q", "billing", "--max-buried", "0")
    assert r.exit_code == 0, r.output


# -- the counts by queue and state, as batches change them --------------------------------------

@pytest.fixture(params=["sqlite", "postgres"])
def any_db(request, tmp_path):
    """A database of each engine (PostgreSQL: the test server, in a schema of this test's own)."""
    return tmp_path / "jobs.db" if request.param == "sqlite" else request.getfixturevalue("pg_url")


def kept_and_counted(db) -> tuple[dict, dict]:
    """(the counts jobctl keeps by queue and state, a count(*) of the rows by queue and state)."""
    q = Queue.open(db)
    try:
        engine = q.engine
        with engine._read() as c:
            kept = {(queue, state): int(n) for queue, state, n in engine._state_counts(c) if n}
            counted = {(r[0], r[1]): int(r[2]) for r in c.execute(
                "SELECT queue, CASE WHEN status = 'pending' AND waiting_on > 0 THEN 'blocked' ELSE status END, "
                "count(*) FROM jobs GROUP BY 1, 2")}
    finally:
        q.close()
    return kept, counted


def test_a_batch_is_counted_exactly_by_queue_and_state_and_not_when_rolled_back(any_db, monkeypatch):
    """A batch's jobs are counted once per statement (not row by row): the counts still equal a
    count(*) by queue and state after bulk chunks, keyed lines, a batch a bad line rolls back, and
    the changes of state that follow."""
    from conftest import run_inproc
    from jobctl.engines.sql import SQLEngine

    monkeypatch.setattr(SQLEngine, "BULK_STEP", 7)  # several bulk chunks in one transaction
    lines = [json.dumps({"type": "t", "queue": f"q{i % 3}", "payload": {"i": i}}) for i in range(40)]
    r = run_inproc("enqueue", "--batch", "-", db=any_db, input="\n".join(lines) + "\n")
    assert r.exit_code == 0, r.stderr
    keyed = [json.dumps({"type": "k", "queue": "q1", "key": f"k{i}"}) for i in range(5)]
    after = [json.dumps({"type": "a", "queue": "q2", "after": [1]})]
    r = run_inproc("enqueue", "--batch", "-", db=any_db, input="\n".join([*lines[:9], *keyed, *after]) + "\n")
    assert r.exit_code == 0, r.stderr
    kept, counted = kept_and_counted(any_db)
    assert kept == counted
    assert counted[("q0", "pending")] == 14 + 3 and counted[("q2", "blocked")] == 1
    assert sum(counted.values()) == 40 + 9 + 5 + 1

    r = run_inproc("enqueue", "--batch", "-", db=any_db, input="\n".join([*lines, "not json"]) + "\n")
    assert r.exit_code == 2 and "nothing was enqueued" in r.stderr
    assert kept_and_counted(any_db) == (kept, counted)  # the rolled-back batch counted nowhere

    q = Queue.open(any_db)
    try:
        job = q.claim(queues=["q0"])
        q.complete(job.id, token=job.token)
        q.cancel(2)
    finally:
        q.close()
    r = run_inproc("enqueue", "--batch", "-", db=any_db, input="\n".join(lines[:4]) + "\n")
    assert r.exit_code == 0, r.stderr
    kept, counted = kept_and_counted(any_db)
    assert kept == counted and counted[("q0", "completed")] == 1 and counted[("q1", "cancelled")] == 1
    assert sum(counted.values()) == 40 + 9 + 5 + 1 + 4


def test_every_kind_of_insert_is_counted_and_a_failed_bulk_insert_leaves_nothing(any_db, monkeypatch):
    """On SQLite no trigger counts an inserted job: the engine counts each insert right after it
    (one trigger on the table made every multi-row INSERT keep a statement journal). A single
    enqueue, one blocked by --after, a --unique one, the reaction to a bury and a bulk insert are
    counted exactly; a bulk insert that fails on a later statement (the earlier ones written
    without a statement journal) leaves no row and no count."""
    from conftest import run_inproc
    from jobctl.engines.base import NewJob
    from jobctl.engines.sql import SQLEngine
    from jobctl.jobspec import prepare

    for args in (["t"], ["t", "--after", "1"], ["t", "--unique"], ["t", "--unique"], ["t", "-q", "q2"],
                 ["t", "--on-buried", "r"]):
        assert run_inproc("enqueue", *args, db=any_db).exit_code == 0
    assert run_inproc("bury", "4", "--reason", "by hand", db=any_db).exit_code == 0  # (--unique gave 1): reaction 5
    kept, counted = kept_and_counted(any_db)
    assert kept == counted == {("default", "pending"): 2, ("default", "blocked"): 1, ("q2", "pending"): 1,
                               ("default", "buried"): 1}, (kept, counted)

    monkeypatch.setattr(SQLEngine, "BULK_STEP", 100)
    good = prepare(Settings(), "t", {})
    bad = NewJob(*(None if name == "type" else getattr(good, name) for name in NewJob.__slots__))  # NOT NULL
    q = Queue.open(any_db)
    try:
        with pytest.raises(Exception):
            q.insert([good] * 250 + [bad])  # (the bad row in the last chunk, after 250 rows written)
    finally:
        q.close()
    assert kept_and_counted(any_db) == (kept, counted)
