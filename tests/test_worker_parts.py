"""The worker's rules with a fake clock and fake processes, on a real database file.

The supervisor's launcher and the loop's monotonic clock are injected: each test steps the loop
(`Worker.step()`) and moves the clock by hand, so timeouts, graces, heartbeats, outages, back-offs
and wake-ups are checked in milliseconds. The real processes are tested in test_worker.py and
test_worker_faults.py.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sqlite3
import time

import pytest

from jobctl.config import Settings, TypeConfig
from jobctl.errors import DatabaseUnusable
from jobctl.queue import Queue
from jobctl.worker import Log, Worker, WorkerOptions
from jobctl.worker.supervisor import Proc

TERM, KILL = signal.SIGTERM, signal.SIGKILL


class FakeClock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class FakeProc(Proc):
    __slots__ = ("argv", "env", "signals", "done", "rc", "ignores_term", "_stdin", "_stdin_fd")

    def __init__(self, pid, argv, env, stdin_fd):
        super().__init__(pid)
        self.argv, self.env = argv, env
        self._stdin_fd, self._stdin = stdin_fd, None
        self.signals: list[int] = []
        self.done = False
        self.rc = 0
        self.ignores_term = False

    def exit(self, rc: int) -> None:
        if not self.done:
            self.done, self.rc = True, rc

    @property
    def stdin(self) -> bytes:
        """What the handler read on its stdin: all of it, once the worker has closed its end (the
        worker may give it the payload after the start, as to a real one)."""
        if self._stdin is None:
            chunks = []
            while chunk := os.read(self._stdin_fd, 65536):
                chunks.append(chunk)
            os.close(self._stdin_fd)
            self._stdin = b"".join(chunks)
        return self._stdin


class FakeLauncher:
    """Processes that exist only here: a test makes them exit, write output or ignore SIGTERM."""

    exit_fds = False  # (a fake's exit wakes nothing: each test steps the loop by hand)

    def watch(self, p):
        pass

    def __init__(self):
        self.procs: list[FakeProc] = []
        self.fail: OSError | None = None
        self.stdout = b""
        self.escaped: dict[str, set[int]] = {}  # token -> pids that left the group
        self.signalled: list[tuple[int, int]] = []
        self.stopped: set[int] = set()

    def spawn(self, argv, stdin, stdout, stderr, env):
        if self.fail is not None:
            raise self.fail
        os.write(stdout, self.stdout)
        p = FakeProc(4000 + len(self.procs), argv, env, os.dup(stdin))
        self.procs.append(p)
        return p

    def exited(self, p):
        return p.done

    def reap(self, p, timeout=None):
        if not p.done and timeout is not None:
            return None
        p.returncode = p.rc
        return p.rc

    def signal_group(self, p, sig):
        p.signals.append(sig)
        if sig == KILL or (sig == TERM and not p.ignores_term):
            p.exit(-sig)

    def token_holders(self, token):
        return set(self.escaped.get(token, ()))

    def signal_pids(self, pids, sig):
        self.signalled += [(pid, sig) for pid in sorted(pids)]

    def stop_pids(self, pids, grace):
        self.stopped |= set(pids)


class Lines:
    def __init__(self):
        self.records: list[dict] = []

    def write(self, text):
        self.records += [json.loads(line) for line in text.splitlines()]

    def flush(self):
        pass

    def events(self, name=None):
        return [r for r in self.records if name is None or r["event"] == name]


class CountingQueue(Queue):
    """A real queue that counts its claim queries."""

    claims = 0

    def claim(self, **kw):
        self.claims += 1
        return super().claim(**kw)


@pytest.fixture
def make(tmp_path):
    made = []

    def build(*, timeout=600.0, bury_exit_codes=None, wall=time.time, busy_timeout=0.05, **opts):
        settings = Settings(busy_timeout=busy_timeout, types={
            "t": TypeConfig("t", command=["handler"], timeout=timeout, max_attempts=3,
                            bury_exit_codes=bury_exit_codes or [])})
        q = CountingQueue.open(tmp_path / "q.db", settings, create=True, busy_timeout=busy_timeout, clock=wall)
        clock, launcher, lines = FakeClock(), FakeLauncher(), Lines()
        options = WorkerOptions(worker_id="w1", **{"poll": 1.0, "grace": 30.0, "lease": 60.0, "kill_grace": 5.0,
                                                   "recover_every": 30.0, "purge_every": 600.0, **opts})
        w = Worker(q, settings, options, Log("w1", "json", lines), clock=clock, launcher=launcher)
        w.begin()
        made.append(q)
        return w, q, clock, launcher, lines

    yield build
    for q in made:
        q.close()


def job_row(q, job_id):
    return q.get(job_id)


# -- timeouts and kill grace ------------------------------------------------------------------


def test_timeout_sends_sigterm_then_sigkill_after_the_kill_grace(make):
    w, q, clock, launcher, lines = make(timeout=10.0)
    job_id = q.enqueue("t", {"a": 1}).id
    w.step()
    [p] = launcher.procs
    assert p.stdin == b'{"a":1}' and p.env["JOBCTL_JOB_ID"] == str(job_id)
    p.ignores_term = True
    clock.advance(9.9)
    w.step()
    assert p.signals == []
    clock.advance(0.1)
    w.step()
    assert p.signals == [TERM]
    clock.advance(4.9)
    w.step()
    assert p.signals == [TERM]
    clock.advance(0.1)
    w.step()  # SIGKILL: the fake exits at once
    assert p.signals[:2] == [TERM, KILL]
    w.step()
    job = job_row(q, job_id)
    assert job.status == "pending" and job.error == "timed out after 10s"
    assert lines.events("failed")


def test_a_handler_that_exits_on_sigterm_is_not_killed(make):
    w, q, clock, launcher, _ = make(timeout=1.0)
    q.enqueue("t")
    w.step()
    [p] = launcher.procs
    clock.advance(1.0)
    w.step()
    w.step()
    assert p.signals[0] == TERM and KILL not in p.signals[1:] or p.signals == [TERM, KILL]
    assert not w.running


def test_escaped_processes_are_stopped_on_timeout_before_the_failure_is_written(make):
    w, q, clock, launcher, _ = make(timeout=1.0)
    job_id = q.enqueue("t").id
    w.step()
    [p] = launcher.procs
    token = p.env["JOBCTL_TOKEN"]
    launcher.escaped[token] = {777}
    clock.advance(1.0)
    w.step()  # SIGTERM to the group and to the process that left it
    assert (777, TERM) in launcher.signalled
    w.step()  # the leader exited: what still carries the token is stopped before the fail is written
    assert 777 in launcher.stopped
    assert job_row(q, job_id).status == "pending"


def test_a_run_that_was_not_stopped_leaves_escaped_processes_alone(make):
    w, q, clock, launcher, _ = make()
    q.enqueue("t")
    w.step()
    [p] = launcher.procs
    launcher.escaped[p.env["JOBCTL_TOKEN"]] = {778}
    p.exit(0)
    w.step()
    assert launcher.stopped == set() and launcher.signalled == []


# -- shutdown grace ---------------------------------------------------------------------------


def test_sigterm_waits_the_grace_then_stops_and_releases(make):
    w, q, clock, launcher, lines = make(grace=30.0)
    job_id = q.enqueue("t").id
    w.step()
    [p] = launcher.procs
    w.on_signal(TERM)
    assert not w.step()
    clock.advance(29.0)
    w.step()
    assert p.signals == []
    clock.advance(1.0)
    w.step()
    assert p.signals == [TERM]
    assert w.step()  # reaped, released, done
    job = job_row(q, job_id)
    assert job.status == "pending" and job.attempts == 0
    assert lines.events("released")


def test_a_second_signal_stops_at_once(make):
    w, q, clock, launcher, _ = make(grace=30.0)
    q.enqueue("t")
    w.step()
    [p] = launcher.procs
    w.on_signal(TERM)
    w.step()
    w.on_signal(signal.SIGINT)
    w.step()
    assert p.signals == [TERM]


def test_the_grace_lets_a_handler_finish(make):
    w, q, clock, launcher, _ = make(grace=30.0)
    job_id = q.enqueue("t").id
    w.step()
    w.on_signal(TERM)
    w.step()
    clock.advance(10)
    launcher.procs[0].exit(0)
    assert w.step()
    assert job_row(q, job_id).status == "completed"
    assert len(launcher.procs) == 1  # nothing more was claimed


# -- heartbeats and cancellation --------------------------------------------------------------


def test_heartbeats_renew_the_lease_and_notice_a_cancellation(make):
    w, q, clock, launcher, lines = make(lease=3.0)
    job_id = q.enqueue("t").id
    w.step()
    first = job_row(q, job_id).heartbeat_at
    time.sleep(0.01)
    clock.advance(0.9)
    w.step()
    assert job_row(q, job_id).heartbeat_at == first  # every lease/3 = 1 s
    clock.advance(0.1)
    w.step()
    assert job_row(q, job_id).heartbeat_at > first
    q.cancel(job_id)
    clock.advance(1.0)
    w.step()
    [p] = launcher.procs
    assert p.signals == [TERM]
    w.step()
    assert job_row(q, job_id).status == "cancelled"
    assert lines.events("cancel") and lines.events("cancelled")


# -- outcomes: bury reasons and result lines --------------------------------------------------


def test_a_bury_names_the_exit_code(make):
    w, q, clock, launcher, _ = make(bury_exit_codes=[65])
    job_id = q.enqueue("t").id
    w.step()
    launcher.procs[0].exit(65)
    w.step()
    job = job_row(q, job_id)
    assert job.status == "buried"
    buried = [e for e in q.events(job_id) if e.to_status == "buried"][0]
    assert "exit code 65 is listed in bury_exit_codes" in buried.message


@pytest.mark.parametrize("line, ok", [
    (b'{"sent": 2}\n', {"sent": 2}),
    (b"all done\n", None),
    (b"1" * 5000 + b"\n", "result line is not valid JSON: "),
    (b'{"x": NaN}\n', "result line is not valid JSON"),
])
def test_result_lines(make, line, ok):
    # exit 0 completes the job; a result line jobctl cannot keep is left out (and the log says
    # why), as one too large to keep: the run's side effects are done, it is not run again.
    w, q, clock, launcher, lines = make()
    job_id = q.enqueue("t").id
    launcher.stdout = b"log line\n" + line
    w.step()
    launcher.procs[0].exit(0)
    w.step()  # must not raise
    job = job_row(q, job_id)
    assert job.status == "completed"
    if isinstance(ok, str):
        assert job.result is None
        said = [str(e) for e in lines.events("result")]
        assert any("completes without a result" in x and ok in x for x in said), lines.records
    else:
        assert (json.loads(job.result) if job.result else None) == ok


# -- spawn failures ---------------------------------------------------------------------------


@pytest.mark.parametrize("err", [errno.EMFILE, errno.EAGAIN, errno.ENOENT])
def test_a_spawn_failure_releases_the_job_and_backs_off(make, err):
    w, q, clock, launcher, lines = make()
    job_id = q.enqueue("t").id
    launcher.fail = OSError(err, os.strerror(err))
    w.step()
    job = job_row(q, job_id)
    assert job.status == "pending" and job.attempts == 0, job
    [failed] = lines.events("spawn-failed")
    assert os.strerror(err) in failed["message"]
    claims = q.claims
    clock.advance(0.4)
    w.step()
    assert q.claims == claims  # backing off: no claim before 0.5 s
    clock.advance(0.1)
    w.step()
    assert q.claims == claims + 1 and len(lines.events("spawn-failed")) == 2
    clock.advance(0.9)
    w.step()
    assert q.claims == claims + 1  # the delay doubled
    launcher.fail = None
    clock.advance(0.1)
    w.step()
    assert len(launcher.procs) == 1 and job_row(q, job_id).attempts == 1


# -- database outages -------------------------------------------------------------------------


def test_a_locked_database_is_waited_out_and_logged_once(make, tmp_path):
    w, q, clock, launcher, lines = make()
    job_id = q.enqueue("t").id
    w.step()
    locker = sqlite3.connect(tmp_path / "q.db", isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")
    launcher.procs[0].exit(0)
    w.step()
    assert w.unrecorded and job_row(q, job_id).status == "running"
    for _ in range(5):
        clock.advance(5.0)
        w.step()
    assert len(lines.events("db-busy")) == 1
    locker.execute("ROLLBACK")
    locker.close()
    clock.advance(10.0)
    w.step()
    assert not w.unrecorded and job_row(q, job_id).status == "completed"
    assert len(lines.events("db-ok")) == 1


def test_a_damaged_schema_stops_the_worker(make, tmp_path):
    w, q, clock, launcher, lines = make()
    conn = sqlite3.connect(tmp_path / "q.db")
    conn.execute("ALTER TABLE jobs DROP COLUMN progress")
    conn.close()
    clock.advance(1.0)
    with pytest.raises(DatabaseUnusable, match="no such column"):
        w.step()


def test_outcomes_left_by_an_unusable_database_are_each_logged(make, tmp_path):
    w, q, clock, launcher, lines = make(concurrency=2)
    a, b = q.enqueue("t").id, q.enqueue("t").id
    w.step()
    assert len(launcher.procs) == 2
    conn = sqlite3.connect(tmp_path / "q.db")
    conn.execute("ALTER TABLE jobs DROP COLUMN progress")
    conn.close()
    for p in launcher.procs:
        p.exit(0)
    with pytest.raises(DatabaseUnusable):
        w.step()
    w._abandon()
    left = lines.events("unrecorded")
    assert sorted(r["job"] for r in left) == [a, b]
    assert all("completed" in r["message"] for r in left)


def test_a_completion_refused_because_the_claim_was_taken_over_is_logged_as_lost_not_done(make):
    # (a lease recovered while the worker could not reach the database, say): the late report is
    # one `lost` line, and the worker goes on claiming, --stop-when-empty or not
    w, q, clock, launcher, lines = make(stop_when_empty=True)
    a = q.enqueue("t").id
    w.step()
    first = job_row(q, a)
    q.release(a, token=first.token)  # taken over: another worker holds it now
    assert q.claim(worker="w2").token != first.token
    b = q.enqueue("t").id
    launcher.procs[0].exit(0)
    assert w.step() is False  # not done: job b is ready
    assert [r["job"] for r in lines.events("lost")] == [a]
    assert lines.events("done") == []
    assert job_row(q, a).worker == "w2" and job_row(q, b).status == "running"


# -- its own claims -----------------------------------------------------------------------


def test_housekeeping_never_recovers_the_workers_own_running_jobs(make):
    offset = [0.0]
    w, q, clock, launcher, lines = make(wall=lambda: time.time() + offset[0], lease=3.0)
    job_id = q.enqueue("t").id
    w.step()
    offset[0] = 3600.0  # the wall clock jumps an hour: every lease looks expired
    clock.advance(30.0)
    w.step()
    assert not lines.events("recovered")
    job = job_row(q, job_id)
    assert job.status == "running" and job.attempts == 1
    assert job.lease_expires_at > q.now()  # renewed before the sweep


# -- wake-ups -----------------------------------------------------------------------------


def test_an_idle_worker_notices_a_new_job_before_the_poll_interval(make, tmp_path):
    w, q, clock, launcher, _ = make(poll=60.0)
    for _ in range(12):  # let the idle delay grow to the poll interval
        clock.advance(60.0)
        w.step()
    claims = q.claims
    for _ in range(40):  # two seconds of quiet: looks at the database, no claim query
        clock.advance(0.05)
        w.step()
    assert q.claims == claims
    with Queue.open(tmp_path / "q.db", q.settings) as other:
        other.enqueue("t")
    clock.advance(0.05)
    w.step()
    assert len(launcher.procs) == 1
    assert w.next_deadline(clock()) - clock() <= 60.0


def test_commits_it_cannot_use_do_not_make_an_idle_worker_claim_at_every_look(make, tmp_path):
    w, q, clock, launcher, _ = make(poll=4.0)
    for _ in range(12):
        clock.advance(4.0)
        w.step()
    claims = q.claims
    with Queue.open(tmp_path / "q.db", q.settings) as other:
        for _ in range(80):  # four seconds of other workers' commits, none of them for us
            other.enqueue("not-ours")
            clock.advance(0.05)
            w.step()
    assert q.claims - claims <= 12, q.claims - claims  # not one claim per look (80)
    assert not launcher.procs


# -- the orphan registry ----------------------------------------------------------------------


class FakeRegistry:
    def __init__(self):
        self.recorded, self.forgotten = [], []

    def record(self, job_id, token, worker, pid, start_min, start_max):
        self.recorded.append(job_id)

    def forget(self, job_id):
        self.forgotten.append(job_id)

    def strays(self, job_id, token):
        return set(), None


def test_only_handlers_still_running_after_the_first_wait_are_registered(make):
    from jobctl.worker import Supervisor

    w, q, clock, launcher, _ = make(concurrency=2)
    registry = FakeRegistry()
    sup = Supervisor(launcher, clock, kill_grace=1.0, registry=registry, worker_id="w1")
    quick, slow = q.enqueue("t").id, q.enqueue("t").id
    a = sup.start(q.claim(worker="w1"), ["handler"], {}, 1.0)
    b = sup.start(q.claim(worker="w1"), ["handler"], {}, 1.0)
    assert registry.recorded == []  # not before the first wait
    a.proc.exit(0)
    sup.register()
    assert registry.recorded == [slow]
    b.proc.exit(0)
    for r, _ in sup.reap():
        sup.forget(r)
    assert registry.forgotten == [slow]  # nothing to delete for the quick one
    assert quick not in registry.recorded


# -- the output pipes, with real processes ----------------------------------------------------


def test_output_pipes_start_small_and_grow_for_a_handler_that_fills_one(q):
    """Most handlers print little: their pipes keep the default size (no resize per job). One
    that fills a pipe gets bigger pipes, and nothing it wrote is lost."""
    import fcntl
    import select

    from jobctl.worker import Supervisor
    from jobctl.worker.supervisor import FULL_PIPE, PIPE_SIZE, PosixLauncher

    get_size = getattr(fcntl, "F_GETPIPE_SZ", 1032)
    sup = Supervisor(PosixLauncher(), time.monotonic, kill_grace=1.0)
    runs = {}
    for name, size in (("quiet", 10), ("loud", 3 * FULL_PIPE)):
        q.enqueue("t", {"n": name})
        runs[name] = sup.start(q.claim(worker="w"), ["head", "-c", str(size), "/dev/zero"], dict(os.environ), 60.0)
    quiet, loud = runs["quiet"], runs["loud"]
    assert fcntl.fcntl(quiet.out, get_size) == fcntl.fcntl(loud.out, get_size) < PIPE_SIZE
    time.sleep(0.5)  # the loud one fills its pipe and waits on it, so the first read finds it full
    deadline = time.monotonic() + 30
    while sup.running and time.monotonic() < deadline:
        fds = sup.fds()
        for fd in select.select(list(fds), [], [], 0.5)[0] if fds else ():
            r = fds[fd]
            if fd in r.fds():
                if r is loud and fd == r.out and r.out >= 0 and not r.grown:
                    assert fcntl.fcntl(fd, get_size) < PIPE_SIZE
                r.pump(fd)
                if r is loud and r.grown and r.out >= 0:
                    assert fcntl.fcntl(r.out, get_size) == PIPE_SIZE
        for r, rc in sup.reap():
            assert rc == 0
            r.drain()
    assert not sup.running
    assert loud.grown and not quiet.grown
    assert loud.output.stdout.total == 3 * FULL_PIPE and quiet.output.stdout.total == 10


def _open_fds() -> set[int]:
    found = set()
    for fd in range(1024):  # (not a listing of /proc/self/fd: it would count its own descriptor)
        try:
            os.fstat(fd)
            found.add(fd)
        except OSError:
            pass
    return found


def test_the_next_handlers_pipes_are_made_while_one_runs_and_never_leak(q):
    """prepare() makes the next start's pipes off the path from one handler's exit to the next
    one's start; start() takes them (a payload too big for a pipe goes through a scratch file
    instead), a failed start closes them, and close() closes what was never used."""
    from jobctl.worker import Supervisor
    from jobctl.worker.supervisor import SpawnError

    launcher = FakeLauncher()
    sup = Supervisor(launcher, time.monotonic, kill_grace=1.0)
    before = _open_fds()
    sup.prepare()
    spare = _open_fds() - before
    assert len(spare) == 6
    sup.prepare()  # one set at a time
    assert _open_fds() - before == spare
    q.enqueue("t", {"n": 1})
    r = sup.start(q.claim(worker="w"), ["handler"], {}, 60.0)
    assert {r.out, r.err} < spare and launcher.procs[-1].stdin == b'{"n":1}'
    r.close()
    assert _open_fds() == before

    sup.prepare()
    q.enqueue("t", {"big": "x" * 10_000})
    r = sup.start(q.claim(worker="w"), ["handler"], {}, 60.0)
    assert launcher.procs[-1].stdin == json.dumps({"big": "x" * 10_000}, separators=(",", ":")).encode()
    r.close()
    assert _open_fds() == before

    sup.prepare()
    launcher.fail = OSError(errno.EMFILE, "Too many open files")
    q.enqueue("t", {"n": 3})
    with pytest.raises(SpawnError):
        sup.start(q.claim(worker="w"), ["handler"], {}, 60.0)
    assert _open_fds() == before

    sup.prepare()
    sup.close()
    assert _open_fds() == before


# -- the step prepared while a handler runs -----------------------------------------------------


def test_a_silent_run_is_completed_by_the_step_prepared_while_it_ran(make):
    """The loop prepares each running handler's completion and the next claim (_prepare_steps);
    a run that exits 0 and prints nothing is written by that step, with the same rows as the
    general path, and a run that prints a result goes the general way (its result is stored)."""
    w, q, clock, launcher, lines = make()
    general = []
    q.complete_and_claim = lambda *a, _orig=q.complete_and_claim, **kw: general.append(a) or _orig(*a, **kw)
    a, b, c = (q.enqueue("t", {"n": n}).id for n in range(3))
    w.step()
    w._prepare_steps()
    [r] = w.sup.running
    assert r.next_step is not None and job_row(q, b).status == "pending"  # prepared, nothing written
    launcher.procs[0].exit(0)
    clock.advance(1.0)
    w.step()
    assert general == [] and job_row(q, a).status == "completed" and job_row(q, b).status == "running"
    assert [(e.from_status, e.to_status, e.actor) for e in q.events(a)][-2:] == \
        [("pending", "running", "w1"), ("running", "completed", "w1")]
    assert [e["job"] for e in lines.events("done")] == [a] and [e["job"] for e in lines.events("start")] == [a, b]

    w._prepare_steps()
    launcher.stdout = b'{"sent": 2}\n'  # (the next spawn writes it: job c's handler prints a result)
    launcher.procs[1].exit(0)
    w.step()
    w._prepare_steps()
    launcher.procs[2].exit(0)
    w.step()
    assert len(general) == 1 and json.loads(job_row(q, c).result) == {"sent": 2}
    assert [job_row(q, i).status for i in (a, b, c)] == ["completed"] * 3


def test_a_prepared_step_finds_the_claim_taken_over_and_logs_it_lost(make):
    w, q, clock, launcher, lines = make(stop_when_empty=True)
    a = q.enqueue("t").id
    w.step()
    w._prepare_steps()  # decided on the job as claimed...
    first = job_row(q, a)
    q.release(a, token=first.token)  # ...which another worker holds by the time it exits
    assert q.claim(worker="w2").token != first.token
    b = q.enqueue("t").id
    launcher.procs[0].exit(0)
    assert w.step() is False
    assert [r["job"] for r in lines.events("lost")] == [a] and lines.events("done") == []
    assert job_row(q, a).worker == "w2" and job_row(q, b).status == "running"


def test_a_prepared_step_is_taken_once_a_busy_database_retries_the_general_way(make, tmp_path):
    w, q, clock, launcher, lines = make()
    job_id = q.enqueue("t").id
    w.step()
    w._prepare_steps()
    locker = sqlite3.connect(tmp_path / "q.db", isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")
    launcher.procs[0].exit(0)
    w.step()
    assert w.unrecorded and w.unrecorded[0].run.next_step is None
    locker.execute("ROLLBACK")
    locker.close()
    clock.advance(10.0)
    w.step()
    assert not w.unrecorded and job_row(q, job_id).status == "completed"


def test_handlers_get_every_signal_at_its_default_but_those_the_worker_ignores():
    """Named one by one to posix_spawn, so that glibc resets each with one call in the child (the
    real handler's view of it is tested in test_worker.py)."""
    from jobctl.worker.supervisor import _signals_to_default

    old = signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    try:
        to_default = _signals_to_default()
    finally:
        signal.signal(signal.SIGUSR2, old)
    assert signal.SIGUSR2 not in to_default  # ignored by the worker: ignored by its handlers
    assert {signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGRTMAX} <= set(to_default)
    assert not {signal.SIGKILL, signal.SIGSTOP} & set(to_default)
