"""`jobctl work` (SPEC §5) with real handler processes, real signals and real files.

Handlers are small scripts written into tmp_path; the config is ./jobctl.toml (the tests run in
tmp_path). Leases, timeouts and graces are shortened through the config so each test is quick.
"""

import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import JOBCTL, finish, run_cli, run_inproc, start_worker, wait_for

PY = sys.executable


# Short leases, graces and polls, so each test is quick (tests/test_worker_faults.py uses them too).
WORKER_CONF = 'lease = "1s"\nkill_grace = "300ms"\nrecover_every = "200ms"\npoll = "100ms"'


def write_config(tmp_path, body: str, worker: str = WORKER_CONF):
    (tmp_path / "jobctl.toml").write_text(f"{textwrap.dedent(body)}\n[worker]\n{worker}\n")


def script(tmp_path, name: str, code: str) -> str:
    """A handler written into tmp_path, executable (run as itself, or by an interpreter)."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(code))
    path.chmod(0o755)
    return str(path)


def toml_argv(*argv) -> str:
    return json.dumps([str(a) for a in argv])


def show(db, job_id) -> dict:
    r = run_inproc("show", job_id, "--json", db=db)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)




def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False






def work(db, *args, timeout=60):
    return run_cli("work", *args, db=db, timeout=timeout)


# -- 1. outcomes -----------------------------------------------------------------------------


def test_success_with_result_and_failure_retried_then_buried(tmp_path, cli, db):
    write_config(tmp_path, """
        [types.ok]
        command = ["sh", "-c", "echo working; echo '{\\"sent\\": 2}'"]

        [types.boom]
        command = ["sh", "-c", "echo first >&2; echo 'smtp said no' >&2; exit 3"]
        max_attempts = 2
        backoff = [1]
    """)
    ok = int(cli("enqueue", "ok").stdout)
    boom = int(cli("enqueue", "boom").stdout)
    r = work(db, "--max-jobs", 3)  # ok, boom run 1, boom run 2 one second later
    assert r.exit_code == 0, r.output

    job = show(db, ok)
    assert job["status"] == "completed" and job["result"] == {"sent": 2}

    job = show(db, boom)
    assert job["status"] == "buried", job
    assert job["attempts"] == 2
    assert job["error"] == "exit 3: smtp said no"
    failed = [e for e in job["events"] if e["from"] == "running"]
    assert [e["to"] for e in failed] == ["pending", "buried"]
    assert "retry in 1s" in failed[0]["message"]
    assert failed[0]["details"]["exit_code"] == 3
    assert failed[0]["details"]["stderr_tail"] == "first\nsmtp said no"
    # The retry waited for its backoff.
    retried = [e for e in job["events"] if e["to"] == "running"]
    gap = _ms(retried[1]["at"]) - _ms(failed[0]["at"])
    assert gap >= 1000 - 5, job["events"]
    assert "failed job" in r.stderr and "buried job" in r.stderr and "done job" in r.stderr


def _ms(rfc3339: str) -> int:
    from jobctl.durations import parse_time

    return parse_time(rfc3339)


def test_bury_exit_codes_bury_on_first_such_exit(tmp_path, cli, db):
    write_config(tmp_path, """
        [types.bad-input]
        command = ["sh", "-c", "echo 'bad address' >&2; exit 65"]
        max_attempts = 5
        bury_exit_codes = [64, 65]
    """)
    job_id = int(cli("enqueue", "bad-input").stdout)
    r = work(db, "--stop-when-empty")
    assert r.exit_code == 0, r.output
    job = show(db, job_id)
    assert job["status"] == "buried" and job["attempts"] == 1
    assert job["error"] == "exit 65: bad address"
    assert "bury_exit_codes" in r.stderr


def test_last_stdout_line_only_becomes_result_when_json(tmp_path, cli, db):
    write_config(tmp_path, """
        [types.text]
        command = ["sh", "-c", "echo '{\\"not\\": \\"last\\"}'; echo all done"]
    """)
    job_id = int(cli("enqueue", "text").stdout)
    assert work(db, "--stop-when-empty").exit_code == 0
    job = show(db, job_id)
    assert job["status"] == "completed" and job["result"] is None


@pytest.mark.parametrize("concurrency", ["1", "2"])
def test_a_json_string_as_the_last_line_is_the_result_as_it_is(tmp_path, cli, db, concurrency):
    # A JSON string is a JSON value like any other: it is the result, kept as a string (never
    # read a second time as JSON text, which crashed the worker and left the job running).
    says = script(tmp_path, "says.py", """
        import json, sys
        print(json.dumps(json.load(sys.stdin)["say"]))
    """)
    write_config(tmp_path, f"""
        [types.says]
        command = {toml_argv(PY, says)}
    """)
    ids = {said: int(cli("enqueue", "says", json.dumps({"say": said})).stdout)
           for said in ("just a string", "123", '{"a": 1}')}
    r = work(db, "--stop-when-empty", "--concurrency", concurrency)
    assert r.exit_code == 0 and "Traceback" not in r.stderr, r.output
    for said, job_id in ids.items():
        job = show(db, job_id)
        assert (job["status"], job["result"]) == ("completed", said), job


def test_a_long_last_stderr_line_still_gives_the_error_and_the_stderr_tail(tmp_path, cli, db):
    # One stderr line longer than the tail the worker keeps (a stack trace on one line, a JSON
    # blob): its end is still the error line and the stderr tail of the history, not nothing.
    write_config(tmp_path, """
        [types.loud]
        command = ["sh", "-c", "printf 'first line\\n' >&2; head -c 20000 /dev/zero | tr '\\\\0' E >&2; echo ' the end' >&2; exit 2"]
        max_attempts = 1
    """)
    job_id = int(cli("enqueue", "loud").stdout)
    assert work(db, "--stop-when-empty").exit_code == 0
    job = show(db, job_id)
    assert job["status"] == "buried"
    assert job["error"].startswith("exit 2: EEE") and len(job["error"]) <= 500, job["error"]
    assert job["events"][-1]["details"]["stderr_tail"].endswith("EEE the end")


def test_missing_command_is_a_config_error_and_the_job_is_not_charged(tmp_path, cli, db):
    write_config(tmp_path, f"""
        [types.gone]
        command = ["{tmp_path}/no-such-handler"]
        max_attempts = 1
    """)
    job_id = int(cli("enqueue", "gone").stdout)
    r = work(db, "--stop-when-empty")
    assert r.exit_code == 2, r.output
    assert "type gone" in r.stderr and "no-such-handler does not exist" in r.stderr, r.stderr
    job = show(db, job_id)
    assert job["status"] == "pending" and job["attempts"] == 0


# -- 2. payload and environment -------------------------------------------------------------


@pytest.mark.parametrize("memory_limit", [None, "1GiB"], ids=["posix_spawn", "fork-exec"])
def test_a_handler_starts_with_default_signals_but_those_the_worker_was_started_ignoring(tmp_path, cli, db,
                                                                                         memory_limit):
    # The worker catches SIGTERM, SIGINT, SIGHUP and SIGCHLD, and Python ignores SIGPIPE: none of
    # that reaches a handler. A signal the worker itself was started with ignored stays ignored,
    # as across any exec. Both ways of starting a handler: posix_spawn, and fork + exec for a
    # memory limit. (The handler, a shell, reads its own status. glibc's posix_spawn leaves its
    # two internal signals, 32 and 33, ignored: not ours to judge.)
    probe = script(tmp_path, "probe.sh", """
        ign=$(sed -n 's/^SigIgn:[[:space:]]*//p' /proc/$$/status)
        blk=$(sed -n 's/^SigBlk:[[:space:]]*//p' /proc/$$/status)
        printf '{"ignored": "%s", "blocked": "%s"}\\n' "$ign" "$blk"
    """)
    limit = f'memory_limit = "{memory_limit}"\n' if memory_limit else ""
    write_config(tmp_path, f"[types.probe]\ncommand = {toml_argv('sh', probe)}\n{limit}")
    job = int(cli("enqueue", "probe").stdout)
    r = run_cli("work", "--max-jobs", 1, db=db, preexec_fn=lambda: signal.signal(signal.SIGUSR1, signal.SIG_IGN))
    assert r.exit_code == 0, r.output
    seen = show(db, job)["result"]
    assert int(seen["ignored"], 16) & ~(0b11 << 31) == 1 << (signal.SIGUSR1 - 1), seen
    assert int(seen["blocked"], 16) == 0, seen


def test_payload_arrives_byte_exact_and_is_never_executed(tmp_path, cli, db):
    handler = script(tmp_path, "capture.py", """
        import json, os, sys
        data = sys.stdin.buffer.read()
        job = os.environ["JOBCTL_JOB_ID"]
        open(f"payload-{job}.bin", "wb").write(data)
        env = {k: v for k, v in os.environ.items() if k.startswith("JOBCTL_")}
        open(f"env-{job}.json", "w").write(json.dumps(env))
    """)
    write_config(tmp_path, f"""
        [types.capture]
        command = {toml_argv(PY, handler)}
        queue = "mail"
        max_attempts = 4
    """)
    payload = '{"cmd":"$(touch pwned)","rm":"; rm -rf x","tick":"`touch pwned2`","quote":"\'\\"","ü":"日本 ✓ 🚀","n":[1,2.5,null]}'
    job_id = int(cli("enqueue", "capture", payload).stdout)
    r = work(db, "--stop-when-empty")
    assert r.exit_code == 0, r.output
    assert (tmp_path / f"payload-{job_id}.bin").read_bytes() == payload.encode("utf-8")
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()
    env = json.loads((tmp_path / f"env-{job_id}.json").read_text())
    show(db, job_id)
    assert env["JOBCTL_JOB_ID"] == str(job_id)
    assert env["JOBCTL_JOB_TYPE"] == "capture"
    assert env["JOBCTL_QUEUE"] == "mail"
    assert env["JOBCTL_ATTEMPT"] == "1" and env["JOBCTL_MAX_ATTEMPTS"] == "4"
    assert len(env["JOBCTL_TOKEN"]) >= 16
    assert os.path.samefile(env["JOBCTL_DB"], db)
    assert payload not in r.stderr and "pwned" not in r.stderr  # payloads never reach the log


def test_handler_reports_progress_with_its_environment(tmp_path, cli, db):
    handler = script(tmp_path, "progress.sh", f"""
        {" ".join(JOBCTL)} progress "$JOBCTL_JOB_ID" --token "$JOBCTL_TOKEN" -m halfway --percent 50 || exit 9
        {" ".join(JOBCTL)} show "$JOBCTL_JOB_ID" --json > shown.json
    """)
    write_config(tmp_path, f"""
        [types.p]
        command = ["sh", "{handler}"]
    """)
    job_id = int(cli("enqueue", "p").stdout)
    r = work(db, "--stop-when-empty")
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "shown.json").read_text())["progress"] == {"message": "halfway", "percent": 50}
    assert show(db, job_id)["status"] == "completed"


# -- 3, 4. timeouts kill the whole process group ----------------------------------------------


def test_timeout_kills_the_handler_and_its_children(tmp_path, cli, db):
    write_config(tmp_path, """
        [types.hang]
        command = ["sh", "-c", "sleep 600 & echo $! > child.pid; echo $$ > handler.pid; wait"]
        timeout = "1s"
        max_attempts = 1
    """)
    job_id = int(cli("enqueue", "hang").stdout)
    r = work(db, "--stop-when-empty")
    assert r.exit_code == 0, r.output
    handler, child = int((tmp_path / "handler.pid").read_text()), int((tmp_path / "child.pid").read_text())
    wait_for(lambda: not alive(handler) and not alive(child), 5, "the handler and its child to be gone")
    job = show(db, job_id)
    assert job["status"] == "buried"
    assert job["error"] == "timed out after 1s"


def test_what_a_finished_handler_left_in_its_group_is_killed_and_no_zombie_stays(tmp_path, cli, db):
    """A handler that exits 0 leaving a process behind in its group: the worker kills the group
    and reaps the handler once the next handler has started (off the path between the two), and
    at once after the last one: an idle worker keeps no zombie child."""
    write_config(tmp_path, """
        [types.leaver]
        command = ["sh", "-c", "sleep 600 & echo $! > left.$JOBCTL_JOB_ID; exit 0"]
    """)
    ids = [int(cli("enqueue", "leaver").stdout) for _ in range(3)]
    w = start_worker(tmp_path, db, "--poll", "100ms")
    try:
        wait_for(lambda: all(show(db, i)["status"] == "completed" for i in ids), what="the three jobs done")
        left = [int((tmp_path / f"left.{i}").read_text()) for i in ids]
        wait_for(lambda: not any(alive(pid) for pid in left), 5, "what the handlers left to be killed")

        def zombies() -> list[str]:
            found = []
            for name in filter(str.isdigit, os.listdir("/proc")):
                try:
                    stat = open(f"/proc/{name}/stat").read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if stat[0] == "Z" and int(stat[1]) == w.pid:
                    found.append(name)
            return found

        time.sleep(0.3)  # idle: polling, no handler to start
        assert zombies() == [] and w.poll() is None
    finally:
        w.send_signal(signal.SIGTERM)
        assert finish(w)[0] == 0


def test_handler_ignoring_sigterm_is_killed_after_the_grace(tmp_path, cli, db):
    handler = script(tmp_path, "stubborn.py", """
        import os, signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open("handler.pid", "w").write(str(os.getpid()))
        while True:
            time.sleep(0.05)
    """)
    write_config(tmp_path, f"""
        [types.stubborn]
        command = {toml_argv(PY, handler)}
        timeout = "1s"
        max_attempts = 1
    """)
    job_id = int(cli("enqueue", "stubborn").stdout)
    r = work(db, "--stop-when-empty")
    assert r.exit_code == 0, r.output
    pid = int((tmp_path / "handler.pid").read_text())
    wait_for(lambda: not alive(pid), 5, "the handler to be gone")
    job = show(db, job_id)
    assert job["error"] == "timed out after 1s"
    assert job["events"][-1]["details"]["signal"] == "SIGKILL"


# -- 5. heartbeats --------------------------------------------------------------------------


@pytest.mark.slow
def test_job_longer_than_its_lease_completes_and_is_not_claimed_twice(tmp_path, cli, db):
    write_config(tmp_path, """
        [types.long]
        command = ["sh", "-c", "echo $JOBCTL_ATTEMPT >> runs.txt; sleep 2"]
    """)  # lease 1s: the job runs two leases long (three proved no more)
    job_id = int(cli("enqueue", "long").stdout)
    first = start_worker(tmp_path, db, "--max-jobs", 1, name="first")
    wait_for(lambda: (tmp_path / "runs.txt").exists(), what="the job to start")
    other = start_worker(tmp_path, db, "--max-time", "3s", name="other")  # recovers every 200 ms, past the job's end
    code, log = finish(first)
    assert code == 0, log
    code, other_log = finish(other)
    assert code == 0, other_log
    job = show(db, job_id)
    assert job["status"] == "completed" and job["attempts"] == 1
    assert (tmp_path / "runs.txt").read_text() == "1\n"
    assert [e["to"] for e in job["events"]] == ["pending", "running", "completed"]
    assert "recovered" not in other_log


# -- 6. cancellation ------------------------------------------------------------------------


def test_cancel_of_a_running_job_stops_the_handler(tmp_path, cli, db):
    write_config(tmp_path, """
        [types.slow]
        command = ["sh", "-c", "echo $$ > handler.pid; sleep 600"]
    """)
    job_id = int(cli("enqueue", "slow").stdout)
    worker = start_worker(tmp_path, db)
    try:
        wait_for(lambda: (tmp_path / "handler.pid").exists() and show(db, job_id)["status"] == "running",
                 what="the job to run")
        r = cli("cancel", job_id, "--reason", "no longer needed")
        assert r.exit_code == 0 and "cancel_requested" in r.stdout, r.output
        wait_for(lambda: show(db, job_id)["status"] == "cancelled", 10, "the job to be cancelled")
        assert not alive(int((tmp_path / "handler.pid").read_text()))
    finally:
        worker.send_signal(signal.SIGTERM)
        code, log = finish(worker)
    assert code == 0, log
    assert "cancelled job" in log


def test_a_cancel_noticed_while_a_timed_out_handler_is_stopped_cancels_the_job(tmp_path, cli, db):
    # The handler timed out and ignores SIGTERM: while the worker waits to SIGKILL it, the operator
    # cancels the job. Once the worker has seen that, the job ends cancelled as asked, not buried
    # (a failure parked for a person, that fires on_buried and `stats --check --max-buried`).
    handler = script(tmp_path, "stubborn.py", """
        import signal, time
        signal.signal(signal.SIGTERM, lambda *a: open("term", "w").close())
        while True:
            time.sleep(0.05)
    """)
    write_config(tmp_path, f"""
        [types.stubborn]
        command = {toml_argv(PY, handler)}
        timeout = "1s"
    """, worker='lease = "1s"\nkill_grace = "4s"\nrecover_every = "200ms"\npoll = "100ms"')
    job_id = int(cli("enqueue", "stubborn").stdout)
    worker = start_worker(tmp_path, db, "--stop-when-empty")
    wait_for(lambda: (tmp_path / "term").exists(), 10, "the timeout's SIGTERM")
    r = cli("cancel", job_id)
    assert r.exit_code == 0 and "cancel_requested" in r.stdout, r.output
    code, log = finish(worker)
    assert code == 0, log
    job = show(db, job_id)
    assert job["status"] == "cancelled", log
    assert "cancel" in log


# -- 7. stopping the worker -----------------------------------------------------------------


def test_sigterm_mid_job_releases_it_without_counting_the_run(tmp_path, cli, db):
    write_config(tmp_path, """
        [types.slow]
        command = ["sh", "-c", "echo $$ > handler.pid; sleep 600"]
    """)
    job_id = int(cli("enqueue", "slow").stdout)
    worker = start_worker(tmp_path, db, "--grace", "500ms")
    wait_for(lambda: (tmp_path / "handler.pid").exists(), what="the handler to start")
    worker.send_signal(signal.SIGTERM)
    code, log = finish(worker, timeout=10)
    assert code == 0, log
    assert not alive(int((tmp_path / "handler.pid").read_text()))
    job = show(db, job_id)
    assert job["status"] == "pending" and job["attempts"] == 0 and job["token"] is None
    assert job["events"][-1]["message"].startswith("released")
    assert "released job" in log


def test_sigterm_lets_a_running_job_finish_within_the_grace(tmp_path, cli, db):
    write_config(tmp_path, """
        [types.short]
        command = ["sh", "-c", "touch started; sleep 1; echo '{\\"ok\\": true}'"]
    """)
    first = int(cli("enqueue", "short").stdout)
    second = int(cli("enqueue", "short").stdout)
    worker = start_worker(tmp_path, db, "--grace", "30s")
    wait_for(lambda: (tmp_path / "started").exists(), what="the handler to start")
    worker.send_signal(signal.SIGINT)
    code, log = finish(worker)
    assert code == 0, log
    assert show(db, first)["status"] == "completed"
    assert show(db, second)["status"] == "pending" and show(db, second)["attempts"] == 0  # not claimed


def test_second_signal_stops_at_once(tmp_path, cli, db):
    write_config(tmp_path, """
        [types.slow]
        command = ["sh", "-c", "echo $$ > handler.pid; sleep 600"]
    """)
    job_id = int(cli("enqueue", "slow").stdout)
    worker = start_worker(tmp_path, db, "--grace", "10m")
    wait_for(lambda: (tmp_path / "handler.pid").exists(), what="the handler to start")
    worker.send_signal(signal.SIGTERM)
    wait_for(lambda: "stopping" in worker.log_path.read_text(), what="the first signal to be seen")
    worker.send_signal(signal.SIGTERM)
    code, log = finish(worker, timeout=10)
    assert code == 0, log
    assert show(db, job_id)["status"] == "pending"


SIGNALLED_WHILE_STARTING = textwrap.dedent("""
    import os, signal, sys
    from jobctl.cli import main, state
    opened, signum = state.State.open_queue, getattr(signal, sys.argv[1])
    def open_queue(self, *args, **kwargs):  # the signal arrives while the worker opens the database
        os.kill(os.getpid(), signum)
        return opened(self, *args, **kwargs)
    state.State.open_queue = open_queue
    sys.argv = ["jobctl", *sys.argv[2:]]
    main()
""")


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_a_signal_while_the_worker_starts_stops_it_cleanly(tmp_path, cli, db, signame):
    # Stopped before it ran anything: exit 0, as for any stop by a signal, with its log lines
    # (not killed by the signal, nor "interrupted" with exit 130), and no job started.
    write_config(tmp_path, """
        [types.quick]
        command = ["true"]
    """)
    job_id = int(cli("enqueue", "quick").stdout)
    r = subprocess.run([sys.executable, "-c", SIGNALLED_WHILE_STARTING, signame, "--db", str(db), "work"],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"stopping: {signame} received" in r.stderr and "stopped: 0 job(s) started" in r.stderr, r.stderr
    job = show(db, job_id)
    assert job["status"] == "pending" and job["attempts"] == 0


def test_limits_stop_the_worker(tmp_path, cli, db):
    write_config(tmp_path, """
        [types.t]
        command = ["true"]
    """)
    for _ in range(3):
        cli("enqueue", "t")
    r = work(db, "--max-jobs", 2)
    assert r.exit_code == 0, r.output
    statuses = sorted(json.loads(line)["status"] for line in cli("list", "--json").stdout.splitlines())
    assert statuses == ["completed", "completed", "pending"]
    r = work(db, "--max-time", "300ms", "--queue", "elsewhere")
    assert r.exit_code == 0, r.output


# -- 8. a worker killed with SIGKILL -------------------------------------------------------


def test_killed_worker_job_is_recovered_by_another_worker(tmp_path, cli, db):
    write_config(tmp_path, """
        [types.once]
        command = ["sh", "-c", "if [ $JOBCTL_ATTEMPT = 1 ]; then echo $$ > first.pid; exec sleep 600; fi; echo '{\\"run\\": 2}'"]
    """)
    job_id = int(cli("enqueue", "once").stdout)
    doomed = start_worker(tmp_path, db, name="doomed")
    try:
        wait_for(lambda: (tmp_path / "first.pid").exists(), what="the first run to start")
        doomed.kill()
        doomed.wait()
    finally:
        # The orphaned handler lives in its own session; under systemd the unit's cgroup is
        # killed with the worker. Here the test cleans it up.
        wait_for(lambda: (tmp_path / "first.pid").exists(), what="the first run's pid")
        os.kill(int((tmp_path / "first.pid").read_text()), signal.SIGKILL)
    r = work(db, "--max-jobs", 1)  # waits for the 1 s lease to expire, recovers, claims, completes
    assert r.exit_code == 0, r.output
    assert "recovered" in r.stderr
    job = show(db, job_id)
    assert job["status"] == "completed" and job["attempts"] == 2 and job["result"] == {"run": 2}
    assert [e["to"] for e in job["events"]] == ["pending", "running", "pending", "running", "completed"]
    assert "lost" in job["events"][2]["message"]


# -- 9. many workers ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.shared  # outcomes only: runs beside other tests
def test_four_workers_run_every_job_exactly_once(tmp_path, cli, db):
    write_config(tmp_path, """
        [types.append]
        command = ["sh", "-c", "echo $JOBCTL_JOB_ID >> ids.txt"]
    """, worker='lease = "30s"\npoll = "100ms"')
    # (a lease no stall of a loaded machine outlasts: this is about claims never overlapping; a
    # lease that expires under a live worker reruns its job by design, as the 1 s leases of the
    # tests above show)
    batch = "".join('{"type": "append"}\n' for _ in range(300))
    r = cli("enqueue", "--batch", "-", input=batch)
    assert r.exit_code == 0, r.output
    workers = [start_worker(tmp_path, db, "--concurrency", 2, "--stop-when-empty", name=f"w{i}") for i in range(4)]
    for w in workers:
        code, log = finish(w, timeout=120)
        assert code == 0, log
    ids = [int(x) for x in (tmp_path / "ids.txt").read_text().split()]
    assert sorted(ids) == list(range(1, 301))
    statuses = {json.loads(line)["status"] for line in cli("list", "--json", "--limit", 1000).stdout.splitlines()}
    assert statuses == {"completed"}


# -- 10. a locked database ------------------------------------------------------------------


LOCKER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
"""


@pytest.mark.slow
@pytest.mark.shared  # outcomes only: runs beside other tests
def test_worker_waits_out_a_write_lock_held_by_another_process(tmp_path, cli, db):
    write_config(tmp_path, """
        busy_timeout = "500ms"

        [types.append]
        command = ["sh", "-c", "echo $JOBCTL_JOB_ID >> ids.txt; sleep 0.2"]
    """, worker='lease = "30s"\npoll = "100ms"')  # a lease longer than the outage
    cli("enqueue", "--batch", "-", input='{"type": "append"}\n' * 12)
    worker = start_worker(tmp_path, db, "--stop-when-empty")
    wait_for(lambda: (tmp_path / "ids.txt").exists() and len((tmp_path / "ids.txt").read_text().split()) >= 2,
             what="some jobs to run")
    # held for 4 busy timeouts: the worker meets the lock, backs off and retries several times
    # (0.1 s, 0.2 s, 0.4 s... between tries of 0.5 s each) before it is free; 10 s (and 4 s for
    # tries of 1 s) proved no more
    locker = subprocess.Popen([PY, "-c", LOCKER, str(db), "2"], stdout=subprocess.PIPE, text=True)
    assert locker.stdout.readline().strip() == "locked"
    assert locker.wait(timeout=30) == 0
    code, log = finish(worker, timeout=60)
    assert code == 0, log
    ids = sorted(int(x) for x in (tmp_path / "ids.txt").read_text().split())
    assert ids == list(range(1, 13))
    assert log.count("db-busy") == 1, log  # logged once, not once per retry
    statuses = {json.loads(line)["status"] for line in cli("list", "--json").stdout.splitlines()}
    assert statuses == {"completed"}


def test_signals_sent_while_the_worker_waits_on_a_lock_each_count(tmp_path, cli, db):
    # Two SIGTERMs while the worker waits for the write lock (a heartbeat blocked inside SQLite)
    # reach Python as one call of its handler: they are still two signals, so the second stops
    # the handler at once instead of after the 10-minute grace.
    write_config(tmp_path, """
        [types.slow]
        command = ["sh", "-c", "echo $$ > handler.pid; sleep 600"]

        [sqlite]
        busy_timeout = "20s"
    """)  # lease 1s: a heartbeat every third of a second meets the lock at once
    job_id = int(cli("enqueue", "slow").stdout)
    worker = start_worker(tmp_path, db, "--grace", "10m")
    wait_for(lambda: (tmp_path / "handler.pid").exists(), what="the handler to start")
    locker = subprocess.Popen([PY, "-c", LOCKER, str(db), "3"], stdout=subprocess.PIPE, text=True)
    assert locker.stdout.readline().strip() == "locked"
    time.sleep(0.8)  # the worker is now waiting for the lock
    worker.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    worker.send_signal(signal.SIGTERM)
    assert locker.wait(timeout=30) == 0
    code, log = finish(worker, timeout=15)
    assert code == 0, log
    assert "second signal" in log
    assert show(db, job_id)["status"] == "pending"


# -- retention, recovery, logs, configuration problems ----------------------------------------


def test_retention_deletes_only_what_is_old_enough(tmp_path, cli, db):
    """In-process worker with a queue clock three days ahead: the retention sees old jobs."""
    from jobctl.config import load_settings
    from jobctl.queue import Queue
    from jobctl.worker import Log, Worker, WorkerOptions

    write_config(tmp_path, """
        [retention]
        completed = "2d"
        cancelled = "5d"

        [types.t]
        command = ["true"]
    """)
    done = int(cli("enqueue", "t").stdout)
    assert work(db, "--stop-when-empty").exit_code == 0
    cancelled = int(cli("enqueue", "t").stdout)
    cli("cancel", cancelled)
    buried = int(cli("enqueue", "t", "--max-attempts", 1).stdout)
    token = json.loads(cli("claim").stdout)["token"]
    cli("fail", buried, "--token", token)
    fresh = int(cli("enqueue", "t").stdout)

    settings = load_settings(str(tmp_path / "jobctl.toml"))
    lines = []

    class Lines:
        write = lines.append

        @staticmethod
        def flush():
            pass

    options = WorkerOptions(worker_id="test", stop_when_empty=True, poll=0.1)
    with Queue.open(db, settings, clock=lambda: time.time() + 3 * 86400) as q:
        assert Worker(q, settings, options, Log("test", "json", Lines)).run() == 0
    assert run_cli("show", done, db=db).exit_code == 3  # completed 3 days "ago": deleted
    for kept in (cancelled, buried):
        assert show(db, kept)["status"] in ("cancelled", "buried")
    assert show(db, fresh)["status"] == "completed"  # finished "now"
    purged = [json.loads(line) for line in lines if '"purged"' in line]
    assert purged and purged[0]["deleted"] == {"completed": 1, "cancelled": 0}


def test_json_logs_one_object_per_line_without_payloads(tmp_path, cli, db):
    write_config(tmp_path, """
        [types.t]
        command = ["sh", "-c", "cat > /dev/null; echo 'broke \\u001b[31m' >&2; exit 1"]
        max_attempts = 1
    """)
    job_id = int(cli("enqueue", "t", '{"password": "hunter2-secret"}').stdout)
    r = work(db, "--stop-when-empty", "--log-format", "json")
    assert r.exit_code == 0, r.output
    records = [json.loads(line) for line in r.stderr.splitlines()]
    assert [x["event"] for x in records if "job" in x] == ["start", "buried"]
    buried = records[-2]
    assert buried["job"] == job_id and buried["type"] == "t" and buried["error"].startswith("exit 1: broke")
    assert "hunter2" not in r.stderr


def test_human_logs_escape_control_characters(tmp_path, cli, db):
    handler = script(tmp_path, "noisy.py", """
        import sys
        sys.stderr.write("\\x1b]0;owned\\x07\\x1b[2J gone\\n")
        sys.exit(2)
    """)
    write_config(tmp_path, f"""
        [types.t]
        command = {toml_argv(PY, handler)}
    """)
    cli("enqueue", "t", "--max-attempts", 1)
    r = work(db, "--stop-when-empty")
    assert r.exit_code == 0, r.output
    assert "\x1b" not in r.stderr and "\x07" not in r.stderr
    assert "exit 2: \\x1b]0;owned\\x07\\x1b[2J gone" in r.stderr, r.stderr


def test_work_needs_a_handler_command(tmp_path, cli, db):
    r = work(db, "--stop-when-empty")
    assert r.exit_code == 2 and "no job type has a command" in r.stderr, r.output
    assert not db.exists()  # a config problem creates no file
    write_config(tmp_path, """
        [types.t]
        queue = "x"
    """)
    r = work(db, "--type", "t")
    assert r.exit_code == 2 and "no command for type t" in r.stderr, r.output


def test_work_claims_only_types_with_a_command(tmp_path, cli, db):
    write_config(tmp_path, """
        [types.t]
        command = ["true"]
    """)
    other = int(cli("enqueue", "manual").stdout)
    mine = int(cli("enqueue", "t").stdout)
    assert work(db, "--stop-when-empty").exit_code == 0
    assert show(db, mine)["status"] == "completed"
    assert show(db, other)["status"] == "pending"


def test_unusable_database_stops_the_worker_with_exit_8(tmp_path, db):
    write_config(tmp_path, """
        [types.t]
        command = ["true"]
    """)
    foreign = tmp_path / "foreign.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE x (y)")
    conn.close()
    os.chmod(foreign, 0o600)
    r = run_cli("work", "--stop-when-empty", db=foreign)
    assert r.exit_code == 8 and "not a jobctl database" in r.stderr, r.output


def test_worker_module_does_not_import_typer_or_rich():
    code = "import sys, jobctl.worker; print(sorted(m for m in ('typer', 'rich', 'sqlite_utils') if m in sys.modules))"
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# -- JSON log lines are ASCII, controls escaped ----------------------------------------------------

def test_worker_json_log_lines_are_ascii_with_escapes(tmp_path, db):
    from jobctl.models import Job
    from jobctl.worker import Log

    out = io.StringIO()
    log = Log("w\x1b[31m", "json", stream=out)
    job = Job(id=1, queue="q", type="t", payload="{}", priority=10, status="running", attempts=1,
              max_attempts=3, backoff="fixed", timeout_ms=1000, run_at=0, created_at=0, updated_at=0)
    log("failed", "exit 1: \x1b]8;;http://evil/\x07click\x9b \u202eevil \ud800", job, error="\x85x")
    text = out.getvalue()
    assert text.isascii() and text.count("\n") == 1, text
    record = json.loads(text)
    assert record["worker"] == "w\x1b[31m" and "\x1b]8;;" in record["message"] and "\u202e" in record["message"]
    assert record["error"] == "\x85x"


def test_worker_json_log_of_a_real_run_is_ascii(cli, db, tmp_path):
    handler = tmp_path / "handler.sh"
    handler.write_text("#!/bin/sh\nprintf 'bad \\033[2J\\342\\200\\256 x' >&2\nexit 3\n")
    handler.chmod(0o755)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[worker]\nlog_format = "json"\npoll = "100ms"\n[types.t]\ncommand = ["{handler}"]\n'
                   "max_attempts = 1\n")
    assert cli("--config", cfg, "enqueue", "t").exit_code == 0
    r = cli("--config", cfg, "work", "--stop-when-empty", binary=True)
    assert r.exit_code == 0, r.output
    assert r.stderr.isascii() and b"\x1b" not in r.stderr, r.stderr
    records = [json.loads(line) for line in r.stderr.splitlines()]
    assert any(rec.get("error") == "exit 3: bad \x1b[2J\u202e x" for rec in records), r.stderr


@pytest.mark.alone  # (a time bound: 4 s for what takes ~0.6 s, and 5 s or more without the wake)
def test_without_pidfds_a_handlers_exit_wakes_the_worker_by_sigchld(tmp_path):
    """Where the kernel gives no pidfds (before Linux 5.3) SIGCHLD wakes the loop when a handler
    exits, as pidfds do elsewhere: ten 50 ms jobs run one after another at once. Without any wake
    each would wait for the next deadline, a heartbeat 5 s away (a handler over within the loop's
    first 2 ms look needs no wake: these are not)."""
    from jobctl.config import Settings, TypeConfig
    from jobctl.queue import Queue
    from jobctl.worker import Log, Worker, WorkerOptions
    from jobctl.worker.supervisor import PosixLauncher

    class WithoutPidfds(PosixLauncher):
        def __init__(self):
            super().__init__()
            self.exit_fds = False

    settings = Settings(types={"t": TypeConfig("t", command=["sleep", "0.05"], timeout=60, max_attempts=1)})
    with Queue.open(tmp_path / "q.db", settings, create=True) as q:
        ids = [q.enqueue("t", {"i": i}).id for i in range(10)]
        launcher = WithoutPidfds()
        w = Worker(q, settings, WorkerOptions(worker_id="w", poll=5.0, stop_when_empty=True),
                   Log("w", "json", io.StringIO()), launcher=launcher)
        started = time.monotonic()
        assert w.run() == 0
        assert time.monotonic() - started < 4.0  # (without a wake the loop sleeps to a deadline 5 s away)
        assert [q.get(i).status for i in ids] == ["completed"] * 10
        assert signal.getsignal(signal.SIGCHLD) in (signal.SIG_DFL, None)  # (given back as it was)
