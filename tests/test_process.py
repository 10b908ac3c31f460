"""Most CLI tests run jobctl in-process (the `cli` fixture: conftest.run_inproc calls jobctl.cli.run,
what main() calls), which saves a process start per call. Here the installed program, a real
process, is run beside the in-process runner on the same situations, one per exit code: both give
the same exit code, the same output and the same one error line, so the binary stays tested and the
in-process runner stays honest."""

import json
import os
import re
import sqlite3

import pytest

from conftest import run_cli, run_inproc
from jobctl.queue import Queue


def _new(db):
    Queue.open(db, create=True).close()


def _pending(db):
    with Queue.open(db, create=True) as q:
        q.enqueue("t", {"a": 1})


def _cancel_requested(db):
    with Queue.open(db, create=True) as q:
        job_id = q.enqueue("t").id
        token = q.claim(worker="w").token
        q.cancel(job_id)
    return token


def _locked(db):
    """A write lock held by another connection until the returned connection is closed."""
    _new(db)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    return conn


def _directory(db):
    db.mkdir(parents=True)


def _pending_without_a_command(db, tmp_path):
    _pending(db)
    config = tmp_path / "c.toml"
    config.write_text('[types.other]\ncommand = ["true"]\n')
    return config


def _same(text: str, folder) -> str:
    """What two runs a moment apart in two folders have in common: ages, the padding that lines
    their columns up, and paths aside."""
    text = re.sub(r"\b\d+(\.\d+)?(ms|s|m|h|d) ago\b", "<age>", text.replace(str(folder), "<dir>"))
    return re.sub(r" +", " ", text)


CASES = {
    # name: (exit code, set-up, argv after --db, stdin, what the error line says)
    "0-enqueue": (0, _new, ["enqueue", "t", '{"x": [1, "é"]}'], None, None),
    "0-batch-stdin": (0, _new, ["enqueue", "--batch", "-"], '{"type": "a"}\n{"type": "b"}\n', None),
    "0-list-table": (0, _pending, ["list"], None, None),
    "0-help": (0, _new, ["enqueue", "--help"], None, None),
    "2-bad-json": (2, _new, ["enqueue", "t", "{bad"], None, "not JSON"),
    "2-bad-stdin": (2, _new, ["enqueue", "t", "--payload-file", "-"], '{"x": NaN}', "NaN"),
    "2-unknown-option": (2, _new, ["enqueue", "--bogus"], None, "--help"),
    "2-unknown-command": (2, _new, ["enqueu", "t"], None, "no such command"),
    "3-no-such-job": (3, _new, ["show", "99"], None, "99"),
    "4-wrong-state": (4, _pending, ["complete", "1"], None, "pending"),
    "5-nothing-to-claim": (5, _new, ["claim"], None, None),
    "6-busy": (6, _locked, ["--busy-timeout", "100ms", "enqueue", "t"], None, "locked"),
    "7-cancel-requested": (7, _cancel_requested, ["heartbeat", "1", "--token", "TOKEN"], None, "cancel"),
    "8-a-directory": (8, _directory, ["list"], None, "directory"),
    "9-check-failed": (9, _pending_without_a_command, ["--config", "CONFIG", "doctor"], None, "problem"),
}


@pytest.mark.parametrize("name", CASES)
def test_the_binary_and_the_in_process_runner_agree(tmp_path, name):
    code, setup, argv, stdin, words = CASES[name]
    results = []
    for runner, folder in ((run_cli, "process"), (run_inproc, "inproc")):
        db = tmp_path / folder / "q" / "jobs.db"
        (tmp_path / folder).mkdir()
        made = setup(db, tmp_path / folder) if setup is _pending_without_a_command else setup(db)
        args = [str(made) if a == "CONFIG" else made if a == "TOKEN" else a for a in argv]
        try:
            r = runner(*args, db=db, input=stdin)
        finally:
            if isinstance(made, sqlite3.Connection):
                made.close()
        assert r.exit_code == code, (runner.__name__, r.output)
        if code != 0:
            line = r.one_error_line()
            assert r.stdout == "" or name == "9-check-failed", r.output
            if words:
                assert words.lower() in line.lower(), line
        results.append((r.exit_code, *(_same(text, tmp_path / folder) for text in (r.stdout, r.stderr))))
    assert results[0] == results[1]


def test_the_binary_prints_json_and_reads_stdin_as_bytes(tmp_path):
    """Bytes in, bytes out, as a shell pipe gives them: what the in-process runner decodes."""
    db = tmp_path / "q" / "jobs.db"
    payload = '{"s": "é\u2028\\u0000"}'.encode()
    r = run_cli("enqueue", "t", "--payload-file", "-", "--json", db=db, input=payload, binary=True)
    assert r.exit_code == 0, r.output
    job = json.loads(r.stdout)
    assert job["payload"] == {"s": "é\u2028\x00"} and r.stdout.endswith(b"\n")
    again = run_inproc("show", "1", "--json", db=db, binary=True)
    assert json.loads(again.stdout)["payload"] == job["payload"]


def test_the_in_process_runner_leaves_the_process_as_it_was(db):
    """env= is set for the call only (TZ included: local times are read in it), and stdin, stdout
    and stderr are given back."""
    import sys
    import time

    env, streams, zone = dict(os.environ), (sys.stdin, sys.stdout, sys.stderr), time.tzname
    r = run_inproc("enqueue", "t", "--at", "2031-05-06 10:08:09", "--json", db=db, env={"TZ": "Etc/GMT-3"})
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["run_at"] == "2031-05-06T07:08:09.000Z"
    assert dict(os.environ) == env and (sys.stdin, sys.stdout, sys.stderr) == streams and time.tzname == zone


def test_the_in_process_runner_runs_work_as_a_real_process(db, tmp_path):
    """`work` installs signal handlers and starts handler processes: run_inproc hands it to run_cli."""
    command = json.dumps(["sh", "-c", 'printf \'{"worker": %s}\\n\' "$PPID"'])
    (tmp_path / "jobctl.toml").write_text(f"[types.t]\ncommand = {command}\n")
    assert run_inproc("enqueue", "t", db=db).exit_code == 0
    r = run_inproc("work", "--stop-when-empty", db=db)
    assert r.exit_code == 0, r.output
    show = json.loads(run_inproc("show", "1", "--json", db=db).stdout)
    assert show["status"] == "completed" and show["result"]["worker"] != os.getpid(), show
