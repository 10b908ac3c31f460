"""Secrets that reached the screen: a URL's password (`scheme://user:PW@host`) and a `--password X`
option in errors, payload strings, progress messages, a run's output and the worker's log; and a
buried job's error printed by `wait` and `enqueue --wait`. Human views mask them; `--reveal` shows
them where a view has it; `--json` stays exact."""

import json
import subprocess
import textwrap
import threading
import time

from conftest import JOBCTL, run_cli
from jobctl.untrusted import mask, mask_text

KEYS = ["password", "passwd", "token", "secret", "api_key", "authorization"]


def test_mask_text_hides_a_urls_password_whatever_the_scheme_and_password_options():
    cases = {
        "could not connect to postgres://bob:s3cr%40t@db:5432/jobs?sslmode=require":
            "could not connect to postgres://bob:***@db:5432/jobs?sslmode=require",
        "redis://:hunter2@cache:6379/0 refused": "redis://:***@cache:6379/0 refused",
        "GET https://alice:p@ss@example.com/x": "GET https://alice:***@example.com/x",  # an unencoded @ hidden whole
        '{"dsn":"amqp://u:pw@mq/vhost","n":1}': '{"dsn":"amqp://u:***@mq/vhost","n":1}',
        "mysql --password hunter2 -u root": "mysql --password *** -u root",
        "mysql --password=hunter2 -u root": "mysql --password=*** -u root",
        "tool --db-password 'a b' --verbose": "tool --db-password '***' --verbose",
        # what is not a secret stays as it is
        "https://example.com:8443/path and mail a@b": "https://example.com:8443/path and mail a@b",
        "postgres://bob@db/jobs": "postgres://bob@db/jobs",
        "cp --verbose src dst -p 5": "cp --verbose src dst -p 5",
        "--password --json": "--password --json",
    }
    for text, shown in cases.items():
        assert mask_text(text, KEYS) == shown, text
    assert mask_text("redis://:hunter2@cache", [], reveal=False) == "redis://:***@cache"  # no key needed
    assert mask_text("redis://:hunter2@cache", KEYS, reveal=True) == "redis://:hunter2@cache"


def test_mask_hides_credentials_inside_payload_strings():
    value = {"dsn": "postgres://u:pw@h/db", "steps": ["run --password x", 3], "password": "y", "n": "a=b"}
    assert mask(value, KEYS) == {"dsn": "postgres://u:***@h/db", "steps": ["run --password ***", 3],
                                 "password": "***", "n": "a=b"}
    assert mask(value, KEYS, reveal=True) is value


def test_list_show_and_stats_mask_url_credentials_in_payloads_errors_and_progress(cli, db):
    job_id = int(cli("enqueue", "t", '{"dsn": "postgres://app:pw-payload@db/x"}').stdout)
    token = json.loads(cli("claim").stdout)["token"]
    r = cli("progress", job_id, "--token", token, "--message", "via redis://:pw-progress@cache")
    assert r.exit_code == 0, r.output
    r = cli("fail", job_id, "--token", token, "--bury", "--error", "cannot reach postgres://app:pw-error@db/x")
    assert r.exit_code == 0, r.output
    for args in (["list"], ["show", job_id], ["stats"]):
        out = cli(*args).stdout
        assert "pw-" not in out, (args, out)
        assert "app:***@db" in out, (args, out)
    shown = cli("show", job_id).stdout
    assert "redis://:***@cache" in shown and "postgres://app:***@db/x" in shown
    revealed = cli("show", job_id, "--reveal").stdout
    assert all(f"pw-{w}" in revealed for w in ("payload", "progress", "error")), revealed
    exact = json.loads(cli("show", job_id, "--json").stdout)
    assert exact["payload"]["dsn"] == "postgres://app:pw-payload@db/x"
    assert exact["error"] == "cannot reach postgres://app:pw-error@db/x"
    assert "pw-error" in cli("list", "--json").stdout and "pw-error" in cli("stats", "--json").stdout


def test_wait_masks_a_buried_jobs_error_and_json_stays_exact(cli, db):
    job_id = int(cli("enqueue", "t").stdout)
    token = json.loads(cli("claim").stdout)["token"]
    error = "refused: api_key=sk-live-9 at postgres://app:pw-9@db/x"
    assert cli("fail", job_id, "--token", token, "--bury", "--error", error).exit_code == 0
    r = cli("wait", job_id)
    assert r.exit_code == 4, r.output
    line = r.one_error_line()
    assert "sk-live-9" not in line and "pw-9" not in line, line
    assert "api_key=***" in line and "postgres://app:***@db/x" in line, line
    r = cli("wait", job_id, "--json")
    assert r.exit_code == 4 and json.loads(r.stdout)["error"] == error
    assert "sk-live-9" not in r.stderr


def test_enqueue_wait_masks_the_error_of_the_job_it_waited_for(db):
    def bury_when_claimable():
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            r = run_cli("claim", db=db)
            if r.exit_code == 0:
                job = json.loads(r.stdout)
                r = run_cli("fail", job["id"], "--token", job["token"], "--bury", "--error",
                            "login failed: password=hunter2 --token tk-77", db=db)
                assert r.exit_code == 0, r.output
                return
            time.sleep(0.1)

    run_cli("init", db=db)
    t = threading.Thread(target=bury_when_claimable)
    t.start()
    try:
        r = run_cli("enqueue", "t", "--wait", "--wait-timeout", "30s", db=db)
    finally:
        t.join()
    assert r.exit_code == 4, r.output
    line = r.one_error_line()
    assert "hunter2" not in line and "tk-77" not in line and "password=***" in line, line


def test_a_handlers_url_password_is_masked_in_the_worker_log_logs_and_show(tmp_path, db):
    (tmp_path / "jobctl.toml").write_text(textwrap.dedent("""
        [types.leaky]
        command = ["sh", "-c", "echo 'psql postgres://app:pw-out@db/x --password pw-opt' >&2; exit 3"]
        max_attempts = 1
        [worker]
        poll = "100ms"
    """))
    base = [*JOBCTL, "--db", str(db), "--config", str(tmp_path / "jobctl.toml")]
    job_id = int(subprocess.run([*base, "enqueue", "leaky"], capture_output=True, text=True).stdout)
    for fmt in ("human", "json"):
        if fmt == "json":
            subprocess.run([*base, "retry", str(job_id)], capture_output=True, check=True)
        r = subprocess.run([*base, "work", "--stop-when-empty", "--log-format", fmt], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        assert "pw-out" not in r.stderr and "pw-opt" not in r.stderr, r.stderr
        assert "postgres://app:***@db/x --password ***" in r.stderr, r.stderr
    for args in (["logs", str(job_id)], ["show", str(job_id)], ["list"]):
        out = subprocess.run([*base, *args], capture_output=True, text=True).stdout
        assert "pw-out" not in out and "pw-opt" not in out and "app:***@db" in out, (args, out)
    logs = subprocess.run([*base, "logs", str(job_id), "--reveal"], capture_output=True, text=True).stdout
    assert "postgres://app:pw-out@db/x --password pw-opt" in logs
    exact = subprocess.run([*base, "logs", str(job_id), "--json"], capture_output=True, text=True).stdout
    assert "pw-out" in exact and "pw-opt" in exact


def test_the_worker_log_masks_a_urls_password_whatever_the_keys():
    import io

    from jobctl.worker.log import Log

    for keys in (None, [], KEYS):
        out = io.StringIO()
        Log("w1", stream=out, secret_keys=keys)("failed", "cannot reach postgres://app:pw-1@db/x")
        assert "pw-1" not in out.getvalue() and "postgres://app:***@db/x" in out.getvalue(), out.getvalue()
