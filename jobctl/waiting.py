"""Waiting for jobs to finish (`jobctl wait`, `enqueue --wait`).

No busy polling: between looks at the jobs the wait sleeps on the engine's wake-up (a commit by
anyone; SQLite's data_version, read without I/O), and looks again at the latest after a backoff
that grows to a cap, so an engine without wake-ups still sees the jobs finish. Nothing here writes.
"""

from __future__ import annotations

import time

from jobctl.errors import InvalidState, NoSuchJob, WaitTimedOut
from jobctl.models import FINISHED, Job

FIRST_LOOK = 0.05  # seconds until the second look without a commit seen; doubles up to the cap
LOOK_CAP = 2.0


def wait_finished(q, job_ids: list[int], timeout: float | None = None, *,
                  cap: float = LOOK_CAP) -> tuple[list[Job], dict[int, str]]:
    """Block until every job is finished or can never run; the jobs in the order asked (each id
    once), and {id: why} for those that can never run (blocked on a job cancelled or deleted
    before it completed: nothing will change them unless someone acts, so they are not waited on).

    NoSuchJob for an id that does not exist (at the first look, or purged meanwhile); WaitTimedOut
    (exit 5) when `timeout` seconds pass first, naming what is still unfinished."""
    ids = list(dict.fromkeys(job_ids))
    deadline = None if timeout is None else time.monotonic() + timeout
    step = FIRST_LOOK
    watch = q.engine.wakes
    while True:
        if watch:
            q.has_changed()  # the mark: a commit after this line wakes the wait below
        jobs = q.get_many(ids)
        if len(jobs) != len(ids):
            found = {j.id for j in jobs}
            raise NoSuchJob(next(i for i in ids if i not in found))
        stuck = {j.id: why for j in jobs if j.status == "pending" and j.waiting_on > 0
                 and (why := never_runs(q, j)) is not None}
        left_ids = [j.id for j in jobs if j.status not in FINISHED and j.id not in stuck]
        if not left_ids:
            return jobs, stuck
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            shown = ", ".join(f"{j.id} ({j.status})" for j in jobs if j.id in left_ids)
            unfinished = f"timed out after {_seconds(timeout)}: not finished yet: {shown}"
            error = WaitTimedOut(f"{unfinished}; nothing was changed; `jobctl wait {' '.join(map(str, left_ids))}` "
                                 "waits again")
            error.unfinished = unfinished
            raise error
        pause = step if left is None else min(step, left)
        if watch:
            _sleep_until_change(q, pause)
        else:
            time.sleep(pause)
        step = min(step * 2, cap)


def never_runs(q, job: Job, most: int = 200) -> str | None:
    """Why a blocked job can never run (a job it waits on, directly or through other blocked jobs,
    was cancelled, or was deleted before it completed), or None when it may still run (a buried
    dependency may be retried). Looks at up to `most` blocked jobs. Each job's dependencies are read
    before the job itself, so a dependency that completes in between can only hide a cause."""
    seen = {job.id}
    todo: list[tuple[Job, list[int]]] = [(job, [])]
    while todo and len(seen) <= most:
        blocked, path = todo.pop(0)
        deps = q.dependencies(blocked.id)
        now = q.get_many([blocked.id])
        if not now or now[0].status != "pending" or now[0].waiting_on == 0:
            continue
        via = [*path[1:], blocked.id] if path else []
        alive = 0
        for dep_id, state in deps:
            if state == "cancelled":
                return _stuck(job, via, dep_id, "was cancelled")
            if state is not None and state != "completed":
                alive += 1
        if now[0].waiting_on > alive:  # a job it waits on was deleted before it completed
            gone = next((d for d, state in deps if state is None), None)
            if gone is not None:
                return _stuck(job, via, gone, "was deleted before it completed")
        pending = [d for d, state in deps if state == "pending" and d not in seen]
        for dep in q.get_many(pending):
            if dep.waiting_on > 0:
                seen.add(dep.id)
                todo.append((dep, [*path, blocked.id]))
    return None


def _stuck(job: Job, via: list[int], dep_id: int, what: str) -> str:
    """The sentence: job X can never run: it waits on job A, which waits on job B, which was cancelled."""
    chain = ", which waits on ".join(f"job {i}" for i in [*via, dep_id])
    if what == "was cancelled":
        tree = f"`jobctl cancel {dep_id} --with-dependents` every job that waits on job {dep_id}"
    else:  # a deleted job cannot be named: the job that waits on it directly stands for it
        waiter = via[-1] if via else job.id
        tree = f"`jobctl cancel {waiter} --with-dependents` job {waiter} and every job that waits on it"
    return f"job {job.id} can never run: it waits on {chain}, which {what}; `jobctl cancel {job.id}` cancels it, {tree}"


def _sleep_until_change(q, seconds: float, tick: float = 0.02) -> None:
    """Sleep up to `seconds`, returning early when anyone commits (since the mark set by the caller)."""
    end = time.monotonic() + seconds
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(tick, left))
        if q.has_changed():
            return


def _seconds(timeout) -> str:
    from jobctl.durations import format_duration

    return format_duration(timeout)


def outcome_error(jobs: list[Job], stuck: dict[int, str] | None = None, secret_keys=()) -> InvalidState | None:
    """Exit 4 when any job ended buried or cancelled, or can never run: one line naming them (a
    buried job's error, its secrets masked as in every human view; why a blocked one can never run)."""
    stuck = stuck or {}
    bad = [j for j in jobs if j.status != "completed" and j.id not in stuck]
    if not bad and not stuck:
        return None
    from jobctl.untrusted import mask_text

    parts = [f"job {j.id} ended {j.status}" + (f" ({_short(mask_text(j.error, secret_keys))})" if j.error else "")
             for j in bad]
    if bad:
        parts[-1] += f"; see `jobctl show {bad[0].id}`"
    return InvalidState("; ".join([*parts, *stuck.values()]))


def _short(text: str, most: int = 200) -> str:
    return text if len(text) <= most else text[:most] + "..."
