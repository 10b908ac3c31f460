"""A full disk, met on a real small filesystem (a tmpfs mounted for the test): a write that fails
leaves no file behind, says the disk is full (exit 8, one line), and works again once there is room."""

from __future__ import annotations

import os
import shutil
import sqlite3
import signal
import subprocess

import pytest

from conftest import finish, run_cli, start_worker, wait_for

PAGE = 4096


def mounted_tmpfs(disk, size: str):
    """A tmpfs of `size` at `disk` (mode 0700), unmounted afterwards; skipped where mounting is not allowed."""
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip() or mounted.returncode}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs at tmp_path/disk."""
    yield from mounted_tmpfs(tmp_path / "disk", "1m")


@pytest.fixture
def disk_8m(tmp_path):
    """An 8 MiB tmpfs at tmp_path/disk: room for a write-ahead log of some hundred jobs."""
    yield from mounted_tmpfs(tmp_path / "disk", "8m")


def free_bytes(folder) -> int:
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize


def fill(disk, leave: int) -> None:
    """Fill the disk with disk/filler until about `leave` bytes are free (whole pages)."""
    filler = disk / "filler"
    filler.unlink(missing_ok=True)
    size = max(0, (free_bytes(disk) - leave) // PAGE * PAGE)
    with open(filler, "wb") as f:
        f.write(b"\0" * size)


def fresh_database_size(tmp_path) -> int:
    path = tmp_path / "measure" / "jobs.db"
    assert run_cli("init", db=path).exit_code == 0
    return path.stat().st_size


def assert_whole(db) -> None:
    from jobctl.engines.schema import SCHEMA_VERSION

    c = sqlite3.connect(f"file:{db}?immutable=1", uri=True)
    try:
        assert c.execute("PRAGMA quick_check").fetchall() == [("ok",)]
        assert c.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert c.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
    finally:
        c.close()


def clear(disk) -> None:
    for p in disk.iterdir():
        if p.name != "filler":
            shutil.rmtree(p) if p.is_dir() else p.unlink()


def left_on(disk) -> list[str]:
    return sorted(p.name for p in disk.iterdir() if p.name != "filler")


CONFIG = '[types.t]\ncommand = ["true"]\n'
CREATORS = {"init": ("init",), "enqueue": ("enqueue", "t", "{}"), "work": ("work", "--stop-when-empty")}


@pytest.mark.slow
@pytest.mark.shared  # outcomes only: runs beside other tests
@pytest.mark.parametrize("command", list(CREATORS))
def test_creating_a_database_on_a_full_disk_leaves_nothing_and_works_once_there_is_room(tmp_path, small_disk, command):
    (tmp_path / "jobctl.toml").write_text(CONFIG)
    size = fresh_database_size(tmp_path)
    db = small_disk / "jobs.db"
    # From no room at all to room for the file but not for its write-ahead log as well (where a
    # truncated file used to be linked into place, and every later command called it corrupt).
    for leave in (PAGE, size + 8 * PAGE, size * 3 // 2, size * 2):
        fill(small_disk, leave)
        r = run_cli(*CREATORS[command], db=db)
        if r.exit_code == 0:
            assert run_cli("list", db=db).exit_code == 0, (leave, r.output)
            assert run_cli("doctor", db=db).exit_code == 0, (leave, r.output)
            clear(small_disk)
            continue
        assert r.exit_code == 8, (leave, r.output)
        line = r.one_error_line()
        assert "disk" in line and "full" in line, (leave, line)
        if command == "init" or not db.exists():
            assert left_on(small_disk) == [], (leave, left_on(small_disk))
            # a later command says there is no database (not that it is corrupt)
            r = run_cli("list", db=db)
            assert r.exit_code == 8 and "no database" in r.one_error_line(), (leave, r.output)
        else:  # the database was made, whole; the job did not fit (nothing enqueued, no id printed)
            assert left_on(small_disk) == ["jobs.db"], (leave, left_on(small_disk))
            assert_whole(db)
            assert r.stdout == ""
            clear(small_disk)
    (small_disk / "filler").unlink()
    r = run_cli(*CREATORS[command], db=db)
    assert r.exit_code == 0, r.output
    assert run_cli("init", db=db).exit_code == 0
    assert run_cli("list", db=db).exit_code == 0


def test_a_failed_init_with_no_room_at_all_leaves_nothing_and_init_again_works(small_disk):
    db = small_disk / "jobs.db"
    fill(small_disk, 0)
    r = run_cli("init", db=db)
    assert r.exit_code == 8, r.output
    assert "full" in r.one_error_line()
    assert left_on(small_disk) == []
    (small_disk / "filler").unlink()
    assert run_cli("init", db=db).exit_code == 0
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA quick_check").fetchone()[0] == "ok"


# -- backup: what is wrong is said of the destination, and nothing is left there -------------------


def big_database(db, jobs: int = 150) -> None:
    """A database of about 0.5 MiB (jobs with 3 KB payloads)."""
    lines = "".join(f'{{"type": "t", "payload": {{"blob": "{os.urandom(1500).hex()}"}}}}\n' for _ in range(jobs))
    r = run_cli("enqueue", "--batch", "-", db=db, input=lines)
    assert r.exit_code == 0, r.output


@pytest.mark.slow
@pytest.mark.shared  # outcomes only: runs beside other tests
def test_backup_to_a_full_disk_names_that_disk_and_leaves_nothing(small_disk, db):
    big_database(db)
    before = db.read_bytes()
    fill(small_disk, 64 * 1024)
    (small_disk / "old.db").write_bytes(b"an older backup")
    for args in (("backup", small_disk / "b.db"), ("backup", "--force", small_disk / "old.db")):
        r = run_cli(*args, db=db)
        assert r.exit_code == 8, r.output
        line = r.one_error_line()
        assert f"the disk holding {small_disk}/" in line and "full" in line and "nothing was written" in line, line
        assert str(db) not in line, line  # the database's disk is not to blame
        assert left_on(small_disk) == ["old.db"], left_on(small_disk)
        assert (small_disk / "old.db").read_bytes() == b"an older backup"
    assert db.read_bytes() == before
    (small_disk / "filler").unlink()
    r = run_cli("backup", small_disk / "b.db", db=db)
    assert r.exit_code == 0, r.output
    assert left_on(small_disk) == ["b.db", "old.db"]


def test_backup_that_fills_the_disk_while_it_copies_leaves_no_copy_and_no_journal(small_disk, db, monkeypatch):
    """The disk fills during the copy (the check of the free space up front is skipped): SQLite's
    own error, said of the destination, and neither the copy nor its -journal stays."""
    from jobctl.engines import files
    from jobctl.errors import DiskFull
    from jobctl.queue import Queue

    big_database(db)
    fill(small_disk, 128 * 1024)
    monkeypatch.setattr(files, "free_bytes", lambda folder: None)
    with Queue.open(db) as q, pytest.raises(DiskFull) as e:
        q.backup(small_disk / "b.db")
    assert f"the disk holding {small_disk}/b.db is full" in str(e.value), str(e.value)
    assert left_on(small_disk) == []


@pytest.mark.parametrize("dest", ["/proc/x.db", "/proc/self/x.db", "/sys/x.db", "/sys/kernel/x.db", "/dev/x.db"])
def test_backup_into_proc_sys_or_dev_is_a_bad_destination(db, dest):
    assert run_cli("init", db=db).exit_code == 0
    r = run_cli("backup", dest, db=db)
    assert r.exit_code == 2, r.output
    line = r.one_error_line()
    assert dest in line and "not a disk that keeps files" in line, line
    assert not os.path.lexists(dest)


def test_backup_into_a_missing_or_read_only_folder(tmp_path, db):
    assert run_cli("init", db=db).exit_code == 0
    r = run_cli("backup", tmp_path / "missing" / "b.db", db=db)
    assert r.exit_code == 2 and "does not exist" in r.one_error_line(), r.output
    ro = tmp_path / "ro"
    ro.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(ro)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        r = run_cli("backup", ro / "b.db", db=db)
        assert r.exit_code == 8, r.output
        line = r.one_error_line()
        assert f"cannot write {ro}/b.db" in line and "read-only" in line, line
    finally:
        subprocess.run(["umount", "-l", str(ro)], capture_output=True)


# -- a stopping worker gives its write-ahead log's space back -------------------------------------


def wal_size(db) -> int:
    try:
        return os.stat(f"{db}-wal").st_size
    except FileNotFoundError:
        return 0


@pytest.mark.slow
@pytest.mark.shared  # outcomes only: runs beside other tests
def test_a_worker_that_stops_truncates_the_write_ahead_log(tmp_path, disk_8m):
    """Another process keeps the database open (a `stats --watch`, say), so SQLite's own checkpoint
    at the last close does not happen: the worker's exit folds the log in and truncates it, and on
    a disk that is all but full that space is what lets the queue go on."""
    (tmp_path / "jobctl.toml").write_text(CONFIG)
    db = disk_8m / "jobs.db"
    r = run_cli("enqueue", "--batch", "-", db=db, input='{"type": "t"}\n' * 40)
    assert r.exit_code == 0, r.output
    reader = sqlite3.connect(db)
    try:
        assert reader.execute("SELECT count(*) FROM jobs").fetchall() == [(40,)]  # (fetched whole: no read left open)
        worker = start_worker(tmp_path, db)
        wait_for(lambda: reader.execute("SELECT count(*) FROM jobs WHERE status = 'completed'").fetchall() == [(40,)],
                 timeout=60, what="the jobs to complete")
        grown = wal_size(db)
        assert grown > 200_000  # (no checkpoint came by itself: that takes 1,000 pages)
        fill(disk_8m, 256 * 1024)  # the disk is all but full (room to grow the file, not the log)
        worker.send_signal(signal.SIGTERM)
        code, log = finish(worker)
        assert code == 0, log
        assert wal_size(db) == 0, (grown, log)
        assert free_bytes(disk_8m) > grown  # the log's space went back to the disk
        r = run_cli("enqueue", "--batch", "-", db=db, input='{"type": "t"}\n' * 40)
        assert r.exit_code == 0, r.output
        assert reader.execute("SELECT count(*) FROM jobs WHERE status = 'completed'").fetchall() == [(40,)]
    finally:
        reader.close()
