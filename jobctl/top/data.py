"""What `jobctl top` shows, read through the queue core as `stats`, `list`, `show` and `logs` read
it: Queue.stats (one consistent read, masked for people as `stats` masks it), Queue.list_jobs,
the job, its history and its explanation as `show` builds them, and a run's last lines as `logs`
keeps them. No Textual here: plain values a test can check, and that the app draws.

The jobs tabs are read as `jobctl list` reads them, through the command line's own filters (a
selection.Selection: the `/` filter ANDed with the tab's states), so the view never matches jobs
by a second set of rules; the counts, held included, and the buried groups without a filter come
from the stats figures. Workers come from the registry: alive and lost from the stats figures (as
`stats` shows them), the list as `jobctl workers` reads it (`workers()`).
"""

from __future__ import annotations

from typing import Callable

from jobctl.models import Job
from jobctl.top.filters import WAITING, Filter

ROWS = 200  # rows a jobs tab reads: a screen's worth many times over, cheap on 1,000,000 jobs
BURIED_READ = 1000  # buried jobs a filter's groups are counted from (the tab then says 1,000+)
LOG_LINES = 200  # the tail of a run's output kept for the detail pane


class Snapshot:
    """One look at the queue: the stats figures (masked), the jobs of each tab, the database time."""

    def __init__(self, *, now: int, location: str, figures: dict, tabs: dict[str, list], workers: dict | None,
                 notes: list[str], held_why: dict[int, str] | None = None, nows: dict[int, int] | None = None):
        self.now = now
        self.location = location
        self.figures = figures
        self.tabs = tabs  # tab name -> rows (Jobs, or buried groups as dicts)
        self.workers = workers  # {"alive", "lost"}; None where this role may not read the registry
        self.notes = notes  # what the view could not read exactly, said in the status line
        self.held_why = held_why or {}  # held tab: job id -> why it is held (Queue.held_reasons, as `list --held`)
        self.nows = nows or {}  # running tab: job id -> its "now" on its lease's clock (Engine.lease_now, as `list`)


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
        self._file: tuple[str, tuple[int, int]] | None = None  # a SQLite file: its path, (device, inode)

    # -- the connection -----------------------------------------------------------------------

    def queue(self):
        if self.q is None:
            import os

            q = self.q = self._open_queue()
            files = q.engine.files
            if files is not None:
                st = os.stat(files.url)
                self._file = (files.url, (st.st_dev, st.st_ino))
        return self.q

    def _check_file(self) -> None:
        """A SQLite file removed or moved away while the view runs would stay readable through the
        open connection, its last state shown as live: DatabaseUnusable instead (the view says so,
        and opens what is at the path again)."""
        import os

        from jobctl.errors import DatabaseUnusable

        if self._file is None:
            return
        path, ident = self._file
        try:
            st = os.stat(path)
            same = (st.st_dev, st.st_ino) == ident
        except OSError:
            same = False
        if not same:
            raise DatabaseUnusable(f"{path} was removed or replaced since the view opened it")

    def drop(self) -> None:
        """Forget the connection after an error: the next call opens a new one (a restarted server,
        a file that came back)."""
        q, self.q, self._file = self.q, None, None
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
        from jobctl.untrusted import safe

        flt = flt or Filter()
        q = self.queue()
        self._check_file()
        raw, now = q.stats(limit=50, also_known=self.also_known)
        figures, now = masked(raw, now, self.settings.secret_keys)
        notes = [f"job {d['id']} is damaged and left out: {safe(d['why'])}; `jobctl doctor` says more"
                 for d in figures.get("damaged_jobs", [])]  # (as `stats` says on stderr)
        # (none held, as stats just counted: no need to test every ready job for it)
        held = self._jobs(q, flt, ["held"], "priority") if figures["totals"].get("held") else []
        tabs: dict[str, list] = {
            # (by run_at, then id: the index of states serves it, where id order walked every job)
            "running": self._jobs(q, flt, ["running", "cancel_requested"], "run-at"),
            "buried": self._buried(q, raw, figures, flt, now),
            "aging": self._aging(q, figures, flt, now),
            "held": held,
            "scheduled": self._jobs(q, flt, ["scheduled"], "run-at"),
        }
        # why each is held, in the words of `list --held`: one read of the pauses and limits for them all
        held_why = q.held_reasons(held, now) if held else {}
        nows = {j.id: q.engine.lease_now(j, now) for j in tabs["running"]}
        return Snapshot(now=now, location=q.location, figures=figures, tabs=tabs, workers=figures.get("workers"),
                        notes=notes, held_why=held_why, nows=nows)

    def workers(self) -> tuple[list[dict], int]:
        """The workers as `jobctl workers` lists them (alive, draining, lost, and scripts' ids), and
        the database time."""
        return self.queue().workers()

    @staticmethod
    def _jobs(q, flt: Filter, statuses: list[str], sort: str, limit: int = ROWS) -> list[Job]:
        """The first jobs of a tab: `jobctl list --status S... --sort SORT` with the filter's options."""
        sel = flt.within(statuses)
        return [] if sel is None else q.list_jobs(selection=sel, limit=limit, sort=sort)

    def _buried(self, q, raw: dict, figures: dict, flt: Filter, now: int) -> list[dict]:
        """Buried jobs grouped by queue, type and error, the latest first: the stats figures' groups
        without a filter (every buried job counted); with one, the groups of the newest BURIED_READ
        buried jobs it matches. `select_error`: the error as stored (the group's `r` selects by it;
        `error` is masked for the screen)."""
        from jobctl.durations import parse_time
        from jobctl.untrusted import mask_text

        if not flt:
            return [{**g, "latest_ms": parse_time(g["latest_at"]) if g.get("latest_at") else None,
                     "select_error": r.get("error")}
                    for g, r in zip(figures.get("buried_by_error", []), raw.get("buried_by_error", []))]
        groups: dict[tuple, dict] = {}
        for j in self._jobs(q, flt, ["buried"], "updated", BURIED_READ):
            g = groups.get((j.queue, j.type, j.error))
            at = j.finished_at if j.finished_at is not None else j.updated_at
            if g is None:
                groups[(j.queue, j.type, j.error)] = {
                    "queue": j.queue, "type": j.type, "count": 1, "latest_id": j.id, "latest_ms": at,
                    "error": mask_text(j.error, self.settings.secret_keys) if j.error else j.error,
                    "select_error": j.error}
            else:
                g["count"] += 1
        return list(groups.values())

    def _aging(self, q, figures: dict, flt: Filter, now: int) -> list[dict]:
        """Ready jobs waiting longest for a worker (held ones are not waiting for one): the stats
        figures' list without a filter; with one, the ready jobs it matches, longest waiting first."""
        if not flt:
            return figures.get("aging", [])
        return [{**j.to_dict(), "waiting_for": max(now - j.run_at, 0) / 1000}  # (as stats makes its entries)
                for j in self._jobs(q, flt, [WAITING], "run-at")]

    # -- one job ----------------------------------------------------------------------------------

    def detail(self, job_id: int) -> Detail:
        """The job as `jobctl show` reads it (its history and why it waits), and its log's tail."""
        from jobctl import runlog
        from jobctl.stats import explain_job

        q = self.queue()
        job = q.get(job_id)
        events = q.events(job_id)
        why, now = explain_job(q, job, events, q.now())
        log = q.run_output(job_id)
        lines = runlog.last_lines(log, LOG_LINES, self.settings.secret_keys) if log is not None else []
        return Detail(job, events, why, log, lines, now)

    def close(self) -> None:
        self.drop()

