"""Every error is one line on stderr, whatever the user typed, and its terminal controls are shown escaped."""

import json
import os

from conftest import refused_line, run_cli


def test_an_error_naming_a_path_with_a_newline_stays_one_line(tmp_path):
    weird = tmp_path / "no\nsuch"
    r = run_cli("enqueue", "t", "--payload-file", str(weird), db=tmp_path / "q.db")
    assert r.exit_code == 2, r.output
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("jobctl: error: "), r.output
    assert "no\\nsuch" in r.stderr


# -- terminal controls in error lines are shown escaped, never raw ---------------------------------

RAW = ["\x1b", "\x07", "\x9b", "\x85", "\u202e", "\u2066", "\u2028"]


def assert_inert(text: str) -> None:
    for ch in RAW:
        assert ch not in text, (ch, text)


def test_an_unknown_batch_key_is_escaped_and_cut_in_the_error(cli, db):
    key = "\x1b[31mred\x9b\u202e" + "k" * 500
    r = cli("enqueue", "--batch", "-", input=json.dumps({"type": "t", key: 1}) + "\n")
    line = refused_line(r, "line 1", "unknown key", "\\x1b[31mred")
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
    assert_inert(refused_line(r, "cannot read"))
    r = cli("cancel", "1", "99", "98")
    assert r.exit_code == 3, r.output
    assert r.stdout == "1 cancelled\n", r.output
    lines = r.stderr.splitlines()
    assert [line.split(";")[0] for line in lines] == ["jobctl: error: no job with id 99",
                                                      "jobctl: error: no job with id 98"], r.output


def test_a_path_with_a_lone_surrogate_is_printed_escaped_not_a_crash(tmp_path):
    bad = os.fsencode(tmp_path) + b"/\xff\x1b/jobs.db"
    r = run_cli("--db", os.fsdecode(bad), "list", binary=True)
    assert r.exit_code == 8, r.output
    line = r.one_error_line()
    assert b"\x1b" not in r.stderr and "\\udcff\\x1b" in line


def test_a_value_that_is_not_utf8_is_a_usage_error_and_changes_nothing(any_db):
    """Bytes that are not UTF-8 in an argument (a filter, a reason, a worker id) reach the database
    as text it cannot take: exit 2 in one line, not an internal error, and nothing changed."""
    from jobctl.queue import Queue

    with Queue.open(any_db, create=True) as q:
        job_id = q.enqueue("t", {}).id
    bad = os.fsdecode(b"x\xff")
    for args in (["list", "--key", bad], ["list", "--worker", bad], ["list", "--error", bad],
                 ["bury", "--type", "t", "--reason", bad], ["cancel", str(job_id), "--reason", bad],
                 ["workers", "drain", bad]):
        line = refused_line(run_cli("--db", any_db, *args, binary=True), "not UTF-8")
        assert "\\udcff" in line or "x" in line, line
    with Queue.open(any_db) as q:
        assert q.get(job_id).status == "pending"
