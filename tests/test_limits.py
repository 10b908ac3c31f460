"""Admission control: rate limits, concurrency groups and cost units, counted by the claim itself
inside its transaction, so they hold across every process that claims."""

import pytest

from conftest import Clock, T0, open_queues, types_settings, run_cli, run_inproc
from jobctl.config import Settings, TypeConfig, load_settings
from jobctl.limits import Limits, admission, from_settings, window_opens_at
from jobctl.errors import InvalidInput
from jobctl.queue import Queue


settings = types_settings


@pytest.fixture
def make(db):
    yield from open_queues(db)


def test_a_rate_limit_skips_the_shut_type_and_reopens_with_its_window(make):
    clock = Clock(T0)
    q = make(settings(api=dict(rate_limit=(3, 60.0)), other={}), clock)
    for _ in range(5):
        q.enqueue("api", priority="high")
    q.enqueue("other")
    got = [q.claim(worker="w") for _ in range(5)]
    assert [j.type if j else None for j in got] == ["api", "api", "api", "other", None]  # no head-of-line block
    for j in got[:3]:
        q.complete(j.id, token=j.token)  # finished runs still count as starts in the window
    clock.t += 59
    assert q.claim(worker="w") is None
    assert q.next_admission_in() == pytest.approx(1, abs=0.01)
    clock.t += 1.001
    assert q.claim(worker="w").type == "api"


def test_a_retry_is_a_new_start(make):
    clock = Clock(T0)
    q = make(settings(api=dict(rate_limit=(2, 60.0))), clock)
    q.enqueue("api", max_attempts=5)
    q.enqueue("api")
    j = q.claim(worker="w")
    q.fail(j.id, token=j.token, retry_in="0s")
    assert q.claim(worker="w").id == j.id  # the retry: the second start of the window
    assert q.claim(worker="w") is None


def test_concurrency_groups_take_the_smallest_limit_and_count_cost_units(make):
    clock = Clock(T0)
    s = settings(render=dict(concurrency_group="gpu", concurrency_limit=4, cost_units=2),
                 thumb=dict(concurrency_group="gpu", concurrency_limit=3), free={})
    assert from_settings(s) == Limits({}, {"gpu": 3}, {}, {"render": "gpu", "thumb": "gpu"}, {"render": 2})
    q = make(s, clock)
    r1 = q.enqueue("render").id
    q.enqueue("render")
    t1 = q.enqueue("thumb").id
    q.enqueue("thumb")
    q.enqueue("free")
    # not set on the job: the claimer's config decides (stored as "not set", null in its JSON)
    assert (q.get(r1).cost_units, q.get(r1).concurrency_group) == (0, None)
    assert q.get(r1).to_dict()["cost_units"] is None
    a = q.claim(worker="w")  # render: 2 of 3
    b = q.claim(worker="w")  # render needs 2, 1 left: skipped; thumb fits: 3 of 3
    c = q.claim(worker="w")  # the group is full: only "free"
    assert (a.id, b.id, c.type) == (r1, t1, "free")
    assert q.claim(worker="w") is None
    held = q.held_because(q.get(t1 + 1))
    assert held == "group gpu is full: 3 of 3 units running"
    q.complete(a.id, token=a.token)
    assert q.claim(worker="w").type == "render"  # 2 units freed: the next render (2) fits again
    assert q.claim(worker="w") is None  # 3 of 3 again: the last thumb waits


def test_a_type_limit_without_group_and_enqueue_overrides(make, db):
    clock = Clock(T0)
    q = make(settings(conv=dict(concurrency_limit=1)), clock)
    q.enqueue("conv")
    q.enqueue("conv", group="elsewhere")  # counts against the group "elsewhere", which has no limit
    with pytest.raises(InvalidInput, match="more than the concurrency limit of type conv"):
        q.enqueue("conv", cost="3")  # refused where the config that sets the limit is read
    big = make(settings(conv={}), clock).enqueue("conv", cost="3").id  # (a config without the limit)
    assert q.get(big).cost_units == 3
    first = q.claim(worker="w")
    second = q.claim(worker="w")
    assert second.concurrency_group == "elsewhere"
    assert q.claim(worker="w") is None  # the type's one slot is taken
    q.complete(first.id, token=first.token)
    assert q.claim(worker="w") is None  # cost 3 can never fit a limit of 1: held, not run
    assert "this job needs 3" in q.held_because(q.get(big))


def test_limits_hold_across_connections(make, db):
    """Two processes' queues on one file: the second sees the first's starts and held units."""
    s = settings(api=dict(rate_limit=(2, 3600.0)), gpu=dict(concurrency_limit=1))
    a, b = make(s, Clock(T0)), make(s, Clock(T0))
    for t in ("api", "api", "api", "gpu", "gpu"):
        a.enqueue(t)
    assert a.claim(worker="a", types=["api"]) and b.claim(worker="b", types=["api"])
    assert a.claim(worker="a", types=["api"]) is None and b.claim(worker="b", types=["api"]) is None
    assert a.claim(worker="a", types=["gpu"]) and b.claim(worker="b", types=["gpu"]) is None


def test_pure_admission():
    limits = Limits({"api": (2, 1000)}, {"g": 2}, {"t": 1})
    adm = admission(limits, {"api": 2}, {("group", "g"): 1})
    assert adm.shut_types == {"api"} and adm.room == {("group", "g"): 1, ("type", "t"): 1}
    assert not adm.admits("api", None, 1) and adm.admits("x", "g", 1) and not adm.admits("x", "g", 2)
    assert window_opens_at([900, 500], 2, 1000) == 1500 and window_opens_at([900], 2, 1000) == 0


@pytest.mark.parametrize("table, message", [
    ('rate_limit = 10', "must be a pair"),
    ('rate_limit = [10]', "must be a pair"),
    ('rate_limit = [0, "60s"]', "rate_limit[0]"),
    ('rate_limit = [10, "soon"]', "rate_limit[1]"),
    ('concurrency_limit = 0', "concurrency_limit"),
    ('concurrency_limit = 2.5', "concurrency_limit"),
    ('cost_units = 1.5', "cost_units"),
    ('cost_units = 0', "cost_units"),
    ('concurrency_group = "no spaces"', "concurrency_group"),
])
def test_bad_limit_values_are_refused_at_load(tmp_path, table, message):
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[types.api]\ncommand = ["true"]\n{table}\n')
    with pytest.raises(Exception) as exc:
        load_settings(str(cfg))
    assert message in str(exc.value) and exc.value.exit_code == 2


def test_bad_cost_and_group_on_the_command_line(db):
    r = run_cli("--db", db, "enqueue", "t", "--cost", "1.5")
    assert r.exit_code == 2 and "cost" in r.one_error_line()
    r = run_cli("--db", db, "enqueue", "t", "--group", "no spaces")
    assert r.exit_code == 2
    r = run_cli("--db", db, "enqueue", "--batch", "-", input='{"type": "t", "cost": 0}\n')
    assert r.exit_code == 2 and "line 1" in r.one_error_line()
    r = run_cli("--db", db, "enqueue", "t", "--cost", "4", "--group", "gpu", "--json")
    assert r.exit_code == 0 and '"cost_units":4' in r.stdout and '"concurrency_group":"gpu"' in r.stdout


# -- views ----------------------------------------------------------------------------------------


@pytest.fixture
def limited(tmp_path, db):
    """A config with a rate limit of 1 start an hour and a group of 1 unit; one job of each taken."""
    import json

    cfg = tmp_path / "jobctl.toml"
    cfg.write_text('[types.api]\ncommand = ["true"]\nrate_limit = [1, "1h"]\n'
                   '[types.render]\ncommand = ["true"]\nconcurrency_group = "gpu"\nconcurrency_limit = 1\n')

    def cli(*args, **kw):
        return run_cli("--config", cfg, "--db", db, *args, **kw)

    def setup(*args):  # in this process: the tests' own commands are the real processes
        return run_inproc("--config", cfg, "--db", db, *args)

    ids = [int(setup("enqueue", t).stdout) for t in ("api", "api", "render", "render", "other")]
    for t in ("api", "render"):
        assert json.loads(setup("claim", "--type", t).stdout)["type"] == t
    return cli, ids


def test_show_says_which_limit_holds_a_ready_job(limited):
    cli, ids = limited
    r = cli("show", ids[1])
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())
    assert "held back by a limit: type api reached its rate limit 1/1h; next start possible in " in text, r.stdout
    text = " ".join(cli("show", ids[3]).stdout.split())
    assert "group gpu is full: 1 of 1 units running" in text


def test_list_held(limited):
    import json

    cli, ids = limited
    r = cli("list", "--held", "--json")
    assert r.exit_code == 0, r.output
    assert sorted(json.loads(line)["id"] for line in r.stdout.splitlines()) == [ids[1], ids[3]]


def test_a_claim_that_finds_only_held_jobs_says_so(limited):
    # "no job is ready" alone, while `list` shows pending jobs, sends the person on call looking
    # for a broken worker: the claim says that ready jobs wait for a limit, and where to see why.
    cli, ids = limited
    r = cli("claim", "--type", "api", "--type", "render")
    assert r.exit_code == 5 and r.stdout == "", r.output
    assert r.one_error_line() == ("jobctl: error: no job is ready; 2 ready job(s) are held back by a limit or a "
                                  "pause (`jobctl list --held` says why)")
    r = cli("claim", "--type", "api", "--queue", "elsewhere")  # none of what it asked for is held
    assert r.exit_code == 5 and r.one_error_line() == "jobctl: error: no job is ready", r.output


def test_list_held_without_limits_is_empty(cli):
    cli("enqueue", "t")
    r = cli("list", "--held", "--json")
    assert r.exit_code == 0 and r.stdout == ""


def test_stats_has_a_limits_section(limited):
    import json

    cli, ids = limited
    figures = json.loads(cli("stats", "--json").stdout)
    api, gpu = figures["limits"]["types"]["api"], figures["limits"]["groups"]["gpu"]
    assert api["rate_limit"] == {"max_starts": 1, "window": 3600.0}
    assert (api["starts_in_window"], api["ready_held"]) == (1, 1) and 3500 < api["next_start_in"] <= 3600
    assert gpu == {"concurrency_limit": 1, "units_running": 1, "ready_held": 1}
    table = cli("stats").stdout
    assert "limits" in table and "group gpu" in table and "1/1 per 1h" in table, table


def test_stats_without_limits_has_no_limits_key(cli):
    import json

    cli("enqueue", "t")
    assert "limits" not in json.loads(cli("stats", "--json").stdout)


def test_config_show_says_which_limit_a_group_runs_at(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[types.a]\ncommand = ["true"]\nrate_limit = [10, "60s"]\nconcurrency_group = "g"\n'
                   'concurrency_limit = 4\ncost_units = 2\n[types.b]\ncommand = ["true"]\nconcurrency_group = "g"\n'
                   'concurrency_limit = 2\n')
    r = run_cli("--config", cfg, "config", "show")
    assert r.exit_code == 0, r.output
    assert "concurrency_limit = 4  # group g runs at 2, the smallest limit of its types" in r.stdout
    assert 'rate_limit = [10, "1m"]' in r.stdout and "cost_units = 2" in r.stdout
    again = tmp_path / "again.toml"
    again.write_text(r.stdout)
    assert load_settings(str(again)).types["a"].rate_limit == (10, 60.0)  # what it prints loads back


# -- limits that hold exactly whatever happens to the jobs they count (both engines) ---------------

@pytest.fixture
def make_any(any_db):
    """A maker of Queues as `make`, on each engine in turn."""
    yield from open_queues(any_db)


def test_a_purge_keeps_the_starts_that_a_rate_window_still_counts(make_any):
    # A retention (or `purge --completed-older-than`) shorter than a type's rate window must not
    # make the window forget the starts of the jobs it deletes.
    clock = Clock(T0)
    q = make_any(settings(api=dict(rate_limit=(2, 3600.0))), clock)
    for _ in range(4):
        q.enqueue("api")
    for _ in range(2):
        j = q.claim(worker="w")
        q.complete(j.id, token=j.token)
    assert q.claim(worker="w") is None  # 2 starts in the hour
    clock.t += 60
    q.purge(completed_older_than="1s")
    assert q.claim(worker="w") is None  # still 2 starts in the hour
    clock.t += 3600
    assert q.purge(completed_older_than="1s")["completed"] == 2  # out of the window: deleted now
    assert q.claim(worker="w") is not None


def test_a_job_that_costs_more_than_its_limit_says_it_can_never_start(make_any):
    clock = Clock(T0)
    q = make_any(settings(render=dict(concurrency_group="gpu", concurrency_limit=2), solo=dict(concurrency_limit=1)),
                 clock)
    # (enqueued under a config without these limits: the limited one refuses them at enqueue)
    other = make_any(settings(render={}, solo={}), clock)
    big = other.enqueue("render", cost=3).id
    solo = other.enqueue("solo", cost=2).id
    q.enqueue("render")
    assert q.claim(worker="w").type == "render"  # the costly job blocks nothing else
    assert q.claim(worker="w") is None
    held = q.held_because(q.get(big))
    assert "never" in held and "more than the limit" in held and "gpu" in held, held
    held = q.held_because(q.get(solo))
    assert "never" in held and "type solo" in held, held


@pytest.mark.parametrize("limit", [dict(concurrency_group="gpu", concurrency_limit=1), dict(concurrency_limit=1)])
def test_a_freed_slot_wakes_a_worker_that_a_full_limit_holds_back(make_any, limit):
    # An idle worker sleeps until someone commits something that may let it claim (SQLite: any
    # commit; PostgreSQL: a notification). A job leaving a full limit is such a commit.
    import time

    clock = Clock(T0)
    s = settings(render=limit)
    a, b = make_any(s, clock), make_any(s, clock)
    b.enqueue("render")
    b.enqueue("render")
    j = b.claim(worker="b")
    assert a.claim(worker="a") is None  # full
    deadline = time.monotonic() + 2
    while a.has_changed() and time.monotonic() < deadline:  # what came before: seen
        time.sleep(0.05)
    assert not a.has_changed()
    b.complete(j.id, token=j.token)
    deadline, woke = time.monotonic() + 2, False
    while not woke and time.monotonic() < deadline:
        woke = a.has_changed()
        time.sleep(0.02)
    assert woke, "the freed slot woke nobody"
    assert a.claim(worker="a") is not None


def test_a_worker_held_back_by_a_rate_still_claims_when_a_concurrency_slot_frees(any_db):
    # Types a (rate-shut for an hour) and b (its one slot taken by another process): the worker
    # waits for the window of a, and must still wake when b's slot frees, not a --poll later.
    from test_worker_parts import FakeClock, FakeLauncher, Lines
    from jobctl.worker import Log, Worker, WorkerOptions

    s = Settings(types={"a": TypeConfig("a", command=["handler"], rate_limit=(1, 3600.0)),
                        "b": TypeConfig("b", command=["handler"], concurrency_limit=1)})
    q = Queue.open(any_db, s, create=True)
    other = Queue.open(any_db, s)
    try:
        for t in ("a", "a", "b", "b"):
            q.enqueue(t)
        held = other.claim(worker="other", types=["b"])
        clock = FakeClock()
        w = Worker(q, s, WorkerOptions(worker_id="w1", poll=60.0, grace=30.0, lease=60.0, kill_grace=5.0,
                                       recover_every=30.0, purge_every=600.0, concurrency=4),
                   Log("w1", "json", Lines()), clock=clock, launcher=FakeLauncher())
        w.begin()
        w.step()
        assert [r.job.type for r in w.sup.running] == ["a"]  # then a is shut, b is full
        clock.advance(1.0)
        w.step()
        other.complete(held.id, token=held.token)
        import time
        deadline = time.monotonic() + 3
        while len(w.sup.running) < 2 and time.monotonic() < deadline:
            clock.advance(0.1)
            w.step()
            time.sleep(0.02)
        assert sorted(r.job.type for r in w.sup.running) == ["a", "b"], "the freed slot waited for --poll"
        assert not w._done()
    finally:
        other.close()
        q.close()


def _claimer(db, seconds, out):
    import random
    import time

    q = Queue.open(db, _FOUR_SETTINGS)
    done = []
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            j = q.claim(worker=f"p{out}")
            if j is None:
                time.sleep(0.002)
                continue
            time.sleep(random.random() * 0.01)
            f = q.complete(j.id, token=j.token)
            done.append((j.type, q.limits.resolve(j.type, j.concurrency_group, j.cost_units)[1], j.claimed_at,
                         f.finished_at))
    finally:
        q.close()
    return done


_FOUR_SETTINGS = settings(r=dict(rate_limit=(15, 0.5)), g1=dict(concurrency_group="gpu", concurrency_limit=3),
                          g2=dict(concurrency_group="gpu", concurrency_limit=5, cost_units=2))


@pytest.mark.alone  # counts the starts 4 processes make in 2.5 s
def test_limits_are_exact_under_four_processes(any_db):
    from concurrent.futures import ProcessPoolExecutor
    import multiprocessing

    q = Queue.open(any_db, _FOUR_SETTINGS, create=True)
    try:
        import json

        q.enqueue_batch([json.dumps({"type": t}) for t in ["r"] * 300 + ["g1"] * 300 + ["g2"] * 300])
    finally:
        q.close()
    with ProcessPoolExecutor(4, mp_context=multiprocessing.get_context("fork")) as pool:
        runs = [r for f in [pool.submit(_claimer, any_db, 2.5, i) for i in range(4)] for r in f.result()]
    starts = sorted(c for t, _, c, _ in runs if t == "r")
    assert len(starts) >= 30
    worst = max(sum(1 for s in starts if t - 500 < s <= t) for t in starts)
    assert worst <= 15, f"{worst} starts of r in one 0.5 s window (limit 15)"
    edges = sorted([(c, cost) for t, cost, c, _ in runs if t != "r"] + [(f, -cost) for t, cost, _, f in runs if t != "r"],
                   key=lambda e: (e[0], e[1]))  # at one instant, ends before starts
    held = most = 0
    for _, d in edges:
        held += d
        most = max(most, held)
    assert most <= 3, f"{most} units of group gpu held at once (limit 3)"
    assert sum(1 for t, *_ in runs if t != "r") >= 50


def test_a_pause_for_a_while_ends_by_itself_for_a_type_and_a_queue(make_any):
    clock = Clock(T0)
    q = make_any(settings(api=dict(rate_limit=(5, 60.0)), other={}), clock)
    q.enqueue("api")
    q.enqueue("other")
    q.pause("default", type="api", for_="10s")
    assert q.claim(worker="w").type == "other"
    assert q.claim(worker="w") is None
    clock.t += 10.001
    assert q.claim(worker="w").type == "api"
    q.enqueue("api")
    q.pause("default", until="2099-01-01T00:00:00Z")
    q.pause("default", for_="1s")  # pausing again replaces the end
    assert q.claim(worker="w") is None
    clock.t += 1.001
    assert q.claim(worker="w").type == "api"


def test_held_means_running_or_cancel_requested_and_a_release_frees_units_but_counts_a_start(make_any):
    clock = Clock(T0)
    q = make_any(settings(gpu=dict(concurrency_limit=2, cost_units=2, rate_limit=(2, 60.0))), clock)
    for _ in range(3):
        q.enqueue("gpu")
    j = q.claim(worker="w")
    q.cancel(j.id)
    assert q.get(j.id).status == "cancel_requested"
    assert q.claim(worker="w") is None  # its 2 units are still held
    q.cancel(j.id, token=j.token)
    k = q.claim(worker="w")  # freed; the second start of the window
    q.release(k.id, token=k.token, reason="spawn failed")
    assert q.get(k.id).status == "pending"
    assert q.claim(worker="w") is None  # units free, but the released run was a start: 2 of 2
    clock.t += 60.001
    assert q.claim(worker="w") is not None


def test_stop_when_empty_still_waits_for_jobs_that_a_rate_holds_back(tmp_path):
    from test_worker_parts import FakeClock, FakeLauncher, Lines
    from jobctl.worker import Log, Worker, WorkerOptions

    s = Settings(types={"a": TypeConfig("a", command=["handler"], rate_limit=(1, 3600.0))})
    q = Queue.open(tmp_path / "q.db", s, create=True)
    try:
        q.enqueue("a")
        q.enqueue("a")
        clock, launcher = FakeClock(), FakeLauncher()
        w = Worker(q, s, WorkerOptions(worker_id="w1", poll=1.0, grace=30.0, lease=60.0, kill_grace=5.0,
                                       recover_every=30.0, purge_every=600.0, concurrency=2, stop_when_empty=True),
                   Log("w1", "json", Lines()), clock=clock, launcher=launcher)
        w.begin()
        w.step()
        launcher.procs[0].exit(0)
        for _ in range(5):
            clock.advance(0.5)
            w.step()
        assert [q.get(i).status for i in (1, 2)] == ["completed", "pending"]
        assert not w._done()  # the second job waits for the window: not empty
        assert w.next_claim - clock() <= 1.0  # and is looked at again by --poll at the latest
    finally:
        q.close()


def test_purge_says_how_many_jobs_a_rate_window_kept(tmp_path, any_db):
    # An operator who purges "everything completed" and finds jobs left is told why, in one line.
    import json

    from conftest import run_inproc

    cfg = tmp_path / "jobctl.toml"
    cfg.write_text('[types.api]\ncommand = ["true"]\nrate_limit = [5, "1h"]\n[types.other]\ncommand = ["true"]\n')

    def cli(*args):
        return run_inproc("--config", cfg, "--db", any_db, *args)

    for t in ("api", "api", "other"):
        assert cli("enqueue", t).exit_code == 0
        claimed = json.loads(cli("claim", "--type", t).stdout)
        assert cli("complete", str(claimed["id"]), "--token", claimed["token"]).exit_code == 0
    r = cli("purge", "--completed-older-than", "0s", "--dry-run")
    assert (r.exit_code, r.stdout.strip()) == (0, "1"), r.output
    assert "2 finished job(s) of rate-limited types would be kept" in r.stderr, r.stderr
    r = cli("purge", "--completed-older-than", "0s")
    assert (r.exit_code, r.stdout.strip()) == (0, "1"), r.output
    assert "2 finished job(s) of rate-limited types were kept" in r.stderr, r.stderr
    r = cli("purge", "--completed-older-than", "0s", "--json")
    assert json.loads(r.stdout)["deleted"] == 0 and "were kept" in r.stderr


# -- a full limit's backlog is never read by a claim -----------------------------------------------

def _claim_steps(db, held_back: int, types) -> tuple[str, int]:
    """The SQLite VM steps of one claim (of the type it takes) with `held_back` ready jobs of a
    type and of a group, both at their limits, in front of the one job it may take."""
    import json

    q = Queue.open(db, settings(full=dict(concurrency_limit=1), grouped=dict(concurrency_group="G", concurrency_limit=1),
                                free={}), create=True)
    try:
        q.enqueue_batch([json.dumps({"type": t}) for t in ("full", "grouped") for _ in range(held_back + 1)])
        q.enqueue_batch([json.dumps({"type": "full", "group": "other"}), json.dumps({"type": "free"})])
        assert {q.claim(worker="w", types=["full"]).type, q.claim(worker="w", types=["grouped"]).type} == {
            "full", "grouped"}
        steps = [0]

        def step():
            steps[0] += 1
            return 0
        q.engine.conn.set_progress_handler(step, 100)
        job = q.claim(worker="w", types=types)
        q.engine.conn.set_progress_handler(None, 0)
        return f"{job.type}/{job.concurrency_group}", steps[0]
    finally:
        q.close()


@pytest.mark.parametrize("types", [["full", "grouped", "free"], None], ids=["typed", "any type"])
def test_a_claim_never_reads_the_ready_jobs_a_full_limit_holds_back(tmp_path, types):
    """While a type's own limit and a group's are full, a claim seeks each (type, group) that has
    room: 20 times the backlog held back costs it no more steps (it read past every held-back job
    before, ~70 ms a claim with 400,000 of them). The job of the full type in another group, which
    no limit holds, is still found first, in claim order."""
    small = _claim_steps(tmp_path / "small.db", 500, types)
    large = _claim_steps(tmp_path / "large.db", 10_000, types)
    assert small[0] == large[0] == "full/other"
    assert large[1] <= small[1] * 1.2 + 5, (small, large)


@pytest.mark.parametrize("max_seeks", [100, 2], ids=["seeks", "too many pairs: walks"])
@pytest.mark.parametrize("types", [["full", "x", "free"], None], ids=["typed", "any type"])
def test_a_claim_past_a_full_limit_takes_the_same_job_whether_it_seeks_or_walks(make_any, monkeypatch, max_seeks, types):
    from jobctl.engines.sql import SQLEngine

    monkeypatch.setattr(SQLEngine, "MAX_SEEKS", max_seeks)
    q = make_any(settings(full=dict(concurrency_limit=1), x={}, free={}), Clock(T0))
    q.enqueue("full")
    q.enqueue("full")
    assert q.claim(worker="w", types=["full"]).type == "full"
    first = [q.enqueue("x", group=g).id for g in ("g1", "g2", "g3")]
    q.enqueue("free")
    taken = [q.claim(worker="w", types=types) for _ in range(5)]
    assert [j.id for j in taken[:3]] == first
    assert taken[3].type == "free" and taken[4] is None  # the second `full` waits for its slot


def test_stop_when_empty_does_not_wait_for_a_rate_window_when_nothing_is_left(any_db, tmp_path):
    # A cron worker that ran the last jobs of a rate-limited type exits at once: no job waits for
    # the window, so there is nothing to wait for (it waited out the whole window, an hour here).
    # A job of that type in a queue the worker does not serve is not its to wait for either.
    import time

    cfg = tmp_path / "jobctl.toml"
    cfg.write_text('[types.api]\ncommand = ["true"]\nrate_limit = [2, "1h"]\n')
    for queue in ("default", "default", "other"):
        assert run_cli("--config", cfg, "--db", any_db, "enqueue", "--quiet", "-q", queue, "api").exit_code == 0
    started = time.monotonic()
    r = run_cli("--config", cfg, "--db", any_db, "work", "--queue", "default", "--stop-when-empty", timeout=60)
    assert r.exit_code == 0, r.output
    assert time.monotonic() - started < 20, "the worker waited for a rate window that holds back no job of its own"
    assert "2 job(s) started" in r.stderr
