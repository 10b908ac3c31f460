"""The files of a SQLite database: where they may live, who may own them, how they are created.

Everything here is plain os/stat work, cheap enough for the hot commands, and knows nothing of
SQL: sqlite.py calls it before it lets SQLite open a path.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from jobctl.errors import DatabaseUnusable

# Filesystems on which SQLite's locks cannot be trusted.
NETWORK_FS = {
    "nfs", "nfs4", "cifs", "smb", "smb2", "smb3", "smbfs", "ncpfs", "afs", "coda", "9p", "ceph",
    "glusterfs", "lustre", "gpfs", "davfs", "fuse.sshfs", "sshfs", "fuse.glusterfs", "fuse.cephfs",
    "fuse.s3fs", "fuse.rclone", "fuse.gcsfuse", "fuse.davfs", "fuse.juicefs", "virtiofs",
}


def filesystem_type(path: str, mounts_text: str) -> str | None:
    """The type of the filesystem holding `path`, from /proc/mounts text (longest mount prefix)."""
    best, best_type = "", None
    for line in mounts_text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        mount = parts[1].replace("\\040", " ")
        if (path == mount or path.startswith(mount.rstrip("/") + "/")) and len(mount) >= len(best):
            best, best_type = mount, parts[2]
    return best_type


def check_filesystem(path: Path) -> None:
    try:
        mounts = Path("/proc/mounts").read_text()
    except OSError:
        return  # not Linux, or /proc hidden: nothing to check against
    # The file's own real path: through a link (~/jobs.db -> /mnt/nfs/jobs.db) the file SQLite
    # locks is where the link points, not beside the link.
    fstype = filesystem_type(os.path.realpath(path), mounts)
    if fstype and fstype.lower() in NETWORK_FS:
        raise DatabaseUnusable(
            f"{path} is on a network filesystem ({fstype}), where SQLite's locking is unsafe and jobs "
            "could be lost or run twice; use a local disk or a server database, or pass "
            "--allow-network-fs if you know this mount's locking works"
        )


def make_private_dirs(folder: Path) -> None:
    """Create missing folders with mode 0700 (whatever the umask)."""
    missing = []
    p = folder
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            continue
        os.chmod(d, 0o700)


def create_private_file(path: Path) -> None:
    """Create an empty file readable and writable by its owner only (whatever the umask); never
    through a symbolic link, never over an existing name."""
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


# -- who may own what -----------------------------------------------------------------------
#
# As ssh's StrictModes does: every file jobctl trusts, and every folder on the way to it, must
# belong to the user running jobctl or to root, and no one else may write to it. A folder others
# may write to is fine only with the sticky bit (/tmp): then no one but a file's owner can remove
# or rename it, so a name that is ours stays ours (others can still take a free name first, which
# the owner check catches).

MAX_LINKS = 40


def trusted_owner(uid: int) -> bool:
    """The user running jobctl, or root."""
    return uid == os.geteuid() or uid == 0


def user_name(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _not_yours(path, st, what: str) -> str:
    return (f"{what} {path} belongs to {user_name(st.st_uid)}, not to you ({user_name(os.geteuid())}) or root; "
            "jobctl refuses it so that another user cannot plant or redirect what you run; run jobctl as "
            f"its owner, or `chown` it if it is yours")


def check_folder(path: str, st: os.stat_result | None = None) -> None:
    """A folder in which jobctl looks names up: ours or root's, and only writable by others when sticky."""
    if st is None:
        st = os.stat(path)
    if not trusted_owner(st.st_uid):
        raise DatabaseUnusable(_not_yours(path, st, "the folder"))
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise DatabaseUnusable(
            f"the folder {path} is writable by group or others without the sticky bit (mode "
            f"{stat.S_IMODE(st.st_mode):04o}), so anyone could replace the files in it; run "
            f"`chmod go-w {path}` (or `chmod +t {path}` for a shared folder such as /tmp)")


def resolve(path: str | os.PathLike) -> str:
    """The real path of `path`, checking each folder looked up on the way (check_folder) and
    each symbolic link followed (it must be ours or root's: in a sticky folder only its owner can
    change it). A missing last part is returned as it would be created (FileNotFoundError comes
    from check_file); a link whose target is missing is refused."""
    path = os.fspath(path)
    pending = (path if path.startswith("/") else os.getcwd() + "/" + path).split("/")
    pending.reverse()
    cur, cur_st, checked, links = "/", None, set(), 0
    while pending:
        name = pending.pop()
        if name in ("", "."):
            continue
        if name == "..":
            cur, cur_st = os.path.dirname(cur), None
            continue
        if cur not in checked:
            try:
                check_folder(cur, cur_st)
            except NotADirectoryError:
                raise DatabaseUnusable(f"{cur} is not a folder; check the path {path}") from None
            except OSError as e:
                raise DatabaseUnusable(f"cannot read the folder {cur}: {e.strerror}") from None
            checked.add(cur)
        nxt = os.path.join(cur, name)
        try:
            st = os.lstat(nxt)
        except FileNotFoundError:
            if links:
                raise DatabaseUnusable(
                    f"{path} is a symbolic link to {os.path.join(nxt, *reversed(pending))}, which does not "
                    "exist; jobctl does not create files through a link; give the real path") from None
            return os.path.join(nxt, *reversed([p for p in pending if p not in ("", ".")]))
        except OSError as e:
            raise DatabaseUnusable(f"cannot read {nxt}: {e.strerror}; check the permissions of its folder") from None
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if links > MAX_LINKS:
                raise DatabaseUnusable(f"{path}: too many levels of symbolic links")
            if not trusted_owner(st.st_uid):
                raise DatabaseUnusable(_not_yours(nxt, st, "the symbolic link"))
            target = os.readlink(nxt)
            if target.startswith("/"):
                cur, cur_st = "/", None
            pending.extend(reversed(target.split("/")))
            continue
        cur, cur_st = nxt, st
    return cur


def check_file(path: str | os.PathLike, *, wal: bool = True) -> str:
    """Check a database file before SQLite opens it, and return its real path (what to open).

    Raises FileNotFoundError when it does not exist (the caller may create it), DatabaseUnusable
    with the reason when it must not be used: a folder on the way or a link others could change,
    a file that is not a regular file, not yours (or root's), writable by others; a -wal or -shm
    beside it that is not yours, writable by others, or readable by more people than the
    database; a -wal that cannot belong to this database (see stale_wal)."""
    real = resolve(path)
    try:
        st = os.lstat(real)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise DatabaseUnusable(f"cannot read {path}: {e.strerror}; check the permissions of its folder") from None
    if stat.S_ISDIR(st.st_mode):
        raise DatabaseUnusable(f"{path} is a directory, not a database file; give a file path with --db")
    if not stat.S_ISREG(st.st_mode):
        raise DatabaseUnusable(f"{path} is not a regular file")
    if not trusted_owner(st.st_uid):
        raise DatabaseUnusable(_not_yours(real, st, "the database"))
    if st.st_mode & 0o022:
        raise DatabaseUnusable(
            f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}); anyone could "
            f"change its jobs; run `chmod 600 {real}`"
        )
    for suffix in ("-wal", "-shm"):
        side = real + suffix
        try:
            sst = os.lstat(side)
        except FileNotFoundError:
            continue
        except OSError as e:
            raise DatabaseUnusable(f"cannot read {side}: {e.strerror}") from None
        if not stat.S_ISREG(sst.st_mode):
            raise DatabaseUnusable(
                f"{side} is not a regular file (SQLite keeps the database's recent changes there); "
                "someone made it to redirect them; remove it when no jobctl process runs")
        if not trusted_owner(sst.st_uid):
            raise DatabaseUnusable(_not_yours(side, sst, "the database's side file"))
        extra = stat.S_IMODE(sst.st_mode) & 0o077 & ~st.st_mode
        if sst.st_mode & 0o022 or extra:
            raise DatabaseUnusable(
                f"{side} (mode {stat.S_IMODE(sst.st_mode):04o}) lets group or others read or change what "
                f"the database (mode {stat.S_IMODE(st.st_mode):04o}) keeps from them; run `chmod "
                f"{stat.S_IMODE(st.st_mode):o} {side}`")
    reason = stale_wal(real, st) if wal else None
    if reason:
        raise DatabaseUnusable(
            f"{real}-wal does not belong to the database {path} ({reason}): SQLite would apply it and "
            "corrupt the jobs. The database was replaced (restored from a backup?) while its old write-"
            f"ahead log stayed. If no jobctl process uses it, move {real}-wal and {real}-shm aside; "
            "restore a backup with `jobctl restore BACKUP`, which does this safely")
    return real


# -- the side files SQLite opens itself --------------------------------------------------------
#
# SQLite creates and opens the -wal and -shm beside the database on its first read, after
# check_file looked at them: another user who can create files in that folder (a shared sticky
# one such as /tmp) can create a -wal of theirs in between, keep it open, and read every page
# written to it. When jobctl runs as root SQLite even hands such an empty file to the database's
# owner with the database's mode, so no look at the file afterwards can tell. Hence two checks:
# the database's own folder must be closed to others (check_db_folder), and the side files the
# connection has open must be the ones at those names, yours and private (check_open_side_files).


def check_db_folder(real: str) -> None:
    """The folder the database (and so its -wal and -shm) lives in: nobody else may create files in it."""
    folder = os.path.dirname(real) or "/"
    try:
        st = os.stat(folder)
    except OSError:
        return  # check_file said what is wrong with the way there
    if st.st_mode & 0o022:
        raise DatabaseUnusable(
            f"the database {real} is in a folder others may create files in ({folder}, mode "
            f"{stat.S_IMODE(st.st_mode):04o}), where another user could create its -wal before SQLite does "
            f"and read the jobs; keep it in a folder of its own: `mkdir -m 700 {folder.rstrip('/')}/jobctl` "
            "and move it there (with its -wal and -shm, when no jobctl process runs)")


def check_open_side_files(real: str) -> None:
    """After SQLite opened the database `real` (its first read opens the -wal and -shm of a WAL
    database), before anything is written: every -wal and -shm this process has open must be the
    file at that name (same device and inode, not removed), a regular file of yours (or root's),
    no more open to others than the database. Linux only (/proc/self/fd); elsewhere the folder
    check is what protects."""
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return
    names = (real + "-wal", real + "-shm")
    db_mode = None
    for fd in fds:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        removed = target.endswith(" (deleted)")
        name = target[:-len(" (deleted)")] if removed else target
        if name not in names:
            continue
        try:
            fst = os.fstat(int(fd))
            pst = None if removed else os.lstat(name)
        except FileNotFoundError:
            pst = None
        except OSError:
            continue  # (closed meanwhile by another thread)
        if pst is None or (pst.st_dev, pst.st_ino) != (fst.st_dev, fst.st_ino):
            raise DatabaseUnusable(
                f"{name} was replaced while jobctl opened the database: someone may be trying to read or "
                "change the jobs; nothing was written; check who else can write to "
                f"{os.path.dirname(real) or '/'}, then retry")
        if not stat.S_ISREG(fst.st_mode):
            raise DatabaseUnusable(f"{name} is not a regular file; nothing was written; remove it when no jobctl "
                                   "process runs")
        if not trusted_owner(fst.st_uid):
            raise DatabaseUnusable(_not_yours(name, fst, "the database's side file") + "; nothing was written")
        if db_mode is None:
            db_mode = os.stat(real).st_mode
        if fst.st_mode & 0o022 or stat.S_IMODE(fst.st_mode) & 0o077 & ~db_mode:
            raise DatabaseUnusable(
                f"{name} (mode {stat.S_IMODE(fst.st_mode):04o}) lets group or others read or change what the "
                f"database (mode {stat.S_IMODE(db_mode):04o}) keeps from them; nothing was written; remove it "
                "when no jobctl process runs")


# -- a write-ahead log that is not the database's ------------------------------------------------
#
# SQLite's file formats do not tie a -wal to its database: the header's salts are random and its
# checksums cover only the log itself, so a log left beside a database that was replaced (a backup
# copied over it) is replayed onto the new file and corrupts it. What can be told for sure: a
# database whose header says it is not in WAL mode (file format bytes 18 and 19 are 1, as in every
# `jobctl backup`) cannot have committed frames of its own in a -wal (leaving WAL mode checkpoints
# and deletes the log first), and frames of another page size cannot be the database's.

WAL_HEADER, FRAME_HEADER = 32, 24
WAL_MAGIC = (0x377F0682, 0x377F0683)


def _wal_checksum(data: bytes, big_endian: bool, s0: int = 0, s1: int = 0) -> tuple[int, int]:
    import struct

    words = struct.unpack((">" if big_endian else "<") + f"{len(data) // 4}I", data)
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & 0xFFFFFFFF
        s1 = (s1 + words[i + 1] + s0) & 0xFFFFFFFF
    return s0, s1


def _wal_header(fd: int):
    """(page size, big-endian checksums, salts, checksum) of a valid WAL header, else None."""
    import struct

    head = os.pread(fd, WAL_HEADER, 0)
    if len(head) < WAL_HEADER:
        return None
    magic, _version, page_size, _seq, salt1, salt2, c1, c2 = struct.unpack(">8I", head)
    if magic not in WAL_MAGIC or page_size < 512 or page_size > 65536 or page_size & (page_size - 1):
        return None
    big = bool(magic & 1)
    s = _wal_checksum(head[:24], big)
    return (page_size, big, (salt1, salt2), s) if s == (c1, c2) else None


def wal_frames(wal: str) -> tuple[int, int]:
    """(page size, 1 if the log's first frame is valid else 0) of a -wal file: what SQLite would
    replay. (0, 0) when the log is empty or its header is not valid (SQLite ignores it then)."""
    import struct

    try:
        fd = os.open(wal, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return 0, 0
    try:
        header = _wal_header(fd)
        if header is None:
            return 0, 0
        page_size, big, salts, s = header
        frame = os.pread(fd, FRAME_HEADER + page_size, WAL_HEADER)
        if len(frame) < FRAME_HEADER + page_size:
            return page_size, 0
        _pgno, _commit, fsalt1, fsalt2, fc1, fc2 = struct.unpack(">6I", frame[:FRAME_HEADER])
        if (fsalt1, fsalt2) != salts:
            return page_size, 0
        s = _wal_checksum(frame[:8], big, *s)
        s = _wal_checksum(frame[FRAME_HEADER:], big, *s)
        return page_size, int(s == (fc1, fc2))
    finally:
        os.close(fd)


def _open_here(st: os.stat_result) -> bool:
    """Whether this process already has the file open (then it must not be opened and closed
    again: that would drop the locks SQLite holds on it)."""
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return True  # cannot tell: do not touch the file
    for fd in fds:
        try:
            fst = os.fstat(int(fd))
        except (OSError, ValueError):
            continue
        if (fst.st_dev, fst.st_ino) == (st.st_dev, st.st_ino):
            return True
    return False


def stale_wal(real: str, st: os.stat_result) -> str | None:
    """Why the -wal beside the database `real` cannot be its own, or None (also when absent).

    Cheap in the usual case (a live log of a WAL database): two small reads, no checksums."""
    try:
        if os.stat(real + "-wal").st_size < WAL_HEADER + FRAME_HEADER + 512:
            return None  # no frame to replay
    except OSError:
        return None
    if _open_here(st):
        return None
    fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW)  # this process has no SQLite lock on it to drop
    try:
        head = os.pread(fd, 100, 0)
    finally:
        os.close(fd)
    if len(head) < 100 or not head.startswith(b"SQLite format 3\0"):
        return None  # SQLite itself says what is wrong with such a file
    db_page = int.from_bytes(head[16:18], "big")
    db_page = 65536 if db_page == 1 else db_page
    wal_mode = head[18] == 2 and head[19] == 2
    if wal_mode:
        try:
            wfd = os.open(real + "-wal", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            header = _wal_header(wfd)
        finally:
            os.close(wfd)
        if header is None or header[0] == db_page:
            return None
    page_size, frames = wal_frames(real + "-wal")
    if not frames:
        return None  # SQLite ignores a log without a valid first frame
    if not wal_mode:
        return "the database is not in WAL mode, yet the log holds changes"
    return f"the log's pages are {page_size} bytes, the database's {db_page}"


# -- what a killed jobctl left behind ------------------------------------------------------------

TEMP_KINDS = ("init", "backup", "restore")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process: alive
    return True


def temp_name(path: Path, kind: str) -> Path:
    """A private temporary name beside `path`; its pid tells clean_stale_temps whether it is stale."""
    return path.parent / f".{path.name}.{kind}-{os.getpid()}-{os.urandom(4).hex()}"


def clean_stale_temps(path: str | os.PathLike) -> list[str]:
    """Remove the temporary files (and their -wal/-shm/-journal) that a jobctl killed while it
    created, backed up or restored the database `path` left beside it: only ours, only when the
    process that made them is gone. Returns the names removed."""
    path = os.fspath(path)
    folder, name = os.path.split(path)
    prefix = f".{name}."
    removed: list[str] = []
    try:
        entries = os.scandir(folder or ".")
    except OSError:
        return removed
    with entries:
        for entry in entries:
            if not entry.name.startswith(prefix):
                continue
            kind, _, rest = entry.name[len(prefix):].partition("-")
            pid = rest.split("-", 1)[0]
            if kind not in TEMP_KINDS or not pid.isdigit() or _pid_alive(int(pid)):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                    os.unlink(entry.path)
                    removed.append(entry.path)
            except OSError:
                continue
    return removed


# -- where a copy may be written -----------------------------------------------------------------

SIDE_FILES = ("", "-wal", "-shm", "-journal")


def copy_target_problem(dest: str | os.PathLike, database: str) -> str | None:
    """Why a copy must not be written at `dest` (replacing what is there), or None: something that
    is not a regular file (a device such as /dev/null, a link, a folder), or the database
    `database` itself or one of its side files, under any name."""
    dest = os.fspath(dest)
    try:
        st = os.lstat(dest)
    except FileNotFoundError:
        st = None
    except OSError as e:
        return f"cannot read {dest}: {e.strerror}"
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            return f"{dest} is a directory; give a file path"
        if stat.S_ISLNK(st.st_mode):
            return f"{dest} is a symbolic link (to {os.path.realpath(dest)}); give the real path"
        if not stat.S_ISREG(st.st_mode):
            return f"{dest} exists and is not a regular file; it is never replaced; give a file path"
    real = os.path.realpath(database)
    target = os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(dest))), os.path.basename(dest))
    for suffix in SIDE_FILES:
        side = real + suffix
        same = target == side
        if not same and st is not None:
            try:
                sst = os.stat(side)
                same = (sst.st_dev, sst.st_ino) == (st.st_dev, st.st_ino)
            except OSError:
                pass
        if same:
            what = "the database itself" if not suffix else f"the database's {suffix} file"
            return f"{dest} is {what} ({side}); write the copy elsewhere"
    return None


# Filesystems of the kernel, not disks (/proc, /sys, /dev): a copy written there fails, or is lost
# at the next reboot (devtmpfs).
NOT_STORAGE_FS = {
    "proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs", "pstore",
    "bpf", "configfs", "fusectl", "mqueue", "binfmt_misc", "efivarfs", "selinuxfs", "rpc_pipefs", "nsfs",
    "autofs", "hugetlbfs",
}


def copy_folder_problem(dest: str | os.PathLike) -> str | None:
    """Why no copy can be written in the folder of `dest`, or None: the folder is missing, or it is
    on a filesystem of the kernel that keeps no files on a disk (/proc, /sys, /dev)."""
    folder = os.path.dirname(os.path.abspath(dest))
    if not os.path.isdir(folder):
        return f"the folder {folder} does not exist; create it first or give another path"
    try:
        mounts = Path("/proc/mounts").read_text()
    except OSError:
        return None
    fstype = filesystem_type(os.path.realpath(folder), mounts)
    if fstype in NOT_STORAGE_FS:
        return (f"{os.fspath(dest)} is on {fstype}, a filesystem of the kernel, not a disk that keeps files; "
                "write the copy to a disk")
    return None


def free_bytes(folder: str | os.PathLike) -> int | None:
    """The bytes an unprivileged writer may still use on the filesystem of `folder`, or None."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


# -- sole use --------------------------------------------------------------------------------------

# Where SQLite's unix VFS keeps its locks: a connection holds a read lock on the database file's
# SHARED range while it is in WAL mode, and on the -shm's DMS byte while it has the WAL index
# mapped; the first to take them exclusively knows nobody else has the database open.
PENDING_BYTE, SHARED_FIRST, SHARED_SIZE = 0x40000000, 0x40000002, 510
SHM_DMS = 128


class InUse(Exception):
    """Another process has the database open."""


class SoleUse:
    """Hold SQLite's locks on a database the way only a sole user can: while held, nobody else has
    it open, and a process that tries to open it waits (its busy timeout) or gives up. Raises InUse
    on entry when another process has it open. Never use it on a file this process has open with
    SQLite: closing these descriptors would drop that connection's locks."""

    def __init__(self, real: str):
        self.real = real
        self.fds: list[int] = []

    def __enter__(self) -> "SoleUse":
        import fcntl

        try:
            for path, ranges in ((self.real, ((1, PENDING_BYTE), (SHARED_SIZE, SHARED_FIRST))),
                                 (self.real + "-shm", ((1, SHM_DMS),))):
                try:
                    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
                except FileNotFoundError:
                    continue
                self.fds.append(fd)
                for length, start in ranges:
                    try:
                        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, length, start)
                    except OSError:
                        raise InUse(path) from None
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []
