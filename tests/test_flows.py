"""Flows: reactions (on_buried / on_completed / on_cancelled), chains, the dependents of a job that
will never complete, cancel by filter, and reschedule. End to end through the CLI, plus the Queue
for the paths that need a moving clock (recover)."""

from __future__ import annotations

import json

import pytest

from conftest import Clock, run_cli
from jobctl.config import Settings, apply_config
from jobctl.errors import ConfigError
from jobctl.queue import Queue


def config(tmp_path, text: str) -> str:
    """./jobctl.toml: the tests run in tmp_path, where jobctl finds it."""
    path = tmp_path / "jobctl.toml"
    path.write_text(text)
    return str(path)


def enq(cli, *args, **kw) -> int:
    r = cli("enqueue", *args, **kw)
    assert r.exit_code == 0, r.output
    return int(r.stdout)


def show(cli, job_id, *args) -> dict:
    r = cli(*args, "show", job_id, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def listed(cli, *args) -> list[dict]:
    r = cli("list", "--json", "--sort", "oldest", "--limit", "0", *args)
    assert r.exit_code == 0, r.output
    return [json.loads(line) for line in r.stdout.splitlines()]


def run_and_fail(cli, job_id, *args):
    r = cli(*args, "claim", "--type", show(cli, job_id, *args)["type"])
    assert r.exit_code == 0, r.output
    claimed = json.loads(r.stdout)
    assert claimed["id"] == job_id
    r = cli(*args, "fail", job_id, "--token", claimed["token"], "--error", "boom", "--bury")
    assert r.exit_code == 0, r.output


# -- 1. reactions are jobs -----------------------------------------------------------------------


def test_a_buried_job_enqueues_its_reaction_with_the_job_as_it_ended(cli, tmp_path):
    config(tmp_path, '[types.alert]\nqueue = "ops"\npriority = "high"\nmax_attempts = 5\n')
    job_id = enq(cli, "work", '{"order": 42}', "--on-buried", "alert")
    assert show(cli, job_id)["on_buried"] == "alert"
    assert show(cli, job_id)["on_completed"] is None and show(cli, job_id)["on_cancelled"] is None
    run_and_fail(cli, job_id)
    buried = show(cli, job_id)
    (reaction,) = listed(cli, "--type", "alert")
    assert reaction["payload"]["event"] == "buried"
    assert reaction["payload"]["job"] == {k: v for k, v in buried.items() if k != "events"}
    assert reaction["payload"]["job"]["status"] == "buried" and reaction["payload"]["job"]["error"] == "boom"
    # an ordinary job, from its own type's config
    assert (reaction["queue"], reaction["priority"], reaction["max_attempts"]) == ("ops", 20, 5)
    history = show(cli, reaction["id"])["events"]
    assert [e["message"] for e in history] == [f"enqueued: reaction to job {job_id} (buried)"]
    assert f"reaction: job {reaction['id']} (alert)" in buried["events"][-1]["message"]


def test_completed_and_cancelled_reactions_and_a_reaction_of_a_reaction(cli, tmp_path):
    config(tmp_path, '[types.step]\non_completed = "done"\non_cancelled = "undo"\n'
                           '[types.done]\non_completed = "log"\n')
    a = enq(cli, "step")
    b = enq(cli, "step")
    claimed = json.loads(cli("claim", "-t", "step").stdout)
    assert cli("complete", a, "--token", claimed["token"], "--result", '{"ok": 1}').exit_code == 0
    assert cli("cancel", b).exit_code == 0
    by_type = {j["type"]: j for j in listed(cli)}
    assert by_type["done"]["payload"]["event"] == "completed"
    assert by_type["done"]["payload"]["job"]["id"] == a and by_type["done"]["payload"]["job"]["result"] == {"ok": 1}
    assert by_type["undo"]["payload"]["event"] == "cancelled" and by_type["undo"]["payload"]["job"]["id"] == b
    assert by_type["done"]["on_completed"] == "log"  # the reaction job carries its own type's reactions
    claimed = json.loads(cli("claim", "-t", "done").stdout)
    assert cli("complete", claimed["id"], "--token", claimed["token"]).exit_code == 0
    (log,) = listed(cli, "--type", "log")
    assert log["payload"]["job"]["type"] == "done" and log["payload"]["job"]["status"] == "completed"


def test_the_reaction_types_are_stored_at_enqueue(cli, tmp_path):
    config(tmp_path, '[types.work]\non_buried = "alert"\n')
    job_id = enq(cli, "work")
    (tmp_path / "jobctl.toml").write_text("")  # the config no longer names a reaction
    run_and_fail(cli, job_id)
    assert [j["type"] for j in listed(cli, "--type", "alert")] == ["alert"]
    override = enq(cli, "work", "--on-buried", "page")  # the option wins over the config
    assert show(cli, override)["on_buried"] == "page"


def test_a_type_cannot_react_to_itself(cli, tmp_path):
    config(tmp_path, '[types.work]\non_cancelled = "work"\n')
    r = cli("enqueue", "other")
    assert r.exit_code == 2 and "types.work.on_cancelled" in r.one_error_line() and "itself" in r.stderr
    (tmp_path / "jobctl.toml").unlink()
    for flag in ("--on-buried", "--on-completed", "--on-cancelled"):
        r = cli("enqueue", "work", flag, "work")
        assert r.exit_code == 2 and "itself" in r.one_error_line()
    r = cli("enqueue", "--batch", "-", input='{"type": "a"}\n{"type": "work", "on_buried": "work"}\n')
    assert r.exit_code == 2 and r.one_error_line().startswith("jobctl: error: line 2:")
    r = cli("enqueue", "work", "--on-buried", "bad name!")
    assert r.exit_code == 2
    assert cli("list", "--json").stdout == ""


def test_recover_and_retry_buried_follow_the_rule_and_a_dry_run_enqueues_nothing(db):
    clock = Clock(1_900_000_000.0)
    with Queue.open(db, Settings(), create=True, clock=clock) as q:
        lost = q.enqueue("work", on_buried="alert", max_attempts=1).id
        q.claim(worker="gone", lease="1s")
        clock.t += 60
        assert [a for _, a in q.recover(dry_run=True)] == ["buried"]
        assert q.count_jobs(type="alert") == 0
        assert [(j.id, a) for j, a in q.recover()] == [(lost, "buried")]
        (reaction,) = q.list_jobs(type="alert")
        assert json.loads(reaction.payload)["job"]["id"] == lost
        assert "lost" in json.loads(reaction.payload)["job"]["error"]
        # the reaction is itself buried (by --bury) and reacts in turn; retry-buried moves it back
        r2 = q.enqueue("alert", on_buried="page").id
        job = q.claim(types=["alert"])
        assert job.id == reaction.id  # the older one first
        q.fail(job.id, token=job.token, bury=True)
        assert q.count_jobs(type="page") == 0  # that one had no reaction of its own
        job = q.claim(types=["alert"])
        assert job.id == r2
        q.fail(job.id, token=job.token, bury=True)
        assert q.count_jobs(type="page") == 1
        assert {j.id for j in q.retry_buried(type="alert")} == {reaction.id, r2}
        assert q.count_jobs(type="page") == 1


def test_a_worker_burying_a_job_enqueues_its_reaction(db, tmp_path):
    config(tmp_path, '[types.flaky]\ncommand = ["/bin/sh", "-c", "exit 1"]\nmax_attempts = 1\n'
                           'on_buried = "alert"\n[worker]\npoll = "100ms"\n')
    job_id = int(run_cli("enqueue", "flaky", db=db).stdout)
    r = run_cli("work", "--stop-when-empty", "--type", "flaky", db=db, timeout=60)
    assert r.exit_code == 0, r.output
    with Queue.open(db) as q:
        assert q.get(job_id).status == "buried"
        (reaction,) = q.list_jobs(type="alert")
        assert json.loads(reaction.payload)["job"]["id"] == job_id


# -- 2. chains -----------------------------------------------------------------------------------


def test_chain_makes_each_job_wait_for_the_one_before(cli):
    r = cli("enqueue", "--chain", "-", "--on-buried", "alert",
            input='{"type": "a"}\n\n{"type": "b", "payload": {"x": 1}}\n{"type": "c", "on_buried": "page"}\n')
    assert r.exit_code == 0, r.output
    a, b, c = map(int, r.stdout.split())
    jobs = {j["id"]: j for j in listed(cli)}
    assert [jobs[i]["after"] for i in (a, b, c)] == [[], [a], [b]]
    assert [jobs[i]["on_buried"] for i in (a, b, c)] == ["alert", "alert", "page"]  # a line's own key wins
    claimed = json.loads(cli("claim").stdout)
    assert claimed["id"] == a and cli("claim").exit_code == 5
    assert cli("complete", a, "--token", claimed["token"]).exit_code == 0
    claimed = json.loads(cli("claim").stdout)
    assert claimed["id"] == b
    assert cli("fail", b, "--token", claimed["token"], "--bury").exit_code == 0
    alerts = listed(cli, "--type", "alert")
    assert [j["payload"]["job"]["id"] for j in alerts] == [b]  # once, for the link that was buried
    assert show(cli, c)["status"] == "pending" and cli("claim", "-t", "c").exit_code == 5  # stays blocked
    why = cli("show", c).stdout
    assert f"jobctl retry {b}" in " ".join(why.split())


def test_chain_is_all_or_nothing(cli):
    r = cli("enqueue", "--chain", "-", input='{"type": "a"}\n{"type": "b", "after": [999]}\n')
    assert r.exit_code == 3
    r = cli("enqueue", "--chain", "-", input='{"type": "a"}\n{"typo": "b"}\n')
    assert r.exit_code == 2 and "line 2" in r.one_error_line()
    assert cli("list", "--json").stdout == ""
    r = cli("enqueue", "--chain", "-", "--batch", "-", input='{"type": "a"}\n')
    assert r.exit_code == 2
    r = cli("enqueue", "--chain", "-", input="\n")
    assert r.exit_code == 2


# -- 3. dependents of a job that will never complete -------------------------------------------


def test_show_of_a_job_blocked_by_a_cancelled_one_offers_what_works(cli):
    dep = enq(cli, "first")
    waiting = enq(cli, "second", "--after", str(dep))
    assert cli("cancel", dep).exit_code == 0
    text = " ".join(cli("show", waiting).stdout.split())
    assert f"`jobctl cancel {waiting}`" in text
    assert f"`jobctl cancel {dep} --with-dependents`" in text
    assert f"jobctl retry {dep}" not in text  # refused for a cancelled job
    # and what it offers works, on the dependency's side, although that one is already cancelled
    r = cli("cancel", dep, "--with-dependents")
    assert r.exit_code == 0, r.output
    assert show(cli, waiting)["status"] == "cancelled"


def test_a_job_blocked_by_a_buried_one_continues_when_it_is_retried_and_completes(cli):
    dep = enq(cli, "first", "--max-attempts", "1")
    waiting = enq(cli, "second", "--after", str(dep))
    claimed = json.loads(cli("claim").stdout)
    cli("fail", dep, "--token", claimed["token"])
    assert f"`jobctl retry {dep}`" in " ".join(cli("show", waiting).stdout.split())
    assert cli("retry", dep).exit_code == 0
    claimed = json.loads(cli("claim").stdout)
    assert claimed["id"] == dep
    cli("complete", dep, "--token", claimed["token"])
    assert json.loads(cli("claim").stdout)["id"] == waiting


def test_cancel_with_dependents_cancels_the_whole_tree_in_one_go(cli):
    root = enq(cli, "root")
    child = enq(cli, "child", "--after", str(root))
    grandchild = enq(cli, "grandchild", "--after", str(child), "--on-cancelled", "cleanup")
    other = enq(cli, "other")
    claimed = json.loads(cli("claim", "-t", "root").stdout)
    r = cli("cancel", root, "--with-dependents", "--reason", "customer left")
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == [f"{root} cancel_requested", f"{child} cancelled", f"{grandchild} cancelled"]
    assert show(cli, other)["status"] == "pending"
    last = show(cli, grandchild)["events"][-1]["message"]
    assert f"job {root}" in last and "customer left" in last
    (cleanup,) = listed(cli, "--type", "cleanup")
    assert cleanup["payload"]["job"]["id"] == grandchild
    assert cli("cancel", root, "--token", claimed["token"]).exit_code == 0
    r = cli("cancel", root, "--with-dependents", "--token", "x")
    assert r.exit_code == 2
    assert cli("cancel", 999, "--with-dependents").exit_code == 3


# -- 4. bulk cancel by filter --------------------------------------------------------------------


def test_cancel_by_filter_cancels_only_jobs_not_yet_started(cli):
    ready = enq(cli, "a", "-q", "imports")
    scheduled = enq(cli, "a", "-q", "imports", "--delay", "1h")
    blocked = enq(cli, "b", "-q", "imports", "--after", str(ready))
    running = enq(cli, "c", "-q", "imports")
    elsewhere = enq(cli, "a", "-q", "other")
    assert json.loads(cli("claim", "-t", "c").stdout)["id"] == running
    r = cli("cancel", "-q", "imports", "--dry-run", "--json")  # one {"id", "action"} per job
    assert [json.loads(line) for line in r.stdout.splitlines()] == [
        {"id": i, "action": "cancelled", "dry_run": True} for i in (ready, scheduled, blocked)]
    assert show(cli, ready)["status"] == "pending"
    r = cli("cancel", "-q", "imports", "--status", "scheduled")
    assert r.exit_code == 0 and r.stdout == "1\n"
    assert show(cli, scheduled)["status"] == "cancelled"
    r = cli("cancel", "-q", "imports", "--type", "b", "--json", "--reason", "wrong file")
    assert json.loads(r.stdout) == {"id": blocked, "action": "cancelled"}
    assert show(cli, blocked)["events"][-1]["message"] == "cancelled: wrong file"
    r = cli("cancel", "-q", "imports")
    assert r.stdout == "1\n"
    states = {j["id"]: j["status"] for j in listed(cli)}
    assert states == {ready: "cancelled", scheduled: "cancelled", blocked: "cancelled", running: "running",
                      elsewhere: "pending"}


def test_cancel_by_filter_of_buried_jobs_and_its_refusals(cli):
    job_id = enq(cli, "a", "-q", "imports", "--max-attempts", "1")
    claimed = json.loads(cli("claim").stdout)
    cli("fail", job_id, "--token", claimed["token"])
    assert cli("cancel", "-q", "imports").stdout == "0\n"  # pending only, by default
    assert cli("cancel", "-q", "imports", "-s", "buried").stdout == "1\n"
    assert show(cli, job_id)["status"] == "cancelled"
    for args in (["1", "-q", "imports"], ["--dry-run"], ["-q", "imports", "-s", "running"],
                 ["-q", "imports", "--token", "t"], ["-q", "imports", "--with-dependents"], []):
        r = cli("cancel", *args)
        assert r.exit_code == 2, (args, r.output)
        r.one_error_line()


# -- 5. reschedule -------------------------------------------------------------------------------


def test_reschedule_sets_run_at_of_pending_jobs(cli):
    later = enq(cli, "a", "--delay", "1h")
    r = cli("reschedule", later, "--now")
    assert r.exit_code == 0, r.output
    job = show(cli, later)
    assert r.stdout == f"{later} {job['run_at']}\n"
    assert job["events"][-1]["message"] == "rescheduled: run now"
    assert json.loads(cli("claim").stdout)["id"] == later
    other = enq(cli, "a")
    r = cli("reschedule", other, "--in", "2h", "--json")
    moved = json.loads(r.stdout)
    assert moved["id"] == other and moved["run_at"] > job["run_at"]
    r = cli("reschedule", other, "--at", "2031-01-01T00:00:00Z")
    assert r.stdout == f"{other} 2031-01-01T00:00:00.000Z\n"
    assert show(cli, other)["events"][-1]["message"] == "rescheduled to 2031-01-01T00:00:00.000Z"


def test_reschedule_refusals(cli):
    running = enq(cli, "a")
    json.loads(cli("claim").stdout)
    r = cli("reschedule", running, "--now")
    assert r.exit_code == 4 and "is running" in r.one_error_line()
    assert cli("reschedule", 999, "--now").exit_code == 3
    for args in ([], ["--now", "--in", "5m"], ["--in", "soon"]):
        r = cli("reschedule", running, *args)
        assert r.exit_code == 2, r.output
        r.one_error_line()


NEW_OPTIONS = {"cancel": ["--with-dependents", "-q, --queue QUEUE", "-t, --type TYPE", "-s, --status STATE", "--dry-run"],
               "reschedule": ["--now", "--in DUR", "--at TIME"]}


@pytest.mark.parametrize("command", ["cancel", "reschedule"])
def test_help_names_the_new_options(cli, command):
    r = cli(command, "--help", env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.output
    for option in NEW_OPTIONS[command]:
        assert option in r.stdout, (option, r.stdout)


def test_queue_reaction_without_queue_layer_is_refused(db):
    """An engine change that would drop a stored reaction is refused (nothing is lost silently)."""
    from jobctl import transitions
    from jobctl.errors import InvalidState

    with Queue.open(db, create=True, clock=Clock()) as q:
        job_id = q.enqueue("a", on_cancelled="b").id
        with pytest.raises(InvalidState):
            q.engine.update_job(job_id, lambda job, now: transitions.cancel(job, now, token=None, reason=None), "x")
        assert q.get(job_id).status == "pending"


# -- reactions that loop ---------------------------------------------------------------------------

def _types(**reactions: dict) -> dict:
    return {"types": {name: dict(keys) for name, keys in reactions.items()}}


@pytest.mark.parametrize("graph", [
    {"a": {"on_completed": "b"}, "b": {"on_completed": "a"}},
    {"a": {"on_buried": "b"}, "b": {"on_completed": "c"}, "c": {"on_cancelled": "a"}},
])
def test_types_that_react_to_each_other_in_a_loop_are_refused(graph):
    # a completes -> b is enqueued -> b completes -> a is enqueued -> ... for ever, each payload
    # holding the one before it: the loop the rule "a type may not react to itself" is there to stop.
    with pytest.raises(ConfigError, match=r"react to each other in a loop: a -> b -> .*a"):
        apply_config(Settings(), _types(**graph), "test")


def test_reactions_that_branch_and_meet_again_are_not_a_loop():
    settings = Settings()
    apply_config(settings, _types(a={"on_buried": "alert", "on_completed": "b"}, b={"on_buried": "alert"},
                                  alert={"on_buried": "page"}), "test")
    assert settings.types["a"].on_completed == "b"


def test_a_reaction_loop_is_exit_2_in_one_line(cli, tmp_path):
    (tmp_path / "jobctl.toml").write_text('[types.a]\non_completed = "b"\n[types.b]\non_completed = "a"\n')
    r = cli("enqueue", "a")
    assert r.exit_code == 2, r.output
    r.one_error_line()
    assert "a -> b -> a" in r.stderr and r.stdout == ""


# -- waiting for a job that can never finish -------------------------------------------------------

@pytest.fixture
def on_any(any_db):
    from conftest import on_db, run_inproc

    return on_db(run_inproc, any_db)


def _enq(cli, *args) -> int:
    r = cli("enqueue", *args)
    assert r.exit_code == 0, r.output
    return int(r.stdout.split()[0])


@pytest.mark.parametrize("gone", ["cancelled", "cancelled upstream"])
def test_wait_on_a_job_blocked_by_a_cancelled_one_says_so_at_once(on_any, gone):
    # `wait` (and `enqueue --after ... --wait`) without --timeout waited for ever, without a word,
    # on a job that waits on a cancelled job: it can never run.
    parent = _enq(on_any, "step")
    middle = _enq(on_any, "step", "--after", parent) if gone == "cancelled upstream" else parent
    child = _enq(on_any, "step", "--after", middle)
    assert on_any("cancel", parent).exit_code == 0
    r = on_any("wait", child, "--timeout", "20s")
    assert r.exit_code == 4, r.output
    r.one_error_line()
    assert f"job {child}" in r.stderr and f"job {parent}" in r.stderr and "never" in r.stderr
    assert r.stdout == f"{child} pending\n", "a job that can never run is printed as it is, like the others"
    r = on_any("enqueue", "step", "--after", middle, "--wait", "--wait-timeout", "20s")
    assert r.exit_code == 4, r.output
    r.one_error_line()


def test_wait_on_a_job_blocked_by_a_buried_one_keeps_waiting(on_any):
    # a buried dependency may be retried: the wait goes on (here until its timeout, exit 5)
    parent = _enq(on_any, "step", "--max-attempts", "1")
    child = _enq(on_any, "step", "--after", parent)
    r = on_any("claim", "--json")
    assert r.exit_code == 0, r.output
    import json

    assert on_any("fail", parent, "--token", json.loads(r.stdout)["token"], "--error", "x").exit_code == 0
    r = on_any("wait", child, "--timeout", "0.3s")
    assert r.exit_code == 5, r.output


def test_wait_on_a_job_whose_dependency_was_purged_before_it_completed_says_so(any_db):
    import time

    from jobctl.queue import Queue
    from jobctl.waiting import wait_finished
    from jobctl.errors import WaitTimedOut

    with Queue.open(any_db, create=True) as q:
        done, other, dropped = (q.enqueue("step").id for _ in range(3))
        child = q.enqueue("step", after=[done, other]).id
        job = q.claim(types=["step"])
        assert job is not None and job.id == done
        q.complete(done, token=job.token)
        time.sleep(0.01)
        q.purge(completed_older_than="0s")  # a completed dependency purged: not a reason to give up
        with pytest.raises(WaitTimedOut):
            wait_finished(q, [child], timeout=0.2)
        lone = q.enqueue("step", after=[dropped]).id
        q.cancel(dropped)
        time.sleep(0.01)
        q.purge(cancelled_older_than="0s")
        jobs, stuck = wait_finished(q, [lone], timeout=5)
        assert [j.status for j in jobs] == ["pending"]
        assert stuck[lone].startswith(f"job {lone} can never run: it waits on job {dropped}, which was deleted "
                                      "before it completed")


@pytest.mark.parametrize("upstream", [False, True])
def test_what_wait_offers_for_a_purged_dependency_works(on_any, upstream):
    # The dependency is gone: `jobctl cancel ID --with-dependents` on its id is "no such job"
    # (exit 3). What the message offers must be commands that work, each as it says.
    import re
    import time

    dropped = _enq(on_any, "step")
    middle = _enq(on_any, "step", "--after", dropped)
    child = _enq(on_any, "step", "--after", middle) if upstream else middle
    assert on_any("cancel", dropped).exit_code == 0
    time.sleep(0.01)
    assert on_any("purge", "--cancelled-older-than", "0s").exit_code == 0
    r = on_any("wait", child, "--timeout", "20s")
    assert r.exit_code == 4, r.output
    offered = re.findall(r"`jobctl ([^`]*)`", r.one_error_line())
    assert offered and all(str(dropped) not in cmd.split() for cmd in offered), offered
    tree = next(cmd for cmd in offered if "--with-dependents" in cmd)
    r = on_any(*tree.split())
    assert r.exit_code == 0, r.output
    assert {on_any("show", j, "--json").stdout.count('"status":"cancelled"') for j in (middle, child)} == {1}


# -- enqueue after a job that will never complete --------------------------------------------------

def test_enqueue_after_a_cancelled_job_is_refused(on_any, tmp_path):
    # It was enqueued, exit 0, and stayed blocked for ever: nothing said so unless someone ran show.
    parent = _enq(on_any, "step")
    assert on_any("cancel", parent).exit_code == 0
    r = on_any("enqueue", "step", "--after", parent)
    assert r.exit_code == 4, r.output
    r.one_error_line()
    assert f"job {parent}" in r.stderr and "cancelled" in r.stderr and "nothing was enqueued" in r.stderr
    lines = tmp_path / "chain.ndjson"
    lines.write_text(f'{{"type": "step"}}\n{{"type": "step", "after": [{parent}]}}\n')
    r = on_any("enqueue", "--batch", str(lines))
    assert r.exit_code == 4, r.output
    assert "line 2" in r.stderr
    assert on_any("list", "--json", "--limit", "0").stdout.count("\n") == 1  # all or nothing


def test_cancel_with_dependents_takes_along_a_job_enqueued_after_a_dependent_meanwhile(pg_url):
    # PostgreSQL, READ COMMITTED: the dependents were read by one statement whose snapshot was taken
    # before an enqueue after one of them committed (that enqueue held the dependent's row): the new
    # job was left blocked for ever on a cancelled job.
    import threading
    import time

    from jobctl.queue import Queue

    with Queue.open(pg_url, create=True) as q, Queue.open(pg_url) as slow:
        root = q.enqueue("step").id
        dependent = q.enqueue("step", after=[root]).id
        plain_event = slow.engine._event

        def late_event(c, job_id, now, *args, **kw):
            plain_event(c, job_id, now, *args, **kw)
            time.sleep(1.0)  # inside the enqueue's transaction, the dependent's row locked

        slow.engine._event = late_event  # type: ignore[method-assign]
        added: list[int] = []
        t = threading.Thread(target=lambda: added.append(slow.enqueue("step", after=[dependent]).id))
        t.start()
        time.sleep(0.4)
        q.cancel_with_dependents(root)
        t.join()
        assert [j.status for j in q.get_many([root, dependent, *added])] == ["cancelled"] * 3


def test_reschedule_of_a_blocked_job_does_not_say_it_runs_now(tmp_path):
    from jobctl.queue import Queue

    with Queue.open(tmp_path / "q.db", create=True) as q:
        parent = q.enqueue("step").id
        child = q.enqueue("step", after=[parent]).id
        q.reschedule(child, now=True)
        message = q.events(child)[-1].message
        assert message == "rescheduled: run now, once the jobs it waits on complete", message
        assert q.claim(types=["step"]).id == parent  # still blocked


# -- doctor names the blocked jobs that can never run ----------------------------------------------

def test_doctor_names_blocked_jobs_that_can_never_run(on_any, tmp_path):
    """A job waits on one that was cancelled (without --with-dependents), another on a buried one
    that was then purged: nothing can make either run, and doctor says so (exit 9). A job waiting
    on one of those, or on a buried job (which may be retried), is not named."""
    import json

    (tmp_path / "jobctl.toml").write_text('[types.t]\ncommand = ["true"]\n')
    cancelled = _enq(on_any, "t")
    purged = _enq(on_any, "t")
    buried = _enq(on_any, "t")
    first = _enq(on_any, "t", "--after", str(cancelled))
    second = _enq(on_any, "t", "--after", str(purged))
    _enq(on_any, "t", "--after", str(buried))
    _enq(on_any, "t", "--after", str(first))  # waits on a stuck job: it runs once that one is dealt with
    r = on_any("doctor", "--json")
    assert r.exit_code == 0, r.output
    assert on_any("cancel", str(cancelled)).exit_code == 0
    def bury(job):
        claimed = json.loads(on_any("claim", "--json").stdout)
        assert claimed["id"] == job
        assert on_any("fail", str(job), "--token", claimed["token"], "--bury", "--error", "gone").exit_code == 0

    bury(purged)
    assert on_any("purge", "--buried-older-than", "0s").exit_code == 0
    bury(buried)  # still there: `retry` can make the job waiting on it run
    r = on_any("doctor", "--json")
    assert r.exit_code == 9, r.output
    report = json.loads(r.stdout)
    check = next(c for c in report["checks"] if c["check"] == "blocked jobs")
    assert not check["ok"]
    assert report["never_runnable"] == [{"id": first, "waits_on": cancelled, "why": "was cancelled"},
                                            {"id": second, "waits_on": purged, "why": "was deleted before it completed"}]
    assert f"job {first} waits on job {cancelled}, which was cancelled" in check["detail"]
    assert f"jobctl cancel {first} --with-dependents" in check["detail"]
