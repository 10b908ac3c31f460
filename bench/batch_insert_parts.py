"""Where the CPU of SQLite's bulk insert of `enqueue --batch` goes: the same statements as
SQLiteEngine._insert_many (pages of INSERT_PAGE rows of jobs that set no option, the count, the
enqueue events, the commit) on a database `jobctl init` made, each timed in CPU seconds of this process.

    python bench/batch_insert_parts.py [--jobs 100000] [--rounds 2] [--drop NAME ...]

--drop NAME (repeatable): drop that index before the insert, to see what it costs. Each round uses
a fresh database.
"""

from __future__ import annotations

import argparse
import subprocess
import sqlite3
import sys
import tempfile
import time
from functools import partial
from hashlib import sha256
from itertools import chain
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from jobctl.engines.base import unique_key  # noqa: E402
from jobctl.engines.schema import COUNT_INSERTED  # noqa: E402
from jobctl.engines.sqlite import INSERT_PAGE, SQLiteEngine  # noqa: E402


def one_round(db: Path, n: int, drop: list[str]) -> dict[str, float]:
    subprocess.run([sys.executable, "-m", "jobctl", "--db", str(db), "init"], check=True, stdout=subprocess.DEVNULL,
                   cwd=ROOT)
    c = sqlite3.connect(db, isolation_level=None)
    c.execute("PRAGMA synchronous = FULL")
    c.execute("PRAGMA temp_store = MEMORY")
    for name in drop:
        c.execute(f"DROP INDEX {name}")
    now = int(time.time() * 1000)
    page = partial(SQLiteEngine._insert_page, now=now, plain=True)
    rows = [("default", "bench", '{"i":%d}' % i, sha256(b"%d" % i).hexdigest(), 10, 3, "exponential", 600000, 0,
             unique_key("default", "bench", sha256(b"%d" % i).hexdigest()), 1) for i in range(n)]
    full = n - n % INSERT_PAGE
    t = [time.process_time()]
    c.execute("BEGIN IMMEDIATE")
    c.executemany(page(INSERT_PAGE), (tuple(chain.from_iterable(rows[i:i + INSERT_PAGE])) for i in range(0, full, INSERT_PAGE)))
    if n % INSERT_PAGE:
        c.execute(page(n % INSERT_PAGE), tuple(chain.from_iterable(rows[full:])))
    t.append(time.process_time())
    c.execute(COUNT_INSERTED, (1, n))
    t.append(time.process_time())
    c.execute("INSERT INTO events (job_id, at, from_status, to_status, actor, message) "
              "SELECT id, ?, NULL, 'pending', ?, 'enqueued' FROM jobs WHERE id BETWEEN ? AND ?", (now, "bench", 1, n))
    t.append(time.process_time())
    c.execute("COMMIT")
    t.append(time.process_time())
    c.close()
    return dict(zip(("rows", "counts", "events", "commit"), (b - a for a, b in zip(t, t[1:]))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--drop", action="append", default=[], metavar="NAME")
    args = ap.parse_args()
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="jobctl-parts-") as d:
            parts = one_round(Path(d) / "jobs.db", args.jobs, args.drop)
        print(f"round {r + 1}{' without ' + ', '.join(args.drop) if args.drop else ''}: "
              + ", ".join(f"{k} {v:.3f}" for k, v in parts.items()) + f", all {sum(parts.values()):.3f} CPU s")


if __name__ == "__main__":
    main()
