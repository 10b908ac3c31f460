"""A worker killed with SIGKILL leaves no handler running: its keeper kills every handler's
process group (and what left the group with setsid) when the worker is gone, so that a handler
never outlives its lease and a concurrency limit holds across a killed worker."""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import JOBCTL, keeper_of
from jobctl import handlers
from jobctl.worker import keeper, keeper_process

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux: /proc and pidfds")


def _alive(pid: int) -> bool:
    return handlers.proc_start(pid) is not None  # (a zombie is dead: it only waits to be reaped)


def _wait_for(predicate, timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def _worker(tmp_path, cfg, *args, log="worker.log"):
    out = open(tmp_path / log, "wb")
    return subprocess.Popen([*JOBCTL, "--db", str(tmp_path / "q.db"), "--config", str(cfg), "work", *args],
                            stdout=out, stderr=subprocess.STDOUT)


def _enqueue(tmp_path, cfg, n: int, *payload: str):
    for _ in range(n):
        subprocess.run([*JOBCTL, "--db", str(tmp_path / "q.db"), "--config", str(cfg), "enqueue", "t", *payload],
                       check=True, capture_output=True, timeout=30)


@pytest.mark.alone  # all gone within 2 s of the kill
def test_no_handler_of_a_killed_worker_is_left_running(tmp_path):
    """Two handlers, each with a child in its group and one that left it with setsid: all gone
    within a second or two of the worker's SIGKILL."""
    pids = tmp_path / "pids"
    script = tmp_path / "h.sh"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        sleep 60 & echo $! >> {pids}
        setsid sleep 60 & echo $! >> {pids}
        echo $$ >> {pids}
        wait
    """))
    script.chmod(0o755)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[types.t]\ncommand = ["{script}"]\n')
    _enqueue(tmp_path, cfg, 2)
    w = _worker(tmp_path, cfg, "--concurrency", "2")
    try:
        assert _wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 6, 20), (
            tmp_path / "worker.log").read_text()
        started = [int(p) for p in pids.read_text().split()]
        assert all(_alive(p) for p in started)
        w.send_signal(signal.SIGKILL)
        w.wait(10)
        assert _wait_for(lambda: not any(_alive(p) for p in started), 2.0), [p for p in started if _alive(p)]
    finally:
        if w.poll() is None:
            w.kill()
            w.wait()
        for p in (int(x) for x in pids.read_text().split()) if pids.exists() else ():
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass


def test_a_worker_that_exits_normally_ends_its_keeper(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[types.t]\ncommand = ["true"]\n')
    _enqueue(tmp_path, cfg, 1)
    w = _worker(tmp_path, cfg, "--stop-when-empty")
    assert w.wait(30) == 0
    assert keeper_of(w.pid) is None


@pytest.mark.alone  # the keeper reads within 0.3 s, kills within 2 s
def test_the_keeper_kills_the_groups_it_was_told_of_when_its_worker_ends(tmp_path):
    """The keeper alone, with a stand-in worker: a handler told to it is killed (its whole
    group) once the worker exits; a process never told of, and a pid reused since, are not."""
    code = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {os.path.dirname(os.path.dirname(keeper.__file__))!r})
        from jobctl import handlers
        from jobctl.worker.keeper import Keeper
        k = Keeper.start()
        h = os.posix_spawn("/bin/sh", ["sh", "-c", "sleep 60 & sleep 60"], os.environ, setsid=True)
        t = handlers.boot_ticks()
        k.add(h, t - 100, t + 100, "tok")
        other = os.posix_spawn("/bin/sleep", ["sleep", "60"], os.environ, setsid=True)
        k.add(other, 0, 1, "")  # its start time is not in the range: another process's pid
        print(h, other, flush=True)
        time.sleep(60)
    """)
    stand_in = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    h, other = map(int, stand_in.stdout.readline().split())
    try:
        assert _wait_for(lambda: len(_group(h)) == 3, 5), _group(h)
        group = _group(h)
        time.sleep(0.3)  # the keeper has read the records
        stand_in.kill()
        stand_in.wait()
        assert _wait_for(lambda: not any(_alive(p) for p in group), 2.0)
        assert _alive(other)
    finally:
        for p in [other, *_group(h)]:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass


def _group(pgid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and _alive(int(name)):
            try:
                if os.getpgid(int(name)) == pgid:
                    found.append(int(name))
            except OSError:
                pass
    return found


def _max_overlap(lines: list[str]) -> int:
    """Most handlers running at once, from their own logs: `start JOB T` and `tick JOB T` lines
    (a handler killed with SIGKILL writes no end: its last tick is when it was last seen)."""
    spans: dict[str, list[float]] = {}
    for line in lines:
        kind, job, t = line.split()
        span = spans.setdefault(job, [float(t), float(t)])
        span[1] = max(span[1], float(t))
        span[0] = min(span[0], float(t))
    events = sorted([(s, 1) for s, _ in spans.values()] + [(e, -1) for _, e in spans.values()],
                    key=lambda x: (x[0], x[1]))
    now = most = 0
    for _, d in events:
        now += d
        most = max(most, now)
    return most


@pytest.mark.slow
def test_a_concurrency_limit_holds_when_a_worker_is_killed(tmp_path):
    """concurrency_limit = 2, two workers of --concurrency 2; the one running both slots is killed
    with SIGKILL; its leases expire and the other worker takes the jobs: never more than two
    handlers at once, as the handlers' own logs show."""
    log = tmp_path / "runs.log"
    script = tmp_path / "h.sh"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        echo "start $JOBCTL_JOB_ID.$JOBCTL_ATTEMPT $(date +%s.%N)" >> {log}
        n=5; [[ $(cat) == *long* && $JOBCTL_ATTEMPT == 1 ]] && n=1800  # the runs of the worker killed: 3 min
        for i in $(seq $n); do echo "tick $JOBCTL_JOB_ID.$JOBCTL_ATTEMPT $(date +%s.%N)" >> {log}; sleep 0.1; done
    """))
    script.chmod(0o755)
    cfg = tmp_path / "c.toml"
    cfg.write_text(textwrap.dedent(f"""\
        [types.t]
        command = ["{script}"]
        concurrency_limit = 2
        [worker]
        lease = "1s"
        poll = "100ms"
        recover_every = "1s"  # b looks for expired leases every second, not every 30 s
    """))
    _enqueue(tmp_path, cfg, 2, '"long"')
    _enqueue(tmp_path, cfg, 4)
    a = _worker(tmp_path, cfg, "--concurrency", "2", log="a.log")
    b = None
    try:
        assert _wait_for(lambda: log.exists() and log.read_text().count("start") == 2, 20), (tmp_path / "a.log").read_text()
        b = _worker(tmp_path, cfg, "--concurrency", "2", log="b.log")
        time.sleep(1.0)  # b runs, waiting on the limit
        a.send_signal(signal.SIGKILL)
        a.wait(10)

        def completed():
            with sqlite3.connect(tmp_path / "q.db") as conn:
                return conn.execute("SELECT count(*) FROM jobs WHERE status = 'completed'").fetchone()[0] == 6

        assert _wait_for(completed, 120, 0.5), (tmp_path / "b.log").read_text()
        lines = log.read_text().split("\n")
        starts = {line.split()[1] for line in lines if line.startswith("start")}
        assert len(starts) == 8, (tmp_path / "b.log").read_text()  # every job ran, the killed two twice
        assert _max_overlap([line for line in lines if line]) <= 2
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()



def test_a_worker_whose_keeper_was_killed_says_so_once_and_works_on(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[types.t]\ncommand = ["true"]\n[worker]\npoll = "100ms"\nlease = "3s"\n')  # renewed every 1 s
    _enqueue(tmp_path, cfg, 1)
    w = _worker(tmp_path, cfg)
    try:
        assert _wait_for(lambda: keeper_of(w.pid) is not None, 20)
        os.kill(keeper_of(w.pid), signal.SIGKILL)
        # said while the worker runs on (at its registry's renewal), not only when it stops
        assert _wait_for(lambda: " keeper: " in (tmp_path / "worker.log").read_text(), 10), (
            tmp_path / "worker.log").read_text()
        _enqueue(tmp_path, cfg, 2)

        def done():
            with sqlite3.connect(tmp_path / "q.db") as conn:
                return conn.execute("SELECT count(*) FROM jobs WHERE status = 'completed'").fetchone()[0] == 3

        assert _wait_for(done, 30, 0.2), (tmp_path / "worker.log").read_text()
        w.send_signal(signal.SIGTERM)
        assert w.wait(30) == 0
        log = (tmp_path / "worker.log").read_text()
        assert log.count(" keeper: ") == 1 and "a handler would outlive a killed worker" in log, log
    finally:
        if w.poll() is None:
            w.kill()
            w.wait()


def test_the_keeper_sleeps_while_its_worker_works(tmp_path):
    """The worker keeps its running handlers in memory it shares with the keeper (a store, no
    system call, per job), so nothing wakes the keeper while the worker lives, however many jobs
    it runs: its context switches do not grow with them."""
    cfg = tmp_path / "c.toml"
    cfg.write_text('[types.t]\ncommand = ["true"]\n')
    w = _worker(tmp_path, cfg)
    try:
        assert _wait_for(lambda: keeper_of(w.pid) is not None, 20)
        keeper_pid = keeper_of(w.pid)
        time.sleep(0.3)  # its start-up is over

        def switches() -> int:
            with open(f"/proc/{keeper_pid}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            return int(fields["voluntary_ctxt_switches"]) + int(fields["nonvoluntary_ctxt_switches"])

        before, started = switches(), time.monotonic()
        subprocess.run([*JOBCTL, "--db", str(tmp_path / "q.db"), "--config", str(cfg), "enqueue", "--batch", "-"],
                       input="\n".join('{"type": "t", "payload": {"i": %d}}' % i for i in range(500)), text=True, check=True, timeout=30)

        def all_done():
            with sqlite3.connect(tmp_path / "q.db") as conn:
                return conn.execute("SELECT count(*) FROM jobs WHERE status = 'completed'").fetchone()[0] == 500

        assert _wait_for(all_done, 60, 0.1), (tmp_path / "worker.log").read_text()
        looks = (time.monotonic() - started) / keeper_process.LOOK_EVERY
        assert switches() - before <= looks + 3, (switches() - before, looks)  # not one per job
    finally:
        w.kill()
        w.wait()


def test_a_reaped_handler_leaves_the_keepers_table():
    """Only running handlers are in the table the keeper reads when its worker dies: a slot is
    filled at the start and cleared at the reap, then reused."""
    k = keeper.Keeper(0, -1, bytearray(keeper_process.SLOTS * keeper_process.SLOT_SIZE))
    k.add(101, 5, 7, "tok-a")
    k.add(102, 6, 8, None)
    assert keeper_process._read_table(k.table) == {101: (5, 7, b"tok-a"), 102: (6, 8, b"")}
    k.remove(101)
    assert keeper_process._read_table(k.table) == {102: (6, 8, b"")}
    k.add(103, 9, 9, "t" * 200)  # (a token longer than a claim's is cut)
    assert keeper_process._read_table(k.table)[103] == (9, 9, b"t" * keeper_process.TOKEN_MAX)
    assert k._next == 2  # the cleared slot was reused


def test_the_keeper_starts_without_the_signal_and_os_modules(tmp_path):
    """`signal` (with enum) and `os` (with _collections_abc) would double a bare Python's start-up:
    the keeper does without them."""
    folder = os.path.dirname(keeper.__file__)
    out = subprocess.run([sys.executable, "-I", "-S", "-c",
                          f"import sys; sys.path.insert(0, {folder!r}); import keeper_process; "
                          "print(sorted({'signal', 'os', 'enum'} & set(sys.modules)))"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
