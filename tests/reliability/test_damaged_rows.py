"""Damaged rows: bytes of a real database file changed behind jobctl's back (through sqlite3, as a
bad disk, a bad restore or a hand edit would). A claim never hands out a payload that no longer
matches its hash; it buries that job in the same transaction and takes the next. A row that cannot
be decoded is exit 8 naming the job, never an internal error; doctor names every damaged job.

The commands under test run as real processes where a test is the one that shows a path (a claim
that buries, exit 8 from show and list, doctor); setting up, and the same exit 8 again for each
kind of bad column, run in this process (run_inproc: the same code, exit code and error line,
without ~0.2 s of start-up per call)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from conftest import file_history
from jobctl.queue import Queue

from .util import jobctl, jobs, rows, run_inproc

# Outcomes only, with no time bound: these run beside the other tests (see tests/conftest.py).
pytestmark = pytest.mark.shared


def raw(db, sql: str, params=()) -> None:
    """Write to the file as another program would: no jobctl, no triggers of ours in the way."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute(sql, params)
    finally:
        conn.close()


def stored_bytes(db, job_id: int, column: str) -> bytes:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(f"SELECT CAST({column} AS BLOB) FROM jobs WHERE id = ?", (job_id,)).fetchone()[0]
    finally:
        conn.close()


def put_bytes(db, job_id: int, column: str, data: bytes) -> None:
    raw(db, f"UPDATE jobs SET {column} = CAST(? AS TEXT) WHERE id = ?", (data, job_id))


def flip_bit(db, job_id: int, column: str, index: int, bit: int) -> bytes:
    data = bytearray(stored_bytes(db, job_id, column))
    data[index] ^= 1 << bit
    put_bytes(db, job_id, column, bytes(data))
    return bytes(data)


def enqueue(db, *payloads) -> list[int]:
    r = run_inproc("enqueue", "--batch", "-", db=db,
               input="".join(json.dumps({"type": "t", "payload": p}) + "\n" for p in payloads))
    assert r.exit_code == 0, r.output
    return [int(x) for x in r.stdout.split()]


def listed_without(r, job_id: int) -> str:
    """A view of many jobs goes on past a damaged one: exit 0, the others shown, a warning on stderr
    naming the damaged job and doctor."""
    assert r.exit_code == 0, r.output
    assert f"jobctl: warning: job {job_id} is damaged and left out: " in r.stderr, r.stderr
    assert "`jobctl doctor` says more" in r.stderr and "Traceback" not in r.stderr
    return r.stderr


def exit_8_naming(r, job_id: int) -> str:
    assert r.exit_code == 8, r.output
    line = r.one_error_line()
    assert f"damaged job {job_id}:" in line and "`jobctl doctor` says more" in line, line
    return line


def doctor(db) -> dict:
    r = run_inproc("doctor", "--json", db=db)
    assert r.exit_code in (0, 9), r.output
    return json.loads(r.stdout)


def damaged_ids(db) -> list[int]:
    return [d["id"] for d in doctor(db)["damaged_jobs"]]


# -- a payload that still parses but is not what was enqueued ----------------------------------------

def test_a_flipped_digit_is_buried_at_claim_and_the_next_job_is_handed_out(db):
    first, second = enqueue(db, {"order": 17}, {"order": 18})
    data = stored_bytes(db, first, "payload")
    # "1" is 0x31 and "5" is 0x35: one bit apart. Order 17 silently became order 57.
    flipped = flip_bit(db, first, "payload", data.index(b"17"), 2)
    assert flipped == b'{"order":57}'
    r = jobctl("claim", db=db)
    assert r.exit_code == 0, r.output
    claimed = json.loads(r.stdout)
    assert claimed["id"] == second and claimed["payload"] == {"order": 18}
    damaged = jobs(db)[first]
    assert damaged["status"] == "buried" and damaged["attempts"] == 0 and damaged["token"] is None
    assert damaged["error"].startswith("payload damaged: ") and damaged["finished_at"] is not None
    file_history(db)
    history = rows(db, "SELECT from_status, to_status, message FROM events WHERE job_id = ? ORDER BY id", (first,))
    assert [(h["from_status"], h["to_status"]) for h in history] == [(None, "pending"), ("pending", "buried")]
    assert "buried instead of handed out" in history[-1]["message"]
    assert rows(db, "SELECT count(*) AS n FROM runs WHERE job_id = ?", (first,))[0]["n"] == 0
    counts = {r["state"]: r["n"] for r in rows(db, "SELECT state, n FROM job_counts")}
    assert counts.get("buried") == 1 and counts.get("running") == 1 and counts.get("pending", 0) == 0
    # it parses, so the views still show it (buried, with the reason), and doctor names it
    r = jobctl("show", first, "--json", db=db)
    assert r.exit_code == 0 and json.loads(r.stdout)["payload"] == {"order": 57}, r.output
    assert damaged_ids(db) == [first]


def test_a_claim_with_only_damaged_jobs_buries_them_all_and_finds_nothing(db):
    ids = enqueue(db, {"a": 1}, {"a": 2}, {"a": 3})
    for i in ids:
        put_bytes(db, i, "payload", b'{"a":9}')
    r = jobctl("claim", db=db)
    assert r.exit_code == 5 and r.stdout == "", r.output
    assert {j["status"] for j in jobs(db).values()} == {"buried"}


def test_a_damaged_payload_hash_is_damage_too(db):
    (job_id,) = enqueue(db, {"x": 1})
    raw(db, "UPDATE jobs SET payload_hash = ? WHERE id = ?", ("0" * 64, job_id))
    assert jobctl("claim", db=db).exit_code == 5
    assert rows(db, "SELECT status FROM jobs WHERE id = ?", (job_id,)) == [{"status": "buried"}]


def test_the_worker_never_runs_a_damaged_payload(db, tmp_path):
    log = tmp_path / "ran.log"
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[worker]\npoll = "100ms"\n[types.t]\ncommand = ["/bin/sh", "-c", "cat >> {log}; echo >> {log}"]\n')
    good, bad, good2 = enqueue(db, {"n": 1}, {"n": 2}, {"n": 3})
    put_bytes(db, bad, "payload", b'{"n":6}')
    r = jobctl("--config", cfg, "work", "--stop-when-empty", db=db)
    assert r.exit_code == 0, r.output
    assert sorted(log.read_text().split()) == ['{"n":1}', '{"n":3}']
    states = {i: j["status"] for i, j in jobs(db).items()}
    assert states == {good: "completed", bad: "buried", good2: "completed"}


def test_the_claim_order_and_queues_hold_around_a_damaged_job(db):
    with Queue.open(db, create=True) as q:
        a = q.enqueue("t", {"n": 1}, queue="first", priority="high").id
        b = q.enqueue("t", {"n": 2}, queue="first").id
        c = q.enqueue("t", {"n": 3}, queue="second", priority="critical").id
    put_bytes(db, a, "payload", b'{"n":5}')
    put_bytes(db, b, "payload", b'{"n":6}')
    with Queue.open(db) as q:
        job = q.claim(queues=["first", "second"])  # both of "first" are damaged: "second" is next
        assert job.id == c
    assert {i: j["status"] for i, j in jobs(db).items()} == {a: "buried", b: "buried", c: "running"}


# -- rows that cannot be decoded -----------------------------------------------------------------

def test_a_flipped_bit_that_breaks_the_json_is_exit_8_naming_the_job(db):
    bad, good = enqueue(db, {"order": 17}, {"order": 1})
    data = stored_bytes(db, bad, "payload")
    flip_bit(db, bad, "payload", len(data) - 1, 0)  # "}" (0x7d) becomes "|" (0x7c)
    for args in (["show", bad], ["show", bad, "--json"]):
        exit_8_naming(jobctl(*args, db=db), bad)
    for args in (["list"], ["list", "--json"]):
        r = jobctl(*args, db=db)
        listed_without(r, bad)
        assert '"order":1' in r.stdout and '"order":17' not in r.stdout, r.stdout
    r = jobctl("show", good, db=db)
    assert r.exit_code == 0, r.output
    assert damaged_ids(db) == [bad]
    r = jobctl("claim", db=db)  # the damaged job is older but only the good one is handed out
    assert r.exit_code == 0 and json.loads(r.stdout)["id"] == good, r.output
    assert jobs(db)[bad]["status"] == "buried" and "not valid JSON" in jobs(db)[bad]["error"]


def test_a_flipped_high_bit_that_breaks_utf8_is_exit_8_not_a_retry_hint(db):
    (job_id,) = enqueue(db, {"name": "café"})
    data = stored_bytes(db, job_id, "payload")
    flip_bit(db, job_id, "payload", data.index("é".encode()) + 1, 6)  # a continuation byte no more
    for args in (["show", job_id], ["list"], ["list", "--json"], ["stats"]):
        r = jobctl(*args, db=db)
        if args[0] == "show":
            exit_8_naming(r, job_id)
        else:  # the aging list of stats reads this ready job too
            listed_without(r, job_id)
        assert "safe to retry" not in r.stderr and "Traceback" not in r.stderr, r.output
    assert damaged_ids(db) == [job_id]
    assert jobctl("claim", db=db).exit_code == 5
    assert rows(db, "SELECT status FROM jobs WHERE id = ?", (job_id,)) == [{"status": "buried"}]


@pytest.mark.parametrize("column, value, needle", [
    ("created_at", "garbage", "created_at"),
    ("updated_at", 10**18, "updated_at"),
    ("run_at", -5, "run_at"),
    ("claimed_at", 1.5, "claimed_at"),
    ("attempts", "two", "attempts"),
    ("status", "runnning", "status"),
    ("backoff", "10,x", "backoff"),
    ("progress", '{"message":', "progress"),
    ("result", "[1,", "result"),
])
def test_a_row_with_a_bad_column_is_exit_8_naming_the_job_and_the_column(db, column, value, needle):
    good, bad = enqueue(db, {"n": 1}, {"n": 2})
    raw(db, f"UPDATE jobs SET {column} = ? WHERE id = ?", (value, bad))
    for args in (["show", bad], ["show", bad, "--json"]):
        line = exit_8_naming(run_inproc(*args, db=db), bad)
        assert needle in line, line
    for args in (["list"], ["list", "--json"]):
        r = run_inproc(*args, db=db)
        assert needle in listed_without(r, bad) and '"n":1' in r.stdout, r.output
    assert run_inproc("show", good, db=db).exit_code == 0
    report = doctor(db)
    assert report["ok"] is False and [d["id"] for d in report["damaged_jobs"]] == [bad]
    assert needle in report["damaged_jobs"][0]["why"]


def test_stats_shows_the_other_jobs_and_names_a_damaged_buried_one(db):
    first, bad, last = enqueue(db, {"n": 1}, {"n": 2}, {"n": 3})
    for _ in range(3):
        job = json.loads(run_inproc("claim", db=db).stdout)
        assert run_inproc("fail", job["id"], "--token", job["token"], "--bury", "--error", f"boom {job['id']}",
                          db=db).exit_code == 0
    raw(db, "UPDATE jobs SET finished_at = 'soon' WHERE id = ?", (bad,))
    for args in (["stats"], ["stats", "--json"]):
        r = run_inproc(*args, db=db)
        assert "finished_at" in listed_without(r, bad)
        assert f"boom {first}" in r.stdout and f"boom {last}" in r.stdout, r.stdout
    figures = json.loads(run_inproc("stats", "--json", db=db).stdout)
    assert [j["id"] for j in figures["buried"]] == [last, first]
    assert [d["id"] for d in figures["damaged_jobs"]] == [bad]
    assert damaged_ids(db) == [bad]


def test_control_characters_in_a_damaged_value_stay_inert(db):
    (job_id,) = enqueue(db, {"n": 1})
    raw(db, "UPDATE jobs SET created_at = ? WHERE id = ?", ("\x1b[2J\x1b]0;owned\x07\u202e", job_id))
    line = exit_8_naming(jobctl("show", job_id, db=db), job_id)
    assert "\x1b" not in line and "\u202e" not in line
    r = jobctl("doctor", db=db)
    assert r.exit_code == 9 and "\x1b" not in r.stdout and "\u202e" not in r.stdout, r.output
    assert f"job {job_id}: created_at" in r.stdout


def test_recover_goes_on_past_a_damaged_row(db):
    with Queue.open(db, create=True) as q:
        ids = [q.enqueue("t", {"n": i}).id for i in range(3)]
        for _ in ids:
            q.claim(lease="1s")
    raw(db, "UPDATE jobs SET lease_expires_at = 1000, lease_boot_ms = 0")  # every lease ran out long ago
    raw(db, "UPDATE jobs SET backoff = 'bogus' WHERE id = ?", (ids[1],))
    r = jobctl("recover", "--json", db=db)
    assert r.exit_code == 0, r.output
    assert sorted(json.loads(x)["id"] for x in r.stdout.splitlines()) == [ids[0], ids[2]]
    assert jobs(db)[ids[1]]["status"] == "running"
    assert damaged_ids(db) == [ids[1]]


# -- doctor ------------------------------------------------------------------------------------

def test_doctor_is_well_on_sound_rows_and_reads_them_all(db, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[types.t]\ncommand = ["true"]\n')
    enqueue(db, *[{"n": i, "s": "é" * (i % 7)} for i in range(1200)])  # more than one chunk
    r = jobctl("--config", cfg, "doctor", "--json", db=db)
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["ok"] is True and report["damaged_jobs"] == []
    assert any(c["check"] == "job rows" and "1200 job(s)" in c["detail"] for c in report["checks"])
    put_bytes(db, 1100, "payload", b'{"n":1101,"s":""}')
    r = jobctl("--config", cfg, "doctor", db=db)
    assert r.exit_code == 9 and "job 1100: payload damaged" in r.stdout, r.output
