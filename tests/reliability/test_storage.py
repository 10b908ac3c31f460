"""Storage faults (issue 6, items 7-11): a full disk, a held write lock, a long reader, damaged
or foreign files, and file permissions. Every case: a clear exit code, one error line, and the
file left as it was."""

from __future__ import annotations

import json
import os
import resource
import sqlite3
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest

from jobctl.config import Settings
from jobctl.queue import Queue

from .util import files_state, hold, integrity, jobctl, jobs, release, rows, run_inproc

# Outcomes only (exit codes, error lines, files byte for byte; the locks are held until released,
# not for a while): these run beside other tests.
pytestmark = pytest.mark.shared


def init_db(db: Path, n_jobs: int = 0) -> None:
    r = run_inproc("init", db=db)
    assert r.exit_code == 0, r.output
    if n_jobs:
        lines = "".join(json.dumps({"type": "seed", "payload": {"n": i}}) + "\n" for i in range(n_jobs))
        r = run_inproc("enqueue", "--batch", "-", db=db, input=lines)
        assert r.exit_code == 0, r.output


# -- 7. disk full -----------------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs (as root), else None: the caller then limits file size with RLIMIT_FSIZE."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"cannot mount a tmpfs ({r.stderr.strip() or r.returncode}); simulating a full disk with RLIMIT_FSIZE")
        yield mnt, None
        return
    try:
        yield mnt, True
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_disk_full_enqueue_fails_cleanly_and_keeps_earlier_jobs(small_disk):
    mnt, mounted = small_disk
    db = mnt / "jobs.db"
    limit = 1024 * 1024

    def limited():
        if not mounted:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    # On a mounted small disk the filling runs in-process (a process start per job saved); under
    # RLIMIT_FSIZE it must run in child processes. The repeated failure below is always a real process.
    fill = run_inproc if mounted else jobctl
    r = jobctl("init", db=db, preexec_fn=limited)
    assert r.exit_code == 0, r.output
    blob = "x" * 40_000
    accepted = []
    for i in range(200):
        r = fill("enqueue", "fill", "--payload-file", "-", db=db, input=json.dumps({"i": i, "blob": blob}),
                 preexec_fn=None if mounted else limited)
        if r.exit_code != 0:
            break
        accepted.append((int(r.stdout), i))
    else:
        pytest.fail("the disk never filled up")
    assert accepted, "not even one job fitted"
    assert r.exit_code == 8, r.output
    line = r.one_error_line()
    assert "full" in line or "I/O error" in line, line
    assert r.stdout == "", "a failed enqueue must not print an id"
    # no partial job, every earlier job intact, the file sound
    stored = jobs(db)
    assert sorted(stored) == [job_id for job_id, _ in accepted]
    for job_id, i in accepted:
        assert json.loads(stored[job_id]["payload"]) == {"i": i, "blob": blob}
        assert stored[job_id]["status"] == "pending"
    assert len(rows(db, "SELECT * FROM events")) == len(accepted)
    assert integrity(db) == "ok"
    # the failure repeats cleanly (no spin, no crash), and reads still work on the full disk
    r = jobctl("enqueue", "fill", json.dumps({"blob": blob}), db=db, preexec_fn=limited)
    assert r.exit_code == 8, r.output
    r.one_error_line()
    r = jobctl("list", "--json", "--limit", "1000", db=db)
    assert r.exit_code == 0, r.output
    assert len(r.stdout.splitlines()) == len(accepted)


# -- 8. a write lock held by another process ----------------------------------------------------

HOLD_SECONDS = 120  # held until released (the test closes its stdin): a slow, busy machine cannot end it early


@pytest.mark.slow
def test_held_write_lock_one_shot_commands_exit_6_then_succeed_with_longer_timeout(db):
    init_db(db, 3)
    r = jobctl("claim", "--worker", "w1", "--lease", "1h", db=db)
    assert r.exit_code == 0, r.output
    claimed = json.loads(r.stdout)
    before = files_state(db.parent)
    holder = hold(db, "write", HOLD_SECONDS)
    try:
        for args in (["enqueue", "t", "{}"], ["claim"], ["complete", claimed["id"], "--token", claimed["token"]],
                     ["fail", claimed["id"], "--token", claimed["token"]], ["cancel", "2"], ["recover"],
                     ["pause", "default"]):
            r = jobctl("--busy-timeout", "300ms", *args, db=db)
            assert r.exit_code == 6, (args, r.output)
            line = r.one_error_line()
            assert "locked" in line and "--busy-timeout" in line and "safe to retry" in line, line
        # readers are not blocked by a writer in WAL mode
        r = jobctl("list", "--json", db=db)
        assert r.exit_code == 0, r.output
        assert files_state(db.parent).keys() >= before.keys()
        assert [j["status"] for j in jobs(db).values()] == ["running", "pending", "pending"]
        # a longer busy timeout outwaits the holder (released while the complete waits)
        waited: list = []
        waiter = threading.Thread(target=lambda: waited.append(
            jobctl("--busy-timeout", "60s", "complete", claimed["id"], "--token", claimed["token"], db=db)))
        waiter.start()
        time.sleep(1)
        release(holder)
        waiter.join(90)
        assert waited and waited[0].exit_code == 0, waited and waited[0].output
    finally:
        release(holder)
    assert jobs(db)[claimed["id"]]["status"] == "completed"
    assert len(jobs(db)) == 3
    # JOBCTL_BUSY_TIMEOUT is honoured the same way
    holder = hold(db, "write", HOLD_SECONDS)
    try:
        r = jobctl("enqueue", "t", "{}", db=db, env={"JOBCTL_BUSY_TIMEOUT": "200ms"})
        assert r.exit_code == 6, r.output
    finally:
        release(holder)
    assert len(jobs(db)) == 3


# -- 9. a long reader while jobs flow -----------------------------------------------------------

@pytest.mark.slow
def test_long_reader_does_not_stop_writes_doctor_reports_wal_and_checkpoint_shrinks_it(db):
    from jobctl.engines.sqlite import WAL_WARN_BYTES

    init_db(db)
    reader = hold(db, "read", 600)
    wal = Path(f"{db}-wal")

    def wal_size():
        return wal.stat().st_size if wal.exists() else 0

    try:
        q = Queue.open(db, Settings())
        try:
            # Jobs flow (enqueue, claim, complete, each its own transaction) until the WAL has
            # grown past doctor's threshold: the reader's snapshot keeps every frame alive.
            flowed = 0
            while wal_size() <= WAL_WARN_BYTES + 4 * 1024 * 1024:
                ids = [q.enqueue("flow", {"n": flowed + i}).id for i in range(50)]
                for _ in ids:
                    job = q.claim(worker="w", lease="1m")
                    q.complete(job.id, token=job.token)
                flowed += len(ids)
                assert flowed < 20_000, "the WAL did not grow"
        finally:
            q.close()
        counts = rows(db, "SELECT status, count(*) AS n FROM jobs GROUP BY status")
        assert counts == [{"status": "completed", "n": flowed}]
        r = jobctl("doctor", "--json", db=db)
        assert r.exit_code == 9, r.output
        checks = {c["check"]: c for c in json.loads(r.stdout)["checks"]}
        assert not checks["wal size"]["ok"] and "reader" in checks["wal size"]["detail"], checks
        assert all(c["ok"] for name, c in checks.items() if name not in ("wal size", "handlers")), checks
    finally:
        release(reader)
    # Once the reader is gone, ordinary traffic checkpoints and journal_size_limit shrinks the
    # file; an explicit checkpoint empties it.
    for _ in range(3):
        assert jobctl("enqueue", "after", "{}", db=db).exit_code == 0
    assert wal_size() <= WAL_WARN_BYTES
    r = jobctl("doctor", "--json", db=db)
    assert {c["check"]: c["ok"] for c in json.loads(r.stdout)["checks"]}["wal size"], r.output
    q = Queue.open(db, Settings())
    try:
        busy, log, done = q.engine.checkpoint()
        assert busy == 0 and log == done
    finally:
        q.close()
    assert wal_size() == 0
    assert integrity(db) == "ok"


# -- 10. damaged, foreign and newer files -------------------------------------------------------

def _real_db(path: Path, n_jobs: int = 200) -> None:
    init_db(path, n_jobs)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _not_a_database(path):
    path.write_bytes(b"these are my holiday notes, not a database\n" * 100)


def _zero_length(path):
    path.write_bytes(b"")


def _truncated(path):
    _real_db(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


def _header_flipped(path):
    _real_db(path)
    data = bytearray(path.read_bytes())
    for i in range(0, 16):  # "SQLite format 3\0"
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def _pages_flipped(path):
    """Every b-tree page after the first gets a garbage page-type byte and cell count."""
    _real_db(path)
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big") or 65536
    for off in range(page, len(data), page):
        data[off] = 0x77
        data[off + 3] ^= 0xFF
    path.write_bytes(bytes(data))


def _newer_schema(path):
    _real_db(path)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.commit()
    conn.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _foreign_sqlite(path):
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE recipes (name TEXT, minutes INTEGER)")
    conn.execute("INSERT INTO recipes VALUES ('soup', 40)")
    conn.commit()
    conn.close()


DAMAGE = {
    "not-a-database": (_not_a_database, "not a SQLite database"),
    "truncated": (_truncated, "corrupt"),
    "header-flipped": (_header_flipped, "not a SQLite database"),
    "pages-flipped": (_pages_flipped, "corrupt"),
    "newer-schema": (_newer_schema, "newer jobctl"),
    "foreign-sqlite": (_foreign_sqlite, "not a jobctl database"),
}

COMMANDS = [["list"], ["enqueue", "t", "{}"], ["enqueue", "--batch", "-"], ["claim"], ["show", "1"],
            ["recover"], ["init"], ["doctor"], ["backup", "copy.db"]]


def _file_made_by(make, tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """(its folder, the file, their state): a file `make` wrote, owner-only in a folder of its own."""
    folder = tmp_path / "d"
    folder.mkdir(mode=0o700)
    db = folder / "jobs.db"
    make(db)
    os.chmod(db, 0o600)
    return folder, db, files_state(folder)


def test_a_zero_length_file_is_left_alone_by_what_reads_and_made_a_database_only_by_what_creates(tmp_path):
    """An empty file holds no one's data (only a non-empty file without jobctl's mark is refused):
    the commands that read say it is empty (exit 8) and leave it byte for byte; enqueue makes it a
    database, saying so on stderr, as a queue truncated by mistake must not pass in silence."""
    folder, db, before = _file_made_by(_zero_length, tmp_path)
    for args in (["list"], ["claim"], ["show", "1"], ["recover"], ["doctor"], ["backup", "copy.db"]):
        r = run_inproc(*args, db=db)
        assert r.exit_code == 8 and "empty file" in r.one_error_line(), (args, r.output)
        assert files_state(folder) == before, (args, "the file or its folder changed")
    r = jobctl("enqueue", "t", "{}", db=db)
    assert r.exit_code == 0 and r.stdout == "1\n", r.output
    assert "empty file" in r.stderr and "0 bytes" in r.stderr and "backup" in r.stderr, r.stderr


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_or_foreign_file_is_exit_8_and_left_byte_for_byte(tmp_path, damage):
    make, words = DAMAGE[damage]
    folder, db, before = _file_made_by(make, tmp_path)
    for i, args in enumerate(COMMANDS):
        run = jobctl if i == 0 else run_inproc  # the first as a real process, the rest in-process
        r = run(*args, db=db, input='{"type": "t"}\n' if "--batch" in args else None)
        assert r.exit_code == 8, (args, r.output)
        line = r.one_error_line()
        assert words in line and str(db) in line, (args, line)
        assert files_state(folder) == before, (args, "the file or its folder changed")
    assert not (tmp_path / "copy.db").exists()


# -- 11. permissions ----------------------------------------------------------------------------

def test_new_database_and_its_wal_and_shm_are_owner_only_under_umask_022(tmp_path):
    db = tmp_path / "new" / "sub" / "jobs.db"
    r = jobctl("init", db=db, preexec_fn=lambda: os.umask(0o022))
    assert r.exit_code == 0, r.output
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(db.parent.parent.stat().st_mode) == 0o700
    old = os.umask(0o022)
    try:
        q = Queue.open(db, Settings())  # -wal and -shm exist while a connection is open
        try:
            q.enqueue("t", {})
            for suffix in ("", "-wal", "-shm"):
                assert stat.S_IMODE(os.stat(f"{db}{suffix}").st_mode) == 0o600, suffix
        finally:
            q.close()
    finally:
        os.umask(old)
    # and `enqueue` creating the file is no different from `init`
    db2 = tmp_path / "other" / "jobs.db"
    r = jobctl("enqueue", "t", "{}", db=db2, preexec_fn=lambda: os.umask(0o000))
    assert r.exit_code == 0, r.output
    assert stat.S_IMODE(db2.stat().st_mode) == 0o600
    assert stat.S_IMODE(db2.parent.stat().st_mode) == 0o700


def test_symlinked_database_path_is_refused_with_the_reason_unless_link_and_target_pass(tmp_path):
    # 0.1.0 refused every link; now only a dangling link or one another user owns is refused
    real = tmp_path / "real" / "jobs.db"
    init_db(real, 2)
    link = tmp_path / "link.db"
    link.symlink_to(real)
    assert jobctl("list", db=link).exit_code == 0
    os.lchown(link, 65534, 65534)
    dangling = tmp_path / "dangling.db"
    dangling.symlink_to(tmp_path / "elsewhere.db")
    before = files_state(real.parent)
    for path in (link, dangling):
        for args in (["list"], ["enqueue", "t", "{}"], ["init"]):
            r = (jobctl if args == ["list"] else run_inproc)(*args, db=path)
            assert r.exit_code == 8, (path, args, r.output)
            assert "symbolic link" in r.one_error_line()
    assert files_state(real.parent) == before
    assert not (tmp_path / "elsewhere.db").exists()


@pytest.mark.parametrize("mode", [0o660, 0o602, 0o666])
def test_group_or_world_writable_database_is_refused_with_the_reason(db, mode):
    init_db(db, 1)
    os.chmod(db, mode)
    before = files_state(db.parent)
    for args in (["list"], ["enqueue", "t", "{}"], ["claim"]):
        r = (jobctl if args == ["list"] else run_inproc)(*args, db=db)
        assert r.exit_code == 8, (args, r.output)
        line = r.one_error_line()
        assert "writable by group or others" in line and "chmod 600" in line, line
    assert files_state(db.parent) == before
    os.chmod(db, 0o600)
    assert run_inproc("list", db=db).exit_code == 0


def test_a_disk_full_to_the_last_byte_says_full_not_an_io_error(small_disk):
    """With no byte left, SQLite cannot even make its -shm file and says I/O error (SHMSIZE):
    every command names the cause, the full disk."""
    mnt, mounted = small_disk
    if not mounted:
        pytest.skip("needs a small tmpfs (root): a file-size limit cannot fill the disk for other files")
    db = mnt / "jobs.db"
    assert jobctl("enqueue", "t", db=db).exit_code == 0
    with open(mnt / "filler", "wb") as f:  # every byte that is left
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    try:
        for args in (["list"], ["claim"], ["enqueue", "t"], ["stats"]):
            r = jobctl(*args, db=db)
            assert r.exit_code == 8, (args, r.output)
            line = r.one_error_line()
            assert "full" in line and "SHMSIZE" not in line, (args, line)
    finally:
        os.unlink(mnt / "filler")
    assert jobctl("list", "--json", db=db).exit_code == 0
