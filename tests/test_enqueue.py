"""SPEC §4 enqueue: idempotency keys (also under a race of processes), --unique, --after, --delay,
--at, priorities, and --batch (all or nothing, one transaction)."""

import json
import os
import subprocess
import threading
import time
from datetime import datetime, timezone

import pytest

from conftest import JOBCTL, count_rows, on_db, run_inproc
from jobctl.durations import parse_time
from jobctl.queue import Queue


def ok(r):
    assert r.exit_code == 0, r.output
    return r


def count(db, table="jobs"):
    return count_rows(db, table)


def one_error_line(r, code):
    assert r.exit_code == code, r.output
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("jobctl: error: "), r.stderr
    return lines[0]


def test_prints_the_id_alone(cli):
    assert ok(cli("enqueue", "t")).stdout == "1\n"
    assert ok(cli("enqueue", "t", '{"a": 1}')).stdout == "2\n"


def test_json_output_is_the_job_with_created(cli):
    job = json.loads(ok(cli("enqueue", "send", '{"b": 1, "a": [1, 2]}', "-q", "mail", "--json")).stdout)
    assert job["created"] is True and job["status"] == "pending" and job["queue"] == "mail"
    assert job["payload"] == {"b": 1, "a": [1, 2]} and job["attempts"] == 0 and job["max_attempts"] == 3
    assert job["timeout"] == 600 and job["priority"] == 10 and job["after"] == []


def test_payload_from_file_and_stdin(cli, tmp_path):
    f = tmp_path / "p.json"
    f.write_text('{"from": "file"}')
    a = int(ok(cli("enqueue", "t", "--payload-file", f)).stdout)
    b = int(ok(cli("enqueue", "t", "--payload-file", "-", input='{"from": "stdin"}')).stdout)
    assert json.loads(cli("show", a, "--json").stdout)["payload"] == {"from": "file"}
    assert json.loads(cli("show", b, "--json").stdout)["payload"] == {"from": "stdin"}
    one_error_line(cli("enqueue", "t", "{}", "--payload-file", f), 2)


# -- idempotency --------------------------------------------------------------------------------


def test_same_key_same_job(cli, db):
    first = json.loads(ok(cli("enqueue", "t", '{"a": 1, "b": 2}', "--key", "k1", "--json")).stdout)
    assert first["created"] is True and first["idempotency_key"] == "k1"
    # the same payload with its keys in another order and spacing is "the same"
    again = json.loads(ok(cli("enqueue", "t", '{"b":2,  "a":1}', "--key", "k1", "--json")).stdout)
    assert again["created"] is False and again["id"] == first["id"]
    assert ok(cli("enqueue", "t", '{"a": 1, "b": 2}', "--key", "k1")).stdout == f"{first['id']}\n"
    assert count(db) == 1 and count(db, "events") == 1


@pytest.mark.parametrize("other", [["t", '{"a": 2}'], ["u", '{"a": 1}']])
def test_same_key_other_payload_or_type_is_refused(cli, db, other):
    job_id = int(ok(cli("enqueue", "t", '{"a": 1}', "--key", "k1")).stdout)
    line = one_error_line(cli("enqueue", *other, "--key", "k1"), 4)
    assert f"job {job_id}" in line and "k1" in line
    assert count(db) == 1


def test_key_still_returns_the_job_after_it_finished(cli):
    job_id = int(ok(cli("enqueue", "t", "--key", "k")).stdout)
    token = json.loads(ok(cli("claim")).stdout)["token"]
    ok(cli("complete", job_id, "--token", token))
    again = json.loads(ok(cli("enqueue", "t", "--key", "k", "--json")).stdout)
    assert again["id"] == job_id and again["created"] is False and again["status"] == "completed"


@pytest.mark.slow
@pytest.mark.shared  # outcomes only: runs beside other tests
def test_eight_processes_racing_on_one_key_create_one_job(cli, db):
    ok(cli("init"))
    procs = [
        subprocess.Popen([*JOBCTL, "--db", str(db), "enqueue", "race", '{"n": 1}', "--key", "the-key"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(8)
    ]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, outs
    ids = {out.strip() for out, _ in outs}
    assert len(ids) == 1 and all(err == "" for _, err in outs)
    assert count(db) == 1 and count(db, "events") == 1


@pytest.mark.slow
@pytest.mark.shared  # outcomes only: runs beside other tests
def test_eight_processes_racing_to_create_the_file(tmp_path):
    """No process finds a half-created database: every one enqueues into the same file."""
    db = tmp_path / "new" / "jobs.db"
    procs = [subprocess.Popen([*JOBCTL, "--db", str(db), "enqueue", "race", "--key", "k"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(8)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, outs
    assert {out for out, _ in outs} == {"1\n"}
    assert count(db) == 1
    assert sorted(os.listdir(db.parent)) in (["jobs.db"], ["jobs.db", "jobs.db-shm", "jobs.db-wal"])


# -- --unique -----------------------------------------------------------------------------------


def test_unique_returns_the_live_twin(cli, db):
    a = json.loads(ok(cli("enqueue", "t", '{"x": 1}', "--unique", "--json")).stdout)
    b = json.loads(ok(cli("enqueue", "t", '{"x":1}', "--unique", "--json")).stdout)
    assert b["id"] == a["id"] and b["created"] is False
    # another payload, queue or type is another job; so is a job enqueued without --unique
    assert int(ok(cli("enqueue", "t", '{"x": 2}', "--unique")).stdout) != a["id"]
    assert int(ok(cli("enqueue", "t", '{"x": 1}', "--unique", "-q", "other")).stdout) != a["id"]
    assert int(ok(cli("enqueue", "u", '{"x": 1}', "--unique")).stdout) != a["id"]
    # still the twin while it runs
    job = json.loads(ok(cli("claim", "-q", "default", "-t", "t")).stdout)
    assert job["id"] == a["id"]
    assert int(ok(cli("enqueue", "t", '{"x": 1}', "--unique")).stdout) == a["id"]
    # once it finished, a new one may be created
    ok(cli("complete", a["id"], "--token", job["token"]))
    c = json.loads(ok(cli("enqueue", "t", '{"x": 1}', "--unique", "--json")).stdout)
    assert c["created"] is True and c["id"] != a["id"]


def test_unique_returns_a_live_job_enqueued_without_it(any_db):
    """Any pending or running job with the same queue, type and payload is the twin, however it
    was enqueued; without --unique a job is always created."""
    cli = on_db(run_inproc, any_db)
    plain = int(ok(cli("enqueue", "t", '{"a": 1}')).stdout)
    assert int(ok(cli("enqueue", "t", '{"a":1}')).stdout) == plain + 1  # (two plain ones may coexist)
    twin = json.loads(ok(cli("enqueue", "--unique", "t", '{"a": 1}', "--json")).stdout)
    assert (twin["id"], twin["created"]) == (plain, False)
    r = ok(cli("enqueue", "--batch", "-", input='{"type": "t", "payload": {"a": 1}, "unique": true}\n'))
    assert int(r.stdout) == plain
    for _ in range(2):  # both finish: the next --unique one is a new job
        job = json.loads(ok(cli("claim", "-t", "t")).stdout)
        ok(cli("complete", job["id"], "--token", job["token"]))
    fresh = json.loads(ok(cli("enqueue", "--unique", "t", '{"a": 1}', "--json")).stdout)
    assert fresh["created"] is True and fresh["id"] == plain + 2


def test_unique_returns_the_oldest_twin_whether_it_runs_waits_or_is_being_cancelled(any_db):
    """Pending twins are found by their key, running ones among the jobs being run: the oldest of
    either wins, and a job asked to cancel (it runs until it stops) is still a twin."""
    cli = on_db(run_inproc, any_db)
    first, second = (int(ok(cli("enqueue", "t", '{"a": 1}')).stdout) for _ in range(2))
    job = json.loads(ok(cli("claim", "-t", "t")).stdout)
    assert job["id"] == first
    assert int(ok(cli("enqueue", "--unique", "t", '{"a":1}')).stdout) == first  # running, older than the pending one
    ok(cli("cancel", first))  # asked to cancel: it still runs
    assert json.loads(ok(cli("show", first, "--json")).stdout)["status"] == "cancel_requested"
    assert int(ok(cli("enqueue", "--unique", "t", '{"a":1}')).stdout) == first
    ok(cli("complete", first, "--token", job["token"]))  # (it stops: cancelled)
    assert int(ok(cli("enqueue", "--unique", "t", '{"a":1}')).stdout) == second


# -- --after ------------------------------------------------------------------------------------


def test_after_a_missing_id_is_exit_3_and_inserts_nothing(cli, db):
    first = int(ok(cli("enqueue", "t")).stdout)
    line = one_error_line(cli("enqueue", "t", "--after", first, "--after", 999), 3)
    assert "999" in line
    assert count(db) == 1


def test_after_is_recorded(cli):
    a = int(ok(cli("enqueue", "t")).stdout)
    b = int(ok(cli("enqueue", "t")).stdout)
    c = json.loads(ok(cli("enqueue", "t", "--after", b, "--after", a, "--json")).stdout)
    assert c["after"] == [a, b]


# -- --delay, --at ------------------------------------------------------------------------------


def test_delay(cli):
    before = time.time()
    job = json.loads(ok(cli("enqueue", "t", "--delay", "1h30m", "--json")).stdout)
    after = time.time()
    run_at = parse_time(job["run_at"]) / 1000
    assert before + 5400 - 0.001 <= run_at <= after + 5400 + 0.001
    assert cli("claim").exit_code == 5


def test_at_with_offset_local_time_and_past(cli):
    at = datetime(2031, 5, 6, 7, 8, 9, 123000, tzinfo=timezone.utc)
    job = json.loads(ok(cli("enqueue", "t", "--at", "2031-05-06T09:08:09.123+02:00", "--json")).stdout)
    assert job["run_at"] == "2031-05-06T07:08:09.123Z"
    job = json.loads(ok(cli("enqueue", "t", "--at", "2031-05-06T07:08:09.123Z", "--json")).stdout)
    assert parse_time(job["run_at"]) == int(at.timestamp() * 1000)
    # without an offset: local time (TZ set explicitly for the child)
    job = json.loads(ok(cli("enqueue", "t", "--at", "2031-05-06 10:08:09", "--json", env={"TZ": "Etc/GMT-3"})).stdout)
    assert job["run_at"] == "2031-05-06T07:08:09.000Z"
    # a time in the past means now
    before = time.time()
    job = json.loads(ok(cli("enqueue", "t", "--at", "2001-01-01T00:00:00Z", "--json")).stdout)
    assert before - 0.001 <= parse_time(job["run_at"]) / 1000 <= time.time() + 0.001
    assert json.loads(ok(cli("claim")).stdout)["id"] == job["id"]


def test_delay_and_at_together_are_a_usage_error(cli, db):
    ok(cli("init"))
    one_error_line(cli("enqueue", "t", "--delay", "5m", "--at", "2031-01-01T00:00:00Z"), 2)
    one_error_line(cli("enqueue", "t", "--at", "next tuesday"), 2)
    assert count(db) == 0


# -- priorities ---------------------------------------------------------------------------------


@pytest.mark.parametrize("given,stored", [
    ("low", 0), ("normal", 10), ("medium", 10), ("high", 20), ("critical", 30), ("urgent", 30),
    ("HIGH", 20), ("-1000", -1000), ("1000", 1000), ("0", 0), ("7", 7),
])
def test_priority_labels_and_numbers(db, given, stored):
    with Queue.open(db, create=True) as q:
        assert q.get(q.enqueue("t", priority=given).id).priority == stored


def test_priority_through_the_cli(cli):
    assert json.loads(ok(cli("enqueue", "t", "-p", "urgent", "--json")).stdout)["priority"] == 30
    assert json.loads(ok(cli("enqueue", "t", "--priority", "-5", "--json")).stdout)["priority"] == -5
    assert json.loads(ok(cli("enqueue", "t", "--json")).stdout)["priority"] == 10


def test_type_defaults_from_the_config_and_flags_win(cli, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[types.inv]\nqueue = "billing"\nmax_attempts = 1\ntimeout = "2m"\npriority = "high"\n'
                   'backoff = "linear"\n')
    job = json.loads(ok(cli("--config", cfg, "enqueue", "inv", "--json")).stdout)
    assert (job["queue"], job["max_attempts"], job["timeout"], job["priority"], job["backoff"]) == \
        ("billing", 1, 120, 20, "linear")
    job = json.loads(ok(cli("--config", cfg, "enqueue", "inv", "-q", "x", "-p", "low", "--max-attempts", "4",
                            "--json")).stdout)
    assert (job["queue"], job["priority"], job["max_attempts"]) == ("x", 0, 4)


# -- --batch ------------------------------------------------------------------------------------


def test_batch_prints_one_id_per_line_in_order(cli, db):
    ok(cli("enqueue", "t"))
    lines = [
        {"type": "a", "payload": {"n": 1}},
        {"type": "b", "queue": "q2", "priority": "high", "delay": "5m", "max_attempts": 1, "backoff": [1, 2],
         "timeout": 30},
        {"type": "c", "key": "k", "after": [1]},
        {"type": "c", "key": "k"},  # the same key again in the same batch: the same job
        {"type": "d", "at": "2031-01-01T00:00:00Z", "unique": True},
    ]
    text = "\n".join(json.dumps(x) for x in lines) + "\n\n"
    r = ok(cli("enqueue", "--batch", "-", input=text))
    assert r.stdout == "2\n3\n4\n4\n5\n"
    with Queue.open(db) as q:
        b = q.get(3)
        assert (b.queue, b.priority, b.max_attempts, b.backoff, b.timeout_ms) == ("q2", 20, 1, "1,2", 30000)
        assert q.get(4).after == [1] and q.get(5).run_at == parse_time("2031-01-01T00:00:00Z")


def test_batch_from_a_file_with_json_output(cli, tmp_path):
    f = tmp_path / "jobs.ndjson"
    f.write_text('{"type": "a"}\n{"type": "b", "payload": [1]}\n')
    out = [json.loads(x) for x in ok(cli("enqueue", "--batch", f, "--json")).stdout.splitlines()]
    assert [(j["id"], j["type"], j["payload"]) for j in out] == [(1, "a", {}), (2, "b", [1])]


@pytest.mark.parametrize("bad,what", [
    ('{"type": "t", "payload": NaN}', "NaN"),
    ('{"type": "t", "payload": {"a": 1}', "not JSON"),
    ('{"payload": {}}', "type"),
    ('{"type": "bad name!"}', "name"),
    ('{"type": "t", "priority": 1001}', "priority"),
    ('{"type": "t", "delay": "soon"}', "delay"),
    ('{"type": "t", "colour": "red"}', "colour"),
    ('[1, 2]', "object"),
    ('{"type": "t", "after": 3}', "after"),
    ('{"type": "t", "max_attempts": 0}', "attempts"),
])
def test_a_bad_line_fails_the_whole_batch_naming_it(cli, db, bad, what):
    ok(cli("enqueue", "t"))
    good = '{"type": "t"}'
    text = "\n".join([good] * 6 + [bad] + [good] * 3) + "\n"
    line = one_error_line(cli("enqueue", "--batch", "-", input=text), 2)
    assert "line 7" in line and what.lower() in line.lower(), line
    assert count(db) == 1 and count(db, "events") == 1


def test_batch_with_a_missing_after_inserts_nothing(cli, db):
    text = '{"type": "t"}\n{"type": "t", "after": [99]}\n'
    one_error_line(cli("enqueue", "--batch", "-", input=text), 3)
    assert count(db) == 0


def test_batch_with_a_conflicting_key_inserts_nothing(cli, db):
    ok(cli("enqueue", "t", "--key", "k"))
    text = '{"type": "t"}\n{"type": "t", "key": "k", "payload": {"other": 1}}\n'
    line = one_error_line(cli("enqueue", "--batch", "-", input=text), 4)
    assert count(db) == 1
    # which line of a long input, and the job that holds the key (one that stays)
    assert "line 2: idempotency key 'k' already belongs to job 1" in line and "nothing was enqueued" in line, line


def test_batch_with_a_key_given_twice_differently_names_both_lines_not_a_job_that_was_not_kept(cli, db):
    ok(cli("enqueue", "t"))
    text = '{"type": "t"}\n{"type": "a", "key": "k"}\n\n{"type": "b", "key": "k"}\n'
    for flag in ("--batch", "--chain"):
        line = one_error_line(cli("enqueue", flag, "-", input=text), 4)
        assert count(db) == 1
        assert "line 4: idempotency key 'k' is also on line 2 with a different type or payload" in line, line
        assert "nothing was enqueued" in line and "job 3" not in line, line  # job 3 was never kept


def test_batch_and_a_type_together_are_a_usage_error(cli):
    one_error_line(cli("enqueue", "t", "--batch", "-", input='{"type": "t"}\n'), 2)


def test_batch_input_not_utf8(cli, db, tmp_path):
    f = tmp_path / "bad.ndjson"
    f.write_bytes(b'{"type": "t"}\n{"type": "\xff"}\n')
    one_error_line(cli("enqueue", "--batch", f), 2)


@pytest.mark.slow
@pytest.mark.shared  # outcomes only: runs beside other tests
def test_100k_lines_from_stdin_in_one_transaction(cli, db):
    ok(cli("init"))
    n = 100_000
    text = "".join(f'{{"type": "t", "payload": {{"i": {i}}}}}\n' for i in range(n))
    # A reader polling the file must never see part of the batch. Rows committed apart would stay
    # visible for the seconds the rest of the insert takes: polls every 10 ms see them hundreds of
    # times over (every 2 ms cost ~1 s of the enqueue's time in this process, for nothing more).
    seen, stop = set(), threading.Event()

    def watch():
        while not stop.is_set():
            seen.add(count(db))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        r = cli("enqueue", "--batch", "-", input=text, timeout=300)
    finally:
        time.sleep(0.05)
        stop.set()
        watcher.join()
    assert r.exit_code == 0, r.output[-2000:]
    ids = [int(x) for x in r.stdout.split()]
    assert ids == list(range(1, n + 1))
    assert seen <= {0, n} and n in seen
    assert count(db) == n and count(db, "events") == n
    with Queue.open(db) as q:
        assert q.engine.conn.execute("SELECT payload FROM jobs WHERE id = ?", (n,)).fetchone()[0] == \
            f'{{"i":{n - 1}}}'


@pytest.mark.slow
@pytest.mark.shared  # outcomes only: runs beside other tests
def test_100k_lines_with_a_bad_line_near_the_end_insert_nothing(cli, db):
    ok(cli("enqueue", "t"))
    lines = [f'{{"type": "t", "payload": {{"i": {i}}}}}' for i in range(100_000)]
    lines[99_990] = '{"type": "t", "payload": {"i": Infinity}}'
    line = one_error_line(cli("enqueue", "--batch", "-", input="\n".join(lines) + "\n", timeout=300), 2)
    assert "line 99991" in line
    assert count(db) == 1


def test_a_failed_enqueue_does_not_create_the_database(tmp_path):
    from conftest import run_cli

    db = tmp_path / "typo" / "jobs.db"
    r = run_cli("enqueue", "t", "{not json", db=db)
    assert r.exit_code == 2, r.output
    r = run_cli("enqueue", "--batch", "-", db=db, input='{"type": "t", "payload": NaN}\n')
    assert r.exit_code == 2, r.output
    assert not db.exists() and not db.parent.exists()


def test_batch_json_prints_each_job_with_created(cli):
    lines = '{"type": "a", "key": "k1"}\n{"type": "b"}\n{"type": "a", "key": "k1"}\n'
    r = cli("enqueue", "--batch", "-", "--json", input=lines)
    assert r.exit_code == 0, r.output
    jobs = [json.loads(x) for x in r.stdout.splitlines()]
    assert [(j["type"], j["created"]) for j in jobs] == [("a", True), ("b", True), ("a", False)]
    assert jobs[0]["id"] == jobs[2]["id"]


def test_batch_after_a_missing_job_names_the_line(cli):
    assert cli("enqueue", "first").exit_code == 0
    lines = '{"type": "a", "after": [1]}\n\n{"type": "b", "after": [99]}\n'
    r = cli("enqueue", "--batch", "-", input=lines)
    assert r.exit_code == 3, r.output
    assert "line 3" in r.stderr and "99" in r.stderr and len(r.stderr.splitlines()) == 1
    assert cli("list", "--json").stdout.count("\n") == 1  # nothing of the batch was inserted


def test_unique_lookup_reads_the_same_however_many_jobs_are_live(tmp_path):
    """One probe of the index of pending jobs' keys: the work of a --unique enqueue does not grow
    with the live jobs (it used to read each of them, through the index by status)."""
    with Queue.open(tmp_path / "q.db", create=True) as q:
        def steps() -> int:
            count = [0]

            def tick():
                count[0] += 1
                return 0
            q.engine.conn.set_progress_handler(tick, 100)
            try:
                assert q.enqueue("t", {"n": 1}, unique=True).created is False
            finally:
                q.engine.conn.set_progress_handler(None, 0)
            return count[0]

        q.enqueue("t", {"n": 1}, unique=True)
        few = steps()
        q.insert([q.prepare("t", {"n": i}) for i in range(2, 5_001)])
        many = steps()
        assert many <= few + 5, (few, many)
