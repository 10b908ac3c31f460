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


# -- fixed choices, the config's types, zsh from the first TAB -------------------------------------

def _complete_bash(words, cword, cwd=None):
    import os
    import subprocess

    from conftest import JOBCTL

    env = {**os.environ, "_JOBCTL_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    r = subprocess.run(JOBCTL, env=env, capture_output=True, text=True, timeout=30, cwd=cwd)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return r.stdout.split()


def test_completion_offers_the_fixed_choices():
    assert _complete_bash("jobctl list --status ", 3) == [
        "pending", "running", "cancel_requested", "completed", "buried", "cancelled", "scheduled", "blocked", "held"]
    assert _complete_bash("jobctl list -s b", 3) == ["buried", "blocked"]
    assert _complete_bash("jobctl retry --status h", 3) == ["held"]  # every command that selects jobs
    assert _complete_bash("jobctl bury --", 2)[:2] and "--payload" in _complete_bash("jobctl bury --", 2)
    assert "--min-attempts" in _complete_bash("jobctl purge --m", 2)
    assert _complete_bash("jobctl list --sort ", 3) == ["newest", "oldest", "priority", "run-at", "updated"]
    assert _complete_bash("jobctl stats --format p", 3) == ["prometheus"]
    assert _complete_bash("jobctl stats -f ", 3) == ["table", "json", "prometheus"]
    assert _complete_bash("jobctl stats --by ", 3) == ["queue", "type"]
    assert _complete_bash("jobctl enqueue t --priority ", 4) == ["low", "normal", "high", "critical"]


def test_completion_offers_the_types_of_the_config(tmp_path):
    (tmp_path / "jobctl.toml").write_text('[types.send-invoice]\ncommand = ["true"]\n[types.resize]\ncommand = ["true"]\n')
    assert _complete_bash("jobctl enqueue ", 2, cwd=tmp_path) == ["resize", "send-invoice"]
    assert _complete_bash("jobctl enqueue s", 2, cwd=tmp_path) == ["send-invoice"]
    for cmd in ("list --type", "list -t", "claim --type", "work --type", "retry-buried -t"):
        assert _complete_bash(f"jobctl {cmd} r", 1 + len(cmd.split()), cwd=tmp_path) == ["resize"], cmd
    other = tmp_path / "other.toml"
    other.write_text('[types.report]\ncommand = ["true"]\n')
    assert _complete_bash(f"jobctl --config {other} list --type ", 5, cwd=tmp_path) == ["report"]
    broken = tmp_path / "broken.toml"
    broken.write_text("[types.report\n")
    assert _complete_bash(f"jobctl --config {broken} list --type ", 5, cwd=tmp_path) == []  # silent


def _zsh_tab(tmp_path, typed: str, expect: str) -> str:
    """Type `typed` (ending in a TAB) into an interactive zsh on a pseudo-terminal whose $fpath holds
    completions/_jobctl, as a user who copied it there; return what the terminal showed."""
    import os
    import pty
    import select
    import shutil
    import subprocess
    import sys
    import time

    from conftest import ROOT

    fpath, bin_dir = tmp_path / "zfunc", tmp_path / "bin"
    fpath.mkdir()
    bin_dir.mkdir()
    shutil.copy(ROOT / "completions" / "_jobctl", fpath / "_jobctl")
    (bin_dir / "jobctl").write_text(f"#!/bin/sh\nexec {sys.executable} -m jobctl \"$@\"\n")
    (bin_dir / "jobctl").chmod(0o755)
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "dumb", "HOME": str(tmp_path), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = subprocess.Popen(["zsh", "-f", "-i"], stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True,
                            cwd=tmp_path)
    os.close(slave)
    seen = b""

    def read_until(marker: bytes, timeout: float, or_else: bytes = b"\0") -> None:
        nonlocal seen
        deadline = time.monotonic() + timeout
        while marker not in seen and or_else not in seen and time.monotonic() < deadline:
            if select.select([master], [], [], 0.1)[0]:
                try:
                    seen += os.read(master, 65536)
                except OSError:
                    return

    try:
        os.write(master, f"fpath=({fpath} $fpath); autoload -U compinit; compinit -u -D; echo READY\n".encode())
        read_until(b"READY\r\n", 30)
        seen = b""
        os.write(master, typed.encode())
        read_until(expect.encode(), 15, or_else=b"\x07")  # the line as completed, or a bell: nothing to complete
        os.write(master, b"\x15echo END-OF-TEST\n")  # clear the line, then a marker
        read_until(b"END-OF-TEST\r\n", 15)
    finally:
        proc.kill()
        proc.wait()
        os.close(master)
    return seen.decode("utf-8", "replace")


def test_zsh_completes_from_the_first_tab(tmp_path):
    import shutil

    import pytest

    if shutil.which("zsh") is None:
        pytest.skip("zsh is not installed (apt-get install -y --no-install-recommends zsh)")
    shown = _zsh_tab(tmp_path, "jobctl lis\t", "jobctl list ")
    assert "jobctl list " in shown and "\x07" not in shown, repr(shown)
    (tmp_path / "again").mkdir()
    shown = _zsh_tab(tmp_path / "again", "jobctl list --status bu\t", "--status buried ")
    assert "jobctl list --status buried " in shown, repr(shown)
