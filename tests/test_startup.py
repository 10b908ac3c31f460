"""What the start-up and batch speed-ups in bench/ rely on keeps the behaviour unchanged."""

import json

import pytest

from jobctl import payloads
from jobctl.cli import run, typer_app
from jobctl.errors import InvalidInput


def test_run_builds_only_the_command_it_runs_and_restores_the_others(db, capsys):
    app = typer_app()
    before = list(app.registered_commands), list(app.registered_groups)
    assert run(["--db", str(db), "enqueue", "t", "{}"]) == 0
    assert capsys.readouterr().out.strip() == "1"
    assert (list(app.registered_commands), list(app.registered_groups)) == before
    assert run(["--db", str(db), "--busy-timeout", "1s", "claim", "--worker", "w"]) == 0
    assert '"id":1' in capsys.readouterr().out
    assert run(["--help"]) == 0
    listing = capsys.readouterr().out
    for name in ("enqueue", "claim", "complete", "list", "config"):
        assert name in listing


def test_unknown_and_misplaced_commands_keep_their_errors(db, capsys):
    assert run(["--db", str(db), "enqueu", "t"]) == 2
    assert "no such command 'enqueu'" in capsys.readouterr().err
    assert run(["--db", str(db), "enqueue", "--bogus"]) == 2
    assert "jobctl enqueue --help" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["\ufeff{}", "NaN", '{"a": Infinity}', "[" * 300 + "]" * 300, "{", ""])
def test_shared_decoder_refuses_what_json_loads_refused(text):
    with pytest.raises(InvalidInput):
        payloads.parse_json(text)


def test_shared_encoders_give_the_same_text_as_json_dumps():
    value = {"b": [1, 2.5, None, True], "a": "é\u2028", "c": {"z": 1, "y": {}}}
    assert payloads.compact(value) == '{"b":[1,2.5,null,true],"a":"é\u2028","c":{"z":1,"y":{}}}'
    assert payloads.canonical_hash(value) == payloads.canonical_hash(
        {"c": {"y": {}, "z": 1}, "a": "é\u2028", "b": [1, 2.5, None, True]})
    # (the refusals of NaN, lone surrogates and deep nesting are in test_input.py)


def test_statement_journals_stay_in_memory(db):
    """The job_counts triggers make SQLite journal every statement; in a temporary file that
    doubled the cost of each inserted row (bench/run.py, batch workload)."""
    from jobctl.engines.sqlite import SQLiteEngine

    engine = SQLiteEngine.open(db, create=True)
    try:
        assert engine.conn.execute("PRAGMA temp_store").fetchone()[0] == 2  # MEMORY
    finally:
        engine.close()


def test_plain_records_behave_like_the_dataclasses_they_replaced():
    """models, engines/base, config and queue use plain classes instead of @dataclass (~7 ms of
    start-up); constructors, defaults, equality and repr are unchanged."""
    from jobctl.config import Settings, TypeConfig, WorkerSettings
    from jobctl.engines.base import Change, ClaimRequest, NewJob
    from jobctl.models import Event, Job
    from jobctl.queue import EnqueueResult

    a, b = Settings(), Settings()
    assert a == b and a.secret_keys is not b.secret_keys and a.retention is not b.retention
    assert a.worker == WorkerSettings() and a.worker is not b.worker and a.types == {} and a.sources == {}
    assert Settings(synchronous="normal") != a and a.retention["buried"] is None
    assert TypeConfig("t").bury_exit_codes == [] and TypeConfig("t").bury_exit_codes is not TypeConfig("t").bury_exit_codes
    job = Job(1, "default", "t", "{}", 10, "pending", 0, 3, "exponential", 600_000, 5, 5, 5)
    assert job.after == [] and job.waiting_on == 0 and job.token is None
    assert Job.from_row({**{k: getattr(job, k) for k in Job.__slots__ if k != "after"}, "extra": 1, "after": 9}) == job
    assert repr(Event(1, 2, None, "pending", "me")) == (
        "Event(job_id=1, at=2, from_status=None, to_status='pending', actor='me', message=None, details=None)")
    new = NewJob(queue="q", type="t", payload="{}", payload_hash="h", priority=0, max_attempts=1, backoff="fixed",
                 timeout_ms=1)
    assert new.after == [] and new.unique is False and new.source is None
    assert Change("completed", {}).actor is None and ClaimRequest("w", "tok").queues is None
    assert EnqueueResult(1, True) == EnqueueResult(id=1, created=True) != EnqueueResult(1, False)
    with pytest.raises(TypeError):
        hash(job)
    with pytest.raises(AttributeError):
        job.no_such_field = 1


def test_payload_hash_is_sha256_without_openssl():
    import hashlib

    value = {"b": 1, "a": "é"}
    assert payloads.canonical_hash(value) == hashlib.sha256('{"a":"é","b":1}'.encode()).hexdigest()


def test_enqueue_does_not_load_hashlib_secrets_random_or_dataclasses(tmp_path, db):
    """~6 ms of a one-shot enqueue (OpenSSL through hashlib, secrets -> hmac, random, dataclasses)."""
    from conftest import run_cli
    from test_layering import cli_modules

    assert run_cli("init", db=db).exit_code == 0  # creating the file migrates with sqlite-utils, which loads them
    p, loaded = cli_modules(tmp_path, "--db", db, "enqueue", "t", '{"a": 1}')
    assert p.returncode == 0, p.stderr
    unwanted = {"hashlib", "secrets", "hmac", "random", "dataclasses"}
    assert not loaded & unwanted, sorted(loaded & unwanted)
    every = set(json.loads((tmp_path / "modules.json").read_text()))  # (loaded: top-level names only)
    assert "jobctl.selection" not in every  # the filters of list and of the actions: not an enqueue's


def test_stored_payload_check_takes_the_short_way_only_for_the_canonical_text():
    """stored_damage skips parsing when the stored text hashes to the stored canonical hash (it is
    then that very text); every other text is parsed and hashed as before."""
    canonical = {"a": 1, "b": [1, 2.5, "é"]}
    good_hash = payloads.canonical_hash(canonical)
    assert payloads.stored_damage('{"a":1,"b":[1,2.5,"é"]}', good_hash) is None  # the canonical text itself
    assert payloads.stored_damage('{"b":[1,2.5,"é"],"a":1}', good_hash) is None  # keys as enqueued
    assert "no longer matches" in payloads.stored_damage('{"a":2,"b":[1,2.5,"é"]}', good_hash)
    assert "no longer matches" in payloads.stored_damage('{"a":1,"b":[1,2.5,"é"]}', "0" * 64)
    assert payloads.stored_damage('{"a":1,"b":[1,2.5,"é"]}', "0" * 64, check_hash=False) is None
    assert "not valid JSON" in payloads.stored_damage('{"a":1', payloads.canonical_hash({"a": 1}))
    assert "not UTF-8" in payloads.stored_damage('{"a":"\udcff"}', good_hash)
    assert "stored as bytes" in payloads.stored_damage(b'{"a":1}', payloads.canonical_hash({"a": 1}))


def test_jobs_from_whole_rows_and_partial_rows_are_the_same_as_through_the_constructor(db):
    from jobctl.models import Job
    from jobctl.queue import Queue

    with Queue.open(db, create=True) as q:
        q.enqueue("t", {"b": 1, "a": 2}, priority=5)
        conn = q.engine.conn
        row = conn.execute("SELECT * FROM jobs WHERE id = 1").fetchone()
        expected = Job(**{k: row[k] for k in row.keys() if k in Job.__slots__})
        assert Job.from_row(row) == Job.from_checked_row(row) == expected
        assert Job.from_row(dict(zip(row.keys(), row))) == expected
        assert Job.from_row(row, after=[7]).after == [7] and Job.from_row(row).after == []
        # a row with the columns in another order, one twice (its first one counts), or some
        # missing (the constructor's defaults fill them in)
        other = conn.execute("SELECT 99 AS id, * FROM jobs WHERE id = 1").fetchone()
        assert Job.from_checked_row(other).id == 99 and Job.from_checked_row(other).payload == '{"b":1,"a":2}'
        some = conn.execute("SELECT id, queue, type, payload, priority, status, attempts, max_attempts, backoff, "
                            "timeout_ms, run_at, created_at, updated_at FROM jobs WHERE id = 1").fetchone()
        partial = Job.from_row(some)
        assert partial.priority == 5 and partial.token is None and partial.cost_units == 1 and partial.after == []


def test_a_changed_job_is_returned_as_it_is_stored(db):
    """The engine builds the job a change returns from the row it read and the values it wrote
    (no re-read): for every kind of change, it equals the job read back from the database."""
    from jobctl.queue import Queue

    with Queue.open(db, create=True) as q:
        def stored(job):
            assert job == q.get(job.id)
            return job

        for i in range(6):
            q.enqueue("t", {"i": i}, max_attempts=2)
        job = q.claim(worker="w")
        stored(q.heartbeat(job.id, token=job.token, extend=30))
        stored(q.progress(job.id, token=job.token, message="half way", percent=50))
        assert stored(q.fail(job.id, token=job.token, error="boom", details={"exit_code": 3})).status == "pending"
        job = q.claim(worker="w")
        stored(q.complete(job.id, token=job.token, result={"ok": True}))
        job = q.claim(worker="w")
        assert stored(q.fail(job.id, token=job.token, error="bad", bury=True)).status == "buried"
        stored(q.retry(job.id))
        job = q.claim(worker="w")
        stored(q.release(job.id, token=job.token))
        job = q.claim(worker="w")
        assert stored(q.cancel(job.id)).status == "cancel_requested"
        assert stored(q.cancel(job.id, token=job.token)).status == "cancelled"
        job = q.claim(worker="w")
        completed, following = q.complete_and_claim(job.id, token=job.token, worker="w")
        stored(completed)
        stored(following)
        assert stored(q.cancel(q.enqueue("t", {"i": 9}).id)).status == "cancelled"


def test_enqueue_does_not_load_textual(tmp_path, db):
    """Textual belongs to `jobctl top` alone: it is imported inside that command, never at start-up."""
    from conftest import run_cli
    from test_layering import cli_modules

    assert run_cli("init", db=db).exit_code == 0
    p, loaded = cli_modules(tmp_path, "--db", db, "enqueue", "t", '{"a": 1}')
    assert p.returncode == 0, p.stderr
    assert "textual" not in loaded and "jobctl" in loaded, sorted(loaded)
    p, loaded = cli_modules(tmp_path, "--db", db, "stats", "--json")  # a view that loads rich: not textual either
    assert p.returncode == 0, p.stderr
    assert "textual" not in loaded, sorted(loaded)
