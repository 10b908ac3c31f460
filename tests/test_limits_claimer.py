"""A job's concurrency group and cost are the claimer's config's, unless the job set them itself:
a job enqueued without the config (cron, another host) is limited like any other (both engines)."""

import json
import sys

import pytest

from conftest import open_queues, run_cli, start_worker, finish, types_settings

settings = types_settings

CLAIMER = settings(render=dict(concurrency_group="gpu", concurrency_limit=3),
                   thumb=dict(concurrency_group="gpu", concurrency_limit=3, cost_units=2))


@pytest.fixture
def make(any_db):
    yield from open_queues(any_db)


def _held_units(q, jobs) -> int:
    return sum(q.limits.resolve(j.type, j.concurrency_group, j.cost_units)[1] for j in jobs)


def test_jobs_enqueued_without_the_config_count_against_the_claimers_limits(make, clock):
    enqueuer = make(settings(), clock)  # no [types.X] at all: nothing is known about the limits here
    for _ in range(4):
        enqueuer.enqueue("render")
    thumbs = [enqueuer.enqueue("thumb").id for _ in range(2)]
    j = enqueuer.get(thumbs[0])
    assert (j.concurrency_group, j.cost_units) == (None, 0)  # not set: nothing frozen from this config
    claimer = make(CLAIMER, clock)
    taken = []
    while (job := claimer.claim(worker="w")) is not None:
        taken.append(job)
    assert [j.type for j in taken] == ["render"] * 3 and _held_units(claimer, taken) == 3
    assert claimer.held_because(claimer.get(thumbs[0])) == "group gpu is full: 3 of 3 units running (this job needs 2)"
    assert sorted(j.type for j in claimer.list_jobs(held=True)) == ["render", "thumb", "thumb"]
    figures = claimer.limit_figures()
    assert (figures["held"], figures["held_ready"]) == ({("group", "gpu"): 3}, {("group", "gpu"): 3})
    claimer.complete(taken[0].id, token=taken[0].token)
    claimer.complete(taken[1].id, token=taken[1].token)
    t = claimer.claim(worker="w")  # 1 of 3 held: the last render (first in claim order) takes 1 of the 2 free
    assert t.type == "render" and claimer.claim(worker="w") is None  # 2 held: a thumb (2) does not fit
    claimer.complete(t.id, token=t.token)
    t = claimer.claim(worker="w")
    assert t.type == "thumb" and claimer.claim(worker="w") is None  # 1 render + 1 thumb = 3 of 3


def test_a_group_or_cost_set_on_the_job_wins_over_the_claimers_config(make, clock):
    enqueuer = make(settings(), clock)
    for _ in range(3):
        enqueuer.enqueue("render")
    elsewhere = enqueuer.enqueue("render", group="elsewhere").id  # a group no limit names: never held
    big = enqueuer.enqueue("render", cost="2").id
    claimer = make(CLAIMER, clock)
    taken = [claimer.claim(worker="w") for _ in range(4)]
    assert [j.id for j in taken][3] == elsewhere and claimer.claim(worker="w") is None
    assert "this job needs 2" in claimer.held_because(claimer.get(big))
    assert claimer.get(elsewhere).to_dict()["concurrency_group"] == "elsewhere"
    assert claimer.get(big).to_dict()["cost_units"] == 2


def test_doctor_names_unfinished_jobs_whose_own_group_or_cost_contradicts_the_config(any_db, tmp_path):
    cfg = tmp_path / "jobctl.toml"
    cfg.write_text('[types.render]\ncommand = ["true"]\nconcurrency_group = "gpu"\nconcurrency_limit = 3\n'
                   'cost_units = 2\n')
    assert run_cli("--db", any_db, "enqueue", "render").exit_code == 0  # not set: nothing to name
    r = run_cli("--db", any_db, "--config", cfg, "doctor", "--json")
    assert [c for c in json.loads(r.stdout)["checks"] if c["check"] == "limits"][0]["ok"] is True, r.output
    assert run_cli("--db", any_db, "enqueue", "render", "--cost", "1").exit_code == 0
    assert run_cli("--db", any_db, "enqueue", "render", "--group", "cpu").exit_code == 0
    r = run_cli("--db", any_db, "--config", cfg, "doctor", "--json")
    check = [c for c in json.loads(r.stdout)["checks"] if c["check"] == "limits"][0]
    assert r.exit_code == 9 and check["ok"] is False
    assert "job 2 of type render: cost 1 (config: 2)" in check["detail"]
    assert "job 3 of type render: group cpu (config: gpu)" in check["detail"]


HANDLER = ('import os, sys, time\n'
           'log = open(sys.argv[1], "a")\n'
           'def note(what):\n'
           '    log.write(f"{time.time():.6f} {what} {sys.argv[2]} {os.environ[\'JOBCTL_JOB_ID\']}\\n"); log.flush()\n'
           'note("start"); time.sleep(0.25); note("end")\n')


@pytest.mark.slow
@pytest.mark.shared  # outcomes only: runs beside other tests
def test_four_workers_hold_to_the_claimers_limit_for_jobs_enqueued_without_its_config(any_db, tmp_path):
    handler, log = tmp_path / "handler.py", tmp_path / "runs.log"
    handler.write_text(HANDLER)
    python = sys.executable
    cfg = tmp_path / "workers.toml"
    cfg.write_text(
        f'[types.render]\ncommand = ["{python}", "{handler}", "{log}", "1"]\nconcurrency_group = "gpu"\n'
        'concurrency_limit = 3\n'
        f'[types.thumb]\ncommand = ["{python}", "{handler}", "{log}", "2"]\nconcurrency_group = "gpu"\n'
        'cost_units = 2\n')
    # Enqueued as cron would: no --config, no JOBCTL_CONFIG, an empty XDG config folder.
    batch = "".join(json.dumps({"type": t}) + "\n" for t in ["render", "thumb"] * 10)
    r = run_cli("--db", any_db, "enqueue", "--batch", "-", input=batch)
    assert r.exit_code == 0, r.output
    workers = [start_worker(tmp_path, any_db, "--concurrency", "2", "--stop-when-empty", "--poll", "0.1s",
                            name=f"w{i}", env={"JOBCTL_CONFIG": str(cfg)}) for i in range(4)]
    for w in workers:
        code, text = finish(w, timeout=120)
        assert code == 0, text
    events = []
    for line in log.read_text().splitlines():
        at, what, cost, job = line.split()
        events.append((float(at), 0 if what == "end" else 1, int(cost) if what == "start" else -int(cost), job))
    assert sum(1 for e in events if e[1] == 1) == 20  # every job ran once
    held = most = 0
    for _, _, units, _ in sorted(events):  # at one instant, ends before starts
        held += units
        most = max(most, held)
    assert most <= 3, f"{most} units of group gpu held at once (limit 3)"


def test_doctor_names_jobs_that_no_worker_could_ever_start_under_the_limits(any_db, tmp_path):
    # A reaction cannot take --cost, and a job enqueued without the config is not checked at
    # enqueue: one of a type whose cost is over its group's limit waits for ever, held, while
    # doctor and `stats --check --max-ready-age` said all was well.
    cfg = tmp_path / "jobctl.toml"
    cfg.write_text('[types.job]\ncommand = ["false"]\nmax_attempts = 1\non_buried = "alarm"\n'
                   '[types.alarm]\ncommand = ["true"]\nconcurrency_group = "pager"\nconcurrency_limit = 1\n'
                   'cost_units = 2\n')
    assert run_cli("--db", any_db, "--config", cfg, "enqueue", "job").exit_code == 0
    r = run_cli("--db", any_db, "--config", cfg, "doctor", "--json")
    assert [c for c in json.loads(r.stdout)["checks"] if c["check"] == "limits"][0]["ok"] is True, r.output
    r = run_cli("--db", any_db, "--config", cfg, "work", "--type", "job", "--stop-when-empty")
    assert r.exit_code == 0, r.output
    r = run_cli("--db", any_db, "--config", cfg, "doctor", "--json")
    check = [c for c in json.loads(r.stdout)["checks"] if c["check"] == "limits"][0]
    assert r.exit_code == 9 and check["ok"] is False, r.output
    assert "job 2 of type alarm" in check["detail"] and "can never start" in check["detail"], check
