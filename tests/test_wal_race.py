"""The -wal race: jobctl checks the database's side files, then SQLite opens (and creates) them.
Another user who creates a -wal of theirs in between, and keeps it open, would read every page
written to it. The race is made deterministic here: the victim runs as uid 65534 (nobody) in a
forked child whose check of the files is followed by a pause, in which the attacker (uid 65533,
played by the root parent) creates the -wal, 0666, and keeps it open. Tests run as root."""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import pytest

from conftest import run_cli

VICTIM, ATTACKER = 65534, 65533

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to play two other users")


@pytest.fixture
def victim_folder():
    """A 0700 folder of the victim's, reachable by it (under /tmp, not under root's private tmp_path)."""
    folder = tempfile.mkdtemp(prefix="jobctl-race-", dir="/tmp")  # (handed to the victim by victim_database)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def victim_database(folder: str) -> str:
    db = os.path.join(folder, "jobs.db")
    r = run_cli("enqueue", "t", '{"password": "hunter2"}', db=db)
    assert r.exit_code == 0, r.output
    for name in os.listdir(folder):
        os.chown(os.path.join(folder, name), VICTIM, VICTIM)
    os.chown(folder, VICTIM, VICTIM)
    assert sorted(os.listdir(folder)) == ["jobs.db"]  # the last close removed the -wal and -shm
    return db


def open_as_victim_while(db: str, plant) -> dict:
    """Open the database in a child running as the victim; between its check of the files and
    SQLite's open, call plant() here (as root). What the open did, as {"ok": ...} or {"error": ...}."""
    go_r, go_w = os.pipe()
    ready_r, ready_w = os.pipe()
    out_r, out_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the victim
        code = 0
        try:
            os.close(go_w), os.close(ready_r), os.close(out_r)
            os.setgroups([])
            os.setgid(VICTIM)
            os.setuid(VICTIM)
            from jobctl.engines import files
            from jobctl.engines.sqlite import SQLiteEngine
            from jobctl.errors import JobctlError

            checked = files.check_file

            def check_then_wait(*args, **kwargs):
                real = checked(*args, **kwargs)
                os.write(ready_w, b"checked")
                os.read(go_r, 1)  # the attacker's moment
                return real

            files.check_file = check_then_wait
            try:
                engine = SQLiteEngine.open(db)
                try:
                    engine.conn.execute("BEGIN IMMEDIATE")
                    engine.conn.execute("UPDATE jobs SET payload = payload")  # (pages written to the -wal)
                    engine.conn.execute("COMMIT")
                finally:
                    engine.close()
                result = {"ok": True}
            except JobctlError as e:
                result = {"error": str(e), "exit_code": e.exit_code}
            os.write(out_w, json.dumps(result).encode())
        except BaseException as e:  # noqa: BLE001 (reported to the parent, never raised in a fork)
            os.write(out_w, json.dumps({"crash": repr(e)}).encode())
            code = 1
        finally:
            os._exit(code)
    os.close(go_r), os.close(ready_w), os.close(out_w)
    try:
        assert os.read(ready_r, 7) == b"checked"
        plant()
        os.write(go_w, b"x")
        data = b""
        while chunk := os.read(out_r, 65536):
            data += chunk
    finally:
        os.close(go_w), os.close(ready_r), os.close(out_r)
        os.waitpid(pid, 0)
    return json.loads(data)


def test_a_wal_another_user_creates_between_the_check_and_the_open_is_refused_with_nothing_written(victim_folder):
    db = victim_database(victim_folder)
    before = open(db, "rb").read()
    held = {}

    def plant():
        fd = os.open(db + "-wal", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o666)
        os.fchmod(fd, 0o666)
        os.fchown(fd, ATTACKER, ATTACKER)
        held["fd"] = fd

    result = open_as_victim_while(db, plant)
    try:
        assert "error" in result, result
        assert result["exit_code"] == 8
        message = result["error"]
        assert f"{db}-wal" in message and "belongs to" in message and "uid 65533" in message, message
        assert "nothing was written" in message, message
        # what the attacker's open file shows: nothing of the queue
        assert os.fstat(held["fd"]).st_size == 0
        assert os.pread(held["fd"], 1 << 20, 0) == b""
    finally:
        os.close(held["fd"])
    assert open(db, "rb").read() == before


def test_a_side_file_whose_name_now_holds_another_file_is_refused(tmp_path):
    """The -wal SQLite has open must be the file at that name (same device and inode)."""
    from jobctl.engines import files
    from jobctl.engines.sqlite import SQLiteEngine
    from jobctl.errors import DatabaseUnusable

    db = tmp_path / "q" / "jobs.db"
    engine = SQLiteEngine.open(db, create=True)
    try:
        real = os.path.realpath(db)
        files.check_open_side_files(real)  # as opened: fine
        os.unlink(real + "-wal")
        with pytest.raises(DatabaseUnusable) as e:  # the open file has no name any more
            files.check_open_side_files(real)
        assert f"{real}-wal was replaced" in str(e.value) and "nothing was written" in str(e.value), str(e.value)
        with open(real + "-wal", "wb"):
            pass
        with pytest.raises(DatabaseUnusable) as e:  # another file has its name
            files.check_open_side_files(real)
        assert f"{real}-wal was replaced" in str(e.value), str(e.value)
    finally:
        engine.close()


def test_the_race_is_not_even_possible_in_a_folder_others_may_write(tmp_path):
    """The careful half: root's SQLite hands an empty planted -wal to the database's owner with the
    database's mode, so no look afterwards can tell; a database is never kept where others can
    create files (a sticky /tmp included): exit 8, nothing created."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    (tmp_path / "jobctl.toml").write_text('[types.t]\ncommand = ["true"]\n')

    def refused(*args):
        r = run_cli(*args, db=shared / "jobs.db")
        assert r.exit_code == 8, r.output
        line = r.one_error_line()
        assert "others may create files in" in line and "-wal" in line and "mkdir -m 700" in line, line

    for args in (("init",), ("enqueue", "t", "{}")):
        refused(*args)
    assert list(shared.iterdir()) == []
    made = tmp_path / "made" / "jobs.db"
    assert run_cli("enqueue", "t", "{}", db=made).exit_code == 0
    os.rename(made, shared / "jobs.db")
    before = (shared / "jobs.db").read_bytes()
    for args in (("list",), ("enqueue", "t", "{}"), ("work", "--stop-when-empty")):
        refused(*args)
    assert sorted(p.name for p in shared.iterdir()) == ["jobs.db"]
    assert (shared / "jobs.db").read_bytes() == before
