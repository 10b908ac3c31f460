"""What a new user and an admin trip over at the command line: help, misplaced options, limits
said out loud, quiet cron runs, pause/resume of names that do not exist, labels and number formats."""

import json

from conftest import run_cli


# -- 1. `jobctl` alone and a group alone print help, not an error line ---------------------------

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


# -- 10. a global option after the command says where it goes --------------------------------------

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


# -- 6. list says when it stops at the limit; --limit 0 is all ---------------------------------------

def _enqueue_many(cli, n, **kw):
    lines = "".join(json.dumps({"type": "t", **kw}) + "\n" for _ in range(n))
    r = cli("enqueue", "--batch", "-", input=lines)
    assert r.exit_code == 0, r.output


def test_list_says_on_stderr_when_more_jobs_exist(cli):
    _enqueue_many(cli, 57)
    r = cli("list")
    assert r.exit_code == 0 and len(r.stdout.splitlines()) == 51  # header + 50
    assert r.stderr == "showing 50 of 57; --limit 0 for all\n"
    r = cli("list", "--json")
    assert len(r.stdout.splitlines()) == 50 and r.stderr == "showing 50 of 57; --limit 0 for all\n"
    r = cli("list", "--json", "-n", "10", "--status", "pending")
    assert len(r.stdout.splitlines()) == 10 and r.stderr == "showing 10 of 57; --limit 0 for all\n"


def test_list_limit_zero_is_all_and_exact_limits_say_nothing(cli):
    _enqueue_many(cli, 57)
    r = cli("list", "--json", "--limit", "0")
    assert len(r.stdout.splitlines()) == 57 and r.stderr == "", r.output
    r = cli("list", "--json", "--limit", "57")
    assert len(r.stdout.splitlines()) == 57 and r.stderr == "", r.output
    r = cli("list", "--limit", "-1")
    assert r.exit_code == 2 and r.one_error_line()


# -- 8. --quiet for cron -------------------------------------------------------------------------------

def test_recover_quiet_prints_nothing_when_nothing_was_done(cli):
    cli("enqueue", "t")
    r = cli("recover")
    assert r.exit_code == 0 and r.stdout.strip() == "no expired leases"
    r = cli("recover", "--quiet")
    assert (r.exit_code, r.stdout, r.stderr) == (0, "", "")


def test_recover_quiet_still_reports_what_it_did(cli):
    cli("enqueue", "t")
    job = json.loads(cli("claim", "--lease", "1s").stdout)
    import time

    time.sleep(1.2)
    r = cli("recover", "--quiet")  # the first run acts, and says so
    assert r.exit_code == 0 and str(job["id"]) in r.stdout and "requeued" in r.stdout and not r.stderr, r.output
    r = cli("recover", "--quiet")  # nothing left: silent
    assert (r.exit_code, r.stdout, r.stderr) == (0, "", ""), r.output


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


# -- 9. pause, resume and claim of queues -------------------------------------------------------------

def test_resume_refuses_an_unknown_queue_and_creates_nothing(cli, db):
    import sqlite3

    cli("enqueue", "t", "-q", "billing")
    r = cli("resume", "bilnig")
    line = r.one_error_line()
    assert r.exit_code == 2 and "no queue named 'bilnig'" in line and "known queues: billing" in line
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT count(*) FROM queues").fetchone()[0] == 0
    finally:
        conn.close()


def test_resume_refuses_a_queue_that_is_not_paused(cli):
    cli("enqueue", "t", "-q", "billing")
    cli("enqueue", "t", "-q", "email")
    assert cli("pause", "email").exit_code == 0
    r = cli("resume", "billing")
    line = r.one_error_line()
    assert r.exit_code == 2 and "queue billing is not paused" in line and "paused queues: email" in line
    assert cli("resume", "email").exit_code == 0
    r = cli("resume", "email")  # twice: the second one has nothing to do
    assert r.exit_code == 2 and "not paused; paused queues: none" in r.one_error_line()


def test_pause_ahead_of_time_works_and_says_the_queue_has_no_jobs(cli):
    cli("enqueue", "t", "-q", "billing")
    r = cli("pause", "reports")
    assert r.exit_code == 0 and r.stdout == ""
    assert r.stderr == "jobctl: note: queue reports has no jobs yet; paused ahead of time (known queues: billing)\n"
    cli("enqueue", "t", "-q", "reports")
    assert cli("claim", "-q", "reports").exit_code == 5  # the pause holds for the jobs that come
    r = cli("pause", "billing")
    assert (r.exit_code, r.stdout, r.stderr) == (0, "", "")


def test_claim_of_a_paused_queue_says_it_is_paused(cli):
    cli("enqueue", "t", "-q", "billing")
    cli("pause", "billing")
    r = cli("claim", "--queue", "billing")
    assert r.exit_code == 5 and r.stdout == ""
    assert r.one_error_line() == "jobctl: error: no job is ready; queue billing is paused (`jobctl resume billing`)"
    r = cli("claim")  # without --queue: a paused queue is not the claimer's business
    assert r.exit_code == 5 and r.one_error_line() == "jobctl: error: no job is ready"


# -- 4. stats -q narrows everything; an unknown queue is a usage error ---------------------------------

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


# -- 2. show: the exit code, the signal and the stderr tail of failed runs ------------------------------

def test_show_prints_exit_code_and_stderr_tail_of_a_failed_run(cli, tmp_path):
    config = tmp_path / "jobctl.toml"
    config.write_text(
        '[types.bad]\n'
        'command = ["sh", "-c", "echo reading input >&2; printf \'[red]oops[/red] \\\\033[2J bad input\\\\n\' >&2; exit 65"]\n'
        'bury_exit_codes = [65]\n'
        '[types.slow]\n'
        'command = ["sh", "-c", "echo started >&2; kill -KILL $$"]\n'
        'max_attempts = 1\n'
    )
    cli("--config", config, "enqueue", "bad")
    cli("--config", config, "enqueue", "slow")
    r = cli("--config", config, "work", "--stop-when-empty")
    assert r.exit_code == 0, r.output
    shown = cli("--config", config, "show", "1", env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    out = shown.stdout
    assert "last failure  exit code 65 after " in out
    assert "last lines of run 1 (exit code 65 after " in out
    assert "\nreading input\n" in out
    assert "[red]oops[/red] \\x1b[2J bad input" in out and "\x1b" not in out  # escaped, never interpreted
    assert "(exit code 65 after " in out.split("history")[1]  # in the history too
    killed = cli("--config", config, "show", "2", env={"COLUMNS": "200"}).stdout
    assert "last failure  killed by SIGKILL after " in killed and "\nstarted\n" in killed
    # --json carries the same details, unchanged
    events = json.loads(cli("show", "1", "--json").stdout)["events"]
    assert events[-1]["details"]["exit_code"] == 65 and "reading input" in events[-1]["details"]["stderr_tail"]


# -- 10. show prints a priority's label -----------------------------------------------------------------

def test_show_prints_the_priority_label_with_its_number(cli):
    for p in ("normal", "high", "low", "critical", "7"):
        cli("enqueue", "t", "-p", p)
    shown = [next(line for line in cli("show", i).stdout.splitlines() if "priority" in line) for i in range(1, 6)]
    assert [line.split("priority")[1].strip(" │") for line in shown] == [
        "normal (10)", "high (20)", "low (0)", "critical (30)", "7"]


# -- 7. completion: fixed choices, the config's types, zsh from the first TAB ---------------------------

def _complete_bash(words, cword, cwd=None):
    import os
    import subprocess

    from conftest import JOBCTL

    env = {**os.environ, "_JOBCTL_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    r = subprocess.run(JOBCTL, env=env, capture_output=True, text=True, timeout=30, cwd=cwd)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return r.stdout.split()


def test_completion_offers_the_fixed_choices():
    assert _complete_bash("jobctl list --status ", 3) == [
        "pending", "running", "cancel_requested", "completed", "buried", "cancelled"]
    assert _complete_bash("jobctl list -s b", 3) == ["buried"]
    assert _complete_bash("jobctl list --sort ", 3) == ["newest", "oldest", "priority", "run-at", "updated"]
    assert _complete_bash("jobctl stats --format p", 3) == ["prometheus"]
    assert _complete_bash("jobctl stats -f ", 3) == ["table", "json", "prometheus"]
    assert _complete_bash("jobctl enqueue t --priority ", 4) == ["low", "normal", "high", "critical"]


def test_completion_offers_the_types_of_the_config(tmp_path):
    (tmp_path / "jobctl.toml").write_text('[types.send-invoice]\ncommand = ["true"]\n[types.resize]\ncommand = ["true"]\n')
    assert _complete_bash("jobctl enqueue ", 2, cwd=tmp_path) == ["resize", "send-invoice"]
    assert _complete_bash("jobctl enqueue s", 2, cwd=tmp_path) == ["send-invoice"]
    for cmd in ("list --type", "list -t", "claim --type", "work --type", "retry-buried -t"):
        assert _complete_bash(f"jobctl {cmd} r", 1 + len(cmd.split()), cwd=tmp_path) == ["resize"], cmd
    other = tmp_path / "other.toml"
    other.write_text('[types.report]\ncommand = ["true"]\n')
    assert _complete_bash(f"jobctl --config {other} list --type ", 5, cwd=tmp_path) == ["report"]
    broken = tmp_path / "broken.toml"
    broken.write_text("[types.report\n")
    assert _complete_bash(f"jobctl --config {broken} list --type ", 5, cwd=tmp_path) == []  # silent


def _zsh_tab(tmp_path, typed: str, expect: str) -> str:
    """Type `typed` (ending in a TAB) into an interactive zsh on a pseudo-terminal whose $fpath holds
    completions/_jobctl, as a user who copied it there; return what the terminal showed."""
    import os
    import pty
    import select
    import shutil
    import subprocess
    import sys
    import time

    from conftest import ROOT

    fpath, bin_dir = tmp_path / "zfunc", tmp_path / "bin"
    fpath.mkdir()
    bin_dir.mkdir()
    shutil.copy(ROOT / "completions" / "_jobctl", fpath / "_jobctl")
    (bin_dir / "jobctl").write_text(f"#!/bin/sh\nexec {sys.executable} -m jobctl \"$@\"\n")
    (bin_dir / "jobctl").chmod(0o755)
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "dumb", "HOME": str(tmp_path), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = subprocess.Popen(["zsh", "-f", "-i"], stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True,
                            cwd=tmp_path)
    os.close(slave)
    seen = b""

    def read_until(marker: bytes, timeout: float, or_else: bytes = b"\0") -> None:
        nonlocal seen
        deadline = time.monotonic() + timeout
        while marker not in seen and or_else not in seen and time.monotonic() < deadline:
            if select.select([master], [], [], 0.1)[0]:
                try:
                    seen += os.read(master, 65536)
                except OSError:
                    return

    try:
        os.write(master, f"fpath=({fpath} $fpath); autoload -U compinit; compinit -u -D; echo READY\n".encode())
        read_until(b"READY\r\n", 30)
        seen = b""
        os.write(master, typed.encode())
        read_until(expect.encode(), 15, or_else=b"\x07")  # the line as completed, or a bell: nothing to complete
        os.write(master, b"\x15echo END-OF-TEST\n")  # clear the line, then a marker
        read_until(b"END-OF-TEST\r\n", 15)
    finally:
        proc.kill()
        proc.wait()
        os.close(master)
    return seen.decode("utf-8", "replace")


def test_zsh_completes_from_the_first_tab(tmp_path):
    import shutil

    import pytest

    if shutil.which("zsh") is None:
        pytest.skip("zsh is not installed (apt-get install -y --no-install-recommends zsh)")
    shown = _zsh_tab(tmp_path, "jobctl lis\t", "jobctl list ")
    assert "jobctl list " in shown and "\x07" not in shown, repr(shown)
    (tmp_path / "again").mkdir()
    shown = _zsh_tab(tmp_path / "again", "jobctl list --status bu\t", "--status buried ")
    assert "jobctl list --status buried " in shown, repr(shown)
