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
    fstype = filesystem_type(os.path.realpath(path.parent), mounts)
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


def check_file(path: Path) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise DatabaseUnusable(f"cannot read {path}: {e.strerror}; check the permissions of its folder") from None
    if stat.S_ISLNK(st.st_mode):
        raise DatabaseUnusable(
            f"{path} is a symbolic link; jobctl refuses links to its database so that a link cannot "
            f"redirect it; give the real path ({os.path.realpath(path)})"
        )
    if stat.S_ISDIR(st.st_mode):
        raise DatabaseUnusable(f"{path} is a directory, not a database file; give a file path with --db")
    if not stat.S_ISREG(st.st_mode):
        raise DatabaseUnusable(f"{path} is not a regular file")
    if st.st_mode & 0o022:
        raise DatabaseUnusable(
            f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}); anyone could "
            f"change its jobs; run `chmod 600 {path}`"
        )
