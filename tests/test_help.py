"""`--help` and usage errors in jobctl's words: values named for what they are (QUEUE, N, ID...),
not typer's types (`<str>`, `<int range>`, `{ID}`); a default said once; ranges in words; and
click's messages turned into one jobctl line that ends with where to read more."""

import re

import pytest
import typer.main

from conftest import run_cli, run_inproc
from jobctl.cli import typer_app


def all_commands() -> list[str]:
    root = typer.main.get_command(typer_app())

    def walk(group, prefix):
        for name in group.list_commands(None):
            cmd = group.get_command(None, name)
            if cmd is None or cmd.hidden:
                continue
            yield " ".join(prefix + [name])
            if hasattr(cmd, "list_commands"):
                yield from walk(cmd, prefix + [name])

    return ["", *walk(root, [])]


COMMANDS = all_commands()


def test_every_command_is_checked():
    assert {"enqueue", "list", "stats", "config init", "show"} <= set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c or "jobctl")
def test_help_at_80_columns_names_values_and_says_each_default_once(command):
    r = run_inproc(*command.split(), "--help", env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    text = r.stdout
    assert not re.search(r"<[a-z][a-z ]*>", text), text  # <str>, <int range>, <float>
    assert not re.search(r"\{[A-Z_.]+\}", text), text  # {ID}: a required argument is plain ID
    assert not re.search(r"\S:<", text), text  # ID:<int>
    assert "[default:" not in text and not re.search(r"x[<>]=|[<>]=x", text), text
    assert "[required]" not in text.split("Options:")[0], text  # arguments: the usage line says it
    lines = text.splitlines()
    for line in lines:
        assert len(line) <= 80, f"{line!r} is {len(line)} columns"
    for line, after in zip(lines, lines[1:]):  # `--max-ready-` / `age`: an option name or a word cut in two
        assert not (re.search(r"\w-$", line) and after.strip()[:1].isalnum()), f"a word cut at a hyphen: {line!r} / {after!r}"
    for i, line in enumerate(lines):  # the example stands apart, to be copied, not in a paragraph's last line
        if "Example:" in line:
            assert line.strip().startswith("Example:") and lines[i - 1] == "", f"{lines[i - 1]!r} / {line!r}"
    # an option whose help says its default does not say it again
    options = text.split("Options:", 1)[1] if "Options:" in text else ""
    for entry in re.split(r"\n  (?=-)", options):
        words = " ".join(entry.split())
        assert not ("default" in words.split("[")[0].lower() and re.search(r"\[[^]]*default", words)), words


def test_the_options_show_what_their_values_are():
    r = run_inproc("list", "--help", env={"COLUMNS": "100"})
    for usage in ("-s, --status STATE", "-q, --queue QUEUE", "-t, --type TYPE", "-n, --limit N"):
        assert usage in r.stdout, r.stdout
    assert "(default 50; 0: all). Says so on stderr when more match. [0 to 1,000,000]" in " ".join(r.stdout.split())
    r = run_inproc("stats", "--help", env={"COLUMNS": "100"})
    assert "Rows in the stuck, buried and aging lists (default 10). [1 to 1000]" in " ".join(r.stdout.split())
    assert "--max-stuck N --check: at most N stuck jobs. [at least 0]" in " ".join(r.stdout.split())
    assert run_inproc("show", "--help").stdout.startswith("Usage: jobctl show [OPTIONS] [ID]\n")  # (or --key K)
    # the default paths as they are found: $XDG_DATA_HOME / $XDG_CONFIG_HOME move them
    top = " ".join(run_inproc("--help", env={"COLUMNS": "100"}).stdout.split())
    assert "~/.local/share/jobctl/jobctl.db: in $XDG_DATA_HOME when set" in top, top
    assert "~/.config/jobctl/config.toml: in $XDG_CONFIG_HOME when set" in top, top
    init = " ".join(run_inproc("config", "init", "--help").stdout.split())
    assert "(default ~/.config/jobctl/config.toml, in $XDG_CONFIG_HOME when set)" in init, init
    assert run_inproc("retry", "--help").stdout.startswith("Usage: jobctl retry [OPTIONS] [ID...]\n")  # (or a filter)
    assert run_inproc("run", "--help").stdout.startswith("Usage: jobctl run [OPTIONS] TYPE [PAYLOAD]\n")


@pytest.mark.parametrize("args, line", [
    (["enqeue", "t"], "no such command 'enqeue'; did you mean 'enqueue'? See `jobctl --help`"),
    (["config", "check"], "no such command 'check'; see `jobctl config --help`"),
    (["show"], "give a job id or --key K (one of them)"),
    (["show", "abc"], "invalid ID 'abc': must be a whole number; see `jobctl show --help`"),
    (["show", "1", "2"], "unexpected extra argument(s): 2; see `jobctl show --help`"),
    (["cancel", "abc"], "invalid ID 'abc': must be a whole number; see `jobctl cancel --help`"),
    (["retry", "1", "x"], "invalid ID 'x': must be a whole number; see `jobctl retry --help`"),
    (["list", "--limit", "abc"], "invalid --limit 'abc': must be a whole number from 0 to 1,000,000; "
                                 "see `jobctl list --help`"),
    (["stats", "--max-stuck", "-1"], "invalid --max-stuck -1: must be a whole number of at least 0; "
                                     "see `jobctl stats --help`"),
    (["list", "--statuss", "x"], "no such option --statuss; did you mean --status or --stuck? "
                                 "See `jobctl list --help`"),
    (["migrate"], "missing option --to; see `jobctl migrate --help`"),
])
def test_a_usage_error_is_one_jobctl_line(args, line):
    r = run_inproc(*args)
    assert r.exit_code == 2, r.output
    assert r.one_error_line() == f"jobctl: error: {line}"


# -- jobctl alone, a group alone, and a global option after the command ----------------------------

def test_bare_jobctl_prints_help_and_succeeds():
    r = run_cli()
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("Usage: jobctl [OPTIONS] COMMAND"), r.output
    assert "enqueue" in r.stdout and "stats" in r.stdout and "\n" in r.stdout.strip()
    assert r.stderr == ""


def test_bare_group_prints_its_usage_and_subcommands_as_a_usage_error():
    r = run_cli("config")
    assert r.exit_code == 2, r.output
    assert r.stdout == ""
    assert r.stderr.startswith("Usage: jobctl config [OPTIONS] COMMAND"), r.output
    assert "init" in r.stderr and "show" in r.stderr and "jobctl: error" not in r.stderr
    assert len(r.stderr.splitlines()) > 3  # real help, not squeezed into one line


def test_global_option_after_the_command_says_where_to_put_it(tmp_path):
    r = run_cli("list", "--db", "x.db")
    line = r.one_error_line()
    assert r.exit_code == 2
    assert line == "jobctl: error: --db is a global option: put it before the command: jobctl --db x.db list"
    r = run_cli("--config", "c.toml", "list", "-s", "pending", "--busy-timeout", "2s", "-n", "3")
    assert r.one_error_line() == ("jobctl: error: --busy-timeout is a global option: put it before the command: "
                                  "jobctl --config c.toml --busy-timeout 2s list -s pending -n 3")
    r = run_cli("config", "show", "--db=a b.db")
    assert r.one_error_line() == ("jobctl: error: --db is a global option: put it before the command: "
                                  "jobctl '--db=a b.db' config show")
    r = run_cli("list", "--frobnicate")  # other unknown options: as before
    assert "no such option --frobnicate" in r.one_error_line() and r.exit_code == 2
