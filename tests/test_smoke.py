import json

from conftest import run_cli


def test_enqueue_claim_complete_roundtrip(cli_process, db):
    """The installed program end to end, each step a real process (most other tests run in-process)."""
    cli = cli_process
    r = cli("enqueue", "send", '{"to": "a"}')
    assert r.exit_code == 0, r.output
    job_id = int(r.stdout)
    r = cli("claim")
    assert r.exit_code == 0, r.output
    job = json.loads(r.stdout)
    assert job["id"] == job_id and job["attempt"] == 1 and job["status"] == "running"
    r = cli("complete", job_id, "--token", job["token"], "--result", '{"ok": true}')
    assert r.exit_code == 0, r.output
    r = cli("show", job_id, "--json")
    shown = json.loads(r.stdout)
    assert shown["status"] == "completed" and shown["result"] == {"ok": True}
    assert [e["to"] for e in shown["events"]] == ["pending", "running", "completed"]


def test_missing_database_is_exit_8_and_not_created(tmp_path):
    path = tmp_path / "typo.db"
    r = run_cli("list", db=path)
    assert r.exit_code == 8, r.output
    assert r.stderr.startswith("jobctl: error: ") and len(r.stderr.splitlines()) == 1
    assert not path.exists()
