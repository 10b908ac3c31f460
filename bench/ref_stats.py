"""The reference of the `stats` workload: one process that counts jobs by state and queue with a
GROUP BY that SQLite answers from the covering index jobs_status (status, queue, finished_at).

    python bench/ref_stats.py DB
"""

import json
import sqlite3
import sys

conn = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
counts = {}
for status, queue, n in conn.execute(
    "SELECT status, queue, count(*) FROM jobs INDEXED BY jobs_status GROUP BY status, queue"
):
    counts.setdefault(queue, {})[status] = n
print(json.dumps(counts))
