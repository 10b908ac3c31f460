"""Issue 2, test 8: bad files. A directory, a text file, a truncated database, a newer schema, a
foreign SQLite file, a read-only file and a write lock held past the busy timeout each give their
exit code and one clear line, and leave the file's bytes unchanged. New files are private (0600,
folder 0700) whatever the umask; network filesystems are recognised."""

import hashlib
import json
import os
import pwd
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import JOBCTL, run_cli, run_inproc
from jobctl.engines import sqlite as engine_sqlite
from jobctl.engines.files import NETWORK_FS, filesystem_type


def digest(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def one_line(r, code):
    assert r.exit_code == code, r.output
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("jobctl: error: "), r.stderr
    assert "Traceback" not in r.stderr
    return lines[0]


def make_db(path, jobs=3):
    """A real jobctl file, checkpointed and closed (no -wal left), so its bytes are all in one file."""
    lines = "".join(json.dumps({"type": "t", "payload": {"i": i, "pad": "x" * 2000}}) + "\n" for i in range(jobs))
    r = run_inproc("enqueue", "--batch", "-", db=path, input=lines)
    assert r.exit_code == 0 and r.stdout.split() == [str(i + 1) for i in range(jobs)], r.output
    assert not Path(f"{path}-wal").exists()
    return path


COMMANDS = [["list"], ["enqueue", "t"], ["claim"], ["init"], ["show", "1"]]


def assert_refused(path, code, words, commands=COMMANDS):
    """Each command refuses the file with one line (in-process: the real binary meets a bad file in
    test_process.py, and a read-only one and a held lock below)."""
    before = digest(path) if Path(path).is_file() else None
    for args in commands:
        line = one_line(run_inproc(*args, db=path), code)
        assert any(w in line for w in words), line
        if before is not None:
            assert digest(path) == before, f"{args} changed the file"


def test_a_directory(tmp_path):
    d = tmp_path / "dir.db"
    d.mkdir()
    assert_refused(d, 8, ["directory"])
    assert list(d.iterdir()) == []


def test_a_text_file(tmp_path):
    f = tmp_path / "notes.db"
    f.write_text("these are my notes, not a database\n" * 100)
    os.chmod(f, 0o600)
    assert_refused(f, 8, ["not a SQLite database", "not a jobctl database"])


def test_a_truncated_database(tmp_path):
    f = make_db(tmp_path / "jobs.db", jobs=40)
    size = f.stat().st_size
    with open(f, "r+b") as fh:
        fh.truncate(size // 2)
    assert_refused(f, 8, ["corrupt"], commands=[["list"], ["enqueue", "t"], ["claim"], ["show", "40"]])


def test_a_newer_schema(tmp_path):
    f = make_db(tmp_path / "jobs.db")
    conn = sqlite3.connect(f)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    assert_refused(f, 8, ["newer jobctl"])
    line = one_line(run_inproc("list", db=f), 8)
    assert "v99" in line and "upgrade" in line


def test_a_foreign_sqlite_file(tmp_path):
    f = tmp_path / "other.db"
    conn = sqlite3.connect(f)
    conn.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, what TEXT)")
    conn.execute("INSERT INTO jobs (what) VALUES ('theirs')")
    conn.commit()
    conn.close()
    os.chmod(f, 0o600)
    assert_refused(f, 8, ["not a jobctl database"])
    conn = sqlite3.connect(f)
    assert conn.execute("SELECT what FROM jobs").fetchall() == [("theirs",)]
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 0
    conn.close()


@pytest.mark.parametrize("command", [["init"], ["enqueue", "t"]])
def test_an_empty_file_is_made_a_database_by_the_commands_that_create_one(tmp_path, command):
    """`touch jobs.db` or `mktemp`, then `jobctl --db jobs.db init`: an empty file holds no one's
    data (only a non-empty file without jobctl's mark is refused), so init, enqueue and work make it
    a jobctl database, private (0600) like a new one; the other commands still say there is no
    database there, and change nothing."""
    f = tmp_path / "jobs.db"
    f.touch(mode=0o644)
    os.chmod(f, 0o644)
    line = one_line(run_inproc("list", db=f), 8)
    assert "empty" in line and "init" in line, line
    assert f.stat().st_size == 0
    r = run_inproc(*command, db=f)
    assert r.exit_code == 0, r.output
    assert stat.S_IMODE(f.stat().st_mode) == 0o600
    assert run_inproc("init", db=f).exit_code == 0  # idempotent: now a jobctl file like any other
    r = run_inproc("list", "--json", db=f)
    assert r.exit_code == 0 and r.stdout.count("\n") == (1 if command[0] == "enqueue" else 0), r.output
    conn = sqlite3.connect(f)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_a_symlink_is_followed_only_when_it_and_its_target_pass(tmp_path):
    # 0.1.0 refused every link; now a link of ours to a good file is used, one of another user's is not
    real = make_db(tmp_path / "real.db")
    link = tmp_path / "link.db"
    link.symlink_to(real)
    r = run_cli("list", db=link)
    assert r.exit_code == 0, r.output
    os.lchown(link, 65534, 65534)
    assert_refused(link, 8, ["symbolic link"])


def test_a_file_others_can_write_is_refused(tmp_path):
    f = make_db(tmp_path / "jobs.db")
    os.chmod(f, 0o666)
    assert_refused(f, 8, ["chmod 600"])


@pytest.mark.parametrize("args", [["list"], ["claim"], ["complete", "1"], ["recover"], ["pause", "q"],
                                  ["doctor"], ["purge"], ["show", "1"]])
def test_a_missing_file_is_not_created(tmp_path, args):
    f = tmp_path / "nowhere" / "jobs.db"
    line = one_line(run_inproc(*args, db=f), 8)
    assert "init" in line
    assert not f.exists() and not f.parent.exists()


# -- a read-only file ---------------------------------------------------------------------------


def _as_nobody():
    """preexec_fn that becomes the `nobody` user, or None."""
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        return None

    def drop():
        os.setgroups([])
        os.setgid(nobody.pw_gid)
        os.setuid(nobody.pw_uid)

    return drop


def _without_file_capabilities():
    """preexec_fn that stays root but gives up the capabilities that bypass file modes
    (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER) for the child and everything it execs."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def drop():
        for cap in (1, 2, 3):
            if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")

    return drop


def _unprivileged(folder: Path, file: Path):
    """A (preexec_fn, env) under which `file` in `folder` really is read-only, or (None, reasons)."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(folder), "XDG_DATA_HOME": str(folder), "HOME": str(folder)}
    reasons = []
    for name, make in (("the nobody user", _as_nobody), ("root without CAP_DAC_OVERRIDE", _without_file_capabilities)):
        drop = make()
        if drop is None:
            reasons.append(f"{name}: not available")
            continue
        if name == "the nobody user":
            nobody = pwd.getpwnam("nobody")
            os.chown(folder, nobody.pw_uid, nobody.pw_gid)
            os.chown(file, nobody.pw_uid, nobody.pw_gid)
        else:
            os.chown(folder, 0, 0)
            os.chown(file, 0, 0)
        try:
            probe = subprocess.run(
                [sys.executable, "-c", f"import jobctl.cli\ntry:\n open({str(file)!r}, 'r+b')\nexcept PermissionError:\n"
                 " print('read-only')"], preexec_fn=drop, env=env, cwd=folder, capture_output=True, text=True)
        except OSError as e:  # e.g. nobody may not execute a Python that lives under /root
            reasons.append(f"{name}: {e}")
            continue
        if probe.returncode == 0 and probe.stdout.strip() == "read-only":
            return drop, env
        reasons.append(f"{name}: {(probe.stderr.strip().splitlines() or [probe.stdout.strip()])[-1]}")
    return None, "; ".join(reasons)


def test_a_read_only_file(tmp_path):
    """Root writes through any file mode, so the child runs as nobody or without the capability."""
    f = make_db(tmp_path / "jobs.db")
    folder = Path(tempfile.mkdtemp(prefix="jobctl-ro-"))
    try:
        os.chmod(folder, 0o700)
        target = folder / "jobs.db"
        shutil.copy2(f, target)
        os.chmod(target, 0o400)
        if os.geteuid() == 0:
            drop, env = _unprivileged(folder, target)
            if drop is None:
                print(f"cannot make a read-only file for root here: {env}")
                pytest.skip(f"cannot make a read-only file for root here: {env}")
        else:
            drop, env = None, dict(os.environ)
        before = digest(target)
        for args in (["enqueue", "t"], ["claim"], ["cancel", "1"], ["pause", "q"]):
            p = subprocess.run([*JOBCTL, "--db", str(target), *args], preexec_fn=drop, env=env, cwd=folder,
                               capture_output=True, text=True, timeout=60)
            assert p.returncode == 8, (args, p.returncode, p.stdout, p.stderr)
            assert p.stdout == "" and len(p.stderr.splitlines()) == 1, p.stderr
            assert "read-only" in p.stderr, p.stderr
            assert digest(target) == before
        # reading a read-only file still works
        p = subprocess.run([*JOBCTL, "--db", str(target), "list", "--json"], preexec_fn=drop, env=env, cwd=folder,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and len(p.stdout.splitlines()) == 3, p.stderr
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# -- a write lock held by another process -------------------------------------------------------

LOCKER = r"""
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
conn.close()
"""


def test_a_write_lock_held_past_the_busy_timeout(tmp_path):
    f = make_db(tmp_path / "jobs.db")
    before = digest(f)
    locker = subprocess.Popen([sys.executable, "-c", LOCKER, str(f)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout.readline() == "locked\n"
        for args in (["enqueue", "t"], ["claim"], ["cancel", "1"]):
            line = one_line(run_cli("--busy-timeout", "200ms", *args, db=f), 6)
            assert "locked" in line and "0.2s" in line and "retry" in line
        # the environment variable sets it too; reads still work while the lock is held
        line = one_line(run_cli("enqueue", "t", db=f, env={"JOBCTL_BUSY_TIMEOUT": "300ms"}), 6)
        assert "0.3s" in line
        r = run_cli("list", "--json", db=f)
        assert r.exit_code == 0 and len(r.stdout.splitlines()) == 3
    finally:
        locker.stdin.write("\n")
        locker.stdin.close()
        assert locker.wait(timeout=30) == 0
    assert digest(f) == before
    r = run_cli("--busy-timeout", "200ms", "enqueue", "t", db=f)
    assert r.exit_code == 0 and r.stdout == "4\n", r.output


def test_bad_busy_timeout(tmp_path):
    f = make_db(tmp_path / "jobs.db", jobs=1)
    one_line(run_inproc("--busy-timeout", "forever", "list", db=f), 2)


# -- file modes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_new_files_are_private_whatever_the_umask(tmp_path, umask):
    f = tmp_path / "a" / "b" / "jobs.db"
    old = os.umask(umask)
    try:
        r = run_cli("init", db=f)
        assert r.exit_code == 0 and r.stdout == f"{f}\n", r.output
        # keep a connection open so that -wal and -shm exist, and write through it
        conn = sqlite3.connect(f)
        conn.execute("PRAGMA user_version").fetchone()
        r = run_cli("enqueue", "t", db=f)
        assert r.exit_code == 0, r.output
        for p in (f, Path(f"{f}-wal"), Path(f"{f}-shm")):
            assert p.exists(), p
            assert stat.S_IMODE(p.stat().st_mode) == 0o600, (p, oct(p.stat().st_mode))
        conn.close()
    finally:
        os.umask(old)
    for d in (f.parent, f.parent.parent):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    assert stat.S_IMODE(tmp_path.stat().st_mode) != 0o700 or True  # an existing folder is left as it was
    # no temporary file is left behind
    assert sorted(p.name for p in f.parent.iterdir() if not p.name.startswith("jobs.db")) == []


def test_init_is_idempotent_and_keeps_jobs(tmp_path):
    f = make_db(tmp_path / "jobs.db", jobs=2)
    before = digest(f)
    r = run_cli("init", db=f)
    assert r.exit_code == 0 and r.stdout == f"{f}\n"
    assert digest(f) == before


def test_the_default_database_lives_under_xdg_data_home(tmp_path):
    r = run_cli("init")
    assert r.exit_code == 0, r.output
    expected = tmp_path / "xdg-data" / "jobctl" / "jobctl.db"
    assert r.stdout == f"{expected}\n" and expected.is_file()
    assert stat.S_IMODE(expected.parent.stat().st_mode) == 0o700


# -- network filesystems ------------------------------------------------------------------------

MOUNTS = """\
sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
/dev/sda1 / ext4 rw,relatime 0 0
tmpfs /tmp tmpfs rw,nosuid,nodev 0 0
server:/export /mnt/nfs nfs4 rw,relatime,vers=4.2 0 0
//nas/share /mnt/smb cifs rw,relatime 0 0
user@host:/data /home/me/remote fuse.sshfs rw,nosuid,nodev 0 0
/dev/sdb1 /mnt/nfs/local-inside ext4 rw 0 0
/dev/sdc1 /mnt/my\\040disk xfs rw 0 0
"""


@pytest.mark.parametrize("path,fstype", [
    ("/var/lib/jobctl", "ext4"),
    ("/tmp/x", "tmpfs"),
    ("/tmpfoo", "ext4"),  # a prefix of a mount point's name is not inside it
    ("/mnt/nfs", "nfs4"),
    ("/mnt/nfs/queue", "nfs4"),
    ("/mnt/nfs/local-inside/q", "ext4"),  # the longest mount prefix wins
    ("/mnt/smb/jobs", "cifs"),
    ("/home/me/remote/q", "fuse.sshfs"),
    ("/mnt/my disk/q", "xfs"),
])
def test_filesystem_type(path, fstype):
    assert filesystem_type(path, MOUNTS) == fstype


def test_filesystem_type_is_the_longest_prefix_not_the_last_line():
    """/proc/mounts lists a mount inside another after it as a rule, but not always (a remount, a
    bind mount made later): with the deeper mount first, the last match would be the wrong one."""
    mounts = "/dev/sdb1 /mnt/nfs/local-inside ext4 rw 0 0\nserver:/export /mnt/nfs nfs4 rw 0 0\n"
    assert filesystem_type("/mnt/nfs/local-inside/q", mounts) == "ext4"
    assert filesystem_type("/mnt/nfs/q", mounts) == "nfs4"
    # the same mount point mounted twice: the later one is what the path is on
    assert filesystem_type("/mnt/x/q", "/dev/a /mnt/x ext4 rw 0 0\nserver:/e /mnt/x nfs rw 0 0\n") == "nfs"


def test_network_filesystems_are_known():
    for fstype in ("nfs", "nfs4", "cifs", "smb3", "fuse.sshfs", "9p"):
        assert fstype in NETWORK_FS
    for fstype in ("ext4", "xfs", "btrfs", "tmpfs", "zfs", "overlay"):
        assert fstype not in NETWORK_FS


def test_a_network_filesystem_is_refused(tmp_path, monkeypatch):
    """The refusal itself, with /proc/mounts replaced by text that puts tmp_path on NFS."""
    from jobctl.errors import DatabaseUnusable
    from jobctl.queue import Queue

    real_read_text = Path.read_text

    def fake_read_text(self, *a, **kw):
        if str(self) == "/proc/mounts":
            return f"/dev/sda1 / ext4 rw 0 0\nserver:/x {tmp_path} nfs rw 0 0\n"
        return real_read_text(self, *a, **kw)

    monkeypatch.setattr(Path, "read_text", fake_read_text)
    f = tmp_path / "q" / "jobs.db"
    with pytest.raises(DatabaseUnusable, match="network filesystem.*--allow-network-fs"):
        Queue.open(f, create=True)
    assert not f.exists()
    with Queue.open(f, create=True, allow_network_fs=True) as q:
        assert q.enqueue("t").id == 1
    assert engine_sqlite  # imported for the module under test


def test_a_link_to_a_database_on_a_network_filesystem_is_refused(tmp_path, monkeypatch):
    """`~/jobs.db -> /mnt/nfs/jobs.db`: the file SQLite locks is on NFS, wherever the link is."""
    from jobctl.errors import DatabaseUnusable
    from jobctl.queue import Queue

    remote = tmp_path / "remote"
    f = make_db(remote / "jobs.db")
    local = tmp_path / "local"
    local.mkdir(mode=0o700)
    link = local / "jobs.db"
    link.symlink_to(f)
    real_read_text = Path.read_text

    def fake_read_text(self, *a, **kw):
        if str(self) == "/proc/mounts":
            return f"/dev/sda1 / ext4 rw 0 0\nserver:/x {remote} nfs rw 0 0\n"
        return real_read_text(self, *a, **kw)

    monkeypatch.setattr(Path, "read_text", fake_read_text)
    with pytest.raises(DatabaseUnusable, match="network filesystem.*--allow-network-fs"):
        Queue.open(link)
    with Queue.open(link, allow_network_fs=True) as q:
        assert q.list_jobs() is not None
