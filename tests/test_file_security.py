"""Another local user must never act through your jobctl: the database, its -wal and -shm, the
folders and links on the way to them, the handler registry and the config file must be yours (or
root's) and closed to others' writes, as ssh's StrictModes demands. Tests run as root; uid 65534
(nobody) plays the other user."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_cli
from jobctl.engines import files
from jobctl.engines.sqlite import SQLiteEngine
from jobctl.errors import DatabaseUnusable

NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand files to another user")


def refused(path, *words, args=("list",)):
    r = run_cli(*args, db=path)
    assert r.exit_code == 8, r.output
    line = r.one_error_line()
    for w in words:
        assert w in line, line
    return line


def make_db(path: Path) -> Path:
    SQLiteEngine.open(path, create=True).close()
    return path


def make_db_there(path: Path) -> Path:
    """A whole database at `path`, made elsewhere (jobctl refuses to make one in a shared folder)."""
    made = make_db(path.parent.parent / f"made-{path.name}" / path.name)
    os.rename(made, path)
    return path


def opens(path) -> None:
    SQLiteEngine.open(path).close()


def refuses(path, *words) -> str:
    with pytest.raises(DatabaseUnusable) as e:
        SQLiteEngine.open(path)
    for w in words:
        assert w in str(e.value), str(e.value)
    return str(e.value)


# -- the database and its side files ------------------------------------------------------------


def test_a_database_another_user_owns_is_refused_and_doctor_says_so(db):
    make_db(db)
    os.chown(db, NOBODY, NOBODY)
    before = db.read_bytes()
    for args in (["list"], ["enqueue", "t", "{}"], ["init"], ["doctor"]):
        refused(db, "belongs to", "uid 65534", args=args)
    assert db.read_bytes() == before


def test_a_database_root_owns_is_accepted(db):
    make_db(db)
    os.chown(db, 0, 0)
    opens(db)


@pytest.mark.parametrize("suffix", ["-wal", "-shm"])
def test_a_side_file_another_user_planted_is_refused(db, suffix):
    make_db(db)
    side = Path(f"{db}{suffix}")
    side.write_bytes(b"")
    os.chmod(side, 0o600)
    os.chown(side, NOBODY, NOBODY)
    refuses(db, suffix, "belongs to")
    refused(db, "belongs to")


@pytest.mark.parametrize("suffix", ["-wal", "-shm"])
def test_a_side_file_others_may_read_is_refused_when_the_database_is_private(db, suffix):
    # ... so that a world-readable -wal planted (or left) beside a 0600 queue cannot leak its payloads
    make_db(db)
    side = Path(f"{db}{suffix}")
    side.write_bytes(b"")
    os.chmod(side, 0o644)
    refuses(db, suffix, "0644", f"chmod 600 {side}")
    os.chmod(side, 0o600)
    opens(db)


def test_a_side_file_that_is_a_link_is_refused(db, tmp_path):
    make_db(db)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"")
    Path(f"{db}-wal").symlink_to(elsewhere)
    refuses(db, "-wal", "not a regular file")


# -- folders -------------------------------------------------------------------------------------


def test_a_folder_others_may_write_without_the_sticky_bit_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    db = make_db(shared / "jobs.db")
    for mode in (0o777, 0o775):
        os.chmod(shared, mode)
        refuses(db, "without the sticky bit", "chmod go-w")
    os.chmod(shared, 0o1777)
    refuses(db, "others may create files in", "mode 1777", "mkdir -m 700")  # (the -wal race: below)


def test_a_sticky_shared_folder_works_on_the_way_not_as_the_database_s_own(tmp_path):
    """/tmp/me/jobs.db is fine (only its owner may rename /tmp/me); /tmp/jobs.db is not: another user
    could create its -wal between jobctl's check and SQLite's open (tests/test_wal_race.py)."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    db = shared / "jobs.db"
    r = run_cli("enqueue", "t", "{}", db=db)
    assert r.exit_code == 8, r.output
    assert "others may create files in" in r.one_error_line()
    assert list(shared.iterdir()) == []  # nothing created
    mine = shared / "me"
    mine.mkdir(mode=0o700)
    r = run_cli("enqueue", "t", "{}", db=mine / "jobs.db")
    assert r.exit_code == 0, r.output
    assert run_cli("list", db=mine / "jobs.db").exit_code == 0
    # another user who takes the name first is caught by the owner check
    theirs = make_db_there(shared / "theirs.db")
    os.chown(theirs, NOBODY, NOBODY)
    refused(theirs, "belongs to", args=("enqueue", "t", "{}"))


def test_a_name_taken_first_by_another_user_in_a_sticky_folder_is_refused(tmp_path):
    shared = tmp_path / "tmp"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    db = shared / "jobs.db"
    # the other user creates the path first (a whole jobctl database), hoping root's worker adopts it
    make_db_there(db)
    for f in shared.iterdir():
        os.chown(f, NOBODY, NOBODY)
    refused(db, "belongs to", args=("init",))
    (tmp_path / "jobctl.toml").write_text('[types.t]\ncommand = ["true"]\n')
    refused(db, "belongs to", args=("work", "--stop-when-empty"))


def test_a_folder_another_user_owns_is_refused(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    db = make_db(theirs / "jobs.db")
    os.chown(theirs, NOBODY, NOBODY)  # they may chmod it and swap the file whenever they like
    refuses(db, "the folder", "belongs to")


# -- links ---------------------------------------------------------------------------------------


def test_links_that_pass_are_followed_and_others_refused(tmp_path):
    real = make_db(tmp_path / "real" / "jobs.db")
    link = tmp_path / "link.db"
    link.symlink_to(real)
    opens(link)
    # a link to a folder (/var/run -> /run, a data disk mounted elsewhere)
    (tmp_path / "data").symlink_to(tmp_path / "real")
    opens(tmp_path / "data" / "jobs.db")
    # a relative link, with ..
    rel = tmp_path / "sub"
    rel.mkdir()
    (rel / "jobs.db").symlink_to(Path("..") / "real" / "jobs.db")
    opens(rel / "jobs.db")
    # a link another user owns (in a sticky folder they can replace their link at any time)
    os.lchown(link, NOBODY, NOBODY)
    refuses(link, "symbolic link", "belongs to")
    # a good link into a folder others may write to
    open_folder = tmp_path / "open"
    open_folder.mkdir()
    os.chmod(open_folder, 0o777)
    target = open_folder / "jobs.db"
    shutil.copy(real, target)
    os.chmod(target, 0o600)
    link2 = tmp_path / "link2.db"
    link2.symlink_to(target)
    refuses(link2, str(open_folder), "sticky")


def test_a_dangling_link_is_refused_and_nothing_is_created(tmp_path):
    link = tmp_path / "dangling.db"
    link.symlink_to(tmp_path / "nowhere" / "jobs.db")
    line = refused(link, "symbolic link", "does not exist", args=("init",))
    assert not (tmp_path / "nowhere").exists(), line


def test_a_link_loop_is_refused(tmp_path):
    (tmp_path / "a.db").symlink_to(tmp_path / "b.db")
    (tmp_path / "b.db").symlink_to(tmp_path / "a.db")
    refuses(tmp_path / "a.db", "symbolic links")


# -- a -wal left beside a replaced database -------------------------------------------------------

KILLED_WRITER = """
import os, sys
from jobctl.queue import Queue
q = Queue.open(sys.argv[1], create=True)
q.engine.conn.execute("PRAGMA wal_autocheckpoint = 0")
for i in range(20):
    q.enqueue("old", {"i": i})
os.kill(os.getpid(), 9)
"""


def killed_with_a_full_wal(db: Path) -> None:
    subprocess.run([sys.executable, "-c", KILLED_WRITER, str(db)])
    assert Path(f"{db}-wal").stat().st_size > 4096


def test_a_restored_backup_beside_a_stale_wal_is_refused_not_corrupted(db, tmp_path):
    make_db(db)
    r = run_cli("enqueue", "new", "{}", db=db)
    assert r.exit_code == 0
    backup = tmp_path / "b.db"
    assert run_cli("backup", backup, db=db).exit_code == 0
    killed_with_a_full_wal(db)
    shutil.copyfile(backup, db)  # a restore by hand: the old -wal stays
    before = db.read_bytes()
    for args in (["list"], ["claim"], ["enqueue", "t", "{}"], ["doctor"]):
        refused(db, "-wal does not belong", "jobctl restore", args=args)
    assert db.read_bytes() == before
    # what the message says to do works: move the log aside and the backup's jobs are there
    os.rename(f"{db}-wal", tmp_path / "old-wal")
    os.rename(f"{db}-shm", tmp_path / "old-shm")
    r = run_cli("list", "--json", db=db)
    assert r.exit_code == 0, r.output
    assert [json.loads(line)["type"] for line in r.stdout.splitlines()] == ["new"]


def test_a_live_wal_is_its_databases_own(db):
    make_db(db)
    killed_with_a_full_wal(db)  # crash recovery: the log is the database's and must be replayed
    r = run_cli("list", "--json", db=db)
    assert r.exit_code == 0, r.output
    assert len(r.stdout.splitlines()) == 20
    holder = SQLiteEngine.open(db)  # and a log another open connection is writing to
    try:
        holder.conn.execute("PRAGMA wal_autocheckpoint = 0")
        holder.conn.execute("UPDATE jobs SET priority = 11")
        assert run_cli("list", db=db).exit_code == 0
        opens(db)  # a second connection in the same process does not touch the file
    finally:
        holder.close()


def test_wal_frames_reads_what_sqlite_would_replay(tmp_path):
    assert files.wal_frames(str(tmp_path / "none-wal")) == (0, 0)
    db = tmp_path / "x.db"
    killed_with_a_full_wal(db)
    assert files.wal_frames(f"{db}-wal") == (4096, 1)
    data = bytearray(Path(f"{db}-wal").read_bytes())
    data[40] ^= 0xFF  # the first frame's checksum no longer holds: SQLite would ignore the log
    Path(f"{db}-wal").write_bytes(bytes(data))
    assert files.wal_frames(f"{db}-wal") == (4096, 0)
    Path(f"{db}-wal").write_bytes(b"\0" * 100)
    assert files.wal_frames(f"{db}-wal") == (0, 0)


# -- what a killed jobctl left behind -------------------------------------------------------------


def dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_temporary_files_of_a_killed_init_are_removed_at_the_next_create(db):
    db.parent.mkdir(mode=0o700)
    pid = dead_pid()
    stale = [db.parent / f".jobs.db.init-{pid}-0a1b2c3d{s}" for s in ("", "-wal", "-shm", "-journal")]
    stale.append(db.parent / f".jobs.db.backup-{pid}-00000000")
    live = db.parent / f".jobs.db.init-{os.getpid()}-00000000"  # an init still running
    theirs = db.parent / f".jobs.db.init-{pid}-11111111"
    unrelated = db.parent / f".jobs.db.notes-{pid}-0"
    for f in [*stale, live, theirs, unrelated]:
        f.write_bytes(b"x")
    os.chown(theirs, NOBODY, NOBODY)
    r = run_cli("init", db=db)
    assert r.exit_code == 0, r.output
    left = sorted(p.name for p in db.parent.iterdir())
    assert left == sorted(["jobs.db", live.name, theirs.name, unrelated.name]), left
    # and with the database already there (killed after the link), at the next command that may create
    for f in stale:
        f.write_bytes(b"x")
    assert run_cli("enqueue", "t", "{}", db=db).exit_code == 0
    assert not any(f.exists() for f in stale)


# -- the handler registry ------------------------------------------------------------------------

from jobctl import handlers  # noqa: E402


@pytest.fixture
def victim():
    """A process someone would like a worker to kill."""
    p = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield p
    p.kill()
    p.wait()


def plant(folder: Path, job_id: int, pid: int, token="theirs") -> Path:
    start = handlers.proc_start(pid)
    rec = folder / str(job_id)
    rec.write_text(json.dumps({"pid": pid, "start": [start, start], "token": token, "worker": "w"}))
    os.chmod(rec, 0o600)
    return rec


def test_a_record_only_a_regular_private_file_of_ours_is_believed(db, victim):
    make_db(db)
    warnings = []
    reg = handlers.Registry(str(db), warn=warnings.append)
    folder = Path(reg.folder)
    rec = plant(folder, 7, victim.pid)
    assert reg.strays(7, "mine") == ({victim.pid}, "w")  # the control: a record of ours is believed
    os.chown(rec, NOBODY, NOBODY)
    assert reg.strays(7, "mine") == (set(), None)
    assert reg.strays(7, "mine") == (set(), None)
    assert len(warnings) == 1 and "ignoring the handler record" in warnings[0] and "uid 65534" in warnings[0]
    os.chown(rec, 0, 0)
    os.chmod(rec, 0o622)
    assert handlers.Registry(str(db), warn=warnings.append).strays(7, "mine") == (set(), None)
    assert "0622" in warnings[-1]
    rec.unlink()
    plant(folder, "other", victim.pid)
    rec.symlink_to(folder / "other")
    assert handlers.Registry(str(db), warn=warnings.append).strays(7, "mine") == (set(), None)
    rec.unlink()
    os.mkfifo(rec)  # would block a plain open
    assert handlers.Registry(str(db), warn=warnings.append).strays(7, "mine") == (set(), None)
    assert victim.poll() is None


def test_a_worker_ignores_a_planted_record_and_says_so_once(tmp_path, db, victim):
    (tmp_path / "jobctl.toml").write_text('[types.t]\ncommand = ["true"]\n')
    make_db(db)
    folder = Path(f"{db}-handlers")
    folder.mkdir(mode=0o700)
    rec = plant(folder, 1, victim.pid)
    os.chown(rec, NOBODY, NOBODY)
    assert run_cli("enqueue", "t", "{}", db=db).exit_code == 0
    r = run_cli("work", "--stop-when-empty", db=db)
    assert r.exit_code == 0, r.output
    assert victim.poll() is None, "the worker killed a process a planted record named"
    assert r.stderr.count("ignoring the handler record") == 1, r.stderr


@pytest.mark.parametrize("how", ["theirs", "open", "file", "link-open", "link-theirs"])
def test_a_registry_folder_that_is_not_ours_alone_stops_the_worker(tmp_path, db, how):
    (tmp_path / "jobctl.toml").write_text('[types.t]\ncommand = ["true"]\n')
    make_db(db)
    folder = Path(f"{db}-handlers")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    if how == "file":
        folder.write_text("")
    elif how.startswith("link"):
        folder.symlink_to(elsewhere)
    else:
        folder.mkdir(mode=0o700)
    if how.endswith("open"):
        os.chmod(elsewhere if how.startswith("link") else folder, 0o755)
    if how.endswith("theirs"):
        os.chown(elsewhere if how.startswith("link") else folder, NOBODY, NOBODY)
    r = run_cli("work", "--stop-when-empty", db=db)
    assert r.exit_code == 8, r.output
    assert "handler registry" in r.one_error_line()
    assert list(elsewhere.iterdir()) == []


def test_a_registry_folder_linked_to_a_private_folder_of_ours_is_used(tmp_path, db):
    make_db(db)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    Path(f"{db}-handlers").symlink_to(elsewhere)
    reg = handlers.Registry(str(db))
    reg.record(3, "tok", "w", os.getpid(), None, None)
    assert (elsewhere / "3").exists()
    reg.forget(3)
    assert not (elsewhere / "3").exists()


def test_a_worker_removes_only_its_own_record(db):
    make_db(db)
    frozen, rescuer = handlers.Registry(str(db)), handlers.Registry(str(db))
    rec = Path(frozen.folder) / "5"
    frozen.record(5, "t1", "frozen", 111, None, None)
    rescuer.record(5, "t2", "rescuer", 222, None, None)  # the lease ran out; another worker took the job
    frozen.forget(5)  # the frozen worker resumes and its (stopped) run ends
    assert json.loads(rec.read_text())["token"] == "t2"
    handlers.Registry(str(db)).forget(5)  # a registry that never recorded it
    assert rec.exists()
    rescuer.forget(5)
    assert not rec.exists()


def test_forget_checks_and_removes_under_the_folder_lock(db):
    import fcntl
    import threading

    make_db(db)
    frozen = handlers.Registry(str(db))
    frozen.record(5, "t1", "frozen", 111, None, None)
    fd = os.open(frozen.folder, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    t = threading.Thread(target=frozen.forget, args=(5,))
    t.start()
    t.join(0.3)
    assert t.is_alive(), "forget did not wait for the lock"
    # the rescuer's replace happens while the frozen worker waits: it must see it
    rec = Path(frozen.folder) / "5"
    rec.write_text(json.dumps({"pid": 222, "start": None, "token": "t2", "worker": "rescuer"}))
    os.close(fd)
    t.join(5)
    assert json.loads(rec.read_text())["token"] == "t2"


# -- the config file -----------------------------------------------------------------------------

CONFIG = '[types.t]\ncommand = ["true"]\n'


def test_a_local_config_file_another_user_left_is_refused(tmp_path, db):
    # another user leaves ./jobctl.toml in a shared working folder; root's `jobctl work` must not run it
    local = tmp_path / "jobctl.toml"
    local.write_text(CONFIG)
    assert run_cli("config", "show", db=db).exit_code == 0  # the control: ours is read
    os.chown(local, NOBODY, NOBODY)
    for args in (["work", "--stop-when-empty"], ["enqueue", "t", "{}"], ["config", "show"]):
        r = run_cli(*args, db=db)
        assert r.exit_code == 2, (args, r.output)
        line = r.one_error_line()
        assert "jobctl.toml" in line and "belongs to" in line and "uid 65534" in line, line
    assert not db.exists()


@pytest.mark.parametrize("mode", [0o664, 0o646])
def test_a_config_file_others_may_write_is_refused(tmp_path, db, mode):
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(CONFIG)
    os.chmod(cfg, mode)
    r = run_cli("--config", cfg, "work", "--stop-when-empty", db=db)
    assert r.exit_code == 2, r.output
    assert f"{mode:04o}" in r.one_error_line() and "chmod go-w" in r.one_error_line()


def test_a_config_file_in_a_folder_others_may_write_is_refused(tmp_path, db):
    shared = tmp_path / "shared"
    shared.mkdir()
    cfg = shared / "cfg.toml"
    cfg.write_text(CONFIG)
    os.chmod(shared, 0o777)
    r = run_cli("--config", cfg, "config", "show", db=db)
    assert r.exit_code == 2, r.output
    assert "sticky" in r.one_error_line()
    os.chmod(shared, 0o1777)
    assert run_cli("--config", cfg, "config", "show", db=db).exit_code == 0


def test_a_config_file_of_root_is_read_and_a_fifo_is_refused(tmp_path, db):
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(CONFIG)
    os.chown(cfg, 0, 0)
    assert run_cli("--config", cfg, "config", "show", db=db).exit_code == 0
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    r = run_cli("--config", fifo, "config", "show", db=db, timeout=10)
    assert r.exit_code == 2 and "not a regular file" in r.one_error_line()


PLAIN_KILLED_WRITER = """
import os, sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("PRAGMA page_size = " + sys.argv[2])
c.execute("PRAGMA journal_mode = WAL")
c.execute("PRAGMA wal_autocheckpoint = 0")
c.execute("CREATE TABLE t (x)")
for i in range(50):
    c.execute("INSERT INTO t VALUES (?)", ("x" * 500,))
os.kill(os.getpid(), 9)
"""


def test_a_wal_of_another_page_size_is_not_the_databases(tmp_path):
    old, other = tmp_path / "old.db", tmp_path / "other.db"
    subprocess.run([sys.executable, "-c", PLAIN_KILLED_WRITER, str(old), "8192"])
    assert files.stale_wal(str(old), os.stat(old)) is None  # its own log, from a crash
    c = sqlite3.connect(other)
    c.execute("PRAGMA journal_mode = WAL")  # a WAL-mode file of 4096-byte pages, closed cleanly
    c.execute("CREATE TABLE u (y)")
    c.commit()
    c.close()
    shutil.copyfile(other, old)
    assert "8192" in files.stale_wal(str(old), os.stat(old))


def test_the_registry_warning_is_a_worker_log_line_in_json_too(tmp_path, db, victim):
    (tmp_path / "jobctl.toml").write_text(CONFIG)
    make_db(db)
    folder = Path(f"{db}-handlers")
    folder.mkdir(mode=0o700)
    os.chown(plant(folder, 1, victim.pid), NOBODY, NOBODY)
    assert run_cli("enqueue", "t", "{}", db=db).exit_code == 0
    r = run_cli("work", "--stop-when-empty", "--log-format", "json", db=db)
    assert r.exit_code == 0, r.output
    events = [json.loads(line) for line in r.stderr.splitlines()]
    warned = [e for e in events if e["event"] == "registry"]
    assert len(warned) == 1 and "ignoring the handler record" in warned[0]["message"]
    assert victim.poll() is None
