import contextlib
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
JOBCTL = [sys.executable, "-m", "jobctl"]


def pytest_configure(config):
    """With PYTHONDONTWRITEBYTECODE set, every `python -m jobctl` the tests start would compile
    jobctl from source again (~60 ms of each process here): the children share compiled files
    in a private folder for the session instead, and still write nothing into the source tree.

    Under pytest-xdist (`-n 2`, the default addopts), the controlling process makes the folder of
    the locks through which the test processes share the machine (see _machine_share) and names
    it in JOBCTL_TEST_LOCKS, which the test processes it starts inherit."""
    if (not hasattr(config, "workerinput") and (getattr(config.option, "numprocesses", None) or 0)
            and not os.environ.get(LOCKS_ENV)):
        import tempfile

        config._jobctl_locks = tempfile.mkdtemp(prefix="jobctl-tests-locks-")
        os.environ[LOCKS_ENV] = config._jobctl_locks
    if os.environ.get("PYTHONDONTWRITEBYTECODE") and not os.environ.get("PYTHONPYCACHEPREFIX"):
        import tempfile

        config._jobctl_pycache = tempfile.mkdtemp(prefix="jobctl-tests-pycache-")
        config._jobctl_dont_write = os.environ.pop("PYTHONDONTWRITEBYTECODE")
        os.environ["PYTHONPYCACHEPREFIX"] = config._jobctl_pycache


def pytest_unconfigure(config):
    locks = getattr(config, "_jobctl_locks", None)
    if locks:
        import shutil

        shutil.rmtree(locks, ignore_errors=True)
        os.environ.pop(LOCKS_ENV, None)
    folder = getattr(config, "_jobctl_pycache", None)
    if folder:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop("PYTHONPYCACHEPREFIX", None)
        os.environ["PYTHONDONTWRITEBYTECODE"] = config._jobctl_dont_write


# -- sharing the machine between the test processes ---------------------------------------------
# The suite runs on 2 processes (pytest-xdist). Most tests wait on processes, I/O or sleeps and run
# side by side; a test that measures time, throughput or memory against a bound, or a torture test
# that loads the machine by itself, must have it alone: a test marked `alone` (such as the memory
# bounds of tests/test_batch_stream.py), `slow` or `reliability` (all of tests/reliability/), unless
# it is also marked `shared`: a long test that checks only outcomes, with no time bound that a busy
# machine could cross (hostile input, damaged rows, races counted job by job).

LOCKS_ENV = "JOBCTL_TEST_LOCKS"
ALONE_MARKERS = ("alone", "slow", "reliability")
_lock_files: dict[str, int] = {}


def needs_the_machine_alone(item) -> bool:
    if item.get_closest_marker("alone"):
        return True
    return any(item.get_closest_marker(m) for m in ALONE_MARKERS) and not item.get_closest_marker("shared")


def _lock_fd(folder: str, name: str) -> int:
    if name not in _lock_files:
        _lock_files[name] = os.open(os.path.join(folder, name), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    return _lock_files[name]


@pytest.hookimpl(trylast=True)  # after tests/reliability/conftest.py has marked its tests
def pytest_collection_modifyitems(config, items):
    """Under xdist, the tests that must be alone come first (in their order), so that both
    processes take them one after the other at the start, with no ordinary test to wait for
    between them; then the ordinary tests run side by side."""
    if os.environ.get(LOCKS_ENV):
        items.sort(key=lambda item: not needs_the_machine_alone(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """_machine_share around the whole of each test: its setup (a module's fixtures included, such
    as a private PostgreSQL cluster), its run and its teardown."""
    alone = needs_the_machine_alone(item)
    with _machine_share(alone=alone, next_alone=alone and nextitem is not None and needs_the_machine_alone(nextitem)):
        return (yield)


_machine_held: list[bool] = []  # [True] while this process keeps "machine" exclusively from one test to the next


@contextlib.contextmanager
def _machine_share(alone: bool, next_alone: bool = False):
    """A share of the machine for one test, through two flock(2) locks in the folder that
    JOBCTL_TEST_LOCKS names: "machine", held shared by an ordinary test and exclusively by one
    that must be alone, taken while holding "turnstile", so that a test waiting to be alone is not
    starved by a stream of shared holders (the next test of the other process waits at the
    turnstile). A test that must be alone and whose process runs another such test next keeps
    "machine" for it (`next_alone`): without that, the other process's ordinary tests, waiting at
    the turnstile, ran one by one between the two, each with the machine to itself. The lock is
    the process's own, so a process that dies lets it go. Without JOBCTL_TEST_LOCKS (a run without
    xdist, or `-n 0`) it does nothing."""
    folder = os.environ.get(LOCKS_ENV)
    if not folder:
        yield
        return
    import fcntl

    turnstile, machine = _lock_fd(folder, "turnstile"), _lock_fd(folder, "machine")
    if not (alone and _machine_held):
        _machine_held.clear()
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(machine, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
    keep = False
    try:
        yield
        keep = next_alone
    finally:
        if keep:
            _machine_held[:] = [True]
        else:
            _machine_held.clear()
            fcntl.flock(machine, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path, monkeypatch):
    """No test reads the developer's config or database, or inherits their worker id."""
    for var in ("JOBCTL_DB", "JOBCTL_CONFIG", "JOBCTL_BUSY_TIMEOUT", "JOBCTL_WORKER_ID", "JOBCTL_DEBUG",
                "JOBCTL_MEMORY_CGROUP"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.chdir(tmp_path)


# -- PostgreSQL ------------------------------------------------------------------------------
# The PostgreSQL half of the suite runs against the server JOBCTL_TEST_POSTGRES_URL names (CI sets
# it: there an unreachable server fails the tests), else against a local one if it answers (else
# those tests skip, and the summary says so in one line). Every test works in a schema of its own,
# dropped afterwards, so that tests (and test runs) sharing a server never meet.

PG_DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
_pg_state: dict = {}  # "base": the server's URL, or "why": why there is none (and "where" it was skipped)


def _pg_server() -> tuple[str | None, str | None]:
    """(the server's URL, None) when it answers, else (None, why not); asked once per session."""
    if "base" not in _pg_state and "why" not in _pg_state:
        url = os.environ.get("JOBCTL_TEST_POSTGRES_URL") or PG_DEFAULT_URL
        try:
            import psycopg2
        except ImportError:
            _pg_state["why"] = "the psycopg2 driver is not installed (pip install '.[postgres]')"
        else:
            from jobctl.engines import display

            try:
                psycopg2.connect(url, connect_timeout=3).close()
                _pg_state["base"] = url
            except psycopg2.Error as e:
                reason = " ".join(str(e).split()) or type(e).__name__
                _pg_state["why"] = f"no PostgreSQL server answers at {display(url)} ({reason})"
    return _pg_state.get("base"), _pg_state.get("why")


def pg_admin(base: str):
    """An autocommit connection to the test server, for a test's own setup and checks."""
    import psycopg2

    conn = psycopg2.connect(base)
    conn.autocommit = True
    return conn


def types_settings(**types):
    """Settings whose types (each with the handler `true`) have the given options, e.g.
    types_settings(api=dict(rate_limit=(2, 60.0)))."""
    from jobctl.config import Settings, TypeConfig

    return Settings(types={name: TypeConfig(name, command=["true"], **kw) for name, kw in types.items()})


def open_queues(db):
    """For a fixture to `yield from`: a maker of Queues on `db` (settings, clock), each closed after the test."""
    from jobctl.queue import Queue

    opened = []

    def make(settings, clock):
        q = Queue.open(db, settings, create=True, clock=clock)
        opened.append(q)
        return q

    yield make
    for q in opened:
        q.close()


def pg_sql(base: str, query: str, params=()):
    """Run one statement on the test server as its admin: the rows, or None for a statement
    that returns none."""
    conn = pg_admin(base)
    try:
        cur = conn.cursor()
        cur.execute(query, params)
        return cur.fetchall() if cur.description else None
    finally:
        conn.close()


def open_pg(url: str, **kw):
    """A PostgresEngine on `url`, creating its schema unless told otherwise."""
    from jobctl.engines.postgres import PostgresEngine

    kw.setdefault("create", True)
    return PostgresEngine.open(url, **kw)


def new_job(type="t", queue="default", payload="{}", **kw):
    """A NewJob as the engine contract takes it (the hash of the payload as given)."""
    import hashlib

    from jobctl.engines.base import NewJob

    return NewJob(queue=queue, type=type, payload=payload, payload_hash=hashlib.sha256(payload.encode()).hexdigest(),
                  priority=10, max_attempts=3, backoff="exponential", timeout_ms=60_000, **kw)


def with_schema(base: str, schema: str) -> str:
    """The server URL with `schema` as its search_path (the URL form jobctl reads the schema from)."""
    from urllib.parse import quote

    return f"{base}{'&' if '?' in base else '?'}options={quote(f'-csearch_path={schema}', safe='')}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Every PostgreSQL test skipped for want of a server reports the same place and reason, so
    that the summary (-ra) says it in one line: SKIPPED [N] conftest.py: PostgreSQL: ..."""
    outcome = yield
    report = outcome.get_result()
    if (report.skipped and "where" in _pg_state and isinstance(report.longrepr, tuple)
            and report.longrepr[2].startswith("Skipped: PostgreSQL: ")):
        report.longrepr = (*_pg_state["where"], report.longrepr[2])


@pytest.fixture
def pg_base():
    """The test server's URL (no schema); skips (or, with JOBCTL_TEST_POSTGRES_URL set, fails)
    when no server answers."""
    base, why = _pg_server()
    if base is None:
        if os.environ.get("JOBCTL_TEST_POSTGRES_URL"):
            pytest.fail(f"JOBCTL_TEST_POSTGRES_URL is set, but {why}")
        _pg_state["where"] = (__file__, sys._getframe().f_lineno + 1)
        pytest.skip(f"PostgreSQL: {why}; set JOBCTL_TEST_POSTGRES_URL=postgresql://USER@HOST:PORT/DB to run them")
    return base


@pytest.fixture
def pg_schema(pg_base):
    """A unique schema name for this test, dropped (with everything in it) afterwards."""
    import secrets

    schema = f"jt_{secrets.token_hex(6)}"
    yield schema
    conn = pg_admin(pg_base)
    try:
        conn.cursor().execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        conn.close()


@pytest.fixture
def pg_url(pg_base, pg_schema):
    """A database URL of the test server in this test's own schema (created by jobctl on first use)."""
    return with_schema(pg_base, pg_schema)


@pytest.fixture
def db(request, tmp_path):
    """The test's database: a SQLite file path, or with JOBCTL_TEST_ENGINE=postgres a PostgreSQL
    URL with a schema of its own (so the CLI tests can run on PostgreSQL too)."""
    if os.environ.get("JOBCTL_TEST_ENGINE") == "postgres":
        return request.getfixturevalue("pg_url")
    return tmp_path / "q" / "jobs.db"


class Result:
    def __init__(self, proc):
        self.exit_code = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr

    @property
    def output(self):
        return f"exit {self.exit_code}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"

    def one_error_line(self) -> str:
        """The error must be exactly one `jobctl: error: ...` line and never a traceback."""
        err = self.stderr if isinstance(self.stderr, str) else self.stderr.decode("utf-8", "replace")
        assert "Traceback" not in err, self.output
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("jobctl: error: "), self.output
        return lines[0]


def run_cli(*args, db=None, input=None, env=None, timeout=60, preexec_fn=None, binary=False):
    """jobctl as users meet it: a real subprocess (binary=True: bytes in and out)."""
    argv = [*JOBCTL, *(["--db", str(db)] if db is not None else []), *map(str, args)]
    if isinstance(input, str) and binary:
        input = input.encode()
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run(argv, input=input, capture_output=True, text=not binary, env=full_env, timeout=timeout,
                          preexec_fn=preexec_fn)
    return Result(proc)


# Commands that belong to a whole process (signal handlers, child processes): run_inproc runs them
# as a real process instead. run: the handler writes to the real stdout and stderr.
PROCESS_COMMANDS = {"work", "run"}


def _command(args) -> str | None:
    words = iter(map(str, args))
    for word in words:
        if word in ("--db", "--config", "--busy-timeout"):
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def run_inproc(*args, db=None, input=None, env=None, timeout=60, preexec_fn=None, binary=False):
    """jobctl.cli.run, the function main() calls, in this process: the same exit code, output and
    error line as run_cli, without a process start (~0.2 s) per call. stdin, stdout and stderr are
    byte streams decoded as a child's would be (UTF-8; stdout strict, stderr backslashreplace;
    text=True translates newlines as subprocess does), `env` is set for the call only (TZ included).
    `work`, and anything with a preexec_fn, runs as a real process (run_cli). One difference is
    left: the default worker id (host:parent pid) names pytest's parent here; tests of it use run_cli."""
    import contextlib
    import io
    import types

    from jobctl.cli import run

    if preexec_fn is not None or _command(args) in PROCESS_COMMANDS:
        return run_cli(*args, db=db, input=input, env=env, timeout=timeout, preexec_fn=preexec_fn, binary=binary)
    argv = [*(["--db", str(db)] if db is not None else []), *map(str, args)]
    if isinstance(input, str):
        input = input.encode()
    stdin = io.TextIOWrapper(io.BytesIO(input or b""), encoding="utf-8")
    out_bytes, err_bytes = io.BytesIO(), io.BytesIO()
    stdout = io.TextIOWrapper(out_bytes, encoding="utf-8", errors="strict", write_through=True)
    stderr = io.TextIOWrapper(err_bytes, encoding="utf-8", errors="backslashreplace", write_through=True)
    saved_env = {k: os.environ.get(k) for k in (env or {})}
    saved_streams = sys.stdin, sys.stdout, sys.stderr
    os.environ.update({k: str(v) for k, v in (env or {}).items()})
    if env and "TZ" in env:
        time.tzset()
    sys.stdin, sys.stdout, sys.stderr = stdin, stdout, stderr
    try:
        code = run(argv)
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
    finally:
        if sys.stdout is not stdout:  # run() swaps in /dev/null on a broken pipe
            with contextlib.suppress(Exception):
                sys.stdout.close()
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if env and "TZ" in env:
            time.tzset()
    out, err = out_bytes.getvalue(), err_bytes.getvalue()
    if not binary:
        out, err = (b.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n") for b in (out, err))
    return Result(types.SimpleNamespace(returncode=code, stdout=out, stderr=err))


def on_db(run, db):
    """`run` (run_inproc or run_cli) with `db` as its database unless a call names another."""
    def _run(*args, **kw):
        kw.setdefault("db", db)
        return run(*args, **kw)
    return _run


@pytest.fixture
def cli(db):
    """jobctl on the test's database, in this process (run_inproc); the real binary is run_cli."""
    return on_db(run_inproc, db)


@pytest.fixture
def cli_process(db):
    """jobctl on the test's database as a real process, as users meet it."""
    return on_db(run_cli, db)


def run_on_pty(argv, *, columns=100, rows=60, stdout=None, stderr=None, until: bytes = b"", times: int = 1,
               timeout=60, answer: bytes | None = None):
    """Run `argv` as at a terminal `columns` wide: stdin, and stdout and stderr unless given (an open
    file, or subprocess.PIPE), on a pseudo-terminal. With `until`, send SIGINT once that has been
    drawn `times` times (stats --watch), or type `answer` then, then read what follows. Returns (exit code, what the
    terminal showed, the Popen for a piped stream)."""
    import fcntl
    import pty
    import select
    import signal
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}  # the pty's size rules
    # SIGINT at its default in the child, as a shell gives a job in the foreground: run from a
    # background job (`pytest ... &`), pytest and so its children ignore SIGINT, and
    # `stats --watch` would then draw on past the test's Ctrl-C until the timeout (60 s, failed).
    proc = subprocess.Popen([*map(str, argv)], stdin=slave, stdout=stdout or slave, stderr=stderr or slave,
                            env={**env, "TERM": "xterm"}, close_fds=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    os.close(slave)
    seen = b""
    interrupted = False
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if until and not interrupted and seen.count(until) >= times:
                if answer is None:
                    proc.send_signal(signal.SIGINT)
                else:
                    os.write(master, answer)
                interrupted = True
            if not select.select([master], [], [], 0.2)[0]:
                if proc.poll() is not None and (interrupted or not until):
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed its end
                break
            if not chunk:
                break
            seen += chunk
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return code, seen.decode("utf-8", "replace"), proc


class Clock:
    """A clock that stands still until a test moves it (seconds, like time.time); for Queue(clock=)."""

    def __init__(self, t: float | None = None):
        self.t = time.time() if t is None else t

    def __call__(self) -> float:
        return self.t


def snapshot(path):
    """Every row of every table: what "nothing changed" is compared against (a SQLite file, or
    the schema of a PostgreSQL URL; there without the count tables, which stats may fold)."""
    if str(path).startswith("postgresql://"):
        return _pg_snapshot(str(path))
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in tables}
    finally:
        conn.close()


def file_history(db) -> None:
    """File what a SQLite database holds of history written ahead (history_log) into events and
    runs, as jobctl does in batches: for tests that read those tables with SQL of their own."""
    from jobctl.engines.sqlite import SQLiteEngine

    engine = SQLiteEngine.open(db)
    try:
        with engine._write() as (c, _now):
            engine._file_history(c)
    finally:
        engine.close()


def count_rows(db, table="jobs") -> int:
    """How many rows a table holds (a SQLite file, or the schema of a PostgreSQL URL: 0 when
    jobctl has not made it)."""
    if str(db).startswith("postgresql://"):
        from jobctl.engines.pg_target import Target

        conn = pg_admin(str(db))
        try:
            cur = conn.cursor()
            cur.execute("SELECT to_regclass(%s)", (f'"{Target(str(db)).schema}"."{table}"',))
            name = cur.fetchone()[0]
            if name is None:
                return 0
            cur.execute(f"SELECT count(*) FROM {name}")
            return cur.fetchone()[0]
        finally:
            conn.close()
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        n = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        if table in ("events", "runs"):  # and those written ahead, not filed yet
            kind = "outcome IS NULL" if table == "events" else "outcome IS NOT NULL"
            n += conn.execute(f"SELECT count(*) FROM history_log WHERE {kind}").fetchone()[0]
        return n
    finally:
        conn.close()


def _pg_snapshot(url):
    from jobctl.engines.pg_target import Target

    schema = Target(url).schema
    conn = pg_admin(url)
    try:
        cur = conn.cursor()
        cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename NOT IN "
                    "('job_counts', 'job_count_changes') ORDER BY 1", (schema,))
        tables = [r[0] for r in cur.fetchall()]
        rows = {}
        for t in tables:
            cur.execute(f'SELECT * FROM "{schema}"."{t}"')
            rows[t] = sorted((tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in cur.fetchall()),
                             key=repr)
        return rows
    finally:
        conn.close()


T0 = 1_900_000_000.0  # a fixed "now" (2030), in seconds, for tests that move time themselves


@pytest.fixture
def clock():
    return Clock(T0)


@pytest.fixture
def q(db, clock):
    """A queue on a real file whose clock stands at T0 until the test moves it."""
    from jobctl.queue import Queue

    queue = Queue.open(db, create=True, clock=clock)
    yield queue
    queue.close()


def start_worker(tmp_path, db, *args, name="worker", env=None, stdout=subprocess.PIPE):
    """`jobctl work` as a real process, its log (stderr) in tmp_path/NAME.log."""
    log = open(tmp_path / f"{name}.log", "wb")
    proc = subprocess.Popen([*JOBCTL, "--db", str(db), "work", *map(str, args)], stdout=stdout,
                            stderr=log, stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    proc.log_path = tmp_path / f"{name}.log"  # type: ignore[attr-defined]
    log.close()
    return proc


def finish(proc, timeout=30):
    """Wait for a worker from start_worker: (exit code, its log); kill it and fail if it hangs."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError("worker did not exit:\n" + proc.log_path.read_text())
    return proc.returncode, proc.log_path.read_text()


def wait_for(predicate, timeout=20.0, what="condition"):
    """Poll predicate() every 50 ms until it returns something true (returned), or fail after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(params=["sqlite", "postgres"])
def any_db(request, tmp_path):
    """The test's database on each engine in turn: a SQLite file path, or pg_url (a PostgreSQL URL
    in a schema of the test's own; skipped, or failed under CI, when no server answers)."""
    if request.param == "postgres":
        return request.getfixturevalue("pg_url")
    return tmp_path / "q" / "jobs.db"


def refused_line(r, *needles) -> str:
    """r is a usage error (exit 2) in one jobctl line holding each of needles: that line."""
    assert r.exit_code == 2, r.output
    line = r.one_error_line()
    for n in needles:
        assert n in line, line
    return line


def pg_named(url: str, app: str) -> str:
    """The URL with an application_name, so a test can find that engine's server processes."""
    return f"{url}&application_name={app}"


def keeper_of(worker_pid: int) -> int | None:
    """The living keeper process of a worker (jobctl/worker/keeper.py), found by its command line;
    a zombie is dead (it only waits to be reaped)."""
    from jobctl import handlers

    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if (any(b"import keeper" in a for a in argv) and str(worker_pid).encode() in argv
                and handlers.proc_start(int(name)) is not None):
            return int(name)
    return None
