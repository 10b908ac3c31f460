"""The SQLite schema and its forward migrations.

The version lives in PRAGMA user_version and jobctl's mark in PRAGMA application_id. Migrations
run through sqlite-utils, which is imported only here (it costs ~90 ms to import, so the hot
commands never load this module unless a file needs creating or migrating). All pending steps run
in the caller's single BEGIN IMMEDIATE transaction: a file is either at the old version or at the
new one, never in between.
"""

from __future__ import annotations

import sqlite3

from jobctl.models import counted_state

APPLICATION_ID = 0x6A6F6263  # "jobc"
SCHEMA_VERSION = 14


# The triggers' change of one row's count in job_counts, under the state it counts in.
_COUNT_ADD = ("INSERT INTO job_counts (queue, state, n) VALUES (NEW.queue, " + counted_state("NEW") + ", 1) "
              "ON CONFLICT (queue, state) DO UPDATE SET n = n + 1;")
_COUNT_REMOVE = "UPDATE job_counts SET n = n - 1 WHERE queue = OLD.queue AND state = " + counted_state("OLD") + ";"


def _v1(db) -> None:
    """The first schema. Times are integer milliseconds since the epoch (UTC)."""
    # AUTOINCREMENT: an id is never handed out twice, even after the newest rows are purged.
    db.execute(
        """
        CREATE TABLE jobs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            queue TEXT NOT NULL,
            type TEXT NOT NULL,
            payload TEXT NOT NULL,
            payload_hash TEXT NOT NULL,
            priority INTEGER NOT NULL,
            status TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            max_attempts INTEGER NOT NULL,
            backoff TEXT NOT NULL,
            timeout_ms INTEGER NOT NULL,
            run_at INTEGER NOT NULL,
            waiting_on INTEGER NOT NULL DEFAULT 0,
            -- 1: the job has `after` dependencies (rows in job_deps as job_id); 2: other jobs depend
            -- on it (rows as after_id). Lets claim and complete skip job_deps for most jobs.
            dep_flags INTEGER NOT NULL DEFAULT 0,
            unique_key TEXT,
            idempotency_key TEXT UNIQUE,
            worker TEXT,
            claimed_at INTEGER,
            heartbeat_at INTEGER,
            lease_expires_at INTEGER,
            lease_ms INTEGER,
            token TEXT,
            progress TEXT,
            error TEXT,
            result TEXT,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            finished_at INTEGER
        )
        """
    )
    # The claim: one partial index per claim order, so a claim is a short index walk whether the
    # table holds ten thousand rows or ten million (finished rows are not in these indexes).
    db.execute(
        "CREATE INDEX jobs_ready_by_queue ON jobs (queue, priority DESC, run_at, id) "
        "WHERE status = 'pending' AND waiting_on = 0"
    )
    db.execute(
        "CREATE INDEX jobs_ready ON jobs (priority DESC, run_at, id) "
        "WHERE status = 'pending' AND waiting_on = 0"
    )
    # Leases of held jobs, for recover and for the stuck view.
    db.execute(
        "CREATE INDEX jobs_held ON jobs (lease_expires_at) WHERE status IN ('running', 'cancel_requested')"
    )
    db.execute(
        "CREATE INDEX jobs_unique ON jobs (unique_key) "
        "WHERE unique_key IS NOT NULL AND status IN ('pending', 'running', 'cancel_requested')"
    )
    # Counting by state and queue (stats, list --status) and purging by age, from one index.
    db.execute("CREATE INDEX jobs_status ON jobs (status, queue, finished_at)")

    db["job_deps"].create({"job_id": int, "after_id": int}, pk=("job_id", "after_id"), not_null={"job_id", "after_id"})
    db.execute("CREATE INDEX job_deps_after ON job_deps (after_id)")

    db["events"].create(
        {
            "id": int,
            "job_id": int,
            "at": int,
            "from_status": str,
            "to_status": str,
            "actor": str,
            "message": str,
            "details": str,
        },
        pk="id",
        not_null={"job_id", "at", "to_status", "actor"},
    )
    db.execute("CREATE INDEX events_job ON events (job_id, id)")

    # One row per finished run: throughput and run durations without scanning the history.
    db["runs"].create(
        {
            "id": int,
            "job_id": int,
            "queue": str,
            "type": str,
            "worker": str,
            "ready_at": int,
            "started_at": int,
            "ended_at": int,
            "outcome": str,
        },
        pk="id",
        not_null={"job_id", "queue", "type", "started_at", "ended_at", "outcome"},
    )
    db.execute("CREATE INDEX runs_ended ON runs (ended_at)")
    db.execute("CREATE INDEX runs_job ON runs (job_id)")

    db["queues"].create({"name": str, "paused": int, "updated_at": int}, pk="name", not_null={"paused"})

    # stats: how long the oldest ready job of each queue has waited, how many are scheduled, and the
    # aging list, as short walks from the front of each queue instead of a sort of every pending row.
    db.execute(
        "CREATE INDEX jobs_pending_age ON jobs (queue, run_at) WHERE status = 'pending' AND waiting_on = 0"
    )
    # stats: jobs per queue and state, kept exact by triggers in the same transaction as each change.
    # Counting 900,000 completed rows through any index takes ~70 ms; reading this table takes
    # microseconds. A pending job waiting on `after` jobs counts as 'blocked'. Cost: one small
    # UPSERT per insert, delete or change of state (a few µs against ~190 µs of fsync per commit).
    db.execute(
        "CREATE TABLE job_counts (queue TEXT NOT NULL, state TEXT NOT NULL, n INTEGER NOT NULL, "
        "PRIMARY KEY (queue, state)) WITHOUT ROWID"
    )
    db.execute(f"CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs BEGIN {_COUNT_ADD} END")
    db.execute(f"CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs BEGIN {_COUNT_REMOVE} END")
    db.execute(
        "CREATE TRIGGER jobs_count_update AFTER UPDATE OF status, queue, waiting_on ON jobs "
        "WHEN OLD.status IS NOT NEW.status OR OLD.queue IS NOT NEW.queue "
        "OR (OLD.waiting_on > 0) IS NOT (NEW.waiting_on > 0) "
        f"BEGIN {_COUNT_REMOVE} {_COUNT_ADD} END"
    )


def _v2(db) -> None:
    """A lease is judged lost only when two sweeps, some time apart, saw it expired with the same
    heartbeat (transitions.recover): the first sighting is kept on the job."""
    db.execute("ALTER TABLE jobs ADD COLUMN expiry_seen_at INTEGER")
    db.execute("ALTER TABLE jobs ADD COLUMN expiry_seen_hb INTEGER")


def _v3(db) -> None:
    """Admission control (jobctl/limits.py): a job's cost units and concurrency group, stored at
    enqueue; claims under limits look ready jobs up by type, and count recent starts of a type."""
    db.execute("ALTER TABLE jobs ADD COLUMN cost_units INTEGER NOT NULL DEFAULT 1")
    db.execute("ALTER TABLE jobs ADD COLUMN concurrency_group TEXT")
    # The best ready job of one type, for a claim that must skip the types a limit holds back
    # without walking past all their ready rows. Covering what the claim and stats filter on
    # (paused queue, cost against the room left, group), so neither reads the table row by row.
    db.execute(
        "CREATE INDEX jobs_ready_by_type ON jobs (type, priority DESC, run_at, id, queue, cost_units, "
        "concurrency_group) WHERE status = 'pending' AND waiting_on = 0"
    )
    # stats: ready jobs that cost more than one unit (few: most cost 1), the only ones a limit with
    # room left can hold back.
    db.execute(
        "CREATE INDEX jobs_ready_costly ON jobs (type, cost_units, queue, run_at) "
        "WHERE status = 'pending' AND waiting_on = 0 AND cost_units > 1"
    )
    # stats: the ready jobs of a concurrency group that its limit holds back (only grouped jobs).
    db.execute(
        "CREATE INDEX jobs_ready_by_group ON jobs (concurrency_group, cost_units, run_at, queue) "
        "WHERE status = 'pending' AND waiting_on = 0 AND concurrency_group IS NOT NULL"
    )
    # Starts of a type in a rate window: ended runs here, running ones in jobs (few, by jobs_held).
    db.execute("CREATE INDEX runs_type_started ON runs (type, started_at)")


def _v4(db) -> None:
    """Reactions: the type of the job to enqueue when a job becomes buried, completed or
    cancelled, stored at enqueue (so a later config change does not lose them)."""
    for column in ("on_buried", "on_completed", "on_cancelled"):
        db.execute(f"ALTER TABLE jobs ADD COLUMN {column} TEXT")


def _v5(db) -> None:
    """Pauses of one type in a queue, and pauses that end by themselves. A pause whose end has
    passed is simply ignored by the claim (no process has to wake up to resume it). The claim
    looks a candidate's (queue, type) up by this table's primary key, inside its one statement."""
    db.execute("ALTER TABLE queues ADD COLUMN paused_until INTEGER")  # NULL: until resumed
    db.execute(
        "CREATE TABLE paused_types (queue TEXT NOT NULL, type TEXT NOT NULL, until INTEGER, "
        "updated_at INTEGER NOT NULL, PRIMARY KEY (queue, type)) WITHOUT ROWID"
    )


def _v6(db) -> None:
    """A handler's output, one row per run (the run's start is the job's claimed_at): the first
    bytes (head), the last bytes (tail) and how many were dropped between them. Written by the
    worker with its heartbeats and with the run's outcome; deleted with the job."""
    # A rowid table, small columns first: a 1 MiB row costs ~35% less to write than WITHOUT ROWID.
    db.execute(
        "CREATE TABLE job_logs (id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL, started_at INTEGER NOT NULL, "
        "ended_at INTEGER, dropped INTEGER NOT NULL DEFAULT 0, head BLOB NOT NULL, tail BLOB NOT NULL)"
    )
    db.execute("CREATE UNIQUE INDEX job_logs_run ON job_logs (job_id, started_at)")


READY_BY_TYPE = (  # (both engines: pg_schema.py)
    "CREATE INDEX jobs_ready_by_type ON jobs (type, concurrency_group, priority DESC, run_at, id, queue, cost_units) "
    "WHERE status = 'pending' AND waiting_on = 0")


def _v7(db) -> None:
    """The ready jobs of a type by concurrency group, then in claim order: a claim while a limit
    is full seeks the best job of each (type, group) that has room, and never reads the jobs the
    full one holds back (in v3's order, by type alone, it read past all of them). Same columns,
    one more in the key: no more index to write than before."""
    db.execute("DROP INDEX jobs_ready_by_type")
    db.execute(READY_BY_TYPE)


def _v8(db) -> None:
    """History written ahead: the events and runs of a job's transitions go first into this one
    table, which has no index but its rowid, and are filed into `events` and `runs` (and their four
    indexes) in batches, by whichever write fills it to FILE_HISTORY_EVERY rows (sqlite.py). A
    worker's step then writes one page of history where it wrote six; readers of events and runs
    read this table too (at most a batch: a scan of a few hundred rows). A row is an event
    (outcome NULL: the columns of `events`) or an ended run (outcome set: the columns of `runs`,
    with `at` its ended_at). Order is kept: a job's rows are filed in the order they were written,
    after every row of it filed before (only a new job's first event goes straight to `events`)."""
    db.execute(
        "CREATE TABLE history_log (id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL, at INTEGER NOT NULL, "
        "from_status TEXT, to_status TEXT, actor TEXT, message TEXT, details TEXT, "
        "queue TEXT, type TEXT, worker TEXT, ready_at INTEGER, started_at INTEGER, outcome TEXT)"
    )


LEASE_AND_PROGRESS = (  # (both engines: pg_schema.py)
    "ALTER TABLE jobs RENAME COLUMN expiry_seen_at TO lease_boot_ms",
    "ALTER TABLE jobs RENAME COLUMN expiry_seen_hb TO lease_boot_id",
    # (a first sighting kept there is no boot-clock lease: such a lease is judged on the wall clock)
    "UPDATE jobs SET lease_boot_ms = NULL, lease_boot_id = NULL WHERE lease_boot_ms IS NOT NULL OR lease_boot_id IS NOT NULL",
    "ALTER TABLE jobs ADD COLUMN progress_at BIGINT",
)


def _v9(db) -> None:
    """A lease is timed on the host's boot clock, not the wall clock, so that one sweep can judge
    it whatever the wall clock did (sqlite.py, SQLiteEngine.boot_clock): the lease's end in boot-clock
    milliseconds and the boot it was taken in (a number made from the boot id). They take the
    place of v2's first sighting of an expired lease, which a second sweep used to confirm (never
    written on PostgreSQL, whose server clock times leases). And when a job's progress last
    changed, so that a stalled job can be told from a live one."""
    for statement in LEASE_AND_PROGRESS:
        db.execute(statement)


# Jobs just inserted (ids first..last, in the transaction that inserts them), counted by queue and
# state in one grouped statement: SQLiteEngine._count_inserted_jobs, used by every insert of a job.
COUNT_INSERTED = ("INSERT INTO job_counts (queue, state, n) SELECT queue, " + counted_state("jobs") + ", count(*) "
                  "FROM jobs WHERE id BETWEEN ? AND ? GROUP BY 1, 2 "
                  "ON CONFLICT (queue, state) DO UPDATE SET n = n + excluded.n")


def _v10(db) -> None:
    """`enqueue --batch` counts its jobs once, not one UPSERT of job_counts per row (half its time
    with the statement journal each trigger needs): while job_counts_deferred holds a row, the
    insert trigger skips the rows, and the bulk insert adds them with COUNT_INSERTED in the same
    transaction. The table is empty outside that transaction."""
    db.execute("CREATE TABLE job_counts_deferred (since INTEGER NOT NULL)")
    db.execute("DROP TRIGGER jobs_count_insert")
    db.execute("CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs "
               f"WHEN NOT EXISTS (SELECT 1 FROM job_counts_deferred) BEGIN {_COUNT_ADD} END")


# The registry of `jobctl work` processes (both engines: pg_schema.py). One row per process, keyed
# by a random id it draws when it registers (a worker id may be shared by two processes, and a
# deleted row's key must never be handed to another process). Times are the database's clock;
# queues and types are JSON lists (queues NULL: every queue); state is what the worker says of
# itself (running, draining, stopped), request what an operator asked of it (drain, stop).
WORKERS = (
    "CREATE TABLE workers (instance TEXT PRIMARY KEY, worker TEXT NOT NULL, host TEXT NOT NULL, "
    "pid BIGINT NOT NULL, version TEXT NOT NULL, queues TEXT, types TEXT NOT NULL, concurrency BIGINT NOT NULL, "
    "started_at BIGINT NOT NULL, last_seen BIGINT NOT NULL, renew_ms BIGINT NOT NULL, state TEXT NOT NULL, "
    "request TEXT, requested_by TEXT, done BIGINT NOT NULL DEFAULT 0, failed BIGINT NOT NULL DEFAULT 0, "
    "stopped_at BIGINT)",
    "CREATE INDEX workers_worker ON workers (worker)",
)


def _v11(db) -> None:
    """The workers' registry (`jobctl workers`): each worker writes its own row when it starts,
    with its lease renewals, and when it stops; an operator's drain or stop is written there."""
    for statement in WORKERS:
        db.execute(statement)


CLAIM_ON_BOOT = (  # (both engines: pg_schema.py)
    "ALTER TABLE jobs ADD COLUMN claimed_boot_ms BIGINT",
    "ALTER TABLE workers ADD COLUMN seen_boot_ms BIGINT",
    "ALTER TABLE workers ADD COLUMN seen_boot_id BIGINT",
)


def _v12(db) -> None:
    """When the run began on the clock that times its lease (the boot clock of lease_boot_id), so
    that "ran past its timeout" is judged as the lease is, whatever the wall clock did since the
    claim (a heartbeat renews the lease on the boot clock but keeps no trace of the claim's own
    time there); and a worker's last renewal on the boot clock (and its boot), so that a step of
    the wall clock makes no live worker lost and no dead one alive. NULL (written before this
    schema, or on PostgreSQL, whose server clock times both): judged on claimed_at, last_seen."""
    for statement in CLAIM_ON_BOOT:
        db.execute(statement)


# Every live job's key, now that each job holds one, is found through the index jobs_status, of
# which it is the last column: (status, queue, finished_at, unique_key). A --unique lookup is one
# seek per live state there (a live job's finished_at is NULL), and no job writes an entry in a
# second index: the index jobs_unique of v1-v12, over --unique jobs only, is gone. (A separate
# index of every live job's key cost each worker step one more WAL page, since the status index is
# written by every insert, claim and completion anyway; the key's own bytes, in the row and in
# the entry, cost `enqueue --batch` about a sixth of its speed either way: docs/performance.md.)
STATUS_INDEX = "CREATE INDEX jobs_status ON jobs (status, queue, finished_at, unique_key)"
_LIVE_JOBS = "SELECT id, queue, type, payload_hash FROM jobs WHERE status IN ('pending', 'running', 'cancel_requested')"


def _v13(db) -> None:
    """Every job has a unique_key from its insert on (16 hex digits made from its queue, type and
    payload hash: engines/base.py), not only the jobs enqueued with --unique, so that a
    --unique enqueue finds any live job with the same queue, type and payload, through the index
    jobs_status, remade with the key as its last column (jobs_unique is dropped). The live jobs get
    their keys here (a --unique job's old 64-digit key is written anew too), and a finished_at that
    an older version left on a live job is cleared (every transition to a live state clears it
    now); a finished job gets its key when it is retried."""
    from jobctl.engines.base import unique_key

    db.execute("DROP INDEX jobs_unique")
    db.execute("DROP INDEX jobs_status")
    db.execute("UPDATE jobs SET finished_at = NULL WHERE status IN ('pending', 'running', 'cancel_requested') "
               "AND finished_at IS NOT NULL")
    rows = db.execute(_LIVE_JOBS).fetchall()
    db.conn.executemany("UPDATE jobs SET unique_key = ? WHERE id = ?",
                        [(unique_key(queue, type_, payload_hash), job_id) for job_id, queue, type_, payload_hash in rows])
    db.execute(STATUS_INDEX)


# The keys of pending jobs, in an index of their own: short entries (the key and the row id), which
# a batch writes at random places (the key as the last column of jobs_status, a wider entry, cost
# it ~0.1 s more CPU per 100,000 jobs); a claim takes the claimed job's entry out, a completion
# touches none. A job being run is found through jobs_status (how many run at once, not the
# backlog, bounds that read).
PENDING_KEY_INDEX = "CREATE INDEX jobs_pending_key ON jobs (unique_key) WHERE status = 'pending'"


def _v14(db) -> None:
    """No trigger counts an inserted job: the engine counts its inserts itself, right after them and
    in their transaction (COUNT_INSERTED). A trigger on the table, even one whose WHEN skips the
    rows of a batch (v10), makes SQLite keep a statement journal for every multi-row INSERT: a copy
    of each page the statement first touches, which for the random places of the jobs' keys in
    jobs_status (v13) was most of `enqueue --batch`'s time (docs/performance.md). The updates and
    deletes are still counted by triggers. And the keys of pending jobs move from jobs_status,
    which is (status, queue, finished_at) again, to jobs_pending_key."""
    db.execute("DROP TRIGGER jobs_count_insert")
    db.execute("DROP TABLE job_counts_deferred")
    db.execute("DROP INDEX jobs_status")
    db.execute("CREATE INDEX jobs_status ON jobs (status, queue, finished_at)")
    db.execute(PENDING_KEY_INDEX)


MIGRATIONS = {1: _v1, 2: _v2, 3: _v3, 4: _v4, 5: _v5, 6: _v6, 7: _v7, 8: _v8, 9: _v9, 10: _v10, 11: _v11, 12: _v12,
              13: _v13, 14: _v14}


def migrate(conn: sqlite3.Connection, from_version: int) -> None:
    """Bring the schema from `from_version` to SCHEMA_VERSION inside the caller's transaction."""
    import sqlite_utils

    db = sqlite_utils.Database(conn)
    for version in range(from_version + 1, SCHEMA_VERSION + 1):
        MIGRATIONS[version](db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")


def layout(conn: sqlite3.Connection) -> set[str]:
    """What a SQLite database holds, as `table T`, `column T.C`, `index I` and `trigger G` (SQLite's
    own objects left out): compared by doctor with what expected_layout() promises."""
    found = set()
    for kind, name in conn.execute("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite^_%' ESCAPE '^'"):
        found.add(f"{kind} {name}")
        if kind == "table":
            quoted = '"' + name.replace('"', '""') + '"'
            found.update(f"column {name}.{row[1]}" for row in conn.execute(f"PRAGMA table_info({quoted})"))
    return found


def expected_layout() -> set[str]:
    """The tables, columns, indexes and triggers SCHEMA_VERSION promises, as layout() writes them:
    found by running the migrations themselves on an empty database in memory (no second list)."""
    conn = sqlite3.connect(":memory:")
    try:
        migrate(conn, 0)
        return layout(conn)
    finally:
        conn.close()
