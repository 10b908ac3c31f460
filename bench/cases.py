"""The benchmark's cases. bench/run.py starts each case as a fresh process:

    python bench/cases.py CASE '{"db": ..., ...}'     -> one JSON line on stdout: the case's figures
    python bench/cases.py worker IMPL '{...}'          -> one claim+complete worker (driven by a case)

A case builds nothing it does not time unless it says so: fixtures (a fresh database file with
its jobs) are made before the clock starts, and every figure is wall-clock time.
"""

from __future__ import annotations

import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
PY = sys.executable


def jobctl_cmd() -> list[str]:
    """The installed console script beside this Python (how users run it), else `python -m jobctl`."""
    script = Path(PY).parent / "jobctl"
    return [str(script)] if script.exists() else [PY, "-m", "jobctl"]


def percentile(values: list[float], p: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    k = (len(s) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def ensure_bytecode() -> None:
    """Compile jobctl and bench/ to .pyc first, as `pip install` does: with PYTHONDONTWRITEBYTECODE
    set (as on this machine) a source checkout would otherwise be compiled again by every process,
    a cost (~60 ms for jobctl) that no installed copy pays."""
    import compileall
    import importlib.util

    package = Path(importlib.util.find_spec("jobctl").origin).parent
    for folder in (package, BENCH):
        compileall.compile_dir(str(folder), quiet=2)


def cpu_seconds() -> float:
    """CPU time (user + system) of this process and of every child it has waited for (their
    children included): a figure that moves much less than wall time with a neighbour's load."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def jobctl_init(db: str) -> None:
    subprocess.run([*jobctl_cmd(), "--db", db, "init"], check=True, stdout=subprocess.DEVNULL)


def count_jobs(db: str, status: str | None = None, table: str = "jobs") -> int:
    conn = sqlite3.connect(db)
    try:
        if status is None:
            return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        return conn.execute("SELECT count(*) FROM jobs WHERE status = ?", (status,)).fetchone()[0]
    finally:
        conn.close()


def ndjson(n: int, type_: str = "bench") -> bytes:
    return "".join(f'{{"type":"{type_}","payload":{{"i":{i}}}}}\n' for i in range(n)).encode()


# The hand-written claim and completion of the references (claim workload, floor workers): the
# same table, indexes and pragmas as jobctl, and nothing else.
RAW_CLAIM = (
    "UPDATE jobs SET status = 'running', attempts = attempts + 1, worker = :worker, claimed_at = :now, "
    "lease_expires_at = :now + timeout_ms, token = :token WHERE id = ("
    # pinned, as jobctl pins it: left to itself the planner picks jobs_status and sorts every
    # pending row on each claim
    "SELECT id FROM jobs INDEXED BY jobs_ready WHERE status = 'pending' AND waiting_on = 0 AND run_at <= :now "
    "ORDER BY priority DESC, run_at, id LIMIT 1) RETURNING id, token, payload")
RAW_COMPLETE = ("UPDATE jobs SET status = 'completed', finished_at = :now, token = NULL "
                "WHERE id = :id AND status = 'running' AND token = :token")


# The hand-written PostgreSQL reference (bench/postgres.py): its own table, as a competent queue on
# PostgreSQL would have it (a partial index for the claim, another for the leases of held jobs),
# the claim as one UPDATE whose subquery takes the row with FOR UPDATE SKIP LOCKED, and the
# complete as one UPDATE: each one statement in autocommit mode, so one round trip and one commit.
PG_RAW_TABLE = """
CREATE TABLE jobs (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue TEXT NOT NULL, type TEXT NOT NULL, payload TEXT NOT NULL, priority INTEGER NOT NULL,
    status TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, timeout_ms BIGINT NOT NULL,
    run_at BIGINT NOT NULL, worker TEXT, claimed_at BIGINT, lease_expires_at BIGINT, token TEXT,
    result TEXT, created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL, finished_at BIGINT);
CREATE INDEX jobs_ready ON jobs (queue, priority DESC, run_at, id) WHERE status = 'pending';
CREATE INDEX jobs_held ON jobs (lease_expires_at) WHERE status = 'running';
"""
PG_RAW_CLAIM = (
    "UPDATE jobs SET status = 'running', attempts = attempts + 1, worker = %(worker)s, claimed_at = %(now)s, "
    "lease_expires_at = %(now)s + timeout_ms, token = %(token)s, updated_at = %(now)s WHERE id = ("
    "SELECT id FROM jobs WHERE queue = 'default' AND status = 'pending' AND run_at <= %(now)s "
    "ORDER BY priority DESC, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id, token, payload")
PG_RAW_COMPLETE = ("UPDATE jobs SET status = 'completed', finished_at = %(now)s, updated_at = %(now)s, "
                   "token = NULL, result = %(result)s WHERE id = %(id)s AND status = 'running' AND token = %(token)s")


def pg_raw_fill(url: str, n: int) -> None:
    """The reference's table with n pending jobs (untimed)."""
    import psycopg2

    conn = psycopg2.connect(url)
    now = int(time.time() * 1000) - 1000
    with conn, conn.cursor() as cur:
        cur.execute(PG_RAW_TABLE)
        cur.execute(
            "INSERT INTO jobs (queue, type, payload, priority, status, timeout_ms, run_at, created_at, updated_at) "
            "SELECT 'default', 'bench', '{\"i\":' || (i - 1) || '}', 0, 'pending', 600000, %s, %s, %s "
            "FROM generate_series(1, %s) AS i ORDER BY i", (now, now, now, n))
        cur.execute("ANALYZE jobs")
    conn.close()


def raw_connection(db: str, synchronous: str = "full") -> sqlite3.Connection:
    conn = sqlite3.connect(db, isolation_level=None, timeout=5.0)
    conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
    conn.execute("PRAGMA temp_store = MEMORY")  # jobctl's pragmas
    return conn


# -- 1. one process per enqueue -------------------------------------------------------------------

ENQUEUE_COMMANDS = {
    "jobctl": lambda db, i: [*jobctl_cmd(), "--db", db, "enqueue", "bench", f'{{"i":{i}}}'],
    "typer": lambda db, i: [PY, str(BENCH / "ref_typer.py"), db, "bench", f'{{"i":{i}}}'],
    "plain": lambda db, i: [PY, str(BENCH / "ref_plain.py"), db, "bench", f'{{"i":{i}}}'],
    "sqlite3-cli": lambda db, i: [
        "sqlite3", "-cmd", ".timeout 5000", db,
        "PRAGMA synchronous = FULL; INSERT INTO jobs (queue, type, payload, payload_hash, priority, status, "
        "max_attempts, backoff, timeout_ms, run_at, created_at, updated_at) VALUES ('default', 'bench', "
        f"'{{\"i\":{i}}}', '', 0, 'pending', 3, 'exponential', 600000, 0, 0, 0);",
    ],
    "tsp": lambda db, i: ["tsp", "true"],
}


def case_enqueue(a: dict) -> dict:
    """`n` processes, one after the other, each inserting one job; the median wall time per call."""
    db = a["db"]
    ensure_bytecode()
    jobctl_init(db)  # every command inserts into the same jobs table of a jobctl file
    make = ENQUEUE_COMMANDS[a["impl"]]
    times, cpu = [], []
    for i in range(a["n"]):
        cmd = make(db, i)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        times.append((time.perf_counter() - t) * 1000)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append((after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000)
        if r.returncode != 0:
            raise SystemExit(f"{cmd[0]} failed ({r.returncode}): {r.stderr.decode(errors='replace')[-500:]}")
    inserted = count_jobs(db) if a["impl"] != "tsp" else a["n"]
    return {"value": statistics.median(times), "p90": percentile(times, 90), "cpu": statistics.median(cpu),
            "missing": a["n"] - inserted,
            "duplicates": max(inserted - a["n"], 0)}


# -- 2. batch enqueue -----------------------------------------------------------------------------

def case_batch_cli(a: dict) -> dict:
    """`jobctl enqueue --batch -` or the hand-written executemany, NDJSON on stdin, the whole process."""
    db, n = a["db"], a["n"]
    ensure_bytecode()
    jobctl_init(db)
    src = Path(db).with_suffix(".ndjson")
    src.write_bytes(ndjson(n))
    cmd = ([*jobctl_cmd(), "--db", db, "enqueue", "--batch", "-"] if a["impl"] == "jobctl"
           else [PY, str(BENCH / "ref_batch.py"), *(["--minimal"] if a["impl"] == "minimal" else []), db])
    with open(src, "rb") as stdin:
        t = time.perf_counter()
        r = subprocess.run(cmd, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        elapsed = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed: {r.stderr.decode(errors='replace')[-500:]}")
    inserted = count_jobs(db, table="jobs_minimal" if a["impl"] == "minimal" else "jobs")
    return {"value": n / elapsed, "seconds": elapsed, "missing": n - inserted, "duplicates": max(inserted - n, 0)}


def _peer_put_loop(impl: str, workdir: Path, n: int, fill: bool = False):
    """Enqueue n jobs through a peer's public API, one call per job. Returns (seconds, opened queue)."""
    if impl == "huey":
        os.environ["JOBCTL_BENCH_HUEY_DB"] = str(workdir / "huey.db")
        if fill:
            os.environ["JOBCTL_BENCH_HUEY_FILL"] = "1"
        sys.path.insert(0, str(BENCH))
        from huey_app import noop

        t = time.perf_counter()
        for i in range(n):
            noop(i)
        return time.perf_counter() - t
    if impl == "persist-queue":
        from persistqueue import SQLiteAckQueue

        q = SQLiteAckQueue(str(workdir / "pq"))
        if fill:
            q._putter.execute("PRAGMA synchronous = OFF")  # fixture only: the timed workers use the defaults
        t = time.perf_counter()
        for i in range(n):
            q.put(i)
        elapsed = time.perf_counter() - t
        q.close()
        return elapsed
    if impl == "litequeue":
        from litequeue import LiteQueue

        q = LiteQueue(str(workdir / "litequeue.db"))
        t = time.perf_counter()
        for i in range(n):
            q.put(str(i))
        elapsed = time.perf_counter() - t
        q.conn.close()
        return elapsed
    raise ValueError(impl)


def _peer_count(impl: str, workdir: Path) -> int:
    if impl == "huey":
        return sqlite3.connect(workdir / "huey.db").execute("SELECT count(*) FROM task").fetchone()[0]
    if impl == "persist-queue":
        return sqlite3.connect(workdir / "pq" / "data.db").execute("SELECT count(*) FROM ack_queue_default").fetchone()[0]
    return sqlite3.connect(workdir / "litequeue.db").execute("SELECT count(*) FROM Queue").fetchone()[0]


def case_batch_peer(a: dict) -> dict:
    """A peer's enqueue loop (its public API, one call per job, in-process: the loop alone is timed)."""
    workdir, n = Path(a["dir"]), a["n"]
    elapsed = _peer_put_loop(a["impl"], workdir, n)
    inserted = _peer_count(a["impl"], workdir)
    return {"value": n / elapsed, "seconds": elapsed, "missing": n - inserted, "duplicates": max(inserted - n, 0)}


# -- 3. claim + complete --------------------------------------------------------------------------

def _fill(impl: str, a: dict) -> None:
    """The fixture: `n` pending jobs (untimed)."""
    n, workdir = a["n"], Path(a["dir"])
    if impl == "pg-raw":
        pg_raw_fill(a["db"], n)
    elif impl in ("jobctl", "jobctl-pipelined", "raw"):
        from jobctl.queue import Queue

        with Queue.open(a["db"], create=True) as q:
            q.enqueue_batch([f'{{"type":"bench","payload":{{"i":{i}}}}}' for i in range(n)])
    else:
        _peer_put_loop(impl, workdir, n, fill=True)


def case_claim(a: dict) -> dict:
    """`procs` fresh worker processes claim and complete every job; from the go signal to the last
    worker's report. Each worker reports the jobs it got, so duplicates and losses are counted."""
    impl, procs, n = a["impl"], a["procs"], a["n"]
    _fill(impl, a)
    env = dict(os.environ)
    if impl == "huey":
        env["JOBCTL_BENCH_HUEY_DB"] = str(Path(a["dir"]) / "huey.db")
        env.pop("JOBCTL_BENCH_HUEY_FILL", None)
    workers = [
        subprocess.Popen([PY, __file__, "worker", impl, json.dumps({**a, "worker": f"w{k}"})],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        for k in range(procs)
    ]
    for w in workers:  # every worker has imported and opened its queue before the clock starts
        if w.stdout.readline().strip() != b"ready":
            raise SystemExit(f"{impl} worker did not start")
    t = time.perf_counter()
    for w in workers:
        w.stdin.write(b"go\n")
        w.stdin.flush()
    reports = []
    for w in workers:
        line = w.stdout.readline()
        reports.append(json.loads(line) if line.strip() else None)
    elapsed = time.perf_counter() - t
    for w in workers:
        w.wait()
    if any(r is None for r in reports):
        raise SystemExit(f"a {impl} worker died: exit codes {[w.returncode for w in workers]}")
    got = [i for r in reports for i in r["ids"]]
    distinct = set(got)
    expected = set(range(n))
    return {
        "value": len(distinct & expected) / elapsed, "seconds": elapsed,
        "duplicates": len(got) - len(distinct), "missing": len(expected - distinct),
        "busy_retries": sum(r["busy"] for r in reports), "errors": sum(r["errors"] for r in reports),
    }


def worker(impl: str, a: dict) -> None:
    """Claim and complete until the queue is empty; report the job numbers it processed."""
    ids: list[int] = []
    busy = [0]
    errors = 0
    busy_errors: tuple = (sqlite3.OperationalError,)

    def is_busy(e: Exception) -> bool:
        # jobctl's DatabaseBusy on any engine (on PostgreSQL a lock timeout or a deadlock, in
        # words of its own), or SQLite's own busy and locked errors
        return type(e).__name__ == "DatabaseBusy" or "locked" in str(e) or "busy" in str(e).lower()

    def persist(fn, *args, **kwargs):
        """Retry a step whose job is already claimed until it goes through: giving up on a busy
        database there would strand the job (and count as a loss that is the harness's own)."""
        while True:
            try:
                return fn(*args, **kwargs)
            except busy_errors as e:
                if not is_busy(e):
                    raise
                busy[0] += 1
                time.sleep(0.001)
    if impl in ("jobctl", "jobctl-pipelined", "raw"):
        from jobctl.errors import DatabaseBusy

        if impl == "jobctl-pipelined":
            from jobctl.config import Settings
            from jobctl.queue import Queue

            q = Queue.open(a["db"], Settings(synchronous=a.get("synchronous", "full")))
            held = []  # the job claimed by the previous transaction, completed by the next

            def step():
                # the worker's path: complete the held job and claim the next in one transaction
                if not held:
                    job = q.claim(worker=a["worker"])
                    if job is None:
                        return None
                    held.append(job)
                job = held[-1]  # kept until its transaction commits: a busy error retries it
                _, following = persist(q.complete_and_claim, job.id, token=job.token, worker=a["worker"])
                held.pop()
                if following is not None:
                    held.append(following)
                return job.id
        elif impl == "jobctl":
            from jobctl.config import Settings
            from jobctl.queue import Queue

            q = Queue.open(a["db"], Settings(synchronous=a.get("synchronous", "full")))

            def step():
                job = q.claim(worker=a["worker"])
                if job is None:
                    return None
                persist(q.complete, job.id, token=job.token)
                return job.id
        else:
            conn = raw_connection(a["db"], a.get("synchronous", "full"))

            def step():
                now = int(time.time() * 1000)
                token = os.urandom(12).hex()
                conn.execute("BEGIN IMMEDIATE")
                try:
                    rows = conn.execute(RAW_CLAIM, {"worker": a["worker"], "now": now, "token": token}).fetchall()
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                if not rows:
                    return None
                job_id, token, _ = rows[0]
                persist(finish, job_id, token)
                return job_id

            def finish(job_id, token):
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.execute(RAW_COMPLETE, {"now": int(time.time() * 1000), "id": job_id, "token": token})
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise

        # jobctl ids start at 1; job i has id i + 1 in a fresh file
        def claim_one():
            job_id = step()
            return None if job_id is None else job_id - 1
        busy_errors = (DatabaseBusy, sqlite3.OperationalError)
    elif impl == "pg-raw":
        import psycopg2

        conn = psycopg2.connect(a["db"])
        conn.autocommit = True  # each statement its own transaction: one round trip, one commit
        cur = conn.cursor()

        def claim_one():
            now = int(time.time() * 1000)
            cur.execute(PG_RAW_CLAIM, {"worker": a["worker"], "now": now, "token": os.urandom(12).hex()})
            row = cur.fetchone()
            if row is None:
                return None
            job_id, token, _ = row
            cur.execute(PG_RAW_COMPLETE, {"now": int(time.time() * 1000), "id": job_id, "token": token,
                                          "result": '{"ok":true}'})
            return job_id - 1  # ids start at 1 in a fresh table
        busy_errors = ()
    elif impl == "huey":
        sys.path.insert(0, str(BENCH))
        from huey_app import huey

        def claim_one():
            task = huey.dequeue()  # huey deletes the row here: there is no separate complete step
            return None if task is None else task.args[0]
    elif impl == "persist-queue":
        from persistqueue import Empty, SQLiteAckQueue

        q = SQLiteAckQueue(str(Path(a["dir"]) / "pq"))

        def claim_one():
            try:
                item = q.get(block=False, raw=True)
            except Empty:
                return None
            persist(q.ack, id=item["pqid"])
            return item["data"]
    elif impl == "litequeue":
        from litequeue import LiteQueue

        q = LiteQueue(str(Path(a["dir"]) / "litequeue.db"))

        def claim_one():
            msg = q.pop()
            if msg is None:
                return None
            persist(q.done, msg.message_id)
            return int(msg.data)
        busy_errors = (sqlite3.OperationalError,)
    else:
        raise SystemExit(f"unknown implementation {impl}")

    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sys.stdin.readline()
    while True:
        try:
            got = claim_one()
        except busy_errors as e:  # a long-running worker retries a busy database, as jobctl's does
            if is_busy(e):
                busy[0] += 1
                time.sleep(0.001)
                continue
            errors += 1
            if errors > 100:
                raise
            continue
        if got is None:
            break
        ids.append(got)
    sys.stdout.write(json.dumps({"ids": ids, "busy": busy[0], "errors": errors}) + "\n")
    sys.stdout.flush()


# -- 4. jobctl work -------------------------------------------------------------------------------

def case_work(a: dict) -> dict:
    """`jobctl work --stop-when-empty` over n jobs whose handler is `true`, the whole process."""
    db, n = a["db"], a["n"]
    cfg = Path(db).with_suffix(".toml")
    cfg.write_text('[types.noop]\ncommand = ["true"]\n')
    from jobctl.config import load_settings
    from jobctl.queue import Queue

    with Queue.open(db, load_settings(str(cfg)), create=True) as q:
        q.enqueue_batch([f'{{"type":"noop","payload":{{"i":{i}}}}}' for i in range(n)])
    ensure_bytecode()
    cmd = [*jobctl_cmd(), "--db", db, "--config", str(cfg), "work", "--stop-when-empty",
           "--concurrency", str(a.get("concurrency", 1))]
    t, cpu = time.perf_counter(), cpu_seconds()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed, cpu = time.perf_counter() - t, cpu_seconds() - cpu
    if r.returncode != 0:
        raise SystemExit(f"jobctl work failed ({r.returncode}): {r.stderr.decode(errors='replace')[-500:]}")
    done = count_jobs(db, "completed")
    conn = sqlite3.connect(db)
    runs = conn.execute("SELECT count(*) FROM runs WHERE outcome = 'completed'").fetchone()[0] + conn.execute(
        "SELECT count(*) FROM history_log WHERE outcome = 'completed'").fetchone()[0]  # (not filed yet)
    conn.close()
    return {"value": done / elapsed, "seconds": elapsed, "cpu": cpu / n * 1000, "missing": n - done,
            "duplicates": max(runs - n, 0)}


def case_spawn(a: dict) -> dict:
    """The reference: a Python loop that only spawns `true` and reaps it, n times."""
    n = a["n"]
    t, cpu = time.perf_counter(), cpu_seconds()
    for _ in range(n):
        subprocess.run(["true"], stdin=subprocess.DEVNULL)
    elapsed, cpu = time.perf_counter() - t, cpu_seconds() - cpu
    return {"value": n / elapsed, "seconds": elapsed, "cpu": cpu / n * 1000, "missing": 0, "duplicates": 0}


def case_floor_worker(a: dict) -> dict:
    """The floor of any worker that keeps jobctl's guarantees, and what claiming ahead would buy: a
    hand-written worker on a jobctl file (same table, indexes, triggers and pragmas) that runs
    `true` for each job with the payload on stdin in a new session, as `jobctl work` does, and
    nothing else: no event history, no run log, no orphan registry, no logs, no result capture.

    mode "sequential": complete the finished job and claim the next in one BEGIN IMMEDIATE
    transaction, then start it (one commit between one handler's exit and the next spawn).
    mode "ahead": start the job claimed by the previous transaction first, then complete the
    finished one and claim the one after while the handler runs, so that the commit overlaps it.
    That job is `running` (attempts + 1, lease ticking) before anything runs it, while jobctl
    reads `running` and `attempts` as started, which is why jobctl does not do this.
    The whole process is timed, start-up included, as `jobctl work` is."""
    db, n = a["db"], a["n"]
    from jobctl.config import Settings
    from jobctl.queue import Queue

    with Queue.open(db, Settings(), create=True) as q:
        q.enqueue_batch([f'{{"type":"noop","payload":{{"i":{i}}}}}' for i in range(n)])
    t, cpu = time.perf_counter(), cpu_seconds()
    r = subprocess.run([PY, __file__, "floor_worker_run", json.dumps(a)], stderr=subprocess.PIPE)
    elapsed, cpu = time.perf_counter() - t, cpu_seconds() - cpu
    if r.returncode != 0:
        raise SystemExit(f"floor worker failed: {r.stderr.decode(errors='replace')[-500:]}")
    done = count_jobs(db, "completed")
    conn = sqlite3.connect(db)
    # every claim counts an attempt: a job claimed more than once was handed out twice
    twice = conn.execute("SELECT coalesce(sum(attempts - 1), 0) FROM jobs WHERE attempts > 1").fetchone()[0]
    conn.close()
    return {"value": done / elapsed, "seconds": elapsed, "cpu": cpu / n * 1000, "missing": n - done,
            "duplicates": twice}


def floor_worker_run(a: dict) -> None:
    conn = raw_connection(a["db"])

    def transaction(finished):
        """Complete `finished` (a claimed row, or None) and claim the next job, in one transaction."""
        now = int(time.time() * 1000)
        conn.execute("BEGIN IMMEDIATE")
        if finished is not None:
            conn.execute(RAW_COMPLETE, {"now": now, "id": finished[0], "token": finished[1]})
        row = conn.execute(RAW_CLAIM, {"worker": "floor", "now": now, "token": os.urandom(12).hex()}).fetchone()
        conn.execute("COMMIT")
        return row

    def spawn(job):
        r, w = os.pipe()
        os.write(w, job[2].encode())
        os.close(w)
        try:
            return subprocess.Popen(["true"], stdin=r, start_new_session=True)
        finally:
            os.close(r)

    job = transaction(None)
    if a["mode"] == "sequential":
        while job is not None:
            spawn(job).wait()
            job = transaction(job)
    else:
        finished = None
        while job is not None:
            proc = spawn(job)
            following = transaction(finished)  # while the handler runs
            proc.wait()
            finished, job = job, following
        if finished is not None:
            transaction(finished)


# -- 5. claim latency -----------------------------------------------------------------------------

def build_pending(db: str, n: int) -> None:
    """A jobctl file with n pending jobs, written straight into the jobs table (fixture, untimed)."""
    from jobctl.engines.sqlite import SQLiteEngine
    from jobctl.payloads import canonical_hash

    SQLiteEngine.open(db, create=True).close()
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("PRAGMA cache_size = -262144")
    now = int(time.time() * 1000) - 1000
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO jobs (queue, type, payload, payload_hash, priority, status, max_attempts, backoff, "
        "timeout_ms, run_at, created_at, updated_at) VALUES ('default', 'bench', ?, ?, 0, 'pending', 3, "
        "'exponential', 600000, ?, ?, ?)",
        # the real hash: a claim buries a job whose payload does not match it
        ((f'{{"i":{i}}}', canonical_hash({"i": i}), now, now, now) for i in range(n)),
    )
    from jobctl.engines.schema import COUNT_INSERTED  # (as jobctl counts its own inserts: no trigger does)

    conn.execute(COUNT_INSERTED, (0, 1 << 62))
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def case_latency(a: dict) -> dict:
    """`k` claims through the core API on a file built beforehand; per-claim wall time."""
    from jobctl.config import Settings
    from jobctl.queue import Queue

    times = []
    with Queue.open(a["db"], Settings(synchronous=a.get("synchronous", "full"))) as q:
        q.claim(worker="warm-up")  # the first claim pays for opening pages; not a steady-state figure
        for _ in range(a["k"]):
            t = time.perf_counter()
            job = q.claim(worker="bench")
            times.append((time.perf_counter() - t) * 1000)
            if job is None:
                raise SystemExit("the latency fixture ran out of pending jobs")
    return {"value": percentile(times, 99), "median": statistics.median(times), "missing": 0, "duplicates": 0}


# -- 6. stats -------------------------------------------------------------------------------------

def case_stats(a: dict) -> dict:
    """`jobctl stats --json`, or the hand-written GROUP BY, as a whole process on a built file."""
    cmd = ([*jobctl_cmd(), "--db", a["db"], "stats", "--json"] if a["impl"] == "jobctl"
           else [PY, str(BENCH / "ref_stats.py"), a["db"]])
    ensure_bytecode()
    times = []
    for _ in range(a["k"]):
        t = time.perf_counter()
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        times.append((time.perf_counter() - t) * 1000)
        if r.returncode != 0:
            raise SystemExit(f"{cmd[0]} failed: {r.stderr.decode(errors='replace')[-500:]}")
    return {"value": statistics.median(times), "min": min(times), "missing": 0, "duplicates": 0}


CASES = {
    "enqueue": case_enqueue, "batch_cli": case_batch_cli, "batch_peer": case_batch_peer, "claim": case_claim,
    "work": case_work, "spawn": case_spawn, "floor_worker": case_floor_worker, "latency": case_latency, "stats": case_stats,
}

if __name__ == "__main__":
    if sys.argv[1] == "worker":
        worker(sys.argv[2], json.loads(sys.argv[3]))
    elif sys.argv[1] == "floor_worker_run":
        floor_worker_run(json.loads(sys.argv[2]))
    else:
        result = CASES[sys.argv[1]](json.loads(sys.argv[2]))
        sys.stdout.write(json.dumps(result) + "\n")
