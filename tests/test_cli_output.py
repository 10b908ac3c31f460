"""What a successful command prints: stdout keeps the answer scripts read (an id, a state, a
count, or nothing); a person at a terminal also gets one line on stderr saying what was done; and
--json on every command that changes jobs or pauses."""

import json
import subprocess

import pytest

from conftest import JOBCTL, run_on_pty


def on_terminal(db, *args):
    """stdout to a pipe, stderr on a terminal: (exit code, stdout, what the terminal showed)."""
    code, shown, proc = run_on_pty([*JOBCTL, "--db", db, *args], stdout=subprocess.PIPE)
    return code, proc.stdout.read().decode(), shown.replace("\r", "")


@pytest.fixture
def running(cli):
    assert cli("enqueue", "t", "--max-attempts", "1").exit_code == 0
    return json.loads(cli("claim").stdout)["token"]


def test_stdout_stays_the_contract_and_a_terminal_is_told_what_was_done(cli, db, running):
    steps = [
        (["heartbeat", "1", "--token", running], "", "lease of job 1 extended to "),
        (["progress", "1", "--token", running, "-m", "half"], "", "progress of job 1 recorded"),
        (["complete", "1", "--token", running], "", "job 1 completed"),
        (["pause", "default", "--for", "30m"], "", "paused queue default until "),
        (["resume", "default"], "", "resumed queue default"),
        (["pause", "default", "--type", "t"], "", "paused type t in queue default until `jobctl resume`"),
        (["resume", "default", "--type", "t"], "", "resumed type t in queue default"),
    ]
    for args, out, told in steps:
        code, stdout, shown = on_terminal(db, *args)
        assert (code, stdout) == (0, out), (args, shown)
        assert told in shown, (args, shown)
    cli("enqueue", "t")
    cli("enqueue", "t")
    code, stdout, shown = on_terminal(db, "cancel", "2")
    assert (code, stdout) == (0, "2 cancelled\n") and "cancel: job 2 is now cancelled" in shown, shown
    code, stdout, shown = on_terminal(db, "cancel", "-q", "default", "--dry-run")
    assert (code, stdout) == (0, "1\n") and "would cancel 1 job (3); --dry-run: nothing changed" in shown, shown
    code, stdout, shown = on_terminal(db, "retry-buried")
    assert (code, stdout) == (0, "0\n") and "retried 0 buried jobs" in shown, shown
    code, stdout, shown = on_terminal(db, "purge", "--cancelled-older-than", "0s")
    assert (code, stdout) == (0, "1\n") and "deleted 1 finished job (cancelled 1)" in shown, shown


def test_in_a_pipe_stderr_stays_quiet(cli, running):
    for args in (["progress", "1", "--token", running, "-m", "x"], ["complete", "1", "--token", running],
                 ["pause", "default"], ["resume", "default"], ["retry-buried"], ["purge"]):
        r = cli(*args)
        assert r.exit_code == 0 and r.stderr == "", (args, r.output)


def test_json_for_every_command_that_changes_something(cli, running):
    job = json.loads(cli("heartbeat", "1", "--token", running, "--json").stdout)
    assert job["id"] == 1 and job["lease_expires_at"]
    job = json.loads(cli("progress", "1", "--token", running, "-m", "half", "--percent", "50", "--json").stdout)
    assert job["progress"] == {"message": "half", "percent": 50}
    job = json.loads(cli("complete", "1", "--token", running, "--result", '{"ok": 1}', "--json").stdout)
    assert (job["status"], job["result"]) == ("completed", {"ok": 1})
    paused = json.loads(cli("pause", "default", "--type", "t", "--json").stdout)
    assert paused == {"queue": "default", "type": "t", "paused": True, "until": None}
    assert json.loads(cli("resume", "default", "--type", "t", "--json").stdout) == \
        {"queue": "default", "type": "t", "paused": False}


@pytest.mark.parametrize("args", [["list", "--limit", "0", "--json"], ["list", "--limit", "0"]])
def test_a_reader_that_stops_early_is_no_error(cli, db, args):
    """`jobctl list --json | head -1` under `set -o pipefail`: the reader went away after what it
    wanted; jobctl stops writing and exits 0, silently (it is not an internal error, exit 1)."""
    lines = "".join(json.dumps({"type": "t", "payload": {"pad": "x" * 200}}) + "\n" for _ in range(3000))
    assert cli("enqueue", "--batch", "-", input=lines).exit_code == 0
    proc = subprocess.Popen([*JOBCTL, "--db", db, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline()
    proc.stdout.close()  # as `head -1` does once it has its line
    code = proc.wait(timeout=60)
    assert (code, proc.stderr.read().decode()) == (0, "")


def test_a_closed_stdout_is_output_nobody_reads_never_a_traceback(cli, db):
    """`jobctl enqueue t >&-` (a script that wants no output): as `> /dev/null`, exit 0, the job
    enqueued once; a closed stderr too. Never a Python traceback."""
    assert cli("init").exit_code == 0
    for args, close in ((["enqueue", "t"], "1>&-"), (["list"], "1>&-"), (["enqueue", "t"], "2>&-"),
                        (["show", "99"], "1>&-")):
        shell = " ".join([*JOBCTL, "--db", str(db), *args]) + f" {close}; echo rc=$?"
        r = subprocess.run(["sh", "-c", shell], capture_output=True, text=True, timeout=60)
        assert "Traceback" not in r.stderr, r.stderr
        expected = 3 if args[0] == "show" else 0
        assert f"rc={expected}" in r.stdout, (args, close, r.stdout, r.stderr)
    assert [json.loads(line)["id"] for line in cli("list", "--json").stdout.splitlines()] == [2, 1]


def test_output_that_cannot_be_written_says_so_and_that_the_change_was_kept(cli, db):
    """stdout on a full disk (`> /dev/full`): one line saying the output could not be written and
    that the enqueue was made (so that nobody enqueues it again blindly), not an internal error."""
    assert cli("init").exit_code == 0
    with open("/dev/full", "w") as full:
        r = subprocess.run([*JOBCTL, "--db", str(db), "enqueue", "t"], stdout=full, stderr=subprocess.PIPE,
                           text=True, timeout=60)
    lines = r.stderr.splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert "cannot write to standard output" in lines[0] and "internal" not in lines[0], lines[0]
    assert "kept" in lines[0] and "jobctl list" in lines[0], lines[0]
    assert cli("list", "--json").stdout.count("\n") == 1


def test_json_for_the_commands_that_print_a_path(cli, db, tmp_path):
    """init, backup and config init print a path; with --json, an object a script can read."""
    assert json.loads(cli("init", "--json").stdout) == {"path": str(db), "created": True}
    assert json.loads(cli("init", "--json").stdout) == {"path": str(db), "created": False}
    copy = tmp_path / "copy.db"
    assert json.loads(cli("backup", str(copy), "--json").stdout) == {"path": str(copy)}
    cfg = tmp_path / "c.toml"
    assert json.loads(cli("config", "init", str(cfg), "--json").stdout) == {"path": str(cfg)}


def test_a_dry_run_names_at_most_twenty_jobs_and_says_how_many_more():
    from jobctl.cli.filters import report

    line = report("cancel", 25, {"cancelled": 25}, True, would=list(range(1, 26)))
    assert line == ("would cancel 25 jobs (" + ", ".join(map(str, range(1, 21)))
                    + " and 5 more: --json lists them); --dry-run: nothing changed"), line
