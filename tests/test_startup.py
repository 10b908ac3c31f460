"""What the start-up and batch speed-ups in bench/ rely on keeps the behaviour unchanged."""

import pytest

from jobctl import payloads
from jobctl.cli import run
from jobctl.cli.app import app
from jobctl.errors import InvalidInput


def test_run_builds_only_the_command_it_runs_and_restores_the_others(db, capsys):
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
    assert "No such command 'enqueu'" in capsys.readouterr().err
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
    with pytest.raises(InvalidInput):
        payloads.compact({"x": float("nan")})
    with pytest.raises(InvalidInput):
        payloads.compact({"x": "\ud800"})
    deep = []
    for _ in range(300):
        deep = [deep]
    with pytest.raises(InvalidInput):
        payloads.compact(deep)


def test_statement_journals_stay_in_memory(db):
    """The job_counts triggers make SQLite journal every statement; in a temporary file that
    doubled the cost of each inserted row (bench/run.py, batch workload)."""
    from jobctl.engines.sqlite import SQLiteEngine

    engine = SQLiteEngine.open(db, create=True)
    try:
        assert engine.conn.execute("PRAGMA temp_store").fetchone()[0] == 2  # MEMORY
    finally:
        engine.close()
