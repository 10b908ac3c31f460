"""wait and enqueue --wait, run (a handler in the foreground, no job), and pauses by type and with
an end. Real processes and signals throughout: a second process completes the job while `wait`
waits, a handler that ignores SIGTERM is killed with its grandchild, a signal to jobctl reaches
the handler."""

import json
import os
import signal
import sqlite3
import subprocess
import textwrap
import threading
import time

import pytest

from conftest import JOBCTL, run_cli, snapshot


def script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return path


def config(tmp_path, text):
    path = tmp_path / "jobctl.toml"
    path.write_text(textwrap.dedent(text))
    return path


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive: read its state
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def finish_later(db, job_id, *, delay=0.5, result='{"ok": 1}', bury=False):
    """Another process claims the job and completes (or buries) it after `delay`."""
    def go():
        time.sleep(delay)
        r = run_cli("claim", db=db)
        assert r.exit_code == 0, r.output
        job = json.loads(r.stdout)
        assert job["id"] == job_id
        if bury:
            r = run_cli("fail", job_id, "--token", job["token"], "--bury", "--error", "broken", db=db)
        else:
            r = run_cli("complete", job_id, "--token", job["token"], "--result", result, db=db)
        assert r.exit_code == 0, r.output

    t = threading.Thread(target=go)
    t.start()
    return t


# -- wait ---------------------------------------------------------------------------------------


@pytest.mark.alone  # returns within 5 s
def test_wait_returns_when_another_process_completes_the_job(cli, db):
    job_id = int(cli("enqueue", "t").stdout)
    other = cli("enqueue", "t", "--queue", "other").stdout.strip()
    cli("cancel", other)
    t = finish_later(db, job_id, delay=0.7)
    started = time.monotonic()
    r = run_cli("wait", job_id, other, db=db)
    took = time.monotonic() - started
    t.join()
    assert r.exit_code == 4, r.output  # the second one was cancelled
    assert r.stdout.splitlines() == [f"{job_id} completed", f"{other} cancelled"]
    assert f"job {other} ended cancelled" in r.one_error_line()
    assert 0.6 < took < 5
    r = cli("wait", job_id)
    assert (r.exit_code, r.stdout) == (0, f"{job_id} completed\n")


@pytest.mark.alone  # a bound on CPU time
def test_wait_does_not_busy_poll(db, cli):
    job_id = int(cli("enqueue", "t").stdout)
    p = subprocess.Popen([*JOBCTL, "--db", str(db), "wait", str(job_id), "--timeout", "3s"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    assert p.returncode == 5
    # ~0.3 s of CPU to start Python and jobctl; three seconds of busy polling would be far more
    assert usage.ru_utime + usage.ru_stime < 1.2, usage


def test_an_engine_that_declares_no_wake_ups_is_polled(db):
    """The wait loops read an engine's declared `wakes` (engines/base.py): without it, every look
    may find news, a wait for a change is a plain sleep, and `wait` still sees the job finish."""
    from jobctl.queue import Queue
    from jobctl.waiting import wait_finished

    q = Queue.open(db, create=True)
    try:
        q.engine.wakes = False  # (as an engine without a cheap wake-up would declare it)
        q.has_changed()
        assert q.has_changed() is True  # (the SQLite engine's own check would say False: nothing committed)
        started = time.monotonic()
        assert q.wait_for_change(0.2) is True and time.monotonic() - started >= 0.2
        job = q.enqueue("t", {})
        claimed = q.claim(worker="w")

        def complete():
            other = Queue.open(db)
            other.complete(claimed.id, token=claimed.token)
            other.close()

        timer = threading.Timer(0.3, complete)
        timer.start()
        try:
            jobs, stuck = wait_finished(q, [job.id], timeout=10)
        finally:
            timer.join()  # not left running past the test
        assert [j.status for j in jobs] == ["completed"] and stuck == {}
    finally:
        q.close()


def test_wait_timeout_changes_nothing_and_says_what_is_left(cli, db):
    job_id = int(cli("enqueue", "t").stdout)
    before = snapshot(db)
    r = cli("wait", job_id, "--timeout", "200ms")
    assert r.exit_code == 5, r.output
    assert f"{job_id} (pending)" in r.one_error_line() and "nothing was changed" in r.stderr
    assert snapshot(db) == before


def test_wait_for_an_unknown_or_malformed_id(cli, db):
    job_id = int(cli("enqueue", "t").stdout)
    r = cli("wait", job_id, 999)
    assert r.exit_code == 3 and "999" in r.one_error_line()
    r = cli("wait", "0")
    assert r.exit_code == 2, r.output


def test_wait_json_prints_the_jobs_as_show_does_without_events(cli, db):
    job_id = int(cli("enqueue", "t").stdout)
    t = finish_later(db, job_id, bury=True, delay=0.2)
    r = cli("wait", job_id, "--json")
    t.join()
    assert r.exit_code == 4
    job = json.loads(r.stdout)
    assert job["status"] == "buried" and job["error"] == "broken" and "events" not in job
    assert job == {k: v for k, v in json.loads(cli("show", job_id, "--json").stdout).items() if k != "events"}


def test_enqueue_wait_prints_the_result_like_a_function_call(cli, db):
    cli("init")
    t = finish_later(db, 1, result='{"sum": 3}', delay=0.5)
    r = run_cli("enqueue", "add", '{"a": 1, "b": 2}', "--wait", "--timeout", "5m", db=db)
    t.join()
    assert (r.exit_code, r.stdout, r.stderr) == (0, '{"sum":3}\n', "")
    assert json.loads(cli("show", 1, "--json").stdout)["timeout"] == 300  # --timeout stays the run's limit


def test_enqueue_wait_timeout_leaves_the_job_queued(cli, db):
    r = cli("enqueue", "t", "--wait", "--wait-timeout", "200ms", "--quiet")
    assert r.exit_code == 5 and r.stdout == ""
    assert "1 (pending)" in r.one_error_line()
    assert json.loads(cli("show", 1, "--json").stdout)["status"] == "pending"
    # the enqueue did change something: the line says the job stays, never "nothing was changed"
    assert r.one_error_line().endswith("; job 1 was enqueued and keeps its place: `jobctl wait 1`"), r.stderr
    assert "nothing was changed" not in r.stderr


def test_enqueue_wait_timeout_needs_wait_and_a_bad_one_enqueues_nothing(cli, db):
    r = cli("enqueue", "t", "--wait-timeout", "1s")
    assert r.exit_code == 2 and "--wait" in r.one_error_line()
    r = cli("enqueue", "t", "--wait", "--wait-timeout", "soon")
    assert r.exit_code == 2, r.output
    assert not db.exists()


def test_enqueue_batch_wait_prints_one_line_per_job_in_input_order(cli, db):
    cli("init")
    lines = "".join(json.dumps({"type": "t", "payload": {"n": n}}) + "\n" for n in range(3))

    def work():
        time.sleep(0.3)
        for n in range(3):
            r = run_cli("claim", "--wait", "10s", db=db)
            job = json.loads(r.stdout)
            if job["payload"]["n"] == 1:
                run_cli("fail", job["id"], "--token", job["token"], "--bury", db=db)
            else:
                run_cli("complete", job["id"], "--token", job["token"], "--result", str(job["payload"]["n"] * 10), db=db)

    t = threading.Thread(target=work)
    t.start()
    r = run_cli("enqueue", "--batch", "-", "--wait", "--wait-timeout", "30s", db=db, input=lines)
    t.join()
    assert r.exit_code == 4, r.output
    assert r.stdout.splitlines() == ["0", "null", "20"]
    assert "job 2 ended buried" in r.one_error_line()


# -- run ----------------------------------------------------------------------------------------


@pytest.fixture
def handlers(tmp_path):
    echo = script(tmp_path, "echo.sh", """\
        printf 'env:%s|%s|%s|%s|%s|%s|%s\\n' "$JOBCTL_JOB_ID" "${JOBCTL_JOB_ID+set}" "$JOBCTL_TOKEN" \
            "$JOBCTL_ATTEMPT" "$JOBCTL_MAX_ATTEMPTS" "$JOBCTL_JOB_TYPE" "$JOBCTL_QUEUE"
        printf 'db:%s\\n' "$JOBCTL_DB"
        printf 'pgid:%s pid:%s\\n' "$(ps -o pgid= $$ | tr -d ' ')" "$$"
        cat
        echo
        echo 'to stderr' >&2
        exit 3
        """)
    stubborn = script(tmp_path, "stubborn.sh", f"""\
        sleep 600 &
        echo $! > {tmp_path}/grandchild.pid
        echo $$ > {tmp_path}/handler.pid
        trap '' TERM
        while :; do sleep 0.05; done
        """)
    polite = script(tmp_path, "polite.sh", f"""\
        trap 'echo got TERM > {tmp_path}/term.txt; exit 42' TERM
        echo $$ > {tmp_path}/handler.pid
        while :; do sleep 0.05; done
        """)
    suicide = script(tmp_path, "suicide.sh", "kill -9 $$\n")
    return config(tmp_path, f"""\
        [types.echo]
        command = ["{echo}"]
        max_attempts = 4
        queue = "mail"
        [types.stubborn]
        command = ["{stubborn}"]
        timeout = "1s"
        [types.polite]
        command = ["{polite}"]
        [types.suicide]
        command = ["{suicide}"]
        [types.nocommand]
        queue = "x"
        [worker]
        kill_grace = "300ms"
        """)


def test_run_passes_payload_environment_and_exit_code_and_creates_no_database(handlers, db):
    r = run_cli("--config", handlers, "run", "echo", '{"a": [1, 2]}', db=db)
    assert r.exit_code == 3, r.output
    out = r.stdout.splitlines()
    assert out[0] == "env:|set||1|4|echo|mail"
    assert out[1] == f"db:{os.path.abspath(db)}"
    pgid, pid = (int(w.split(":")[1]) for w in out[2].split())
    assert pgid == pid  # its own process group, as under a worker
    assert out[3] == '{"a":[1,2]}'  # the payload as the queue would store it
    assert r.stderr == "to stderr\n"
    assert not db.exists() and not db.parent.exists()


def test_run_payload_file_and_bad_input(handlers, db, tmp_path):
    (tmp_path / "p.json").write_text('{"from": "file"}')
    r = run_cli("--config", handlers, "run", "echo", "--payload-file", tmp_path / "p.json", db=db)
    assert r.exit_code == 3 and '{"from":"file"}' in r.stdout
    for args in (["nocommand"], ["nosuchtype"], ["echo", "{not json"]):
        r = run_cli("--config", handlers, "run", *args, db=db)
        assert r.exit_code == 2, r.output
        r.one_error_line()
    # a command that is missing is refused before anything starts (exit 2, as the docs say), not 127
    gone = tmp_path / "gone.toml"
    gone.write_text('[types.gone]\ncommand = ["/nonexistent/handler"]\n')
    r = run_cli("--config", gone, "run", "gone", db=db)
    assert r.exit_code == 2 and "/nonexistent/handler does not exist" in r.one_error_line(), r.output
    assert not db.exists()


@pytest.mark.alone  # ends within 10 s
def test_run_timeout_kills_the_group_with_its_grandchild_and_exits_124(handlers, db, tmp_path):
    started = time.monotonic()
    r = run_cli("--config", handlers, "run", "stubborn", db=db)
    took = time.monotonic() - started
    assert r.exit_code == 124, r.output
    assert "timeout of 1s" in r.one_error_line()
    assert 1.2 < took < 10  # the timeout, then SIGTERM ignored, then SIGKILL after the kill grace
    for name in ("handler.pid", "grandchild.pid"):
        assert not alive(int((tmp_path / name).read_text())), name
    assert not db.exists()


def test_run_a_handler_killed_by_a_signal_exits_128_plus_n(handlers, db):
    r = run_cli("--config", handlers, "run", "suicide", db=db)
    assert r.exit_code == 128 + signal.SIGKILL, r.output


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_run_passes_sigterm_and_sigint_to_the_handler(handlers, db, tmp_path, sig):
    polite = tmp_path / "polite.sh"
    if sig == signal.SIGINT:
        polite.write_text(polite.read_text().replace("TERM", "INT"))
    p = subprocess.Popen([*JOBCTL, "--config", str(handlers), "--db", str(db), "run", "polite"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while not (tmp_path / "handler.pid").exists():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    time.sleep(0.1)
    p.send_signal(sig)
    out, err = p.communicate(timeout=20)
    assert p.returncode == 42, (out, err)
    assert (tmp_path / "term.txt").read_text().startswith("got ")


# -- pauses -------------------------------------------------------------------------------------


def test_pause_a_type_holds_only_it_and_every_view_says_so(cli, db):
    cli("enqueue", "a", "-q", "billing")
    cli("enqueue", "b", "-q", "billing")
    r = cli("pause", "billing", "--type", "a")
    assert (r.exit_code, r.stdout, r.stderr) == (0, "", "")
    r = cli("claim", "--type", "a")
    assert r.exit_code == 5
    assert "type a is paused in queue billing (`jobctl resume billing --type a`)" in r.one_error_line()
    assert "type a is paused in queue billing" in cli("show", 1).stdout
    queue = json.loads(cli("stats", "--json").stdout)["queues"]["billing"]
    assert (queue["paused"], queue["paused_until"], queue["paused_types"]) == (False, None, {"a": None})
    stats = cli("stats").stdout
    assert "billing (1 type paused)" in stats and "paused: type a in billing\n" in stats
    r = cli("claim", "-q", "billing", "--type", "c")
    assert r.exit_code == 5 and r.one_error_line() == "jobctl: error: no job is ready"  # not what it asked for
    assert json.loads(cli("claim", "-q", "billing").stdout)["id"] == 2  # type b still flows
    r = cli("claim", "-q", "billing")
    assert r.exit_code == 5 and "type a is paused in queue billing" in r.one_error_line()
    r = cli("resume", "billing", "--type", "b")
    assert r.exit_code == 2 and "type b is not paused in queue billing" in r.one_error_line()
    assert cli("resume", "billing", "--type", "a").exit_code == 0
    assert json.loads(cli("claim").stdout)["id"] == 1


def test_pause_for_a_while_resumes_by_itself(cli, db):
    cli("enqueue", "a", "-q", "billing")
    cli("enqueue", "b", "-q", "mail")
    assert cli("pause", "billing", "--for", "1s").exit_code == 0
    assert cli("pause", "mail", "--type", "b", "--until", "2099-01-01T00:00:00Z").exit_code == 0
    stats = json.loads(cli("stats", "--json").stdout)["queues"]
    assert stats["billing"]["paused"] is True and stats["billing"]["paused_until"].endswith("Z")
    assert stats["mail"]["paused_types"] == {"b": "2099-01-01T00:00:00.000Z"}
    r = cli("claim", "-q", "billing")
    assert r.exit_code == 5 and "queue billing is paused until " in r.one_error_line()
    assert "until 2099-01-01T00:00:00.000Z" in cli("show", 2).stdout
    time.sleep(1.1)  # no process runs meanwhile: the claim itself finds the pause over
    assert json.loads(cli("claim").stdout)["id"] == 1
    assert json.loads(cli("stats", "--json").stdout)["queues"]["billing"]["paused"] is False
    r = cli("resume", "billing")
    assert r.exit_code == 2 and "queue billing is not paused" in r.one_error_line()
    assert cli("resume", "mail").exit_code == 0  # the queue and every type in it
    assert json.loads(cli("claim").stdout)["id"] == 2


def test_pause_refuses_both_ends_or_an_end_in_the_past(cli, db):
    cli("init")
    before = snapshot(db)
    for args in (["--for", "1m", "--until", "2099-01-01"], ["--until", "2001-01-01T00:00:00Z"], ["--for", "0"],
                 ["--type", "bad name!"]):
        r = cli("pause", "q", *args)
        assert r.exit_code == 2, (args, r.output)
        r.one_error_line()
    assert snapshot(db) == before


def test_claims_with_pauses_stay_index_walks(cli, db):
    """The pause check joins the claim's one statement as key lookups: no scan of jobs, no sort."""
    from jobctl.engines.sqlite import SQLiteEngine
    from jobctl.engines.base import ClaimRequest
    from jobctl.limits import Limits

    cli("enqueue", "a", "-q", "billing")
    cli("pause", "billing", "--type", "a", "--for", "1h")
    engine = SQLiteEngine.open(db)
    statements = []
    engine.conn.set_trace_callback(statements.append)
    for request in (ClaimRequest("w", "t1"), ClaimRequest("w", "t2", queues=["billing"], types=["a"]),
                    ClaimRequest("w", "t3", limits=Limits(types={"a": 2})),
                    ClaimRequest("w", "t4", types=["a"], limits=Limits(types={"a": 2}))):
        assert engine.claim(request) is None
    engine.close()
    updates = [s for s in statements if s.lstrip().startswith("UPDATE jobs SET status = 'running'")]
    assert len(updates) == 4
    conn = sqlite3.connect(db)
    for sql in updates:
        plan = " / ".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql))
        assert "SEARCH p USING PRIMARY KEY (queue=? AND type=?)" in plan, plan  # p: paused_types
        assert "SCAN jobs" not in plan.replace("SCAN jobs USING INDEX", ""), plan
        if "CO-ROUTINE" not in plan:  # (the claim by type sorts the best job of each type: a row per type)
            assert "TEMP B-TREE" not in plan, plan
    conn.close()


def test_help_of_the_new_commands_and_options(cli):
    for args, words in ((["wait", "--help"], ["--timeout", "--json"]), (["run", "--help"], ["--payload-file"]),
                        (["pause", "--help"], ["--type", "--for", "--until"]), (["resume", "--help"], ["--type"]),
                        (["enqueue", "--help"], ["--wait", "--wait-timeout"])):
        out = cli(*args).stdout
        assert all(w in out for w in words), (args, out)


def _interrupted_while_waiting(db, *args, opens_db=True):
    """Run `jobctl --db DB ARGS...` as a real process (stdin a pipe left open), send it a real
    SIGINT once it has the database open and waits, and return (exit code, stdout, stderr)."""
    p = subprocess.Popen([*JOBCTL, "--db", str(db), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + (30 if opens_db else 2)
    while time.monotonic() < deadline:  # (its open database file is seen in /proc)
        try:
            if any(os.readlink(f"/proc/{p.pid}/fd/{fd}") == str(db) for fd in os.listdir(f"/proc/{p.pid}/fd")):
                break
        except OSError:
            pass
        time.sleep(0.05)
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    return p.returncode, out, err


@pytest.mark.parametrize("command", ["claim", "wait", "enqueue", "logs", "payload"])
def test_ctrl_c_while_waiting_says_what_was_left_and_exits_130(tmp_path, command):
    """claim --wait, wait --timeout, logs --follow and any command Ctrl-C stopped where it had
    nothing to say (here: reading a payload from stdin) exited 130 saying nothing at all."""
    db = tmp_path / "jobs.db"
    assert run_cli("--db", db, "init").exit_code == 0
    if command in ("wait", "logs"):
        assert run_cli("--db", db, "enqueue", "t").exit_code == 0
    if command == "logs":
        assert run_cli("--db", db, "claim").exit_code == 0
    args = {"claim": ["claim", "--wait", "1h"], "wait": ["wait", "1", "--timeout", "1h"],
            "enqueue": ["enqueue", "t", "--wait"], "logs": ["logs", "1", "--follow"],
            "payload": ["enqueue", "t", "--payload-file", "-"]}[command]
    code, out, err = _interrupted_while_waiting(db, *args, opens_db=command != "payload")
    assert code == 130 and out == "", (code, out, err)
    assert err == {"claim": "jobctl: error: interrupted while waiting; nothing was claimed\n",
                   "wait": "jobctl: error: interrupted while waiting; nothing was changed\n",
                   "enqueue": "jobctl: error: interrupted; job 1 was enqueued and keeps its place: `jobctl wait 1`\n",
                   "logs": "jobctl: error: interrupted while following the log of job 1; nothing was changed\n",
                   "payload": "jobctl: error: interrupted\n"}[command]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT status FROM jobs").fetchall() == {
            "claim": [], "payload": [], "logs": [("running",)]}.get(command, [("pending",)])
