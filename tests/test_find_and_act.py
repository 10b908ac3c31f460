"""Find and act: the filters shared by list, retry, cancel, reschedule, bury, purge and
retry-buried; bury, edit and show --key; acting on a filter while real workers run (both engines)."""

import json
import sys

import pytest

from conftest import finish, refused_line, run_cli, run_inproc, run_on_pty, JOBCTL, start_worker
from jobctl.models import HELD
from jobctl.queue import Queue


def cli_on(db):
    def run(*args, **kw):
        return run_inproc(*args, db=db, **kw)
    return run


def buried_fixture(db):
    """1, 2: send-email buried by a timeout (2 for tenant b); 3: import buried otherwise;
    4: pending send-email (key k-4); 5: scheduled report."""
    with Queue.open(db, create=True) as q:
        for type, payload, error in (("send-email", {"tenant": "a", "user": {"id": 1}}, "SMTP Timeout after 30s"),
                                     ("send-email", {"tenant": "b", "user": {"id": 2}}, "smtp timeout"),
                                     ("import", {"tenant": "b"}, "HTTP 500")):
            q.enqueue(type, payload)
            job = q.claim(worker="w-3", types=[type])
            q.fail(job.id, token=job.token, error=error, bury=True)
        q.enqueue("send-email", {"tenant": "b"}, key="k-4")
        q.enqueue("report", {}, delay="1h")


def ids_of(r):
    assert r.exit_code == 0, r.output
    return [json.loads(line)["id"] for line in r.stdout.splitlines()]


def test_filters_select_the_same_jobs_for_every_command(any_db):
    cli = cli_on(any_db)
    buried_fixture(any_db)
    assert ids_of(cli("list", "--json", "--error", "TIMEOUT")) == [2, 1]
    assert ids_of(cli("list", "--json", "--payload", "tenant=b")) == [4, 3, 2]
    assert ids_of(cli("list", "--json", "--payload", "tenant=b", "--type", "send-email")) == [4, 2]
    assert ids_of(cli("list", "--json", "--type", "import", "--type", "report")) == [5, 3]
    assert ids_of(cli("list", "--json", "--status", "scheduled", "--status", "buried", "--worker", "w-3")) == [3, 2, 1]
    assert ids_of(cli("list", "--json", "--key", "k-4")) == [4]
    assert ids_of(cli("list", "--json", "--min-attempts", "1", "--since", "1h", "--before", "2099-01-01")) == [3, 2, 1]
    # the same filter acts on the same jobs: a dry run first, then for real, one {"id", "action"} a line
    r = cli("retry", "--error", "timeout", "--payload", "tenant=b", "--dry-run", "--json")
    assert [json.loads(line) for line in r.stdout.splitlines()] == [{"id": 2, "action": "retried", "dry_run": True}]
    r = cli("retry", "--error", "timeout", "--json")
    assert [json.loads(line) for line in r.stdout.splitlines()] == [{"id": 1, "action": "retried"},
                                                                   {"id": 2, "action": "retried"}]
    r = cli("bury", "--type", "report", "--reason", "parked")
    assert (r.exit_code, r.stdout) == (0, "1\n"), r.output
    r = cli("reschedule", "--payload", "tenant=b", "--now", "--json")  # 2 and 4 are pending (3 is buried)
    assert [json.loads(line)["id"] for line in r.stdout.splitlines()] == [2, 4], r.output
    r = cli("cancel", "--status", "buried", "--type", "import")
    assert (r.exit_code, r.stdout) == (0, "1\n"), r.output
    r = cli("retry-buried", "--type", "report", "--json")
    assert json.loads(r.stdout) == {"count": 1, "ids": [5], "dry_run": False}
    r = cli("purge", "--cancelled-older-than", "0s", "--type", "send-email")  # the cancelled import is kept
    assert (r.exit_code, r.stdout) == (0, "0\n"), r.output
    r = cli("purge", "--cancelled-older-than", "0s", "--payload", "tenant=b")
    assert (r.exit_code, r.stdout) == (0, "1\n"), r.output
    with Queue.open(any_db) as q:
        assert {j.id: j.status for j in q.list_jobs(limit=0)} == {1: "pending", 2: "pending", 4: "pending",
                                                                  5: "pending"}
        assert "buried by hand: parked" in [e.message for e in q.events(5)]
    r = cli("retry", "--type", "nothing-like-it")  # nothing matches: not an error
    assert (r.exit_code, r.stdout) == (0, "0\n"), r.output


@pytest.mark.parametrize("args, needles", [
    (["retry", "--payload", "tenant"], ["--payload", "PATH=VALUE"]),
    (["cancel", "--status", "sleeping"], ["invalid status 'sleeping'"]),
    (["retry", "--status", "pending"], ["--status pending", "buried"]),
    (["bury", "--since", "last tuesday"], ["--since", "a time", "a duration"]),
    (["retry", "--since", "1h", "--before", "2h"], ["--since 1h is not before --before 2h"]),
    (["list", "--min-attempts", "many"], ["--min-attempts"]),
    (["retry", "1", "--type", "send-email"], ["job ids or a filter"]),
    (["bury"], ["missing job ids or a filter"]),
    (["show"], ["a job id or --key"]),
    (["edit", "1"], ["nothing to change"]),
])
def test_bad_input_is_a_usage_error_and_changes_nothing(db, args, needles):
    buried_fixture(db)
    with Queue.open(db) as q:
        before = [(j.id, j.status, j.updated_at) for j in q.list_jobs(limit=0)]
    refused_line(run_inproc(*args, db=db), *needles)
    with Queue.open(db) as q:
        assert [(j.id, j.status, j.updated_at) for j in q.list_jobs(limit=0)] == before


def test_bury_edit_and_show_by_key(any_db):
    cli = cli_on(any_db)
    buried_fixture(any_db)
    with Queue.open(any_db) as q:
        q.enqueue("send-email", {"password": "hunter2", "to": "a@example.com"}, key="order-42")  # 6
        running = q.claim(types=["send-email"], worker="w-9")  # 4 runs now
    assert running.id == 4
    r = cli("bury", "4")
    assert r.exit_code == 4 and "running" in r.stderr and "cancel" in r.stderr, r.output
    r = cli("edit", "4", "--priority", "high")
    assert r.exit_code == 4 and "running" in r.stderr, r.output
    r = cli("edit", "6", "--payload", '{"password": "s3cret", "to": "b@example.com"}', "--priority", "high",
            "--queue", "mail", "--max-attempts", "5", "--timeout", "2m", "--backoff", "fixed", "--json")
    job = json.loads(r.stdout)
    assert (job["payload"], job["priority"], job["queue"], job["max_attempts"], job["timeout"], job["backoff"],
            job["idempotency_key"]) == ({"password": "s3cret", "to": "b@example.com"}, 20, "mail", 5, 120, "fixed",
                                        "order-42")
    shown = cli("show", "--key", "order-42")
    assert shown.exit_code == 0 and "job 6" in shown.stdout, shown.output
    history = " ".join(shown.stdout[shown.stdout.index("history"):].split())  # (a long message is wrapped)
    assert "edited:" in history and "priority 10 → 20" in history and "queue default → mail" in history
    assert "s3cret" not in shown.stdout and "hunter2" not in shown.stdout  # masked, as everywhere
    assert "s3cret" in cli("show", "--key", "order-42", "--reveal").stdout
    events = json.loads(cli("show", "--key", "order-42", "--json").stdout)["events"]
    assert events[-1]["from"] == events[-1]["to"] == "pending" and "s3cret" in events[-1]["message"]
    # the same key enqueued again with the new payload finds the edited job
    again = cli("enqueue", "send-email", '{"password": "s3cret", "to": "b@example.com"}', "--key", "order-42",
                "--json")
    assert json.loads(again.stdout)["id"] == 6 and json.loads(again.stdout)["created"] is False, again.output
    assert cli("bury", "6", "--reason", "bad address, token=abc123").stdout == "6 buried\n"
    # show says a person parked it, why and how to undo it (a secret in the reason masked there too)
    why = " ".join(cli("show", "6").stdout.split("why", 1)[1].split("\n  ")[0].split())
    assert "buried by hand: bad address" in why and "`jobctl retry 6` requeues it" in why, why
    assert "bury exit code" not in why and "abc123" not in why, why
    assert cli("retry", "6").stdout == "6 pending\n"
    r = cli("show", "--key", "no-such-key")
    assert r.exit_code == 3 and "no job has the idempotency key" in r.stderr, r.output


def test_on_a_terminal_it_asks_before_acting_on_several_jobs(db):
    buried_fixture(db)
    argv = [*JOBCTL, "--db", str(db), "retry", "--status", "buried"]
    code, shown, _ = run_on_pty(argv, until=b"[y/N] ", timeout=30)  # (SIGINT at the question: nothing done)
    assert "Retry 3 jobs? [y/N]" in shown, shown
    with Queue.open(db) as q:
        assert len(q.list_jobs(statuses=["buried"])) == 3
    code, shown, _ = run_on_pty(argv, until=b"[y/N] ", answer=b"n\r", timeout=30)  # declined: not a failure
    assert code == 0 and shown.endswith("[y/N] n\r\n0\r\nnot confirmed: nothing changed\r\n"), shown
    with Queue.open(db) as q:
        assert len(q.list_jobs(statuses=["buried"])) == 3
    code, shown, _ = run_on_pty([*argv, "--yes"], timeout=30)
    assert code == 0 and "[y/N]" not in shown and "retried 3 jobs" in shown, shown
    r = run_cli("--db", db, "retry", "--status", "buried")  # no terminal: it acts (nothing left to retry)
    assert (r.exit_code, r.stdout) == (0, "0\n"), r.output


def test_nothing_to_act_on_names_the_states_looked_in(db):
    """A filter whose jobs are all in states the action does not take by default says so: `cancel
    --type import` finds the buried import, but cancels pending jobs unless told otherwise."""
    buried_fixture(db)
    code, shown, _ = run_on_pty([*JOBCTL, "--db", str(db), "cancel", "--type", "import"], timeout=30)
    assert code == 0 and "cancelled 0 jobs; no pending job matches" in shown, shown
    code, shown, _ = run_on_pty([*JOBCTL, "--db", str(db), "retry", "--type", "report"], timeout=30)
    assert code == 0 and "retried 0 jobs; no buried job matches" in shown, shown


HANDLER = """import os, sys, time
time.sleep(0.05)
with open(sys.argv[1], "a") as f:
    f.write(os.environ["JOBCTL_JOB_ID"] + "\\n")
"""


def test_acting_on_a_filter_while_workers_claim_the_same_jobs(any_db, tmp_path):
    """Two workers complete jobs while `cancel` and then `retry` act on the same ones by a filter:
    every job ends exactly once, as the worker or the command left it, and the command's report
    agrees with the database."""
    handler, ran = tmp_path / "handler.py", tmp_path / "ran.log"
    handler.write_text(HANDLER)
    cfg = tmp_path / "jobctl.toml"
    cfg.write_text(f'[types.t]\ncommand = ["{sys.executable}", "{handler}", "{ran}"]\n')
    env = {"JOBCTL_CONFIG": str(cfg)}
    batch = "".join(json.dumps({"type": "t", "payload": {"n": i}}) + "\n" for i in range(30))
    assert run_cli("--db", any_db, "enqueue", "--batch", "-", input=batch).exit_code == 0
    workers = [start_worker(tmp_path, any_db, "--poll", "50ms", name=f"w{i}", env=env) for i in range(2)]
    try:
        import time

        time.sleep(0.3)  # the workers are taking jobs (30 jobs of 50 ms for two: they are not done yet)
        r = run_cli("--db", any_db, "cancel", "--type", "t", "--json", env=env)
        assert r.exit_code == 0, r.output
        acted = [json.loads(line) for line in r.stdout.splitlines()]
        with Queue.open(any_db) as q:
            jobs = {j.id: j for j in q.list_jobs(limit=0)}
            for a in acted:  # each job the cancel names once, and the database agrees
                assert a["action"] in ("cancelled", "skipped"), a
                if a["action"] == "cancelled":
                    assert jobs[a["id"]].status == "cancelled"
            assert len({a["id"] for a in acted}) == len(acted)
            cancelled = {a["id"] for a in acted if a["action"] == "cancelled"}
        # every job: cancelled by the command, or run by a worker, never both
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with Queue.open(any_db) as q:
                left = [j for j in q.list_jobs(limit=0) if j.status not in ("completed", "cancelled")]
            if not left:
                break
            time.sleep(0.1)
        assert not left, left
        runs = ran.read_text().split() if ran.exists() else []
        with Queue.open(any_db) as q:
            final = {j.id: j.status for j in q.list_jobs(limit=0)}
            assert len(final) == 30
            assert {i for i, s in final.items() if s == "cancelled"} == cancelled
            assert sorted(map(int, runs)) == sorted(i for i, s in final.items() if s == "completed")  # each ran once
            # 15 more, parked at once (the workers may take a few first), then retried by a filter:
            # the workers complete them as the retry's transactions make them pending
            more = q.insert([q.prepare("t", {"m": i}) for i in range(15)])
        r = run_cli("--db", any_db, "bury", "--type", "t", "--json", env=env)
        parked = {json.loads(line)["id"] for line in r.stdout.splitlines()
                  if json.loads(line)["action"] == "buried"}
        assert parked and parked <= {m.id for m in more}, r.output
        r = run_cli("--db", any_db, "retry", "--type", "t", "--json", env=env)
        assert r.exit_code == 0, r.output
        retried = [json.loads(line) for line in r.stdout.splitlines()]
        assert {a["id"] for a in retried} == parked and {a["action"] for a in retried} == {"retried"}, retried
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with Queue.open(any_db) as q:
                if not q.count_jobs(statuses=["pending", "running"]):
                    break
            time.sleep(0.1)
        runs = ran.read_text().split()
        assert len(runs) == len(set(runs)) == len(final) - len(cancelled) + 15  # nothing twice, nothing lost
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            finish(w)


def test_list_counts_past_its_page_within_bounds(tmp_path):
    db = tmp_path / "q" / "jobs.db"
    with Queue.open(db, create=True) as q:
        q.insert([q.prepare("t", {"tenant": "b", "n": i}) for i in range(5000)])
        sel = parse_selection(payload=["tenant=b"])
        assert q.count_jobs(selection=sel) == 5000
        assert q.count_jobs(selection=sel, at_most=100) == 101  # "more than 100"
        assert q.count_jobs(selection=sel, within_s=0) is None  # SQLite stops a count that takes too long
    r = run_inproc("list", "--payload", "tenant=b", "--limit", "10", db=db)
    assert r.exit_code == 0 and r.stderr == "showing 10 of 5,000; --limit 0 for all\n", r.output


def parse_selection(**options):
    from jobctl.selection import parse

    return parse(**options)


@pytest.mark.parametrize("unique", [True, False])
def test_an_edited_job_is_the_twin_of_its_new_payload(any_db, unique):
    """Whether or not it was enqueued with unique: --unique looks for every live job."""
    with Queue.open(any_db, create=True) as q:
        first = q.enqueue("t", {"n": 1}, unique=unique).id
        q.edit(first, payload={"n": 2})
        assert q.enqueue("t", {"n": 2}, unique=True).id == first  # its twin now
        assert q.enqueue("t", {"n": 1}, unique=True).id != first  # no longer
        q.edit(first, queue="other")
        assert q.enqueue("t", {"n": 2}, unique=True, queue="other").id == first
        assert q.enqueue("t", {"n": 2}, unique=True).id != first


def test_payload_and_attempt_values_no_column_can_hold_are_answered_not_crashed(any_db):
    """Values a database cannot bind or parse (a number past 64 bits, 1e400, a lone surrogate, a
    NUL on PostgreSQL) are an ordinary answer or a usage error, never an internal error (exit 1)."""
    cli = cli_on(any_db)
    with Queue.open(any_db, create=True) as q:
        big = q.enqueue("t", {"n": 99999999999999999999999}).id
        q.enqueue("t", {"n": 1, "s": "x"})
    assert ids_of(cli("list", "--json", "--payload", "n=99999999999999999999999")) == [big]
    assert ids_of(cli("list", "--json", "--payload", "n=9223372036854775808")) == []
    assert ids_of(cli("list", "--json", "--min-attempts", "99999999999999999999999")) == []
    for value in ("n=1e400", "n=-1e400", "n=[1e400]", 's="\\u0000"'):  # (1e400: no JSON value: taken as text)
        assert ids_of(cli("list", "--json", "--payload", value)) == []
    assert ids_of(cli("list", "--json", "--payload", 's="\\ud800"')) == []  # (no JSON value: taken as text)
    refused_line(cli("list", "--payload", "s=x\udcff"), "--payload")  # (argv bytes that are not UTF-8)


def test_a_dry_run_reads_and_never_waits_for_the_write_lock(tmp_path):
    """`--dry-run` changes nothing, so it takes no write lock either: while another process holds
    SQLite's write lock (a worker's claim, another action), a dry run still answers, at once."""
    import sqlite3

    db = tmp_path / "q" / "jobs.db"
    buried_fixture(db)
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # the write lock, held
    try:
        r = run_inproc("--busy-timeout", "200ms", "retry", "--error", "timeout", "--dry-run", "--json", db=db)
        assert r.exit_code == 0, r.output
        assert [json.loads(line)["id"] for line in r.stdout.splitlines()] == [1, 2]
    finally:
        other.execute("ROLLBACK")
        other.close()


def test_an_error_with_letters_beyond_ascii_is_found_by_its_own_text(any_db):
    """--error folds case on both sides: a text with a non-ASCII capital is found by itself and in
    any case (SQLite's own lower() folds ASCII only)."""
    with Queue.open(any_db, create=True) as q:
        q.enqueue("t", {})
        job = q.claim(worker="w-1")
        q.fail(job.id, token=job.token, error="Échec de connexion", bury=True)
    cli = cli_on(any_db)
    assert ids_of(cli("list", "--json", "--error", "Échec")) == [job.id]
    assert ids_of(cli("list", "--json", "--error", "Échec DE CONNEXION")) == [job.id]
    # in any case beyond ASCII too, on SQLite as on PostgreSQL, for listing and acting alike
    assert ids_of(cli("list", "--json", "--error", "échec")) == [job.id]
    assert ids_of(cli("list", "--json", "--error", "ÉCHEC DE")) == [job.id]
    r = cli("retry", "--error", "échec", "--dry-run", "--json")
    assert [json.loads(line)["id"] for line in r.stdout.splitlines()] == [job.id], r.output


def test_a_bad_time_is_refused_before_asking(db):
    """reschedule's --in and --at are read before the question, so nobody answers y to a refusal."""
    buried_fixture(db)
    with Queue.open(db) as q:
        q.enqueue("report", {})
    argv = [*JOBCTL, "--db", str(db), "reschedule", "--status", "pending", "--in", "garbage"]
    code, shown, _ = run_on_pty(argv, until=b"[y/N] ", timeout=30)
    assert code == 2 and "[y/N]" not in shown and "invalid --in 'garbage'" in shown, shown


def test_purge_and_action_help_name_only_the_states_they_take():
    shown = " ".join(run_cli("purge", "--help").stdout.split())
    assert "completed, cancelled or buried" in shown and "held" not in shown, shown
    listing = " ".join(run_cli("list", "--help").stdout.split())
    assert "scheduled, blocked, held" in listing, listing
    # an action's --status names the states it acts on, as its refusal of any other says
    retry = " ".join(run_cli("retry", "--help").stdout.split())
    assert "(repeatable): buried only" in retry and "held" not in retry, retry
    cancel = " ".join(run_cli("cancel", "--help").stdout.split())
    assert "pending, scheduled, blocked, held or buried; without it, pending jobs" in cancel, cancel


def test_a_payload_value_is_compared_by_value_the_same_on_both_engines(any_db):
    """--payload PATH=VALUE with an object or a list: keys in any order, 1 and 1.0 the same number
    (as a single number already is), true never 1; a number in the path is a list index, so it
    finds nothing in a single value or an object, on SQLite as on PostgreSQL."""
    with Queue.open(any_db, create=True) as q:
        ids = [q.enqueue("t", p).id for p in (
            {"u": {"id": 4, "x": [1, 2]}}, {"u": {"x": [1, 2], "id": 4}}, {"u": {"id": 4, "x": [1.0, 2]}},
            {"u": {"id": 4}}, {"f": [True]}, {"n": 1}, {"n": {"0": 1}}, {"n": [1]}, {"u": {"id": 4, "x": [2, 1]}})]
    cli = cli_on(any_db)

    def found(value):
        return sorted(ids_of(cli("list", "--json", "--payload", value)))

    assert found('u={"x": [1, 2], "id": 4}') == ids[:3]
    assert found('u={"id": 4, "x": [1.0, 2.0]}') == ids[:3]
    assert found("u.x=[1,2]") == ids[:3]
    assert found('u={"id": 4.0}') == [ids[3]]
    assert found("f=[1]") == [] and found("f=[true]") == [ids[4]]
    assert found("n.0=1") == [ids[7]]  # the list, not the single 1 nor the object's key "0"
    r = cli("cancel", "--payload", 'u={"x": [1, 2], "id": 4}', "--dry-run", "--json")  # the action agrees
    assert [json.loads(line)["id"] for line in r.stdout.splitlines()] == ids[:3], r.output


def test_an_action_interrupted_says_how_many_jobs_it_changed(any_db, monkeypatch):
    """Ctrl-C in the middle of an action by filter: the transactions done stay done, the one under
    way is undone, and the command says how many it changed (stdout: that count; stderr: one
    line), exit 130, so that the admin knows to run it again for the rest."""
    import contextlib
    import os
    import signal

    from jobctl.cli import progress

    with Queue.open(any_db, create=True) as q:
        q.insert([q.prepare("t", {"n": i}) for i in range(2500)])
    assert run_inproc("bury", "--type", "t", db=any_db).stdout == "2500\n"

    @contextlib.contextmanager
    def ctrl_c_after_the_first_transaction(*args, **kwargs):
        yield lambda done, total: os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(progress, "progress_bar", ctrl_c_after_the_first_transaction)
    r = run_inproc("retry", "--type", "t", db=any_db)
    with Queue.open(any_db) as q:
        retried = q.count_jobs(statuses=["pending"])
    assert 0 < retried < 2500
    assert (r.exit_code, r.stdout) == (130, f"{retried}\n"), r.output
    line = r.one_error_line()
    assert f"interrupted after retrying {retried:,} of 2,500 jobs" in line and "again" in line, line
    r = run_inproc("retry-buried", "--type", "t", "--json", db=any_db)  # the same with retry-buried
    with Queue.open(any_db) as q:
        now_pending = {j.id for j in q.list_jobs(statuses=["pending"], limit=0)}
    shown = json.loads(r.stdout)
    assert r.exit_code == 130 and 0 < shown["count"] < 2500 - retried, r.output
    assert shown["count"] == len(shown["ids"]) == len(now_pending) - retried and set(shown["ids"]) <= now_pending
    assert f"interrupted after retrying {shown['count']:,} of {2500 - retried:,} jobs" in r.one_error_line()
    # Ctrl-C in the last transaction: nothing is left to stop; the action ends as it would have
    with Queue.open(any_db) as q:
        q.insert([q.prepare("small", {})])
    r = run_inproc("bury", "--type", "small", db=any_db)
    assert (r.exit_code, r.stdout, r.stderr) == (0, "1\n", ""), r.output


def test_a_window_in_durations_is_the_one_of_the_moment_the_jobs_were_found(any_db):
    """`retry --since 1s`: "that long ago" is counted from when the command found its jobs, so a
    job found at the edge of the window is acted on even if the window moves on while the action
    runs; it is not skipped as changed meanwhile, since it did not change."""
    import time

    from jobctl.selection import parse

    with Queue.open(any_db, create=True) as q:
        job = q.enqueue("t", {})
        sel = parse(since="1s")
        ids = q.matching_ids(sel)
        assert ids == [job.id]
        time.sleep(1.2)  # the job's last change is now more than 1 s ago
        assert [outcome for _, outcome, _ in q.act("bury", ids, sel)] == ["changed"]
        assert q.get(job.id).status == "buried"


# Every action by id on a job in every state: the state it leaves the job in (exit 0), or its
# exit code when it refuses (4: nothing changes, one error line naming the state). A job already
# where the action leads is refused like any other state the action does not act on; the one
# exception is the contract's: cancel of a job whose cancellation was requested already, exit 0.
# A missing id is exit 3 for every action.
BY_STATE = """
action          pending    scheduled  blocked    running          cancel_requested buried     completed cancelled
retry           4          4          4          4                4                pending    4         4
cancel          cancelled  cancelled  cancelled  cancel_requested cancel_requested cancelled  4         4
cancel-deps     cancelled  cancelled  cancelled  cancel_requested cancel_requested cancelled  4         cancelled
bury            buried     buried     buried     4                4                4          4         4
reschedule      pending    pending    pending    4                4                4          4         4
edit            pending    pending    pending    4                4                buried     4         4
complete        4          4          4          completed        completed        4          4         4
fail            4          4          4          pending          buried           4          4         4
fail-stale      4          4          4          4                4                4          4         4
cancel-stale    4          4          4          4                4                4          4         4
"""
ARGS = {"retry": ["retry"], "cancel": ["cancel"], "cancel-deps": ["cancel", "--with-dependents"], "bury": ["bury"],
        "reschedule": ["reschedule", "--now"], "edit": ["edit", "--priority", "high"], "complete": ["complete"],
        "fail": ["fail"], "fail-stale": ["fail", "--token", "0ld"], "cancel-stale": ["cancel", "--token", "0ld"]}


def job_in_state(q, state: str, n: int) -> int:
    """A fresh job (its own queue) in `state`: a status, or the views scheduled and blocked."""
    queue = f"q{n}"
    if state == "scheduled":
        return q.enqueue("t", {}, queue=queue, delay="1h").id
    if state == "blocked":
        return q.enqueue("t", {}, queue=queue, after=[q.enqueue("t", {}, queue=queue + "-dep", delay="1h").id]).id
    job_id = q.enqueue("t", {}, queue=queue).id
    if state in ("pending", "cancelled"):
        if state == "cancelled":
            q.cancel(job_id)
        return job_id
    token = q.claim(queues=[queue], worker="w-1").token
    if state == "cancel_requested":
        q.cancel(job_id)
    elif state == "buried":
        q.fail(job_id, token=token, bury=True)
    elif state == "completed":
        q.complete(job_id, token=token)
    return job_id


def test_every_action_by_id_in_every_state(any_db):
    """The table above, with and without --json: stdout, stderr, exit code and the job after."""
    header, *rows = [line.split() for line in BY_STATE.strip().splitlines()]
    states = header[1:]
    wrong = []
    made = iter(range(1_000))
    with Queue.open(any_db, create=True) as q:
        for row, as_json in ((row, as_json) for row in rows for as_json in (False, True)):
            action, cells = row[0], row[1:]
            for state, cell in [*zip(states, cells), ("missing", "3")]:
                job_id = job_in_state(q, state, next(made)) if state != "missing" else 999_999
                before = q.get(job_id) if state != "missing" else None
                seen = (len(q.events(job_id)), before.updated_at) if before else None
                r = run_inproc(*ARGS[action][:1], job_id, *ARGS[action][1:], *(["--json"] if as_json else []), db=any_db)
                after = q.get(job_id) if before else None
                got = (str(r.exit_code) if r.exit_code else after.status)
                ok = got == cell
                if cell.isdigit():  # refused: one error line naming the state, nothing changed
                    ok = ok and r.stdout == "" and r.stderr.count("\n") == 1 and r.stderr.startswith("jobctl: error: ")
                    # named by its state; a token of another claim only while a run holds the job
                    named = ((f"job {job_id} is {after.status};",) if after and after.status not in HELD else
                             (f"job {job_id} is {after.status};", f"now {after.status},") if after else ("no job with id",))
                    ok = ok and any(words in r.stderr for words in named)
                    ok = ok and (after is None or (len(q.events(job_id)), after.updated_at) == seen)
                elif as_json:  # the job as it is now
                    ok = ok and r.stderr == "" and (action in ("complete",) and r.stdout == "" or
                                                    json.loads(r.stdout.splitlines()[0])["status"] == after.status)
                elif action in ("retry", "cancel", "cancel-deps", "bury"):
                    ok = ok and r.stdout.splitlines()[0] == f"{job_id} {after.status}" and r.stderr == ""
                if not ok:
                    wrong.append(f"{action}{' --json' if as_json else ''} on {state}: wanted {cell}, got {got}"
                                 f"{' with other output' if got == cell else ''}; {r.output}")
    assert not wrong, "\n".join(wrong)


def test_several_ids_act_on_each_once_and_exit_the_same_in_any_order(any_db):
    """Each id once, in the order given; the refused ones on stderr, the others acted on; the exit
    code does not depend on the order: 3 when any id is missing, else 4. A database error stops
    at once instead of meeting every id after it."""
    import sqlite3

    for order in ("good wrong missing", "missing wrong good", "good missing wrong", "good good", "good wrong"):
        with Queue.open(any_db, create=True) as q:
            ids = {"good": q.enqueue("t", {}).id, "wrong": q.enqueue("t", {}).id, "missing": 999_999}
            q.bury(ids["wrong"])
        r = run_inproc("bury", *[ids[word] for word in order.split()], db=any_db)
        assert r.stdout == f"{ids['good']} buried\n", r.output
        refused = [w for w in dict.fromkeys(order.split()) if w != "good"]
        assert r.exit_code == (3 if "missing" in refused else 4 if refused else 0), (order, r.output)
        assert len(r.stderr.splitlines()) == len(refused), (order, r.output)
    if str(any_db).startswith("postgresql://"):
        return
    with Queue.open(any_db) as q:
        ids = [q.enqueue("t", {}).id for _ in range(3)]
    lock = sqlite3.connect(any_db, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        r = run_inproc("--busy-timeout", "100ms", "cancel", *ids, db=any_db)
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    assert r.exit_code == 6 and "locked" in r.one_error_line(), r.output  # one line, not one per id
