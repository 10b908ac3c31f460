"""The reference of the `enqueue --batch` workload: read NDJSON jobs from stdin, parse each line,
and insert them all with one executemany in one BEGIN IMMEDIATE transaction, into the same jobs
table (same indexes) at the same pragmas as jobctl (WAL, synchronous=FULL).

    python bench/ref_batch.py DB < jobs.ndjson
    python bench/ref_batch.py --minimal DB < jobs.ndjson

--minimal: the same rows into a minimal table of its own (`jobs_minimal`: only the inserted columns,
no index, no constraint, no trigger), created in the same transaction: the floor of any batch insert.
"""

import json
import sqlite3
import sys
import time

INSERT = (
    "INSERT INTO jobs (queue, type, payload, payload_hash, priority, status, max_attempts, backoff, "
    "timeout_ms, run_at, created_at, updated_at) "
    "VALUES (?, ?, ?, '', 0, 'pending', 3, 'exponential', 600000, ?, ?, ?)"
)


MINIMAL = (
    "CREATE TABLE IF NOT EXISTS jobs_minimal (queue, type, payload, payload_hash, priority, status, max_attempts, "
    "backoff, timeout_ms, run_at, created_at, updated_at)"
)


def main(db: str, minimal: bool = False) -> None:
    now = int(time.time() * 1000)
    rows = []
    for line in sys.stdin.buffer.read().decode("utf-8").splitlines():
        job = json.loads(line)
        payload = json.dumps(job.get("payload", {}), separators=(",", ":"), ensure_ascii=False)
        rows.append((job.get("queue", "default"), job["type"], payload, now, now, now))
    conn = sqlite3.connect(db, isolation_level=None, timeout=5.0)
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA temp_store = MEMORY")  # as jobctl sets it
    conn.execute("BEGIN IMMEDIATE")
    if minimal:
        conn.execute(MINIMAL)
    conn.executemany(INSERT.replace("INTO jobs ", "INTO jobs_minimal ") if minimal else INSERT, rows)
    conn.execute("COMMIT")
    conn.close()
    print(len(rows))


if __name__ == "__main__":
    minimal = sys.argv[1] == "--minimal"
    main(sys.argv[-1], minimal)
