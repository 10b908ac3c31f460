"""What `jobctl top` shows, read through the queue core as `stats`, `list`, `show` and `logs` read
it: Queue.stats (one consistent read, masked for people as `stats` masks it), Queue.list_jobs,
the job, its history and its explanation as `show` builds them, and a run's last lines as `logs`
keeps them. No Textual here: plain values a test can check, and that the app draws.

Features that other parts of jobctl bring later plug in here, each in one place: per-queue `held`
counts (taken from the stats figures when they carry them), the command line's shared filters
(`Filter`, filters.py). Workers come from the registry: alive and lost from the stats figures (as
`stats` shows them), the list as `jobctl workers` reads it (`workers()`).
"""

from __future__ import annotations

from typing import Callable

from jobctl.models import Job
from jobctl.top.filters import Filter

ROWS = 200  # rows a jobs tab reads: a screen's worth many times over, cheap on 1,000,000 jobs
LOG_LINES = 200  # the tail of a run's output kept for the detail pane


class Snapshot:
    """One look at the queue: the stats figures (masked), the jobs of each tab, the database time."""

    def __init__(self, *, now: int, location: str, figures: dict, tabs: dict[str, list], workers: dict | None,
                 notes: list[str]):
        self.now = now
        self.location = location
        self.figures = figures
        self.tabs = tabs  # tab name -> rows (Jobs, or buried groups as dicts)
        self.workers = workers  # {"alive", "lost"}; None where this role may not read the registry
        self.notes = notes  # what the view could not read exactly, said in the status line


class Detail:
    """A job as `jobctl show` gives it, and the tail of its latest run's output."""

    def __init__(self, job: Job, events: list, why: str | None, run_output, log_lines: list[str], now: int):
        self.job = job
        self.events = events
        self.why = why
        self.run_output = run_output
        self.log_lines = log_lines
        self.now = now


TABS = ("running", "buried", "aging", "held", "scheduled")


class DataSource:
    """Reads for the view. `open_queue()` opens the queue (the command line's State.open_queue);
    every call runs on the one thread that owns the connection (the app's data thread)."""

    def __init__(self, open_queue: Callable, settings, *, also_known: set[str] | None = None):
        self._open_queue = open_queue
        self.settings = settings
        self.also_known = also_known or {"default"}
        self.q = None

    # -- the connection -----------------------------------------------------------------------

    def queue(self):
        if self.q is None:
            self.q = self._open_queue()
        return self.q

    def drop(self) -> None:
        """Forget the connection after an error: the next call opens a new one (a restarted server,
        a file that came back)."""
        q, self.q = self.q, None
        if q is not None:
            try:
                q.close()
            except Exception:  # noqa: BLE001 (it is already broken; closing is a courtesy)
                pass

    def has_changed(self) -> bool:
        """The engine's wake-up: whether anyone committed since the last call (no I/O on SQLite)."""
        return self.queue().has_changed()

    @property
    def wakes_on_every_commit(self) -> bool:
        """Whether the wake-up tells of every commit (SQLite's data_version), or only of jobs that may
        have become ready (PostgreSQL's NOTIFY, sent for workers): then the view looks more often."""
        engine = self.queue().engine
        return bool(engine.wakes) and getattr(engine, "wakes_on_every_commit", engine.files is not None)

    # -- a look at the queue --------------------------------------------------------------------

    def snapshot(self, flt: Filter | None = None) -> Snapshot:
        from jobctl.stats import masked

        flt = flt or Filter()
        q = self.queue()
        figures, now = q.stats(limit=50, also_known=self.also_known)
        figures, now = masked(figures, now, self.settings.secret_keys)
        from jobctl.untrusted import safe

        notes = [f"job {d['id']} is damaged and left out: {safe(d['why'])}; `jobctl doctor` says more"
                 for d in figures.get("damaged_jobs", [])]  # (as `stats` says on stderr)
        tabs: dict[str, list] = {
            "running": self._running(q, flt, now),
            "buried": self._buried(figures, flt, now),
            "aging": [j for j in figures.get("aging", []) if _keeps_dict(flt, j, now, "ready")],
            "held": self._held(q, flt, now),
            "scheduled": self._scheduled(q, flt, now),
        }
        return Snapshot(now=now, location=q.location, figures=figures, tabs=tabs, workers=figures.get("workers"),
                        notes=notes)

    def workers(self) -> tuple[list[dict], int]:
        """The workers as `jobctl workers` lists them (alive, draining, lost, and scripts' ids), and
        the database time."""
        return self.queue().workers()

    def _running(self, q, flt: Filter, now: int) -> list[Job]:
        jobs = q.list_jobs(statuses=["running", "cancel_requested"], queue=flt.only("queues"),
                           type=flt.only("types"), limit=ROWS, sort="oldest")
        return [j for j in jobs if flt.keeps(j, now, "running")]

    def _buried(self, figures: dict, flt: Filter, now: int) -> list[dict]:
        from jobctl.durations import parse_time

        groups = []
        for g in figures.get("buried_by_error", []):
            at = parse_time(g["latest_at"]) if g.get("latest_at") else None
            if flt.keeps_group(g["queue"], g["type"], g.get("error"), at, now):
                groups.append({**g, "latest_ms": at})
        return groups

    def _held(self, q, flt: Filter, now: int) -> list[Job]:
        if not q.limits:  # nothing can hold a ready job back without limits in the config
            return []
        jobs = q.list_jobs(held=True, queue=flt.only("queues"), type=flt.only("types"), limit=ROWS, sort="priority")
        return [j for j in jobs if flt.keeps(j, now, "held")]

    def _scheduled(self, q, flt: Filter, now: int) -> list[Job]:
        """Pending jobs whose run_at is ahead, soonest first. Read from the newest pending jobs (a
        delayed enqueue or a retry's backoff) until `list` can select scheduled jobs itself."""
        jobs = q.list_jobs(statuses=["pending"], queue=flt.only("queues"), type=flt.only("types"),
                           limit=ROWS * 5, sort="newest")
        found = sorted((j for j in jobs if j.run_at > now and not j.waiting_on and flt.keeps(j, now, "scheduled")),
                       key=lambda j: (j.run_at, j.id))
        return found[:ROWS]

    # -- one job ----------------------------------------------------------------------------------

    def detail(self, job_id: int) -> Detail:
        """The job as `jobctl show` reads it (its history and why it waits), and its log's tail."""
        from jobctl import runlog
        from jobctl.stats import explain

        q = self.queue()
        job = q.get(job_id)
        events = q.events(job_id)
        now = q.now()
        ready = job.status == "pending" and not job.waiting_on and job.run_at <= now
        why = explain(job, now, dependencies=q.dependencies(job.id) if job.after else [],
                      pauses=q.pauses() if job.status == "pending" else [],
                      held=q.held_because(job) if ready else None)
        log = q.run_output(job_id)
        lines = runlog.last_lines(log, LOG_LINES, self.settings.secret_keys) if log is not None else []
        return Detail(job, events, why, log, lines, now)

    def close(self) -> None:
        self.drop()


def _keeps_dict(flt: Filter, d: dict, now: int, shown_as: str) -> bool:
    """A job of the stats figures (a dict, as `stats --json` has it) through the filter."""
    from jobctl.durations import parse_time

    updated = parse_time(d["updated_at"]) if d.get("updated_at") else 0
    return flt.keeps_values(d["queue"], d["type"], d["status"], d.get("error"), updated, now, shown_as)
