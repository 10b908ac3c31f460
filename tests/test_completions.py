"""completions/: the committed scripts match the app, and queue names complete from the database."""

import os
import subprocess

from conftest import JOBCTL, ROOT
from jobctl import completion
from jobctl.queue import Queue


def test_committed_scripts_match_freshly_generated_ones(tmp_path):
    for shell, name in completion.SHELLS.items():
        committed = ROOT / "completions" / name
        assert committed.exists(), f"{committed} is missing; run `python -m jobctl.completion`"
        assert committed.read_text() == completion.script(shell), (
            f"{committed} is stale; run `python -m jobctl.completion`")
    assert completion.main(["--check", str(ROOT / "completions")]) == 0
    assert completion.main(["--check", str(tmp_path)]) == 1
    assert completion.main([str(tmp_path)]) == 0 and completion.main(["--check", str(tmp_path)]) == 0


def complete(words, cword, env=None):
    full = {**os.environ, "_JOBCTL_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword),
            **(env or {})}
    r = subprocess.run(JOBCTL, env=full, capture_output=True, text=True, timeout=30)
    return r.returncode, r.stdout.split(), r.stderr


def test_queue_names_complete_from_the_database(db):
    with Queue.open(db, create=True) as q:
        q.enqueue("t", {}, queue="billing")
        q.enqueue("t", {}, queue="bulk")
        q.enqueue("t", {}, queue="email")
        q.pause("backfill")
    before = db.stat().st_mtime_ns
    for cmd in ("stats --queue", "list -q", "enqueue t --queue", "claim --queue"):
        code, words, err = complete(f"jobctl --db {db} {cmd} b", 3 + len(cmd.split()))
        assert code == 0 and words == ["backfill", "billing", "bulk"], (cmd, words, err)
    assert db.stat().st_mtime_ns == before  # read-only


def test_queue_completion_is_silent_on_any_problem(tmp_path):
    missing = tmp_path / "nope.db"
    code, words, err = complete(f"jobctl --db {missing} stats --queue ", 5)
    assert (code, words, err) == (0, [], "") and not missing.exists()
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 100)
    junk.chmod(0o600)
    assert complete(f"jobctl --db {junk} stats --queue ", 5) == (0, [], "")


def test_commands_complete(tmp_path):
    code, words, _ = complete("jobctl st", 1)
    assert code == 0 and "stats" in words



def test_queue_completion_writes_nothing_even_what_opening_for_work_would(db):
    """A restored backup in rollback-journal mode: any other command switches it to WAL on opening
    (a write); a TAB only reads it."""
    import sqlite3

    with Queue.open(db, create=True) as q:
        q.enqueue("t", {}, queue="billing")
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()
    before = db.stat().st_mtime_ns
    code, words, err = complete(f"jobctl --db {db} stats --queue b", 5)
    assert (code, words, err) == (0, ["billing"], "")
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    conn.close()
    assert db.stat().st_mtime_ns == before
    with Queue.open(db):
        pass
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # what the TAB did not do
    conn.close()


def test_a_read_only_open_refuses_a_file_that_would_need_migrating(db):
    import sqlite3

    import pytest

    from jobctl.engines.sqlite import SQLiteEngine
    from jobctl.errors import DatabaseUnusable

    with Queue.open(db, create=True):
        pass
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version = 0")  # what an older jobctl's file would say
    conn.close()
    with pytest.raises(DatabaseUnusable, match="schema v0"):
        SQLiteEngine.open(db, read_only=True)
