"""backup never replaces what is not a backup (a device, a link, the live database under any name),
and restore puts a backup back safely: checked, private, atomic, never under a running worker, and
never beside the old database's write-ahead log."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_cli, run_inproc

HOLDER = """
import sys, time
from jobctl.queue import Queue
q = Queue.open(sys.argv[1])
q.list_jobs() if hasattr(q, "list_jobs") else None
print("open", flush=True)
time.sleep(60)
"""


def jobs(db):
    """What the database holds (a look from this process: run_inproc)."""
    r = run_inproc("list", "--json", "--limit", 1000, db=db)
    assert r.exit_code == 0, r.output
    return [json.loads(line) for line in r.stdout.splitlines()]


def enqueue(db, type_, n=1):
    """Setup, in this process (run_inproc); backup and restore themselves run as real processes."""
    for _ in range(n):
        r = run_inproc("enqueue", type_, "{}", db=db)
        assert r.exit_code == 0, r.output


def error(r, code):
    assert r.exit_code == code, r.output
    return r.one_error_line()


@pytest.fixture
def holder(db):
    """Another process with the database open, as a worker has."""
    procs = []

    def start():
        p = subprocess.Popen([sys.executable, "-c", HOLDER, str(db)], stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "open"
        procs.append(p)
        return p
    yield start
    for p in procs:
        p.kill()
        p.wait()


# -- backup --force ------------------------------------------------------------------------------


def test_backup_force_never_replaces_a_device_or_a_fifo(db, tmp_path):
    # `backup /dev/null --force` replaced /dev/null with a file; a device node of the test's own
    # stands in for it, so that a regression cannot break the machine's /dev/null
    enqueue(db, "t")
    null, fifo = tmp_path / "null", tmp_path / "fifo"
    if os.geteuid() == 0:
        os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.mkfifo(fifo)
    for target in (null, fifo) if null.exists() else (fifo,):
        line = error(run_cli("backup", target, "--force", db=db), 2)
        assert "not a regular file" in line
    assert (not null.exists() or stat.S_ISCHR(os.lstat(null).st_mode)) and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_backup_force_never_replaces_the_live_database_under_any_name(db, tmp_path, holder):
    enqueue(db, "t", 2)
    holder()  # a worker runs: its completions would be lost in the replaced file
    Path(f"{db}-wal").exists() or Path(f"{db}-wal").touch()
    (tmp_path / "alias.db").hardlink_to(db)
    (tmp_path / "q-link").symlink_to(db.parent)
    before = db.stat().st_ino
    for target, words in ((db, "the database itself"), (tmp_path / "alias.db", "the database itself"),
                          (tmp_path / "q-link" / "jobs.db", "the database itself"),
                          (f"{db}-wal", "-wal"), (f"{db}-shm", "-shm"), (f"{db}-journal", "-journal"),
                          (db.parent / ".." / "q" / "jobs.db", "the database itself")):
        line = error(run_cli("backup", target, "--force", db=db), 2)
        assert words in line and "nothing was written" in line, line
    assert db.stat().st_ino == before
    assert len(jobs(db)) == 2


def test_backup_force_never_replaces_a_link(db, tmp_path):
    enqueue(db, "t")
    other = tmp_path / "precious"
    other.write_text("keep me")
    link = tmp_path / "b.db"
    link.symlink_to(other)
    line = error(run_cli("backup", link, "--force", db=db), 2)
    assert "symbolic link" in line
    assert link.is_symlink() and other.read_text() == "keep me"


def test_backup_force_replaces_an_earlier_backup(db, tmp_path):
    enqueue(db, "t")
    b = tmp_path / "b.db"
    b.write_text("old backup")
    r = run_cli("backup", b, "--force", db=db)
    assert r.exit_code == 0, r.output
    assert b.read_bytes().startswith(b"SQLite format 3\0")
    assert stat.S_IMODE(b.stat().st_mode) == 0o600


# -- restore -------------------------------------------------------------------------------------

KILLED_WRITER = """
import os, sys
from jobctl.queue import Queue
q = Queue.open(sys.argv[1])
q.engine.conn.execute("PRAGMA wal_autocheckpoint = 0")
for i in range(20):
    q.enqueue("after-backup", {"i": i})
os.kill(os.getpid(), 9)
"""


def test_restore_puts_a_backup_back_and_removes_the_stale_wal(db, tmp_path):
    enqueue(db, "before", 3)
    backup = tmp_path / "b.db"
    assert run_inproc("backup", backup, db=db).exit_code == 0  # setup
    subprocess.run([sys.executable, "-c", KILLED_WRITER, str(db)])  # later work, and a crash: a -wal is left
    assert Path(f"{db}-wal").stat().st_size > 4096
    line = error(run_cli("restore", backup, db=db), 2)
    assert "--force" in line  # it replaces every job: say so first
    os.umask(0o022)
    r = run_cli("restore", backup, "--force", db=db)
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == str(db)
    assert not Path(f"{db}-wal").exists()
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert [j["type"] for j in jobs(db)] == ["before"] * 3
    r = run_inproc("doctor", "--json", db=db)
    checks = {c["check"]: c["ok"] for c in json.loads(r.stdout)["checks"]}
    assert checks["integrity"] and checks["journal mode"], r.stdout
    enqueue(db, "after-restore")
    assert len(jobs(db)) == 4
    assert [p.name for p in db.parent.iterdir() if ".restore-" in p.name] == []


def test_restore_creates_a_missing_database(tmp_path, db):
    enqueue(db, "t", 2)
    backup = tmp_path / "b.db"
    assert run_inproc("backup", backup, db=db).exit_code == 0  # setup
    new = tmp_path / "new" / "jobs.db"
    r = run_cli("restore", backup, db=new)
    assert r.exit_code == 0, r.output
    assert len(jobs(new)) == 2
    assert stat.S_IMODE(new.parent.stat().st_mode) == 0o700


def test_restore_is_refused_while_a_worker_has_the_database_open(db, tmp_path, holder):
    enqueue(db, "t", 2)
    backup = tmp_path / "b.db"
    assert run_inproc("backup", backup, db=db).exit_code == 0  # setup
    enqueue(db, "later")
    p = holder()
    before = db.stat().st_ino
    line = error(run_cli("restore", backup, "--force", db=db), 6)
    assert "open in another process" in line and "stop the workers" in line
    assert db.stat().st_ino == before and len(jobs(db)) == 3
    p.kill()
    p.wait()
    assert run_cli("restore", backup, "--force", db=db).exit_code == 0
    assert len(jobs(db)) == 2


@pytest.mark.parametrize("what", ["text", "foreign", "missing", "itself"])
def test_restore_refuses_what_is_not_a_jobctl_backup(db, tmp_path, what):
    enqueue(db, "t")
    bad = tmp_path / "bad.db"
    if what == "text":
        bad.write_text("hello" * 1000)
    elif what == "foreign":
        import sqlite3

        c = sqlite3.connect(bad)
        c.execute("CREATE TABLE x (y)")
        c.commit()
        c.close()
    elif what == "itself":
        bad = db
    os.path.exists(bad) and os.chmod(bad, 0o600)
    before = db.read_bytes()
    line = error(run_cli("restore", bad, "--force", db=db), 2)
    assert str(bad) in line
    assert db.read_bytes() == before
    assert [p.name for p in db.parent.iterdir() if ".restore-" in p.name] == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand a file to another user")
def test_restore_refuses_a_backup_another_user_could_have_written(db, tmp_path):
    enqueue(db, "t")
    backup = tmp_path / "b.db"
    assert run_inproc("backup", backup, db=db).exit_code == 0  # setup
    os.chown(backup, 65534, 65534)
    line = error(run_cli("restore", backup, "--force", db=db), 2)
    assert "belongs to" in line


def test_a_killed_backup_leaves_nothing_behind_at_the_next_backup(db, tmp_path):
    enqueue(db, "t")
    p = subprocess.Popen(["true"])
    p.wait()
    stale = tmp_path / f".b.db.backup-{p.pid}-00000000"
    stale.write_bytes(b"partial")
    assert run_cli("backup", tmp_path / "b.db", db=db).exit_code == 0
    assert not stale.exists()


def test_a_killed_restore_leaves_nothing_behind_at_the_next_restore(db, tmp_path):
    enqueue(db, "t")
    backup = tmp_path / "b.db"
    assert run_inproc("backup", backup, db=db).exit_code == 0  # setup
    p = subprocess.Popen(["true"])
    p.wait()
    stale = db.parent / f".jobs.db.restore-{p.pid}-00000000"
    stale.write_bytes(b"partial")
    assert run_cli("restore", backup, "--force", db=db).exit_code == 0
    assert not stale.exists()
