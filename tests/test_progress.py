"""Progress of long operations: the queue reports on_progress(done, total) with growing counts (a batch
still all or nothing), and the CLI draws a bar on stderr only when stderr is a terminal."""

import json
import time

import pytest

from conftest import JOBCTL, run_on_pty
from jobctl.config import Settings
from jobctl.queue import Queue

HOUR_AGO = time.time() - 3600


def recorder():
    calls = []
    return calls, lambda done, total: calls.append((done, total))


def assert_growing(calls, total):
    assert calls, "on_progress was never called"
    done = [d for d, _ in calls]
    assert done == sorted(done) and len(set(done)) == len(done), calls
    assert all(0 < d <= t for d, t in calls), calls
    assert calls[-1] == (total, total), calls


def finished_jobs(db, cancelled=0, buried=0):
    """Jobs that finished an hour ago: `cancelled` cancelled ones, then `buried` buried ones. (Made
    with synchronous=normal: a thousand commits without a disk sync each; what is tested comes later.)"""
    with Queue.open(db, Settings(synchronous="normal"), create=True, clock=lambda: HOUR_AGO) as q:
        results = q.insert([q.prepare("t", {"i": i}) for i in range(cancelled + buried)])
        for r in results[:cancelled]:
            q.cancel(r.id)
        for _ in range(buried):
            job = q.claim(worker="w")
            q.fail(job.id, token=job.token, error="boom", bury=True)


def test_batch_insert_reports_progress_inside_one_transaction(db):
    with Queue.open(db, create=True) as q:
        calls, on_progress = recorder()
        results = q.insert([q.prepare("t", {"i": i}) for i in range(2500)], on_progress=on_progress)
        assert len(results) == 2500
        assert calls == [(1000, 2500), (2000, 2500), (2500, 2500)]

        # Jobs with keys take the one-by-one path: it reports too.
        calls, on_progress = recorder()
        q.insert([q.prepare("t", {"i": i}, key=f"k{i}") for i in range(1500)], on_progress=on_progress)
        assert calls == [(1000, 1500), (1500, 1500)]


def test_batch_stays_all_or_nothing_when_interrupted_between_chunks(db):
    with Queue.open(db, create=True) as q:
        q.enqueue("before")

        def interrupt(done, total):
            if done >= 2000:
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            q.insert([q.prepare("t", {"i": i}) for i in range(2500)], on_progress=interrupt)
        assert [j.type for j in q.list_jobs(limit=10)] == ["before"]
        assert q.enqueue("after").id == 2  # the rolled-back ids were not consumed


def test_purge_reports_progress_over_every_status(db):
    finished_jobs(db, cancelled=700, buried=600)
    with Queue.open(db) as q:
        calls, on_progress = recorder()
        counts = q.purge(cancelled_older_than="1m", buried_older_than="1m", on_progress=on_progress)
        assert counts == {"cancelled": 700, "buried": 600}
        assert_growing(calls, 1300)
        assert len(calls) >= 3  # batches of 500
        assert {t for _, t in calls} == {1300}
        assert q.purge(cancelled_older_than="1m", on_progress=on_progress) == {"cancelled": 0}


def test_retry_buried_reports_progress(db):
    finished_jobs(db, buried=250)
    with Queue.open(db) as q:
        calls, on_progress = recorder()
        assert len(q.retry_buried(dry_run=True, on_progress=on_progress)) == 250
        assert calls[-1] == (250, 250)  # after each short transaction (at most 1,000 jobs)
        calls, on_progress = recorder()
        assert len(q.retry_buried(on_progress=on_progress)) == 250
        assert calls[-1] == (250, 250)
        assert q.list_jobs(statuses=["pending"], limit=1000).__len__() == 250


def test_backup_reports_pages_copied(db, tmp_path):
    with Queue.open(db, create=True) as q:
        q.insert([q.prepare("t", {"blob": "x" * 1500, "i": i}) for i in range(15000)])  # > 4096 pages
        calls, on_progress = recorder()
        q.engine.backup(tmp_path / "copy.db", on_progress=on_progress)
    assert len(calls) >= 2, calls
    assert_growing(calls, calls[-1][1])
    with Queue.open(tmp_path / "copy.db") as copy:
        assert json.loads(copy.get(15000).payload)["i"] == 14999


# -- the CLI: a bar on a terminal, nothing in a pipe ---------------------------------------------


def run_on_terminal(args, tmp_path):
    """Run jobctl with stderr on a pseudo-terminal and stdout in a file; return (code, stdout, stderr)."""
    out_path = tmp_path / "stdout.txt"
    with open(out_path, "wb") as out:
        code, drawn, _ = run_on_pty([*JOBCTL, *args], stdout=out)
    return code, out_path.read_text(), drawn


def test_enqueue_batch_from_a_file_draws_a_bar_on_a_terminal_only(db, tmp_path, cli):
    batch = tmp_path / "jobs.ndjson"
    batch.write_text("".join(f'{{"type": "t", "payload": {{"i": {i}}}}}\n' for i in range(2500)))

    code, out, err = run_on_terminal(["--db", db, "enqueue", "--batch", batch], tmp_path)
    assert code == 0, err
    assert out.split() == [str(i) for i in range(1, 2501)]
    assert "enqueueing" in err and "2500/2500" in err and "100%" in err, err
    assert "━" in err  # the bar itself

    r = cli("enqueue", "--batch", batch)
    assert r.exit_code == 0, r.output
    assert r.stderr == "" and len(r.stdout.split()) == 2500
    r = cli("enqueue", "--batch", "-", input=batch.read_text())
    assert r.exit_code == 0, r.output
    assert r.stderr == "" and r.stdout.split()[-1] == "7500"


def test_a_small_batch_draws_no_bar_even_on_a_terminal(db, tmp_path):
    batch = tmp_path / "jobs.ndjson"
    batch.write_text('{"type": "t"}\n{"type": "u"}\n')
    code, out, err = run_on_terminal(["--db", db, "enqueue", "--batch", batch, "--quiet"], tmp_path)
    assert (code, out, err) == (0, "1\n2\n", "")


def test_purge_draws_a_bar_on_a_terminal_only(db, tmp_path, cli):
    finished_jobs(db, cancelled=1200)
    r = cli("purge", "--cancelled-older-than", "1m", "--dry-run")
    assert (r.exit_code, r.stdout, r.stderr) == (0, "1200\n", "")

    code, out, err = run_on_terminal(["--db", db, "purge", "--cancelled-older-than", "1m"], tmp_path)
    assert (code, out) == (0, "1200\n"), err
    assert "purging" in err and "1200/1200" in err, err

    finished_jobs(db, cancelled=1200)
    r = cli("purge", "--cancelled-older-than", "1m")
    assert (r.exit_code, r.stdout, r.stderr) == (0, "1200\n", "")


# -- queue names also complete on work --queue, list --queue, pause QUEUE and resume QUEUE --------
# (kept here, beside the other issue-4 leftovers, so tests/test_completions.py stays untouched)


def test_queue_names_complete_on_work_list_pause_and_resume(db):
    from test_completions import complete

    with Queue.open(db, create=True) as q:
        q.enqueue("t", {}, queue="billing")
        q.enqueue("t", {}, queue="bulk")
        q.enqueue("t", {}, queue="email")
    for cmd in ("work --queue", "work -q", "list --queue", "pause", "resume"):
        code, words, err = complete(f"jobctl --db {db} {cmd} b", 3 + len(cmd.split()))
        assert code == 0 and words == ["billing", "bulk"], (cmd, words, err)
