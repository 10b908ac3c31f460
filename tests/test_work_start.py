"""`jobctl work` starts without typer when its command line is plain (jobctl/cli/fast.py), and
behaves exactly as through typer: the same options, checks, errors and exit codes."""

import pytest

from conftest import run_cli
from jobctl.cli.fast import parse_work
from test_layering import cli_modules


def parsed(*argv):
    found = parse_work(list(argv))
    if found is None:
        return None
    st, args = found
    return (st.db, st.config, st.busy_timeout, st.allow_network_fs), args


def test_plain_command_lines_are_read_as_typer_reads_them():
    assert parsed("work") == ((None, None, None, False), {})
    assert parsed("--db", "q.db", "--config=c.toml", "--busy-timeout", "2s", "--allow-network-fs", "work",
                  "-q", "a", "--queue=b", "-t", "x", "--concurrency", "4", "--max-jobs=10", "--max-time", "1h",
                  "--stop-when-empty", "--poll", "2s", "--worker", "w 1", "--grace=5s", "--log-format", "json") == (
        ("q.db", "c.toml", "2s", True),
        {"queue": ["a", "b"], "type": ["x"], "concurrency": 4, "max_jobs": 10, "max_time": "1h",
         "stop_when_empty": True, "poll": "2s", "worker": "w 1", "grace": "5s", "log_format": "json"})
    # the last of a repeated option wins, as with typer; a value may be the word "work"
    assert parsed("--db", "a", "--db", "work", "work", "-c", "2", "-c", "3") == (
        ("work", None, None, False), {"concurrency": 3})


@pytest.mark.parametrize("argv", [
    [], ["enqueue", "t"], ["--version"], ["work", "--help"], ["-h", "work"], ["work", "extra"],
    ["work", "--bogus"], ["work", "--queue"], ["work", "--concurrency", "0"], ["work", "-c", "1025"],
    ["work", "-c", "+2"], ["work", "-c", " 2"], ["work", "-c", "٣"], ["work", "--max-jobs", "0"], ["work", "-c4"],
    ["work", "--worker", "-x"], ["work", "--max-time=-1s"], ["work", "--db", "q.db"], ["--db", "work"],
    ["work", "--stop-when-empty=1"], ["work", "--queue", ""], ["work", "--", "--queue"], ["--no-such", "work"],
])
def test_anything_else_is_left_to_typer(argv):
    assert parse_work(argv) is None


def write_config(tmp_path, command='["true"]'):
    cfg = tmp_path / "w.toml"
    cfg.write_text(f"[types.t]\ncommand = {command}\n")
    return cfg


def test_a_plain_work_does_not_load_typer_and_runs_the_jobs(tmp_path, db):
    cfg = write_config(tmp_path)
    assert run_cli("enqueue", "t", db=db).exit_code == 0
    p, loaded = cli_modules(tmp_path, "--db", db, "--config", cfg, "work", "--stop-when-empty")
    assert p.returncode == 0, p.stderr
    assert not loaded & {"typer", "click", "rich", "sqlite_utils", "dataclasses"}, sorted(loaded)
    assert " done " in p.stderr and "stopped: 1 job(s) started" in p.stderr
    assert run_cli("list", "--status", "completed", "--json", db=db).stdout.count('"id":1') == 1


@pytest.mark.parametrize("args, code, message", [
    (["--log-format", "xml"], 2, "jobctl: error: invalid --log-format 'xml': use human or json"),
    (["--worker", " "], 2, "jobctl: error: invalid --worker: give 1 to 200 characters"),
    (["--grace", "soon"], 2, "jobctl: error: invalid --grace"),
    (["--max-time", "0s"], 2, "jobctl: error: invalid --max-time '0s': must be more than 0"),
    (["--queue", "bad name"], 2, "jobctl: error: invalid queue"),
    (["--type", "other"], 2, "jobctl: error: no command for type other"),
    # typer's own checks, reached because the fast reading leaves these to it
    (["--concurrency", "0"], 2, "jobctl: error: invalid --concurrency 0: must be a whole number from 1 to 1024"),
    (["--bogus"], 2, "jobctl: error: no such option --bogus"),
])
def test_errors_are_one_line_with_the_same_exit_code_either_way(tmp_path, db, args, code, message):
    cfg = write_config(tmp_path)
    r = run_cli("--config", cfg, "work", "--stop-when-empty", *args, db=db)
    assert r.exit_code == code, r.output
    assert r.one_error_line().startswith(message), r.output
    # through typer (a global option after the command would be refused, so force typer with
    # JOBCTL_DEBUG off and the in-process entry point, which never takes the fast reading)
    from jobctl.cli import run

    assert run(["--db", str(db), "--config", str(cfg), "work", "--stop-when-empty", *args]) == code


def test_a_missing_database_folder_is_created_and_a_missing_config_is_named(tmp_path, db):
    r = run_cli("work", "--stop-when-empty", db=db)
    assert r.exit_code == 2, r.output
    assert "no job type has a command" in r.one_error_line()
    cfg = write_config(tmp_path, '["/no/such/handler"]')
    r = run_cli("--config", cfg, "work", "--stop-when-empty", db=db)
    assert r.exit_code == 2 and "cannot run the handler command of type t" in r.one_error_line(), r.output


def test_help_still_comes_from_typer(tmp_path):
    r = run_cli("work", "--help")
    assert r.exit_code == 0 and "--concurrency" in r.stdout and "--stop-when-empty" in r.stdout, r.output
