"""The floor of the `enqueue` workload: a plain Python script that inserts one job row with stdlib
sqlite3 at jobctl's durability (WAL, synchronous=FULL, BEGIN IMMEDIATE). No CLI framework, no
validation beyond json.loads: no Python CLI can start and insert faster than this.

    python bench/ref_plain.py DB TYPE PAYLOAD
"""

import json
import sqlite3
import sys
import time

INSERT = (
    "INSERT INTO jobs (queue, type, payload, payload_hash, priority, status, max_attempts, backoff, "
    "timeout_ms, run_at, created_at, updated_at) "
    "VALUES ('default', ?, ?, '', 0, 'pending', 3, 'exponential', 600000, ?, ?, ?)"
)


def insert_one(db: str, type_: str, payload: str) -> int:
    json.loads(payload)
    now = int(time.time() * 1000)
    conn = sqlite3.connect(db, isolation_level=None, timeout=5.0)
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA temp_store = MEMORY")  # as jobctl sets it
    conn.execute("BEGIN IMMEDIATE")
    job_id = conn.execute(INSERT, (type_, payload, now, now, now)).lastrowid
    conn.execute("COMMIT")
    conn.close()
    return job_id


if __name__ == "__main__":
    print(insert_one(sys.argv[1], sys.argv[2], sys.argv[3]))
