"""A handler's JOBCTL_DB carries no password: a handler that prints it (a connection error) must not
put the database's password into the worker's log, `logs`, `show` or `list`. The password reaches
the handler in a private file (libpq's passfile, named in the URL), so `jobctl progress` in the
handler still connects. The test server trusts every connection, so it accepts any password: the
handler checks what libpq read from the file instead."""

import json
import os
import stat
import subprocess
import sys
import textwrap

import pytest

from conftest import JOBCTL, run_cli
from jobctl import engines
from jobctl.worker.passfile import HandlerDb

PASSWORD = "s3cret:pw\\x"  # a : and a \ to escape in the passfile
ENCODED = "s3cret%3Apw%5Cx"

# The handler: prints its JOBCTL_DB (as a failing connection might), reports what it was given,
# and calls `jobctl progress` (a worker's job) or `jobctl list` (under `jobctl run`).
HANDLER = r"""
import json, os, stat, subprocess, sys
import psycopg2, psycopg2.extensions
url = os.environ["JOBCTL_DB"]
print("connecting to", url, flush=True)
print("cannot connect to", url, file=sys.stderr, flush=True)
passfile = psycopg2.extensions.parse_dsn(url).get("passfile")
st = os.stat(passfile)
conn = psycopg2.connect(url)
seen = {"url": url, "env_has_password": any(sys.argv[2] in v for v in os.environ.values()),
        "file_mode": stat.S_IMODE(st.st_mode), "folder_mode": stat.S_IMODE(os.stat(os.path.dirname(passfile)).st_mode),
        "libpq_password": conn.info.password, "passfile": passfile}
conn.close()
if os.environ["JOBCTL_JOB_ID"]:
    args = ["progress", os.environ["JOBCTL_JOB_ID"], "--token", os.environ["JOBCTL_TOKEN"], "--message", "half way"]
else:
    args = ["list", "--json"]
r = subprocess.run([sys.executable, "-m", "jobctl", *args], capture_output=True, text=True)
seen["jobctl"] = [r.returncode, r.stderr]
with open(sys.argv[1], "w") as f:
    json.dump(seen, f)
"""


def with_password(url: str, *, in_query: bool = False) -> str:
    if in_query:
        return f"{url}{'&' if '?' in url else '?'}password={ENCODED}"
    return url.replace("postgresql://postgres@", f"postgresql://postgres:{ENCODED}@", 1)


def setup(tmp_path, report):
    handler = tmp_path / "handler.py"
    handler.write_text(textwrap.dedent(HANDLER))
    config = tmp_path / "jobctl.toml"
    config.write_text(textwrap.dedent(f"""
        [types.t]
        command = [{json.dumps(sys.executable)}, {json.dumps(str(handler))}, {json.dumps(str(report))}, "s3cret"]
        max_attempts = 1
        [worker]
        poll = "100ms"
    """))
    return ["--config", str(config)]


def check_report(report, url):
    seen = json.loads(report.read_text())
    assert "s3cret" not in seen["url"] and not seen["env_has_password"], seen
    assert seen["url"].startswith(engines.without_password(url)[0] + "&passfile="), seen
    assert (seen["file_mode"], seen["folder_mode"]) == (0o600, 0o700), seen
    assert seen["libpq_password"] == PASSWORD, seen  # libpq read the password from the file
    assert seen["jobctl"] == [0, ""], seen  # jobctl inside the handler connected (and its progress was taken)
    assert not os.path.exists(seen["passfile"]) and not os.path.exists(os.path.dirname(seen["passfile"])), seen
    return seen


def test_a_workers_handler_gets_the_url_without_its_password_and_jobctl_there_connects(tmp_path, pg_url):
    url = with_password(pg_url)
    report = tmp_path / "report.json"
    cfg = setup(tmp_path, report)
    r = run_cli(*cfg, "enqueue", "t", db=url)
    assert r.exit_code == 0, r.output
    job_id = int(r.stdout)
    worker = subprocess.run([*JOBCTL, "--db", url, *cfg, "work", "--stop-when-empty"], capture_output=True,
                            text=True, timeout=60, env={**os.environ, "JOBCTL_DB": url})
    assert worker.returncode == 0, worker.stderr
    check_report(report, url)
    assert "s3cret" not in worker.stderr, worker.stderr
    for args in (["logs", job_id], ["logs", job_id, "--json"], ["show", job_id, "--json"], ["list"]):
        out = run_cli(*cfg, *args, db=url).stdout
        assert "s3cret" not in out, (args, out)
    assert "connecting to postgresql://postgres@127.0.0.1" in run_cli(*cfg, "logs", job_id, db=url).stdout


def test_jobctl_run_gives_its_handler_the_url_without_its_password(tmp_path, pg_url):
    url = with_password(pg_url, in_query=True)
    assert run_cli("init", db=url).exit_code == 0
    report = tmp_path / "report.json"
    cfg = setup(tmp_path, report)
    r = run_cli(*cfg, "run", "t", db=url)
    assert r.exit_code == 0, r.output
    check_report(report, url)
    assert "s3cret" not in r.stdout and "s3cret" not in r.stderr, r.output


def test_a_handler_never_gets_the_passphrase_of_the_client_key(tmp_path, pg_url):
    """sslpassword (the passphrase of the client's TLS key) is a password too: it went to the
    handler in JOBCTL_DB as written, where `ps e` and anything the handler prints show it. The
    handler's JOBCTL_DB leaves it out (libpq has no file to read it from, as it has for a
    password); the server here uses no TLS, so jobctl in the handler still connects."""
    url = with_password(pg_url) + "&sslpassword=kEyPaSs"
    report = tmp_path / "report.json"
    handler = tmp_path / "handler.py"
    handler.write_text(textwrap.dedent(r"""
        import json, os, subprocess, sys
        r = subprocess.run([sys.executable, "-m", "jobctl", "progress", os.environ["JOBCTL_JOB_ID"], "--token",
                            os.environ["JOBCTL_TOKEN"], "--message", "half way"], capture_output=True, text=True)
        with open(sys.argv[1], "w") as f:
            json.dump({"env": dict(os.environ), "jobctl": [r.returncode, r.stderr]}, f)
    """))
    config = tmp_path / "jobctl.toml"
    config.write_text(f"[types.t]\ncommand = [{json.dumps(sys.executable)}, {json.dumps(str(handler))}, "
                      f"{json.dumps(str(report))}]\nmax_attempts = 1\n")
    cfg = ["--config", str(config)]
    assert run_cli(*cfg, "enqueue", "t", db=url).exit_code == 0
    worker = subprocess.run([*JOBCTL, "--db", url, *cfg, "work", "--stop-when-empty"], capture_output=True,
                            text=True, timeout=60)
    assert worker.returncode == 0, worker.stderr
    seen = json.loads(report.read_text())
    assert seen["jobctl"] == [0, ""], seen
    leaks = {k: v for k, v in seen["env"].items() if "kEyPaSs" in v or "s3cret" in v}
    assert leaks == {}, leaks
    assert "sslpassword" not in seen["env"]["JOBCTL_DB"] and "passfile=" in seen["env"]["JOBCTL_DB"], seen["env"]
    assert "kEyPaSs" not in worker.stderr, worker.stderr


@pytest.mark.parametrize("url, bare, password", [
    ("postgresql://app:p%40ss@db:5432/q?sslmode=require", "postgresql://app@db:5432/q?sslmode=require", "p@ss"),
    ("postgresql://app@db/q?password=a%26b&sslmode=disable", "postgresql://app@db/q?sslmode=disable", "a&b"),
    ("postgres://:pw@db/q", "postgres://db/q", "pw"),
    ("postgresql://app@db/q?sslkey=/k&sslpassword=kp&sslmode=require", "postgresql://app@db/q?sslkey=/k&sslmode=require",
     None),  # the client key's passphrase is left out (libpq reads it from no file)
    ("postgresql://app@db/q?pass%77ord=pw&x=1", "postgresql://app@db/q?x=1", "pw"),  # (libpq decodes the name)
    ("postgresql://app@db/q", "postgresql://app@db/q", None),
    ("/var/lib/jobctl/a?b.db", "/var/lib/jobctl/a?b.db", None),
])
def test_without_password(url, bare, password):
    assert engines.without_password(url) == (bare, password)


def test_a_handler_db_without_a_password_is_the_url_itself_and_a_file_is_private(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    for db in ("/tmp/x.db", "postgresql://app@db/q"):
        h = HandlerDb(db)
        assert (h.url, h.folder) == (db, None)
    h = HandlerDb("postgresql://app:pw@db/q")
    try:
        path = h.url.split("passfile=")[1]
        assert h.url == f"postgresql://app@db/q?passfile={path}" and path.startswith(str(tmp_path))
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert open(path).read() == "*:*:*:*:pw\n"
    finally:
        h.close()
    assert not os.path.exists(path)
