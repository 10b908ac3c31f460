"""Hostile input that 0.1.0 let through or turned into exit 1: integers past Python's conversion
limit, durations that cannot work (lease, busy timeout, poll, grace), payload files and batch
lines read whole before their size was checked, terminal controls in error lines and JSON worker
logs, and a payload's depth counted with its batch line's wrapper."""

from __future__ import annotations

import io
import json
import os
import resource
import sqlite3

import pytest

from conftest import run_cli, snapshot
from jobctl.config import Settings, load_settings
from jobctl.errors import InvalidInput
from jobctl.queue import Queue

HUGE = "9" * 5000  # more digits than int() converts by default (4300)


def refused(r, *needles) -> str:
    assert r.exit_code == 2, r.output
    line = r.one_error_line()
    for n in needles:
        assert n in line, line
    return line


# -- 1. integers of more than 4300 digits are invalid input -------------------------------------

def test_enqueue_with_a_huge_integer_is_exit_2_and_creates_nothing(cli, db):
    refused(cli("enqueue", "t", '{"n": ' + HUGE + "}"), "invalid payload", "4300 digits")
    assert not db.exists()


def test_a_huge_integer_in_a_payload_file_and_a_batch_line_is_exit_2(cli, db, tmp_path):
    f = tmp_path / "p.json"
    f.write_text("[" + HUGE + "]")
    refused(cli("enqueue", "t", "--payload-file", f), "4300 digits")
    lines = '{"type": "t"}\n{"type": "t", "payload": ' + HUGE + "}\n"
    refused(cli("enqueue", "--batch", "-", input=lines), "line 2", "4300 digits", "nothing was enqueued")
    assert not db.exists()


def test_complete_with_a_huge_integer_result_is_exit_2_and_changes_nothing(cli, db):
    assert cli("enqueue", "t").exit_code == 0
    job = json.loads(cli("claim").stdout)
    before = snapshot(db)
    refused(cli("complete", str(job["id"]), "--result", HUGE), "invalid result", "4300 digits")
    assert snapshot(db) == before


def test_an_integer_just_under_the_limit_is_kept_exactly(cli, db):
    n = "7" * 4300
    r = cli("enqueue", "t", '{"n": ' + n + "}", "--json")
    assert r.exit_code == 0, r.output
    assert '"n":' + n in r.stdout


# -- 2. durations that cannot work ------------------------------------------------------------

@pytest.mark.parametrize("args, needles", [
    (["claim", "--lease", "10ms"], ["lease '10ms'", "from 1s to"]),
    (["claim", "--lease", "999ms"], ["lease '999ms'", "from 1s to"]),
    (["heartbeat", "1", "--extend", "500ms"], ["'500ms'", "from 1s to"]),
    (["--busy-timeout", "25d", "list"], ["--busy-timeout '25d'", "from 0s to 1d"]),
    (["--busy-timeout", "86401", "list"], ["'86401'", "from 0s to 1d"]),
    (["work", "--poll", "1ms"], ["--poll '1ms'", "from 10ms to 1h"]),
    (["work", "--poll", "2h"], ["--poll '2h'", "from 10ms to 1h"]),
    (["work", "--grace", "2d"], ["--grace '2d'", "from 0s to 1d"]),
])
def test_a_duration_out_of_its_range_on_the_command_line_is_exit_2(cli, db, args, needles):
    assert cli("enqueue", "t").exit_code == 0
    if args[0] == "heartbeat":
        assert cli("claim").exit_code == 0
    before = snapshot(db)
    refused(cli(*args), *needles)
    assert snapshot(db) == before


def test_jobctl_busy_timeout_out_of_range_is_exit_2(cli, db):
    assert cli("enqueue", "t").exit_code == 0
    refused(cli("list", env={"JOBCTL_BUSY_TIMEOUT": "25d"}), "JOBCTL_BUSY_TIMEOUT '25d'", "from 0s to 1d")


@pytest.mark.parametrize("toml, needles", [
    ('[worker]\nlease = "10ms"\n', ["worker.lease", "'10ms'", "from 1s to"]),
    ('[worker]\npoll = "1ms"\n', ["worker.poll", "from 10ms to 1h"]),
    ('[worker]\ngrace = "30d"\n', ["worker.grace", "from 0s to 1d"]),
    ('busy_timeout = "25d"\n', ["busy_timeout", "'25d'", "from 0s to 1d"]),
])
def test_a_duration_out_of_its_range_in_the_config_is_exit_2(cli, db, tmp_path, toml, needles):
    cfg = tmp_path / "c.toml"
    cfg.write_text(toml)
    refused(cli("--config", cfg, "list"), "config file", *needles)
    with pytest.raises(InvalidInput):
        load_settings(str(cfg), env={})


def test_durations_at_the_ends_of_their_ranges_are_accepted(cli, db, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('busy_timeout = "1d"\n[worker]\nlease = "1s"\npoll = "10ms"\ngrace = "0s"\n')
    s = load_settings(str(cfg), env={})
    assert (s.busy_timeout, s.worker.lease, s.worker.poll, s.worker.grace) == (86400, 1, 0.01, 0)
    assert cli("enqueue", "t").exit_code == 0
    r = cli("--busy-timeout", "0", "claim", "--lease", "1s")
    assert r.exit_code == 0, r.output
    job = json.loads(r.stdout)
    assert cli("heartbeat", str(job["id"]), "--extend", "1s").exit_code == 0


def test_the_queue_api_refuses_a_lease_below_one_second(db):
    with Queue.open(db, create=True) as q:
        q.enqueue("t", {})
        with pytest.raises(InvalidInput, match="from 1s"):
            q.claim(lease=0.5)
        job = q.claim(lease=1)
        with pytest.raises(InvalidInput, match="from 1s"):
            q.heartbeat(job.id, token=job.token, extend="0.2s")


# -- 4. payload files and batch lines are read only up to their limit ---------------------------

def _limited_memory():
    """In the child: an address-space cap far below what reading /dev/zero whole would need."""
    cap = 400 * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def test_payload_file_dev_zero_is_refused_without_reading_it_all(cli, db):
    r = cli("enqueue", "t", "--payload-file", "/dev/zero", preexec_fn=_limited_memory, timeout=30)
    refused(r, "too large: /dev/zero", "more than 1048576 bytes", "max_payload_bytes")
    assert not db.exists()


def test_batch_of_dev_zero_is_refused_at_its_first_line(cli, db):
    r = cli("enqueue", "--batch", "/dev/zero", preexec_fn=_limited_memory, timeout=30)
    refused(r, "line 1", "longer than", "nothing was enqueued")
    assert not db.exists()


def test_payload_on_stdin_is_read_only_up_to_the_limit(cli, db, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("max_payload_bytes = 100\n")
    refused(cli("--config", cfg, "enqueue", "t", "--payload-file", "-", input='"' + "x" * 200 + '"'),
            "too large: stdin", "more than 100 bytes")
    r = cli("--config", cfg, "enqueue", "t", "--payload-file", "-", input='"' + "x" * 98 + '"')
    assert r.exit_code == 0, r.output


def test_a_batch_line_past_the_limit_and_the_keys_room_is_refused_by_number(cli, db, tmp_path):
    from jobctl.cli.jobs import BATCH_LINE_ROOM

    cfg = tmp_path / "c.toml"
    cfg.write_text("max_payload_bytes = 100\n")
    fits = json.dumps({"type": "t", "payload": "x" * 90, "key": "k" * 200})  # longer than 100 bytes: fine
    too_long = json.dumps({"type": "t", "payload": "y" * (100 + BATCH_LINE_ROOM)})
    r = cli("--config", cfg, "enqueue", "--batch", "-", input=f"{fits}\n\n{too_long}\n{fits}\n")
    refused(r, "line 3", f"longer than {100 + BATCH_LINE_ROOM} bytes", "nothing was enqueued")
    assert not db.exists()


def test_batch_lines_keep_their_numbers_and_split_only_at_newlines(cli, db):
    lines = ('{"type": "a"}\r\n\n{"type": "b", "payload": "x\u2028y\u0085z"}\n{"type": "c"}').encode()
    r = cli("enqueue", "--batch", "-", "--json", input=lines, binary=True)
    assert r.exit_code == 0, r.output
    got = [json.loads(x) for x in r.stdout.splitlines()]
    assert [j["type"] for j in got] == ["a", "b", "c"]
    assert got[1]["payload"] == "x\u2028y\u0085z"
    r = cli("enqueue", "--batch", "-", input=b'{"type": "a"}\n\xff\n', binary=True)
    assert r.exit_code == 2 and b"line 2: not UTF-8" in r.stderr, r.output


# -- 5. terminal controls never reach the terminal raw ---------------------------------------------

RAW = ["\x1b", "\x07", "\x9b", "\x85", "\u202e", "\u2066", "\u2028"]


def assert_inert(text: str) -> None:
    for ch in RAW:
        assert ch not in text, (ch, text)


def test_an_unknown_batch_key_is_escaped_and_cut_in_the_error(cli, db):
    key = "\x1b[31mred\x9b\u202e" + "k" * 500
    r = cli("enqueue", "--batch", "-", input=json.dumps({"type": "t", key: 1}) + "\n")
    line = refused(r, "line 1", "unknown key", "\\x1b[31mred")
    assert_inert(line)
    assert len(line) < 400, line


def test_a_path_with_controls_is_escaped_in_the_error_line(cli, tmp_path):
    bad = tmp_path / "x\x1b]0;owned\x07\u202e\x9by" / "jobs.db"
    r = run_cli("--db", bad, "list")
    assert r.exit_code == 8, r.output
    line = r.one_error_line()
    assert_inert(line)
    assert "\\x1b]0;owned\\x07" in line and "\\u202e" in line and "\\x9b" in line


def test_each_error_of_a_many_id_command_is_escaped_too(cli, db, tmp_path):
    # cancel of several ids prints one error line per refused id (the second id does not exist)
    assert cli("enqueue", "t").exit_code == 0
    bad = tmp_path / "p\x1b[2J\u202e.json"
    r = cli("enqueue", "t", "--payload-file", bad)
    assert_inert(refused(r, "cannot read"))
    r = cli("cancel", "1", "99")
    assert r.exit_code == 3, r.output
    assert all(line.startswith("jobctl: error: ") for line in r.stderr.splitlines())


def test_a_path_with_a_lone_surrogate_is_printed_escaped_not_a_crash(tmp_path):
    bad = os.fsencode(tmp_path) + b"/\xff\x1b/jobs.db"
    r = run_cli("--db", os.fsdecode(bad), "list", binary=True)
    assert r.exit_code == 8, r.output
    line = r.one_error_line()
    assert b"\x1b" not in r.stderr and "\\udcff\\x1b" in line


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


# -- 6. a payload's depth is its own, alone or on a batch line -------------------------------------

def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def test_a_payload_256_deep_is_accepted_alone_and_in_a_batch(cli, db):
    assert cli("enqueue", "t", nested(256)).exit_code == 0
    r = cli("enqueue", "--batch", "-", input='{"type": "t", "payload": ' + nested(256) + "}\n")
    assert r.exit_code == 0, r.output
    conn = sqlite3.connect(db)
    assert [r[0] for r in conn.execute("SELECT payload FROM jobs ORDER BY id")] == [nested(256)] * 2
    conn.close()


def test_a_payload_257_deep_is_refused_alone_and_in_a_batch(cli, db):
    refused(cli("enqueue", "t", nested(257)), "nested deeper than 256 levels")
    refused(cli("enqueue", "--batch", "-", input='{"type": "t", "payload": ' + nested(257) + "}\n"),
            "line 1", "nested deeper than 256 levels")
    assert not db.exists()


def test_prepare_batch_line_counts_the_payload_depth_only():
    q = Queue(None, Settings())
    assert q.prepare_batch_line('{"type": "t", "payload": ' + nested(256) + "}", 1).payload == nested(256)
    with pytest.raises(InvalidInput, match="line 1: .*256 levels"):
        q.prepare_batch_line('{"type": "t", "payload": ' + nested(257) + "}", 1)
    with pytest.raises(InvalidInput, match="line 1"):  # the other keys may not be deep either
        q.prepare_batch_line('{"type": "t", "after": ' + nested(200) + "}", 1)
