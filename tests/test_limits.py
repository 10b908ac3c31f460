"""Admission control: rate limits, concurrency groups and cost units, counted by the claim itself
inside its transaction, so they hold across every process that claims."""

import pytest

from conftest import Clock, T0, open_queues, types_settings, run_cli, run_inproc
from jobctl.config import load_settings
from jobctl.limits import Limits, admission, from_settings, window_opens_at


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
    big = q.enqueue("conv", cost="3").id
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
