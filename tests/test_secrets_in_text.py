"""Secret-looking `key=value`, `key: value` and `"key": "value"` pairs in free text (errors, a
run's stderr, progress messages, the worker's log) are masked in human views like payload keys;
`--reveal` shows them and `--json` stays exact."""

import json
import subprocess
import textwrap

from conftest import JOBCTL
from jobctl.untrusted import mask_text

KEYS = ["password", "passwd", "token", "secret", "api_key", "authorization"]


def test_mask_text_forms():
    cases = {
        "login failed: password=hunter2 for bob": "login failed: password=*** for bob",
        "Authorization: Bearer abc.def user=x": "Authorization: *** user=x",
        '{"api_key": "k-123", "n": 1}': '{"api_key": "***", "n": 1}',
        "token: t0k, next": "token: ***, next",
        "GET https://x/?a=1&client_secret=zz HTTP/1.1": "GET https://x/?a=1&client_secret=*** HTTP/1.1",
        "db_password = 'p w' x": "db_password = '***' x",
        "at 12:30 the queue=billing": "at 12:30 the queue=billing",
        '{"token":null,"password":"null"}': '{"token":null,"password":"***"}',  # JSON's null hides nothing
    }
    for text, shown in cases.items():
        assert mask_text(text, KEYS) == shown, text
    assert mask_text("password=hunter2", KEYS, reveal=True) == "password=hunter2"


def test_errors_and_progress_are_masked_in_human_views_only(cli):
    job_id = int(cli("enqueue", "t").stdout)
    claimed = json.loads(cli("claim").stdout)
    assert cli("progress", job_id, "--token", claimed["token"], "--message", "using token=abc-progress").exit_code == 0
    r = cli("fail", job_id, "--token", claimed["token"], "--bury", "--error", "login refused: password=hunter2")
    assert r.exit_code == 0, r.output
    for args in (["show", job_id], ["list"], ["stats"]):
        out = cli(*args).stdout
        assert "hunter2" not in out, (args, out)
        assert "password=***" in out, (args, out)
    assert "hunter2" in cli("show", job_id, "--reveal").stdout
    assert json.loads(cli("show", job_id, "--json").stdout)["error"] == "login refused: password=hunter2"
    assert "hunter2" in cli("stats", "--json").stdout


def test_a_handlers_stderr_is_masked_in_show_and_in_the_worker_log(tmp_path, db):
    (tmp_path / "jobctl.toml").write_text(textwrap.dedent("""
        [types.leaky]
        command = ["sh", "-c", "echo 'connecting with api_key=sk-live-123' >&2; exit 3"]
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
        assert "sk-live-123" not in r.stderr and "api_key=***" in r.stderr, r.stderr
    shown = subprocess.run([*base, "show", str(job_id)], capture_output=True, text=True).stdout
    assert "sk-live-123" not in shown and "api_key=***" in shown, shown
    exact = json.loads(subprocess.run([*base, "show", str(job_id), "--json"], capture_output=True, text=True).stdout)
    assert "sk-live-123" in json.dumps(exact)
