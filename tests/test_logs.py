"""A handler's output kept in the database, and `jobctl logs`: real workers, real handlers.

`logs`, `show` and the setup's `enqueue` run in this process (run_inproc: `work` still runs as a
real process), except in the first test and the --follow tests, where `logs` is a real process."""

import json
import select
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import JOBCTL, run_cli, run_inproc
from jobctl.engines.base import RunLog
from jobctl.worker.output import RunOutputBuffer, Window
from jobctl import runlog


def setup(tmp_path, handler: str, extra: str = "", type_extra: str = "", runs: int = 1):
    """A config whose type `t` runs `handler` (Python) up to `runs` times, retried at once."""
    script = tmp_path / "handler.py"
    script.write_text(textwrap.dedent(handler))
    config = tmp_path / "config.toml"
    retries = f'backoff = "{",".join(["0"] * runs)}"\n' if runs > 1 else ""
    config.write_text(f"{extra}\n[types.t]\ncommand = [{json.dumps(sys.executable)}, {json.dumps(str(script))}]\n"
                      f"max_attempts = {runs}\n{retries}{type_extra}\n")
    return ["--config", str(config)]


def work(db, cfg, *more, timeout=60):
    r = run_cli(*cfg, "work", "--stop-when-empty", *more, db=db, timeout=timeout)
    assert r.exit_code == 0, r.output
    return r


def enqueue(db, cfg, payload="{}"):
    r = run_inproc(*cfg, "enqueue", "t", payload, db=db)
    assert r.exit_code == 0, r.output
    return int(r.stdout)


INTERLEAVED = """
    import sys, time
    for i in range(5):
        sys.stdout.write(f"out {i}\\n"); sys.stdout.flush(); time.sleep(0.03)
        sys.stderr.write(f"err {i}\\n"); sys.stderr.flush(); time.sleep(0.03)
    print('{"done": true}')
"""


def test_stdout_and_stderr_are_kept_together_in_the_order_written(tmp_path, db):
    cfg = setup(tmp_path, INTERLEAVED)
    job = enqueue(db, cfg)
    work(db, cfg)
    r = run_cli(*cfg, "logs", job, db=db)
    assert r.exit_code == 0, r.output
    expected = [line for i in range(5) for line in (f"out {i}", f"err {i}")] + ['{"done": true}']
    assert r.stdout.splitlines() == expected
    shown = json.loads(run_cli(*cfg, "show", job, "--json", db=db).stdout)
    assert shown["status"] == "completed" and shown["result"] == {"done": True}  # still from stdout alone
    data = json.loads(run_cli(*cfg, "logs", job, "--json", db=db).stdout)
    assert data["run"] == 1 and data["truncated"] is False and data["outcome"] == "completed"
    assert data["text"] == "\n".join(expected) + "\n"
    assert data["started_at"] < data["ended_at"]


def test_head_and_tail_are_kept_with_a_marker_for_what_was_dropped(tmp_path, db):
    handler = """
        import sys
        sys.stdout.write("".join(f"line {i:04d}\\n" for i in range(1000)))  # 10 bytes a line
        sys.stdout.flush()
        sys.stderr.write("the end of it\\n")
        sys.exit(3)
    """
    cfg = setup(tmp_path, handler, extra="[defaults]\nlog_head = 100\nlog_tail = \"1KiB\"\n")
    job = enqueue(db, cfg)
    work(db, cfg)
    data = json.loads(run_inproc(*cfg, "logs", job, "--json", db=db).stdout)
    total = 10_000 + len("the end of it\n")
    dropped = total - 100 - 1024
    assert data["truncated"] is True and data["dropped"] == dropped and data["outcome"] == "failed"
    lines = data["text"].splitlines()
    assert lines[:10] == [f"line {i:04d}" for i in range(10)]
    assert lines[10] == f"[jobctl: {dropped:,} bytes of output dropped here]"
    assert lines[-1] == "the end of it" and lines[-2] == "line 0999"
    assert len(data["text"].encode()) == 100 + len(lines[10]) + 1 + 1024  # the head ends a line: no newline added
    shown = json.loads(run_inproc(*cfg, "show", job, "--json", db=db).stdout)
    assert shown["error"] == "exit 3: the end of it"  # the error line is still stderr's last line
    human = run_inproc(*cfg, "show", job, db=db).stdout
    assert f"`jobctl logs {job}`" in human and "line 0999" in human  # the last lines of a failed run


def test_bad_log_sizes_are_refused_naming_the_key(tmp_path, db):
    for extra, type_extra, key in (("[defaults]\nlog_head = \"lots\"\n", "", "defaults.log_head"),
                                   ("", "log_tail = -1", "types.t.log_tail"),
                                   ("", "log_tail = \"2GiB\"", "types.t.log_tail"),
                                   ("[defaults]\nlog_tail = true\n", "", "defaults.log_tail true")):
        cfg = setup(tmp_path, "print(1)", extra=extra, type_extra=type_extra)
        r = run_inproc(*cfg, "work", "--stop-when-empty", db=db)
        assert r.exit_code == 2, r.output
        assert key in r.one_error_line()


def test_follow_prints_a_line_before_the_handler_ends(tmp_path, db):
    go = tmp_path / "go"
    handler = f"""
        import os, sys, time
        print("first line, password=hunter2", flush=True)
        while not os.path.exists({str(go)!r}):
            time.sleep(0.02)
        print("second line", flush=True)
    """
    cfg = setup(tmp_path, handler, extra="[worker]\nlease = \"1s\"\n")  # a heartbeat every ~0.3 s
    job = enqueue(db, cfg)
    worker = subprocess.Popen([*JOBCTL, "--db", str(db), *cfg, "work", "--stop-when-empty"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    follow = subprocess.Popen([*JOBCTL, "--db", str(db), *cfg, "logs", str(job), "--follow"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([follow.stdout], [], [], 20)
        assert ready, "nothing followed within 20 s"
        line = follow.stdout.readline()  # the worker stores it with a heartbeat, while the handler waits
        assert line == "first line, password=***\n"
        assert not go.exists() and follow.poll() is None
        go.touch()
        rest, err = follow.communicate(timeout=30)
        assert rest == "second line\n" and follow.returncode == 0, err
        assert worker.wait(timeout=30) == 0
    finally:
        for p in (worker, follow):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_follow_exits_4_when_the_run_failed_and_waits_for_a_run_to_start(tmp_path, db):
    cfg = setup(tmp_path, "import sys\nprint('bad input')\nsys.exit(2)\n")
    job = enqueue(db, cfg)
    r = run_inproc(*cfg, "logs", job, db=db)  # no run yet: nothing printed, said on stderr
    assert (r.exit_code, r.stdout) == (0, "") and "has not run yet" in r.stderr
    follow = subprocess.Popen([*JOBCTL, "--db", str(db), *cfg, "logs", str(job), "--follow"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    work(db, cfg)
    out, err = follow.communicate(timeout=30)
    assert out == "bad input\n" and follow.returncode == 4, err
    assert "failed" in err and err.startswith("jobctl: error: ")


def test_a_run_that_prints_nothing_keeps_no_entry(tmp_path, db):
    cfg = setup(tmp_path, "pass")
    job = enqueue(db, cfg)
    work(db, cfg)
    r = run_inproc(*cfg, "logs", job, db=db)
    assert (r.exit_code, r.stdout) == (0, "") and "no output kept (it is completed" in r.stderr
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM job_logs").fetchone()[0] == 0


def test_follow_of_a_finished_job_with_no_output_exits_as_the_job_ended(tmp_path, db):
    cfg = setup(tmp_path, "pass")
    done = enqueue(db, cfg)
    work(db, cfg)
    r = run_inproc(*cfg, "logs", done, "--follow", db=db)
    assert (r.exit_code, r.stdout) == (0, "") and "with no output kept" in r.stderr, r.output
    (tmp_path / "handler.py").write_text("import sys\nsys.exit(3)\n")
    buried = enqueue(db, cfg)
    work(db, cfg)
    r = run_inproc(*cfg, "logs", buried, "--follow", db=db)  # it said "ended (buried)" and exited 0
    assert r.exit_code == 4 and r.one_error_line() == (
        f"jobctl: error: job {buried} ended buried with no output kept (`jobctl show {buried}`)"), r.output


FAILS_LOUDLY_THEN_WAITS_SILENTLY = """
    import os, pathlib, sys, time
    if os.environ["JOBCTL_ATTEMPT"] == "1":
        print("run 1 speaking")
        sys.exit(1)
    go = pathlib.Path(sys.argv[0]).with_name("go")
    while not go.exists():
        time.sleep(0.05)
"""


def test_follow_follows_the_run_going_on_not_an_earlier_one_that_printed(tmp_path, db):
    cfg = setup(tmp_path, FAILS_LOUDLY_THEN_WAITS_SILENTLY, runs=2)
    job = enqueue(db, cfg)
    worker = subprocess.Popen([*JOBCTL, "--db", str(db), *cfg, "work", "--stop-when-empty"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    follow = None
    try:
        deadline = time.monotonic() + 30
        while json.loads(run_inproc(*cfg, "show", job, "--json", db=db).stdout)["attempts"] < 2:
            assert time.monotonic() < deadline, "run 2 did not start"
            time.sleep(0.05)
        # run 2 runs and has printed nothing: follow it (it printed run 1's output and exited 4 at once)
        follow = subprocess.Popen([*JOBCTL, "--db", str(db), *cfg, "logs", str(job), "--follow"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1)
        assert follow.poll() is None, follow.communicate()
        (tmp_path / "go").touch()
        out, err = follow.communicate(timeout=30)
        assert (follow.returncode, out) == (0, ""), err
        assert worker.wait(timeout=30) == 0
    finally:
        for p in (worker, follow):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def test_logs_errors(tmp_path, db):
    cfg = setup(tmp_path, "print('x')")
    job = enqueue(db, cfg)
    work(db, cfg)
    assert run_inproc(*cfg, "logs", 99, db=db).exit_code == 3
    r = run_inproc(*cfg, "logs", job, "--run", 2, db=db)
    assert r.exit_code == 2 and "its latest is run 1" in r.one_error_line()
    assert run_inproc(*cfg, "logs", job, "--run", 1, db=db).stdout == "x\n"


ONLY_THE_SECOND_RUN_PRINTS = """
    import os, sys
    if os.environ["JOBCTL_ATTEMPT"] == "2":
        print("attempt 2 speaking")
    sys.exit(1)
"""


def test_logs_run_n_is_the_attempt_number_of_show_and_the_worker(tmp_path, db):
    cfg = setup(tmp_path, ONLY_THE_SECOND_RUN_PRINTS, runs=3)
    job = enqueue(db, cfg)
    work(db, cfg)
    r = run_inproc(*cfg, "logs", job, "--run", 2, db=db)
    assert (r.exit_code, r.stdout) == (0, "attempt 2 speaking\n"), r.stderr
    r = run_inproc(*cfg, "logs", job, "--run", 1, db=db)  # it started, and printed nothing: say so
    assert (r.exit_code, r.stdout) == (0, "") and "run 1 of job" in r.stderr and "printed nothing" in r.stderr
    r = run_inproc(*cfg, "logs", job, "--run", 3, db=db)
    assert (r.exit_code, r.stdout) == (0, "") and "printed nothing" in r.stderr
    r = run_inproc(*cfg, "logs", job, db=db)  # the latest with output, and a word that it is not the latest run
    assert r.stdout == "attempt 2 speaking\n" and "run 2, the latest with output" in r.stderr
    assert json.loads(run_inproc(*cfg, "logs", job, "--json", db=db).stdout)["run"] == 2
    r = run_inproc(*cfg, "logs", job, "--run", 4, db=db)
    assert r.exit_code == 2 and "its latest is run 3" in r.one_error_line()
    shown = run_inproc(*cfg, "show", job, db=db).stdout
    assert "run 2 of 3" in shown and "`jobctl logs " in shown


def test_secrets_are_masked_and_terminal_controls_escaped_in_the_human_view(tmp_path, db):
    handler = r"""
        print("connecting with password=hunter2 token: abc")
        print("\x1b[31mred\x1b[0m [bold]not markup[/bold]")
    """
    cfg = setup(tmp_path, handler)
    job = enqueue(db, cfg)
    work(db, cfg)
    human = run_inproc(*cfg, "logs", job, db=db).stdout
    assert "hunter2" not in human and "abc" not in human and "password=***" in human
    assert "\x1b" not in human and "\\x1b[31mred" in human and "[bold]not markup[/bold]" in human
    revealed = run_inproc(*cfg, "logs", job, "--reveal", db=db).stdout
    assert "password=hunter2" in revealed
    exact = json.loads(run_inproc(*cfg, "logs", job, "--json", db=db).stdout)["text"]
    assert "password=hunter2 token: abc" in exact and "\x1b[31m" in exact


def test_purge_and_retention_delete_logs(tmp_path, db):
    cfg = setup(tmp_path, "print('kept until purged')")
    first = enqueue(db, cfg)
    work(db, cfg)
    r = run_inproc(*cfg, "purge", "--completed-older-than", "0s", db=db)
    assert r.exit_code == 0, r.output
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM job_logs").fetchone()[0] == 0
    assert run_inproc(*cfg, "logs", first, db=db).exit_code == 3
    # retention: the worker's own sweep
    cfg = setup(tmp_path, "print('swept')", extra="[retention]\ncompleted = \"1ms\"\n")
    enqueue(db, cfg)
    work(db, cfg)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM job_logs").fetchone()[0] == 1
    time.sleep(0.01)
    work(db, cfg)  # starts with a sweep
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM job_logs").fetchone()[0] == 0


# -- the parts --------------------------------------------------------------------------------


def test_window_keeps_the_last_bytes_and_counts_the_rest():
    w = Window(10)
    assert w.add(b"12345") == 0 and w.add(b"67890abc") == 3 and w.data() == b"4567890abc"
    assert w.add(b"x" * 25) == 25 and w.data() == b"x" * 10 and w.total == 38


def test_buffer_head_tail_and_streams():
    b = RunOutputBuffer(head=4, tail=6, stdout_keep=3, stderr_keep=3)
    b.add(b"out1\n", 1)
    b.add(b"err1\n", 2)
    b.add(b"out2\n", 1)
    snap = b.snapshot()
    assert (snap.head, snap.tail, snap.dropped) == (b"out1", b"\nout2\n", 5)
    assert (b.stdout.data(), b.stdout.total, b.stderr.data(), b.stderr.total) == (b"t2\n", 10, b"r1\n", 5)
    assert not b.dirty


def test_follow_offsets_across_a_sliding_tail():
    def log(head, tail, dropped):
        return RunLog(1, 1, 1, 0, None, head, tail, dropped)

    data, printed = runlog.since(log(b"a\n", b"b\nc\n", 0), 0)
    assert (data, printed) == (b"a\nb\nc\n", 6)
    data, printed = runlog.since(log(b"a\n", b"c\nd\n", 2), printed)  # the 2 that fell out had been printed
    assert (data, printed) == (b"d\n", 8)
    data, printed = runlog.since(log(b"a\n", b"z\n", 10), printed)  # bytes 8-11 were never seen
    assert data == runlog.marker(4) + b"z\n" and printed == 14
    assert runlog.text(log(b"ab", b"cd", 3)) == "ab\n[jobctl: 3 bytes of output dropped here]\ncd"


@pytest.mark.parametrize("value,expected", [(0, 0), (100, 100), ("64KiB", 65536), ("1MiB", 1048576), ("2kB", 2000),
                                            ("1.5 KiB", 1536)])
def test_sizes(value, expected):
    from jobctl.config import parse_size

    assert parse_size(value, "x") == expected


def test_follow_json_prints_one_object_when_the_run_ends(tmp_path, db):
    cfg = setup(tmp_path, "print('one')\nprint('two')\n")
    job = enqueue(db, cfg)
    follow = subprocess.Popen([*JOBCTL, "--db", str(db), *cfg, "logs", str(job), "--follow", "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    work(db, cfg)
    out, err = follow.communicate(timeout=30)
    assert follow.returncode == 0, err
    [line] = out.splitlines()
    data = json.loads(line)
    assert (data["run"], data["outcome"], data["text"], data["truncated"]) == (1, "completed", "one\ntwo\n", False)
