"""`list --stuck/--older-than/--sort` and the explanations of `show` (issue 4)."""

import json
import time

import pytest

from jobctl.queue import Queue
from jobctl.stats import explain


def ids(r):
    assert r.exit_code == 0, r.output
    return [json.loads(line)["id"] for line in r.stdout.splitlines()]


@pytest.fixture
def known(db):
    """1: old low-priority, 2: old high-priority, 3: new, 4: stuck (lease expired), 5: running fine."""
    clock = lambda: time.time() - 3600  # noqa: E731 - an hour ago
    with Queue.open(db, create=True, clock=clock) as q:
        q.enqueue("a", {}, priority="low")
        q.enqueue("b", {}, priority="high")
    with Queue.open(db, clock=lambda: time.time() - 120) as q:
        q.enqueue("c", {})
        q.enqueue("d", {}, queue="w")
        q.enqueue("e", {}, queue="w")
        q.claim(types=["d"], lease="1m")  # lease ended a minute ago
    with Queue.open(db) as q:
        q.claim(types=["e"], lease="1h")
    return db


def test_list_stuck_older_than_and_sort(cli, known):
    assert ids(cli("list", "--stuck", "--json")) == [4]
    assert ids(cli("list", "--older-than", "30m", "--json")) == [2, 1]
    assert ids(cli("list", "--older-than", "30m", "--sort", "oldest", "--json")) == [1, 2]
    assert ids(cli("list", "--status", "pending", "--sort", "priority", "--json")) == [2, 3, 1]
    assert ids(cli("list", "--sort", "newest", "-n", "2", "--json")) == [5, 4]
    r = cli("list", "--sort", "sideways")
    assert r.exit_code == 2 and "newest, oldest" in r.stderr
    assert cli("list", "--older-than", "soon").exit_code == 2


def test_list_table_shows_untrusted_text_escaped(cli, db):
    assert cli("enqueue", "t", '{"note": "[bold]x[/bold]\\u001b[31m", "api_key": "k-123"}').exit_code == 0
    r = cli("list")
    assert "[bold]x[/bold]\\u001b[31m" in r.stdout and "\x1b" not in r.stdout
    assert "k-123" not in r.stdout and "***" in r.stdout
    assert "k-123" in cli("list", "--reveal").stdout


def why(cli, job_id):
    r = cli("show", job_id)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "│ why" in line)
    text = []
    for line in lines[start:]:
        cell = line.strip("│ ").strip()
        if text and (not line.startswith("│  ") or cell.split(" ")[0] in ("queue", "type")):
            break
        text.append(cell[len("why"):].strip() if not text else cell)
    return " ".join(text)


def test_show_explains_each_situation(cli, db):
    with Queue.open(db, create=True, clock=lambda: time.time() - 600) as q:
        ready = q.enqueue("lonely", {}, queue="nobody").id                    # 1 ready for 10 min
        sched = q.enqueue("later", {}, delay="2h").id                          # 2 scheduled
        dep = q.enqueue("first", {}, queue="deps").id                          # 3 its dependency
        blocked = q.enqueue("second", {}, queue="deps2", after=[dep]).id       # 4 blocked by 3
        paused = q.enqueue("held", {}, queue="frozen").id                      # 5 queue paused
        last = q.enqueue("fragile", {}, queue="once", max_attempts=1).id       # 6 no runs left
        q.pause("frozen")
        job = q.claim(queues=["once"])
        q.fail(job.id, token=job.token, error="boom")
    assert why(cli, ready).startswith("ready for 10m but not claimed: is a worker serving queue nobody and type lonely?")
    assert why(cli, sched).startswith("scheduled: not before ")
    assert "blocked by job 3 (pending)" in why(cli, blocked)
    assert "queue frozen is paused: `jobctl resume frozen`" in why(cli, paused)
    assert why(cli, last).startswith("no runs left (1 of 1 used): `jobctl retry 6`")
    assert "why" not in cli("show", dep, "--json").stdout  # JSON stays the SPEC job object


def test_explain_blocked_by_a_buried_job_says_what_to_do(db):
    with Queue.open(db, create=True) as q:
        dep = q.enqueue("first", {}, max_attempts=1).id
        after = q.enqueue("second", {}, after=[dep]).id
        job = q.claim(types=["first"])
        q.fail(job.id, token=job.token)
        text = explain(q.get(after), q.now(), dependencies=q.engine.dependencies(after))
    assert text.startswith(f"blocked by job {dep} (buried); job {dep} will not complete by itself")


def test_explain_running_jobs_only_when_something_is_wrong(db):
    with Queue.open(db, create=True) as q:
        q.enqueue("a", {})
        job = q.claim(lease="1m")
        assert explain(job, q.now()) is None
        assert "lease expired 1m ago" in explain(job, q.now() + 120_000)
