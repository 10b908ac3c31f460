"""The huey app the benchmark's huey cases share (huey finds a task by its module and name, so the
process that enqueues and the processes that dequeue must import the same module)."""

import os

from huey import SqliteHuey

huey = SqliteHuey("bench", filename=os.environ["JOBCTL_BENCH_HUEY_DB"], **(
    {"fsync": False} if os.environ.get("JOBCTL_BENCH_HUEY_FILL") else {}))


@huey.task()
def noop(i):
    return None
