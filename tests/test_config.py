"""The config file (SPEC §1, §5): `config init`, `config show`, precedence, and clear errors."""

import json
import tomllib

import pytest

from conftest import run_inproc


def test_init_then_show_round_trip(tmp_path):
    path = tmp_path / "conf" / "jobctl.toml"
    r = run_inproc("config", "init", path)
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == str(path)
    starter = path.read_text()
    assert "[types.send-invoice]" in starter  # a commented example
    tomllib.loads(starter)  # the starter parses

    r = run_inproc("--config", path, "config", "show")
    assert r.exit_code == 0, r.output
    shown = tomllib.loads(r.stdout)
    assert shown["defaults"]["max_attempts"] == 3 and shown["defaults"]["timeout"] == "10m"
    assert shown["retention"] == {"completed": "7d", "cancelled": "7d", "buried": "never"}
    assert shown["worker"]["grace"] == "30s" and shown["worker"]["concurrency"] == 1

    # show's output is itself a config file that shows the same settings.
    again = tmp_path / "again.toml"
    again.write_text(r.stdout)
    r2 = run_inproc("--config", again, "config", "show")
    assert r2.exit_code == 0, r2.output
    assert tomllib.loads(r2.stdout) == shown


def test_init_never_overwrites_without_force(tmp_path):
    path = tmp_path / "jobctl.toml"
    path.write_text("# mine\n")
    r = run_inproc("config", "init", path)
    assert r.exit_code == 2 and "--force" in r.stderr, r.output
    assert path.read_text() == "# mine\n"
    r = run_inproc("config", "init", path, "--force")
    assert r.exit_code == 0, r.output
    assert "[defaults]" in path.read_text()


def test_init_default_path_is_the_xdg_config(tmp_path):
    r = run_inproc("config", "init")
    assert r.exit_code == 0, r.output
    target = tmp_path / "xdg-config" / "jobctl" / "config.toml"
    assert r.stdout.strip() == str(target) and target.is_file()
    # ... and it is then found without --config (tests run in tmp_path, which has no jobctl.toml)
    r = run_inproc("config", "show", "--sources")
    assert f"# config file: {target}" in r.stdout


def test_show_sources_name_where_each_value_came_from(tmp_path, monkeypatch):
    (tmp_path / "jobctl.toml").write_text(
        'busy_timeout = "2s"\n[defaults]\nmax_attempts = 5\nbackoff = "10,30"\n'
        '[worker]\nconcurrency = 4\n[types."mail.send"]\ncommand = "send-mail --live"\npriority = 20\n'
        'bury_exit_codes = [65]\n'
    )
    monkeypatch.setenv("JOBCTL_DB", str(tmp_path / "env.db"))
    r = run_inproc("config", "show", "--sources")
    assert r.exit_code == 0, r.output
    lines: dict = {}
    for line in r.stdout.splitlines():
        if " = " in line:  # a key's first table wins ([sqlite] busy_timeout before [postgres]'s)
            lines.setdefault(line.split(" = ")[0], line)
    assert lines["db"].endswith("# JOBCTL_DB")
    assert lines["busy_timeout"] == 'busy_timeout = "2s"  # jobctl.toml'
    assert lines["max_attempts"].startswith("max_attempts = 5  # jobctl.toml")
    assert lines["synchronous"].endswith("# default")
    assert lines["command"] == 'command = ["send-mail", "--live"]  # jobctl.toml'
    shown = tomllib.loads(r.stdout)
    assert shown["types"]["mail.send"] == {"command": ["send-mail", "--live"], "priority": "high",
                                          "bury_exit_codes": [65]}
    assert shown["defaults"]["backoff"] == [10, 30]
    r = run_inproc("--busy-timeout", "9s", "config", "show", "--sources")
    assert 'busy_timeout = "9s"  # --busy-timeout' in r.stdout


@pytest.mark.parametrize("body, key", [
    ('[worker]\ngrace = "forever"\n', "worker.grace"),
    ('[worker]\nconcurency = 2\n', "worker.concurency"),
    ('[types.x]\ncommand = []\n', "types.x.command"),
    ('[types.x]\nbury_exit_codes = [0]\n', "types.x.bury_exit_codes"),
    ('[defaults]\nmax_attempts = 0\n', "defaults.max_attempts"),
    ('[retention]\ncompleted = "soon"\n', "retention.completed"),
    ('synchronous = "sometimes"\n', "synchronous"),
    ('[worker]\nlog_format = "xml"\n', "worker.log_format"),
])
def test_bad_config_is_exit_2_naming_the_file_and_key(tmp_path, body, key):
    path = tmp_path / "bad.toml"
    path.write_text(body)
    r = run_inproc("--config", path, "config", "show")
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith(f"jobctl: error: config file {path}") and key in r.stderr, r.stderr
    assert len(r.stderr.splitlines()) == 1


def test_named_config_must_exist_and_parse(tmp_path):
    r = run_inproc("--config", tmp_path / "missing.toml", "config", "show")
    assert r.exit_code == 2 and "does not exist" in r.stderr, r.output
    (tmp_path / "broken.toml").write_text("[defaults\n")
    r = run_inproc("--config", tmp_path / "broken.toml", "config", "show")
    assert r.exit_code == 2 and "does not parse" in r.stderr, r.output


def test_type_defaults_apply_at_enqueue_and_options_win(tmp_path, db):
    (tmp_path / "jobctl.toml").write_text(
        '[defaults]\nmax_attempts = 7\n[types.invoice]\nqueue = "billing"\npriority = "high"\ntimeout = "2m"\n'
    )
    r = run_inproc("enqueue", "invoice", "--json", db=db)
    job = json.loads(r.stdout)
    assert (job["queue"], job["priority"], job["timeout"], job["max_attempts"]) == ("billing", 20, 120, 7)
    r = run_inproc("enqueue", "invoice", "-q", "other", "-p", "low", "--max-attempts", 1, "--json", db=db)
    job = json.loads(r.stdout)
    assert (job["queue"], job["priority"], job["max_attempts"]) == ("other", 0, 1)


def test_worker_table_sets_work_defaults(tmp_path, db):
    (tmp_path / "jobctl.toml").write_text(
        '[worker]\nlog_format = "json"\npoll = "100ms"\n[types.t]\ncommand = ["true"]\n'
    )
    run_inproc("enqueue", "t", db=db)
    r = run_inproc("work", "--stop-when-empty", db=db)
    assert r.exit_code == 0, r.output
    assert all(json.loads(line)["worker"] for line in r.stderr.splitlines())
    r = run_inproc("work", "--stop-when-empty", "--log-format", "human", db=db)
    assert r.exit_code == 0 and not r.stderr.startswith("{"), r.output


@pytest.mark.parametrize("body, key", [
    ('[types.x]\ncommand = ["true"]\ncost_units = "2"\n', "types.x.cost_units"),
    ('[types.x]\ncommand = ["true"]\ncost_units = 2.0\n', "types.x.cost_units"),
    ('[types.x]\ncommand = ["true"]\ncost_units = true\n', "types.x.cost_units"),
    ('[types.x]\ncommand = ["true"]\nconcurrency_limit = "4"\n', "types.x.concurrency_limit"),
    ('[types.x]\ncommand = ["true"]\nconcurrency_limit = true\n', "types.x.concurrency_limit"),
    ('[types.x]\ncommand = ["true"]\nrate_limit = ["10", "60s"]\n', "types.x.rate_limit[0]"),
    ('[types.x]\ncommand = ["true"]\nrate_limit = [10.0, "60s"]\n', "types.x.rate_limit[0]"),
    ('[types.x]\ncommand = ["true"]\nmax_attempts = "3"\n', "types.x.max_attempts"),
    ('[types.x]\ncommand = ["true"]\nbury_exit_codes = ["65"]\n', "types.x.bury_exit_codes"),
    ('[types.x]\ncommand = ["true"]\npriority = "5"\n', "types.x.priority"),
    ('[defaults]\nmax_attempts = true\n', "defaults.max_attempts"),
    ('[defaults]\npriority = "20"\n', "defaults.priority"),
    ('[defaults]\npriority = 2.5\n', "defaults.priority"),
    ('[worker]\nconcurrency = "4"\n', "worker.concurrency"),
    ('[worker]\nconcurrency = 4.0\n', "worker.concurrency"),
    ('max_payload_bytes = "1000"\n', "max_payload_bytes"),
])
def test_a_count_in_the_config_must_be_an_integer_not_a_string_float_or_boolean(tmp_path, body, key):
    # cost_units = "2" was accepted while concurrency_limit = "4" was refused: one rule for every count.
    path = tmp_path / "counts.toml"
    path.write_text(body)
    r = run_inproc("--config", path, "config", "show")
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith(f"jobctl: error: config file {path}: {key}") and "integer" in r.stderr, r.stderr
    assert len(r.stderr.splitlines()) == 1


def test_counts_and_priority_labels_written_as_toml_integers_and_labels_are_taken(tmp_path):
    path = tmp_path / "ok.toml"
    path.write_text('[defaults]\npriority = "high"\nmax_attempts = 4\n[types.x]\ncommand = ["true"]\n'
                    'cost_units = 2\nconcurrency_limit = 4\nrate_limit = [10, "60s"]\npriority = -5\n')
    r = run_inproc("--config", path, "config", "show")
    assert r.exit_code == 0, r.output
    shown = tomllib.loads(r.stdout)
    assert shown["types"]["x"]["cost_units"] == 2 and shown["types"]["x"]["concurrency_limit"] == 4, r.stdout


def test_the_worker_defaults_are_written_once():
    """[worker] in the config and `jobctl work`'s options share one table of defaults (WorkerSettings)."""
    from jobctl.config import WORKER_KEYS, WorkerSettings
    from jobctl.worker.loop import WorkerOptions

    defaults, options = WorkerSettings(), WorkerOptions(worker_id="w")
    assert WORKER_KEYS == WorkerSettings.__slots__
    assert {k: getattr(options, k) for k in WORKER_KEYS} == {k: getattr(defaults, k) for k in WORKER_KEYS}
    assert (defaults.poll, defaults.grace, defaults.lease, defaults.purge_every) == (1.0, 30.0, 60.0, 600.0)


@pytest.mark.parametrize("option", ["--db", "--config"])
@pytest.mark.parametrize("command", [["enqueue", "t"], ["list"], ["work", "--stop-when-empty"]])
def test_an_empty_db_or_config_option_is_refused_not_taken_for_the_default(tmp_path, option, command):
    """`jobctl --db "$QUEUE_DB" enqueue ...` with the variable unset must not put the job into the
    default database (nor read the default config): an empty value is a usage error, as for
    --busy-timeout, and nothing is created."""
    (tmp_path / "jobctl.toml").write_text('[types.t]\ncommand = ["true"]\n')  # (found in the working folder)
    r = run_inproc(option, "", *command)
    assert r.exit_code == 2, r.output
    assert r.stdout == "" and r.stderr.startswith(f"jobctl: error: {option} is empty"), r.stderr
    assert len(r.stderr.splitlines()) == 1
    assert not (tmp_path / "xdg-data" / "jobctl").exists()


def test_a_relative_xdg_folder_is_ignored_as_the_xdg_rules_say(tmp_path, monkeypatch):
    """XDG_DATA_HOME=data (relative) would put the default database wherever the command runs (a
    cron job's home, a person's project): the XDG rules say to ignore a relative value, so the
    defaults under the home folder apply."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", "data")
    monkeypatch.setenv("XDG_CONFIG_HOME", "conf")
    r = run_inproc("init")
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == str(tmp_path / "home" / ".local" / "share" / "jobctl" / "jobctl.db")
    r = run_inproc("config", "init")
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == str(tmp_path / "home" / ".config" / "jobctl" / "config.toml")
    assert not (tmp_path / "data").exists() and not (tmp_path / "conf").exists()
