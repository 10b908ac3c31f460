"""`enqueue --batch`/`--chain` reads its input as a stream: memory stays flat however many lines,
all or nothing is kept, the ids come after the commit in input order, and no input ends in a
traceback (binary garbage, a huge line without a newline, a closed or endless stdin, nothing)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import JOBCTL, count_rows, run_inproc
from jobctl.engines.base import Inserted, NewJob
from jobctl.spool import JobSpool



def ndjson(n: int, **extra) -> str:
    return "".join(json.dumps({"type": "t", "payload": {"i": i}, **extra}) + "\n" for i in range(n))


# -- the pieces: ids kept compactly, jobs spooled ---------------------------------------------------

def test_inserted_keeps_pairs_in_order_as_runs():
    pairs = [(5, True), (6, True), (7, True), (3, False), (8, True), (8, False), (9, False), (100, True)]
    got = Inserted(pairs)
    assert list(got) == pairs and len(got) == len(pairs) and got.last_id == 100
    assert list(got.ids()) == [p[0] for p in pairs]
    assert len(got._runs) == 3 * 5  # 5..7, 3, 8, 8..9, 100
    many = Inserted((i, True) for i in range(1, 1_000_001))
    assert len(many._runs) == 3 and len(many) == 1_000_000 and many.id_runs() == [(1, 1_000_000)]


def test_the_spool_gives_back_every_field_in_order_from_memory_and_from_its_file():
    jobs = [NewJob(queue=f"q{i}", type="t", payload=json.dumps({"i": i}), payload_hash=f"h{i}", priority=i % 7,
                   max_attempts=3, backoff="[10,30]", timeout_ms=1000 + i, delay_ms=i, not_before=None if i % 2 else i,
                   idempotency_key=f"k{i}" if i % 3 else None, unique=bool(i % 2), after=[1, i] if i % 5 else [],
                   source=f"line {i}", cost_units=2, concurrency_group="g" if i % 4 else None,
                   on_buried="b" if i % 2 else None, on_completed="c", on_cancelled=None, after_previous=bool(i % 3))
            for i in range(2500)]
    for memory in (64 * 1024 * 1024, 1000):  # all in memory; then in a temporary file after the first chunk
        with JobSpool(memory=memory) as spool:
            for job in jobs:
                spool.add(job)
            assert len(spool) == 2500
            for _ in range(2):  # read again from the start (a PostgreSQL retry does)
                again = list(spool)
                assert [tuple(getattr(j, k) for k in NewJob.__slots__) for j in again] == \
                       [tuple(getattr(j, k) for k in NewJob.__slots__) for j in jobs]
            assert (spool._file is None) == (memory > 1000)


# -- the command ------------------------------------------------------------------------------------

def test_a_mixed_batch_crosses_chunks_in_input_order(any_db):
    """Plain lines go in bulk, keyed ones one by one: chunk after chunk, one transaction, ids in order."""
    lines = [{"type": "t", "payload": {"i": i}} for i in range(2500)]
    lines[1500]["key"] = "k1500"
    text = "".join(json.dumps(line) + "\n" for line in lines)
    r = run_inproc("enqueue", "--batch", "-", input=text, db=any_db)
    assert r.exit_code == 0, r.output
    ids = [int(x) for x in r.stdout.split()]
    assert ids == list(range(1, 2501))
    r = run_inproc("enqueue", "--batch", "-", "--json", input=text, db=any_db)
    got = [json.loads(x) for x in r.stdout.splitlines()]
    assert [j["payload"]["i"] for j in got] == list(range(2500))
    assert [j["id"] for j in got if not j["created"]] == [1501]  # the key found its job
    assert len({j["id"] for j in got}) == 2500


def test_a_chain_longer_than_a_chunk_links_every_job_to_the_one_before(any_db):
    r = run_inproc("enqueue", "--chain", "-", input=ndjson(1100), db=any_db)
    assert r.exit_code == 0, r.output
    ids = [int(x) for x in r.stdout.split()]
    for i in (1, 999, 1000, 1001, 1099):  # across the chunk boundary
        job = json.loads(run_inproc("show", ids[i], "--json", db=any_db).stdout)
        assert job["after"] == [ids[i - 1]]


def test_a_bad_line_after_many_chunks_keeps_nothing(any_db):
    text = ndjson(25_000) + '{"type": "t", "priority": "sometimes"}\n'
    r = run_inproc("enqueue", "--batch", "-", input=text, db=any_db)
    assert r.exit_code == 2 and "line 25001" in r.one_error_line(), r.output
    assert r.stdout == ""
    r = run_inproc("list", "--json", db=any_db)
    assert r.stdout == ""


def test_a_line_over_the_payload_limit_is_named(db, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("max_payload_bytes = 100\n")
    text = ndjson(3) + json.dumps({"type": "t", "payload": "x" * 150}) + "\n" + ndjson(2)
    r = run_inproc("--config", cfg, "enqueue", "--batch", "-", input=text, db=db)
    assert r.exit_code == 2, r.output
    line = r.one_error_line()
    assert "line 4" in line and "too large" in line and "nothing was enqueued" in line


def test_an_empty_input_adds_nothing(db):
    r = run_inproc("enqueue", "--batch", "-", "--quiet", input="", db=db)
    assert (r.exit_code, r.stdout, r.stderr) == (0, "", "")
    r = run_inproc("enqueue", "--chain", "-", input="\n\n", db=db)
    assert r.exit_code == 2 and "no jobs in the input" in r.one_error_line()


@pytest.mark.parametrize("data,said", [
    (bytes(range(256)) * 50, "line "),  # binary garbage
    (b'{"type": "t"}\n\xc3\x28\n', "line 2: not UTF-8"),  # invalid UTF-8
    (b'{"type": "t"}\n\x00\x00\x00\n', "line 2"),
    (b'{"type": "t", "payload": "\xed\xa0\x80"}\n', "line 1: not UTF-8"),  # an encoded lone surrogate
])
def test_garbage_is_one_error_line(db, data, said):
    r = run_inproc("enqueue", "--batch", "-", input=data, binary=True, db=db)
    assert r.exit_code == 2, r.output
    assert said in r.one_error_line()
    assert not Path(db).exists()


def test_a_100_mb_line_without_newline_through_a_pipe_is_refused_at_line_1(db):
    feeder = subprocess.Popen([sys.executable, "-c", "import sys\nfor _ in range(100): sys.stdout.buffer.write(b'x' * 2**20)"],
                              stdout=subprocess.PIPE)
    r = subprocess.run([*JOBCTL, "--db", str(db), "enqueue", "--batch", "-"], stdin=feeder.stdout,
                       capture_output=True, text=True, timeout=60)
    feeder.stdout.close()
    feeder.kill()
    feeder.wait()
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("jobctl: error: line 1: longer than") and r.stderr.count("\n") == 1


@pytest.mark.parametrize("flag", ["--batch", "--chain"])
def test_a_closed_stdin_is_one_error_line(db, flag):
    r = subprocess.run([*JOBCTL, "--db", str(db), "enqueue", flag, "-"], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=60, preexec_fn=lambda: os.close(0))
    assert r.returncode == 2, r.stderr
    assert r.stderr == "jobctl: error: standard input is closed: pipe the input in, or give a file instead of -\n"
    r = subprocess.run([*JOBCTL, "--db", str(db), "enqueue", "t", "--payload-file", "-"], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=60, preexec_fn=lambda: os.close(0))
    assert r.returncode == 2 and "standard input is closed" in r.stderr, r.stderr


ENDLESS = "import sys\nw = sys.stdout.write\ni = 0\nwhile True:\n    w('{\"type\": \"t\", \"payload\": %d}\\n' % i)\n    i += 1\n"


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.slow
@pytest.mark.alone  # a bound on memory
@pytest.mark.parametrize("sig,code,said", [(signal.SIGINT, 130, "jobctl: error: interrupted before the end of the input"),
                                           (signal.SIGTERM, -signal.SIGTERM, "")])
def test_an_endless_stdin_ended_by_a_signal_keeps_nothing_and_memory_flat(any_db, sig, code, said):
    """While an endless producer writes, the database is neither locked nor changed, memory stays
    flat (the lines go to a spool), and a signal ends it cleanly: nothing kept, no traceback.

    Memory is watched on each engine once, in the SIGINT run: what is held while lines are read
    does not depend on the signal that will end them. The SIGTERM run reads for 2 s (~17 MiB
    here: past the spool's 8 MiB in memory, into its file), then gets its signal."""
    watch_memory = sig == signal.SIGINT
    feeder = subprocess.Popen([sys.executable, "-c", ENDLESS], stdout=subprocess.PIPE)
    proc = subprocess.Popen([*JOBCTL, "--db", str(any_db), "enqueue", "--batch", "-"], stdin=feeder.stdout,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    feeder.stdout.close()
    try:
        time.sleep(2)
        if watch_memory:
            early = _rss_kib(proc.pid)
            time.sleep(4)  # (several times the 16 MiB below would be read meanwhile: each line kept would show)
            late = _rss_kib(proc.pid)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        feeder.kill()
        feeder.wait()
    assert (proc.returncode, out) == (code, "")
    if said:
        assert err.startswith(said) and err.endswith("jobs); nothing was enqueued\n") and err.count("\n") == 1, err
    else:
        assert err == ""
    if watch_memory:
        assert late - early < 16 * 1024, (early, late)  # KiB: the lines read meanwhile are not held in memory
    if isinstance(any_db, Path):
        assert not any_db.exists()  # never opened: nothing created, nothing locked
    assert count_rows(any_db) == 0 if not isinstance(any_db, Path) else True


@pytest.mark.slow
@pytest.mark.alone  # a bound on memory
def test_peak_memory_of_150k_lines_stays_near_that_of_a_few(db):
    """ru_maxrss of the child: before the stream, 300,000 lines cost ~280 MiB more than 1,000, so
    150,000 held in memory would cost ~140 MiB, well past the 40 MiB allowed here."""
    def peak(n: int) -> float:
        feeder = subprocess.Popen([sys.executable, "-c", f"import sys\nfor i in range({n}): "
                                   "sys.stdout.write('{\"type\":\"t\",\"payload\":{\"i\":%d}}\\n' % i)"],
                                  stdout=subprocess.PIPE)
        proc = subprocess.Popen([*JOBCTL, "--db", str(db), "enqueue", "--batch", "-"], stdin=feeder.stdout,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        feeder.stdout.close()
        _pid, status, usage = os.wait4(proc.pid, 0)
        feeder.wait()
        assert os.waitstatus_to_exitcode(status) == 0, proc.stderr.read()
        proc.stderr.close()
        return usage.ru_maxrss / 1024

    few, many = peak(1_000), peak(150_000)
    assert count_rows(db) == 151_000
    assert many - few < 40, (few, many)  # MiB
