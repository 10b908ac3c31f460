"""SPEC §7, human views: job data is untrusted text. Rich markup and terminal control characters
in payloads, errors and messages are shown escaped, never interpreted; secret-looking payload keys
are masked unless --reveal; --json carries everything exactly."""

import json

import pytest

from jobctl.queue import Queue

MARKUP = "[bold red]x[/bold red]"
ANSI = "\x1b[31mRED\x1b[0m"
OSC = "\x1b]0;pwned\x07"  # would retitle the terminal


@pytest.fixture
def job(db):
    payload = {"note": MARKUP, "ansi": ANSI, "api_token": "s3cr3t", "nested": {"password": "hunter2"}}
    with Queue.open(db, create=True) as q:
        job_id = q.enqueue("t", payload).id
        token = q.claim(worker=f"w{MARKUP}").token
        q.fail(job_id, token=token, error=f"boom {MARKUP} {ANSI} {OSC}", bury=True)
    return job_id, payload


def check_escaped(out):
    assert "\x1b" not in out and "\x07" not in out, repr(out)
    assert "\\x1b" in out  # shown, as an escape
    assert MARKUP in out  # markup shown literally, not interpreted (nor dropped)


def test_show_escapes_and_masks(cli, job):
    job_id, _ = job
    r = cli("show", job_id)
    assert r.exit_code == 0, r.output
    check_escaped(r.stdout)
    assert "s3cr3t" not in r.stdout and "hunter2" not in r.stdout and "***" in r.stdout
    assert f"w{MARKUP}" in r.stdout  # the worker id, as given


def test_show_reveal(cli, job):
    job_id, _ = job
    r = cli("show", job_id, "--reveal")
    assert r.exit_code == 0, r.output
    assert "s3cr3t" in r.stdout and "hunter2" in r.stdout
    check_escaped(r.stdout)


def test_list_escapes_and_masks(cli, db, job):
    with Queue.open(db) as q:
        q.enqueue("t", {"note": MARKUP, "ansi": ANSI, "api_token": "s3cr3t"})
    r = cli("list")
    assert r.exit_code == 0, r.output
    check_escaped(r.stdout)
    assert "s3cr3t" not in r.stdout and "***" in r.stdout
    r = cli("list", "--reveal")
    assert "s3cr3t" in r.stdout and "\x1b" not in r.stdout


def test_json_is_exact(cli, job):
    job_id, payload = job
    r = cli("show", job_id, "--json")
    shown = json.loads(r.stdout)
    assert shown["payload"] == payload
    assert shown["error"] == f"boom {MARKUP} {ANSI} {OSC}"
    r = cli("list", "--json")
    assert json.loads(r.stdout.splitlines()[0])["payload"]["api_token"] == "s3cr3t"


def test_error_lines_do_not_carry_control_characters(cli, db):
    with Queue.open(db, create=True) as q:
        q.enqueue("t")
    r = cli("enqueue", "t", "--key", f"k{ANSI}", "--json")
    assert r.exit_code == 0
    r = cli("enqueue", "t", '{"other": 1}', "--key", f"k{ANSI}")
    assert r.exit_code == 4 and len(r.stderr.splitlines()) == 1
    assert "\x1b" not in r.stderr, repr(r.stderr)
