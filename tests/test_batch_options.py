"""`enqueue --batch`/`--chain` with the options of a single enqueue: each is the default of the lines
that do not give its key; the options that name one job (--key, a payload) are refused. Also: the
batch keys in `enqueue --help`, and an `enqueue --wait` interrupted with Ctrl-C names the job it
leaves queued. On SQLite and PostgreSQL (any_db)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import JOBCTL, run_inproc, wait_for


def cli_on(db):
    def run(*args, **kw):
        return run_inproc(*args, db=db, **kw)
    return run


def ndjson(*lines: dict) -> str:
    return "".join(json.dumps(line) + "\n" for line in lines)


def show(cli, job_id: int) -> dict:
    r = cli("show", job_id, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def enqueue_many(cli, flag: str, lines: str, *options) -> list[int]:
    r = cli("enqueue", flag, "-", *options, input=lines)
    assert r.exit_code == 0, r.output
    return [int(x) for x in r.stdout.split()]


# (option, its value, the batch key, a line's own value, the job field, expected from the option, from the line)
OPTIONS = [
    (["-q", "bulk"], "queue", "own", "queue", "bulk", "own"),
    (["-p", "high"], "priority", "low", "priority", 20, 0),
    (["--max-attempts", "7"], "max_attempts", 2, "max_attempts", 7, 2),
    (["--backoff", "10,30"], "backoff", "fixed", "backoff", [10, 30], "fixed"),
    (["--timeout", "5m"], "timeout", 60, "timeout", 300, 60),
    (["--cost", "3"], "cost", 2, "cost_units", 3, 2),
    (["--group", "g1"], "group", "g2", "concurrency_group", "g1", "g2"),
]


@pytest.mark.parametrize("flag", ["--batch", "--chain"])
@pytest.mark.parametrize("option,key,own,field,from_option,from_line", OPTIONS, ids=[o[1] for o in OPTIONS])
def test_an_option_is_the_default_of_lines_without_its_key(any_db, flag, option, key, own, field, from_option,
                                                          from_line):
    cli = cli_on(any_db)
    ids = enqueue_many(cli, flag, ndjson({"type": "t"}, {"type": "t", key: own}, {"type": "t", key: None}), *option)
    got = [show(cli, i)[field] for i in ids]
    assert got == [from_option, from_line, from_option]  # null is "not given", as for a missing key
    if flag == "--chain":
        assert [show(cli, i)["after"] for i in ids] == [[], [ids[0]], [ids[1]]]


@pytest.mark.parametrize("flag", ["--batch", "--chain"])
def test_delay_and_at_are_defaults_and_a_lines_own_start_wins(any_db, flag):
    cli = cli_on(any_db)
    ids = enqueue_many(cli, flag, ndjson({"type": "t"}, {"type": "t", "at": "2031-01-01T00:00:00Z"},
                                         {"type": "t", "delay": 0}), "--delay", "1h")
    jobs = [show(cli, i) for i in ids]
    from jobctl.durations import parse_time

    def ahead(j):
        return (parse_time(j["run_at"]) - parse_time(j["created_at"])) / 1000

    assert ahead(jobs[0]) == pytest.approx(3600, abs=1)
    assert jobs[1]["run_at"] == "2031-01-01T00:00:00.000Z"  # the line's "at", not --delay on top of it
    assert ahead(jobs[2]) == pytest.approx(0, abs=1)

    ids = enqueue_many(cli, flag, ndjson({"type": "t"}, {"type": "t", "delay": "1m"}), "--at", "2032-02-02T00:00:00Z")
    jobs = [show(cli, i) for i in ids]
    assert jobs[0]["run_at"] == "2032-02-02T00:00:00.000Z"
    assert ahead(jobs[1]) == pytest.approx(60, abs=1)


@pytest.mark.parametrize("flag", ["--batch", "--chain"])
def test_unique_is_a_default_and_a_line_may_say_false(any_db, flag):
    cli = cli_on(any_db)
    first = enqueue_many(cli, "--batch", ndjson({"type": "t", "payload": {"a": 1}, "unique": True}))[0]
    ids = enqueue_many(cli, flag, ndjson({"type": "t", "payload": {"a": 1}}, {"type": "u"},
                                         {"type": "t", "payload": {"a": 1}, "unique": False}), "--unique")
    assert ids[0] == first  # the pending twin, returned instead of a new job
    assert len(set(ids)) == 3 and first not in ids[1:]
    r = cli("enqueue", flag, "-", "--unique", "--json", input=ndjson({"type": "t", "payload": {"a": 1}}))
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["id"] == first and json.loads(r.stdout)["created"] is False
    if flag == "--chain":
        assert show(cli, ids[1])["after"] == [first]  # the next link waits on the twin it returned


def test_after_with_batch_is_every_lines_default(any_db):
    cli = cli_on(any_db)
    a, b = enqueue_many(cli, "--batch", ndjson({"type": "p"}, {"type": "p"}))
    ids = enqueue_many(cli, "--batch", ndjson({"type": "t"}, {"type": "t", "after": []}, {"type": "t", "after": [a]}),
                       "--after", str(a), "--after", str(b))
    assert [show(cli, i)["after"] for i in ids] == [[a, b], [], [a]]


def test_after_with_chain_holds_the_first_link_and_each_later_link_waits_on_its_predecessor(any_db):
    cli = cli_on(any_db)
    (parent,) = enqueue_many(cli, "--batch", ndjson({"type": "p"}))
    ids = enqueue_many(cli, "--chain", ndjson({"type": "a"}, {"type": "b"}, {"type": "c"}), "--after", str(parent))
    assert [show(cli, i)["after"] for i in ids] == [[parent], [ids[0]], [ids[1]]]
    # Only the chain's head waits on --after: claim order follows the chain once the parent completed.
    assert cli("claim", "--type", "a").exit_code == 5
    job = json.loads(cli("claim", "--type", "p").stdout)
    assert cli("complete", job["id"], "--token", job["token"]).exit_code == 0
    assert json.loads(cli("claim").stdout)["id"] == ids[0]


@pytest.mark.parametrize("flag", ["--batch", "--chain"])
def test_after_a_missing_job_names_the_option(any_db, flag):
    cli = cli_on(any_db)
    enqueue_many(cli, "--batch", ndjson({"type": "p"}))
    r = cli("enqueue", flag, "-", "--after", "999", input=ndjson({"type": "t"}, {"type": "t"}))
    assert r.exit_code == 3, r.output
    assert "--after: no job with id 999" in r.one_error_line()
    assert len(cli("list", "--json").stdout.splitlines()) == 1  # nothing of the batch was kept


@pytest.mark.parametrize("flag", ["--batch", "--chain"])
@pytest.mark.parametrize("extra,said", [
    (["--key", "k1"], "--key names one job"),
    (["t", "{}"], "give no TYPE, PAYLOAD or --payload-file"),
    (["--payload-file", "-"], "give no TYPE, PAYLOAD or --payload-file"),
])
def test_options_that_name_one_job_are_refused(db, tmp_path, flag, extra, said):
    source = tmp_path / "jobs.ndjson"
    source.write_text(ndjson({"type": "t"}))
    r = run_inproc("enqueue", flag, source, *extra, db=db)
    assert r.exit_code == 2, r.output
    assert said in r.one_error_line()
    if isinstance(db, Path):
        assert not db.exists()  # refused before the file is created


@pytest.mark.parametrize("flag", ["--batch", "--chain"])
def test_a_bad_option_is_named_once_before_anything_is_created(db, flag):
    r = run_inproc("enqueue", flag, "-", "-p", "sometimes", input=ndjson({"type": "t"}), db=db)
    assert r.exit_code == 2, r.output
    line = r.one_error_line()
    assert "sometimes" in line and "line 1" not in line
    r = run_inproc("enqueue", flag, "-", "--delay", "1m", "--at", "2031-01-01T00:00:00Z", input=ndjson({"type": "t"}),
                   db=db)
    assert r.exit_code == 2 and "cannot be used together" in r.one_error_line()
    if isinstance(db, Path):
        assert not db.exists()


def test_batch_options_and_reactions_together(any_db):
    cli = cli_on(any_db)
    ids = enqueue_many(cli, "--batch", ndjson({"type": "t"}, {"type": "t", "queue": "q2", "on_buried": "other"}),
                       "-q", "q1", "-p", "critical", "--on-buried", "alert")
    jobs = [show(cli, i) for i in ids]
    assert [(j["queue"], j["priority"], j["on_buried"]) for j in jobs] == [("q1", 30, "alert"), ("q2", 30, "other")]


# -- enqueue --help lists the batch keys, readable at 80 columns -------------------------------------

def test_enqueue_help_lists_every_batch_key_within_80_columns():
    from jobctl.jobspec import BATCH_KEYS

    r = subprocess.run([*JOBCTL, "enqueue", "--help"], capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "80"}, timeout=60)
    assert r.returncode == 0, r.stderr
    keys_part = r.stdout[r.stdout.index("NDJSON"):r.stdout.index("Arguments:")]
    for key in BATCH_KEYS:
        assert f"{key}" in keys_part.replace(",", " ").split(), (key, keys_part)
    assert max(len(line) for line in r.stdout.splitlines()) <= 80, r.stdout
    assert "first job waits on --after" in " ".join(r.stdout.split())


# -- enqueue --wait interrupted: the job keeps its place, and the message says so -------------------

def _interrupt_wait(db, args, stdin=None):
    proc = subprocess.Popen([*JOBCTL, "--db", str(db), "enqueue", *args, "--wait", "--quiet"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if stdin is not None:
        proc.stdin.write(stdin)
    proc.stdin.close()
    proc.stdin = None  # (closed: communicate() must not flush it)
    wait_for(lambda: run_inproc("list", "--json", db=db).stdout.strip() != "", what="the job enqueued")
    time.sleep(0.3)  # into the wait
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    return proc.returncode, out, err


def test_enqueue_wait_interrupted_names_the_job_that_stays_queued(any_db):
    code, out, err = _interrupt_wait(any_db, ["t", '{"a": 1}'])
    assert code == 130, err
    assert "Traceback" not in err and out == ""
    assert err == "jobctl: error: interrupted; job 1 was enqueued and keeps its place: `jobctl wait 1`\n"
    assert show(cli_on(any_db), 1)["status"] == "pending"


def test_enqueue_batch_wait_interrupted_names_the_jobs(any_db):
    code, out, err = _interrupt_wait(any_db, ["--batch", "-"], stdin=ndjson({"type": "t"}, {"type": "t"}, {"type": "u"}))
    assert code == 130, err
    assert err == ("jobctl: error: interrupted; jobs 1 to 3 were enqueued and keep their places: "
                   "`jobctl wait $(seq 1 3)`\n")
    assert [show(cli_on(any_db), i)["status"] for i in (1, 2, 3)] == ["pending"] * 3


def test_still_queued_names_scattered_and_many_ids():
    from jobctl.cli.jobs import _still_queued

    assert _still_queued([4, 9, 4]) == "jobs 4 9 were enqueued and keep their places: `jobctl wait 4 9`"
    many = _still_queued(list(range(2, 200, 2)))
    assert many.startswith("99 jobs were enqueued (2, 4, … 198)") and "jobctl list" in many


def test_a_bulk_insert_starts_each_job_at_its_delay_or_its_time_whichever_is_later(any_db):
    """The bulk insert computes run_at in its statement: now + delay, or the time given if later
    (a time in the past is now), to the millisecond."""
    cli = cli_on(any_db)
    ids = enqueue_many(cli, "--batch", ndjson({"type": "t"}, {"type": "t", "delay": "90s"},
                                              {"type": "t", "at": "2001-01-01T00:00:00Z"},
                                              {"type": "t", "at": "2031-01-01T00:00:00.5Z"}, {"type": "t", "delay": 0}))
    from jobctl.durations import parse_time

    jobs = [show(cli, i) for i in ids]
    assert [parse_time(j["run_at"]) - parse_time(j["created_at"]) for j in jobs[:3] + jobs[4:]] == [0, 90_000, 0, 0]
    assert jobs[3]["run_at"] == "2031-01-01T00:00:00.500Z"


def test_a_chunk_of_jobs_without_options_is_stored_as_one_with_them(any_db):
    """A chunk whose jobs set no start time, group or reaction writes those as NULLs in its statement
    (not as bound parameters); every other column is as the general statement writes it."""
    from jobctl.durations import parse_time

    cli = cli_on(any_db)
    lines = [{"type": "t", "payload": {"i": 1}, "delay": "90s", "priority": "high"}, {"type": "u", "queue": "q2"}]
    plain = enqueue_many(cli, "--batch", ndjson(*lines))
    general = enqueue_many(cli, "--batch", ndjson(*lines, {"type": "t", "group": "g", "on_buried": "r"}))
    fields = ("queue", "type", "payload", "priority", "max_attempts", "backoff", "timeout", "status", "cost_units",
              "concurrency_group", "on_buried", "on_completed", "on_cancelled", "after", "attempts")

    def stored(job_id):
        job = show(cli, job_id)
        return ({k: job.get(k) for k in fields},
                parse_time(job["run_at"]) - parse_time(job["created_at"]))

    assert [stored(i) for i in plain] == [stored(i) for i in general[:2]]
    assert stored(plain[0])[1] == 90_000 and stored(general[2])[0]["concurrency_group"] == "g"
