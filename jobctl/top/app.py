"""`jobctl top`: the Textual app. The database is read and written on one thread of its own (the
data thread, which owns the connection), so the screen answers keys while a look at a large
database is under way; results come back as messages. The data thread redraws on the engine's
wake-up (a commit by anyone), at most every --interval, and looks again every IDLE_LOOK seconds
anyway (times go by: running-for, a scheduled job that became ready)."""

from __future__ import annotations

import functools
import queue as queues
import threading
import time
from typing import Any, Callable

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.coordinate import Coordinate
from textual.message import Message
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane

from jobctl.top import actions
from jobctl.top.data import TABS, DataSource, Detail, Snapshot
from jobctl.top.filters import Filter, parse
from jobctl.top.widgets import (ConfirmScreen, DetailPane, FilterScreen, HelpScreen, JobsTable, QueuesTable,
                                ReasonScreen, WorkersTable, detail_view, header_lines, queue_cells, queue_columns, row_target,
                                tab_columns, tab_label, tab_row, worker_key, workers_table)

MIN_WIDTH, MIN_HEIGHT = 80, 24
HINT = "? help · q quit"  # the status line until a key says something
TOO_SMALL_TO_ACT = f"needs at least {MIN_WIDTH}×{MIN_HEIGHT} to act; q quits"
WIDE = 160  # from this width on, the detail pane sits beside the jobs instead of over them
IDLE_LOOK = 10.0  # seconds between looks when nothing was committed (ages go on; a scheduled job gets ready)
PARTIAL_WAKE_LOOK = 2.0  # the same where the wake-up tells only of jobs that became ready (PostgreSQL)
RETRY_AFTER = 2.0  # seconds between attempts while the database is unavailable
WAKE_POLL = 0.1  # seconds between looks at the engine's wake-up (no I/O on SQLite)

# The keys: (key, action, what it does, shown in the footer). What a key does to the database is
# one function in actions.ACTIONS (or, for the bulk ones, in actions.py beside them).
KEYS: list[tuple[str, str, str, bool]] = [
    ("enter", "details", "details", False),  # (the footer fits 80 columns; ? lists every key)
    ("l", "follow", "follow", True),
    ("r", "act('retry')", "retry", True),
    ("c", "act('cancel')", "cancel", True),
    ("b", "act('bury')", "bury", True),
    ("e", "act('edit')", "edit", True),
    ("p", "act('pause')", "pause", True),
    ("R", "retry_all", "retry all buried matching", False),
    ("slash", "filter", "filter", True),
    ("w", "workers", "workers", True),
    ("question_mark", "help", "help", True),
    ("q", "quit", "quit", True),
    ("ctrl+c", "quit", "quit", False),
    ("escape", "close", "close", False),
    ("tab", "focus_next", "next pane", False),
    *[(str(i + 1), f"show_tab('{t}')", t, False) for i, t in enumerate(TABS)],
]

HELP = [  # (each line fits the 72 columns of the help box: 24 rows hold them all)
    ("↑ ↓ j k", "move in the focused list; Tab: queues / jobs"), ("1-5", "jobs tabs: " + ", ".join(TABS)),
    ("Enter", "the job's details (`jobctl show`) and output; keys act on it"), ("l", "follow the selected job's output"),
    ("r", "retry the job (`jobctl retry`); a buried group: all (asks)"),
    ("c", "cancel the job (`jobctl cancel ID`), after asking"),
    ("b", "bury the job, with a reason if you like (`jobctl bury`)"),
    ("e", "edit the job's payload in $EDITOR (`jobctl edit`)"),
    ("p", "pause or resume the selected queue, or a job's type"),
    ("R", "retry every buried job matching the filter (asks)"),
    ("/", "filter: queue: type: status: error: payload:PATH=VALUE"),
    ("", "worker: key: since:1h before:WHEN min-attempts:N"),
    ("w", "workers (`jobctl workers`); d drains one (asks)"),
    ("Escape", "close the details or the workers"), ("q Ctrl-C", "quit"),
]


def _key(needs_room: bool = True):
    """A key's action: refused while the screen is too small to show what it would act on, and an
    unexpected error said in the status line instead of ending the view with a traceback."""
    def wrap(method):
        @functools.wraps(method)
        def run(self, *args):
            if needs_room and self._base.has_class("-small"):
                self._set_status_error(TOO_SMALL_TO_ACT)
                return None
            try:
                return method(self, *args)
            except Exception as e:  # noqa: BLE001
                self._set_status_error(f"unexpected error: {type(e).__name__}: {e}")
                return None
        return run
    return wrap


class Loaded(Message):
    """A result from the data thread: kind is snapshot, detail, outcome, count, unavailable, or done
    (a request fully answered)."""

    def __init__(self, kind: str, value: Any):
        super().__init__()
        self.kind = kind
        self.value = value


class DataThread(threading.Thread):
    """Owns the connection; does what the app asks, in order, and looks for changes in between."""

    def __init__(self, app: "TopApp", source: DataSource, interval: float):
        super().__init__(name="jobctl-top-data", daemon=True)
        self.app = app
        self.source = source
        self.interval = interval
        self.requests: queues.Queue = queues.Queue()
        self.stopping = threading.Event()
        self.filter = Filter()
        self.detail_id: int | None = None  # the job shown in the detail pane (read again with each look)
        self.workers_shown = False  # the workers pane is open: the workers are read again with each look
        self.last_look = 0.0
        self.dirty = True
        self.down_since: float | None = None
        self.idle_look: float | None = None  # seconds between looks without a wake-up (by engine)

    def ask(self, kind: str, *args) -> None:
        self.requests.put((kind, args))

    def stop(self) -> None:
        self.stopping.set()
        self.requests.put(("stop", ()))

    def post(self, kind: str, value: Any) -> None:
        self.app.post_message(Loaded(kind, value))

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                try:
                    kind, args = self.requests.get(timeout=WAKE_POLL)
                except queues.Empty:
                    kind, args = "", ()
                if kind == "stop":
                    break
                try:
                    if kind:
                        self.handle(kind, args)
                    self.look_if_due()
                except Exception as e:  # noqa: BLE001 (the database went away: say so, and try again)
                    self.unavailable(e)
                if kind:
                    self.post("done", None)  # (after its results: the app counts what is still asked)
        finally:
            self.source.close()

    def unavailable(self, e: Exception) -> None:
        from jobctl.errors import JobctlError

        self.source.drop()
        self.down_since = self.down_since or time.monotonic()
        why = e.message if isinstance(e, JobctlError) else f"{type(e).__name__}: {e}"
        self.post("unavailable", f"database unavailable: {why}; trying again every {RETRY_AFTER:g}s")
        self.last_look = time.monotonic() - self.interval + RETRY_AFTER  # the next look in RETRY_AFTER
        self.dirty = True

    def handle(self, kind: str, args: tuple) -> None:
        from jobctl.errors import JobctlError

        if kind == "look":
            self.dirty = True
            self.last_look = 0.0
        elif kind == "filter":
            self.filter = args[0]
            self.look()
        elif kind == "detail":
            self.detail_id = args[0]
            if self.detail_id is not None:
                self.read_detail()
        elif kind == "workers":
            self.workers_shown = args[0]
            if self.workers_shown:
                self.post("workers", self.source.workers())
        elif kind == "act":
            name, target = args
            self.post("outcome", actions.ACTIONS[name](self.source.queue(), target))
            self.look()
        elif kind == "count":
            what, flt, group = args
            try:
                n, run = (actions.buried_matching(self.source.queue(), flt) if what == "filter"
                          else actions.buried_group(self.source.queue(), flt, group))
            except JobctlError as e:
                self.post("outcome", actions.Outcome(False, f"retry: {e.message}"))
                return
            self.post("count", (n, run, what, group))
        elif kind in ("edit", "ask"):  # the job as it is now, or the command line's refusal before asking
            name, target = ("edit", args[0]) if kind == "edit" else args
            try:
                job = actions.checked(self.source.queue(), name, target.job_id)
            except JobctlError as e:
                self.post("outcome", actions.Outcome(False, f"edit: {e.message}" if kind == "edit" else e.message))
                return
            self.post(kind, job if kind == "edit" else (name, target, job, self.source.queue().now()))
        elif kind == "run":
            self.post("outcome", args[0]())
            self.look()

    def look_if_due(self) -> None:
        now = time.monotonic()
        since = now - self.last_look
        if since < self.interval:
            return
        if self.idle_look is None and self.down_since is None:
            self.idle_look = IDLE_LOOK if self.source.wakes_on_every_commit else max(PARTIAL_WAKE_LOOK, self.interval)
        if self.down_since is None and not self.dirty and since < (self.idle_look or IDLE_LOOK):
            self.dirty = self.source.has_changed()
            if not self.dirty:
                return
        self.look()

    def look(self) -> None:
        self.source.has_changed()  # the mark: a commit from here on, even during the read, wakes the next look
        snap = self.source.snapshot(self.filter)
        self.last_look = time.monotonic()
        self.dirty = False
        if self.down_since is not None:
            self.down_since = None
            self.post("outcome", actions.Outcome(True, "database available again"))
        self.post("snapshot", snap)
        if self.detail_id is not None:
            self.read_detail()
        if self.workers_shown:
            self.post("workers", self.source.workers())

    def read_detail(self) -> None:
        from jobctl.errors import NoSuchJob

        if self.detail_id is None:
            return
        try:
            self.post("detail", self.source.detail(self.detail_id))
        except NoSuchJob as e:
            self.detail_id = None
            self.post("outcome", actions.Outcome(False, e.message))


class TopApp(App):
    """The live view. `source` reads and acts; `interval` is the shortest time between redraws."""

    TITLE = "jobctl top"
    ENABLE_COMMAND_PALETTE = False
    CSS = """
    Screen { layout: vertical; }
    #header { height: 3; padding: 0 1; }
    #queues { height: auto; max-height: 7; }
    #body { height: 1fr; }
    #jobs { width: 1fr; }
    #detail { width: 1fr; display: none; border-left: vkey $foreground 30%; padding: 0 1; }
    Screen.-tall #queues { max-height: 14; }
    Screen.-wide #detail { display: block; }
    Screen.-detail #detail { display: block; }
    Screen.-detail #jobs { display: none; }
    Screen.-detail #queues { display: none; }
    Screen.-wide.-detail #jobs { display: block; }
    Screen.-wide.-detail #queues { display: block; }
    #workers { display: none; height: 1fr; }
    #workers-title { height: 1; padding: 0 1; }
    Screen.-workers #workers { display: block; }
    Screen.-workers #queues, Screen.-workers #body { display: none; }
    #status { height: auto; max-height: 3; padding: 0 1; }  /* a reason longer than a line is shown whole */
    #toosmall { display: none; height: 1fr; content-align: center middle; }
    Screen.-small #main { display: none; }
    Screen.-small #toosmall { display: block; }
    DataTable { height: 1fr; }
    Screen.-nocolor DataTable > .datatable--cursor { text-style: reverse; }
    #queues DataTable, QueuesTable { height: auto; max-height: 7; }
    TabbedContent { height: 1fr; }
    TabPane { padding: 0; }
    #help-box, #confirm-box, #filter-box, #reason-box { width: 76; height: auto; border: round $accent; padding: 0 1;
        background: $surface; }
    HelpScreen, ConfirmScreen, FilterScreen, ReasonScreen { align: center middle; }
    """
    BINDINGS = [Binding(key, action, what, show=show, priority=key == "ctrl+c")  # (Ctrl-C quits, as in top)
                for key, action, what, show in KEYS]

    def __init__(self, source: DataSource, *, interval: float = 1.0, patterns=(), start_thread: bool = True):
        super().__init__(ansi_color=True)
        self.theme = "ansi-dark"  # the terminal's own colours; NO_COLOR: none (Textual reads it)
        self.animation_level = "none"  # over ssh, a slid underline is bytes and time for nothing
        self.source = source
        self.interval = interval
        self.patterns = patterns
        self.data = DataThread(self, source, interval)
        self.snapshot: Snapshot | None = None
        self.detail: Detail | None = None
        self.filter = Filter()
        self.following: int | None = None
        self.pending = 0  # requests sent to the data thread and not yet answered (tests wait on it)
        self.status_text = HINT
        self.rows: dict[str, list] = {}
        self.worker_rows: dict[str, dict] = {}  # the workers pane's rows by key, as `jobctl workers` read them
        self._workers_read: tuple[list[dict], int] | None = None
        self._shown: dict[str, tuple] = {}
        self._notes: list[str] = []
        self._start_thread = start_thread

    # -- layout -----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        with Vertical(id="main"):
            yield Static(id="header")
            yield QueuesTable(id="queues", cursor_type="row", zebra_stripes=False)
            with Horizontal(id="body"):
                with TabbedContent(id="jobs", initial="tab-running"):
                    for tab in TABS:
                        with TabPane(tab, id=f"tab-{tab}"):
                            yield JobsTable(id=f"table-{tab}", cursor_type="row")
                yield DetailPane(id="detail")
            with Vertical(id="workers"):
                yield Static(id="workers-title")
                yield WorkersTable(id="workers-table", cursor_type="row")
            yield Static(id="status")
            yield Footer(compact=True)
        yield Static(id="toosmall")

    def on_mount(self) -> None:
        if not self.is_headless:  # SIGTERM (kill, timeout) or SIGHUP: ended as q ends it, the terminal given back
            import asyncio
            import signal

            for sig in (signal.SIGTERM, signal.SIGHUP):
                asyncio.get_running_loop().add_signal_handler(sig, self.exit)
        self._base.set_class(self.no_color, "-nocolor")  # NO_COLOR: the selected row in reverse video
        self._fit(self.size.width, self.size.height)
        self.query_one(f"#table-{TABS[0]}", JobsTable).focus()
        self._set_status(self.status_text)
        if self._start_thread:
            self.data.start()
            self._ask("look")

    def on_unmount(self) -> None:
        self.data.stop()
        if self.data.is_alive():
            self.data.join(timeout=5)

    def on_resize(self, event) -> None:
        self._fit(event.size.width, event.size.height)
        if self._base.has_class("-detail"):  # (after the new layout, which may take the focus away)
            self.call_after_refresh(self._focus_for_details)
        if self.snapshot is not None:
            self._shown.clear()
            self._draw(self.snapshot)
        if self._workers_read is not None:
            self._got_workers(self._workers_read)

    def _focus_for_details(self) -> None:
        """The details open: below WIDE they cover the jobs and the arrows scroll them; from WIDE on
        they sit beside the jobs and the arrows move in the jobs."""
        if not self._base.has_class("-detail"):
            return
        if not self.wide and not isinstance(self.focused, DetailPane):
            self.query_one("#detail", DetailPane).focus()
        elif self.wide and not isinstance(self.focused, (JobsTable, QueuesTable)):
            self.query_one(f"#table-{self._active_tab()}", JobsTable).focus()

    def _fit(self, width: int, height: int) -> None:
        small = width < MIN_WIDTH or height < MIN_HEIGHT
        self._base.set_class(small, "-small")
        self._base.set_class(width >= WIDE, "-wide")
        self._base.set_class(height >= 40, "-tall")  # room for more queues
        if small:
            self.query_one("#toosmall", Static).update(Text(
                f"jobctl top needs at least {MIN_WIDTH}×{MIN_HEIGHT}; this terminal is {width}×{height}.\n"
                "Make it larger, or press q to quit.", justify="center"))
        elif self.status_text == TOO_SMALL_TO_ACT:  # (made larger: the keys act again)
            self._set_status(HINT)

    @property
    def _base(self):
        """The screen the panes live on (a question or the help may be above it)."""
        return self.screen_stack[0] if self.screen_stack else self.screen

    @property
    def wide(self) -> bool:
        return self.size.width >= WIDE

    # -- talking to the data thread ---------------------------------------------------------------

    def _ask(self, kind: str, *args) -> None:
        self.pending += 1
        self.data.ask(kind, *args)

    def on_loaded(self, message: Loaded) -> None:
        kinds: dict[str, Callable[[Any], None]] = {
            "snapshot": self._got_snapshot, "detail": self._got_detail, "outcome": self._got_outcome,
            "count": self._got_count, "unavailable": self._set_status_error, "workers": self._got_workers,
            "edit": self._got_edit, "ask": self._got_ask,
        }
        if message.kind == "done":
            self.pending = max(self.pending - 1, 0)
            return
        try:
            kinds[message.kind](message.value)
        except Exception as e:  # noqa: BLE001 (a row the view cannot draw: said, and the view goes on)
            self._set_status_error(f"could not draw the {message.kind}: {type(e).__name__}: {e}")

    def _got_snapshot(self, snap: Snapshot) -> None:
        self.snapshot = snap
        self._draw(snap)
        if snap.notes and snap.notes != self._notes:  # said once, not at every look
            more = len(snap.notes) - 1
            self._set_status_error(snap.notes[0] + (f" (and {more} more)" if more else ""))
        self._notes = snap.notes

    def _got_detail(self, detail: Detail) -> None:
        another = self.detail is None or self.detail.job.id != detail.job.id
        self.detail = detail
        pane = self.query_one("#detail", DetailPane)
        width = max(pane.size.width - 2, 40)
        pane.query_one("#detail-body", Static).update(
            detail_view(detail, self.patterns, width, following=self.following == detail.job.id))
        if self.following == detail.job.id:
            pane.scroll_end(animate=False)
        elif another:
            pane.scroll_home(animate=False)

    def _got_workers(self, value: tuple[list[dict], int]) -> None:
        self._workers_read = value
        if not self._base.has_class("-workers"):
            return
        entries, now = value
        title = Text("workers", style="bold")
        title.append(" (as `jobctl workers`) · d drains the selected one · w or Esc: back", style="dim")
        self.query_one("#workers-title", Static).update(title)
        header, rows = workers_table(entries, now, max(self.size.width - 4, 20))
        table = self.query_one("#workers-table", WorkersTable)
        key = (header, tuple((k, str(cells[0])) for k, cells in rows))
        if self._shown.get("workers") == key:
            return
        self._shown["workers"] = key
        self._refill(table, [header], rows)
        self.worker_rows = {worker_key(e): e for e in entries}

    def _got_outcome(self, outcome: actions.Outcome) -> None:
        if outcome.ok:
            self._set_status(outcome.message)
        else:
            self._set_status_error(outcome.message)

    def _got_count(self, value) -> None:
        n, run, kind, group = value
        if n == 0:
            self._set_status("no buried jobs match" + (f" the filter {self.filter.shown}" if self.filter else ""))
            return
        what = f"buried job{'' if n == 1 else 's'}"
        if kind == "group":
            from jobctl.untrusted import safe

            error = safe(group["error"] or "")
            what += f" of {safe(group['queue'])}/{safe(group['type'])} whose error contains " + (
                repr(error) if len(error) <= 60 else repr(error[:59] + "…"))
        if self.filter:
            what += f" matching {self.filter.shown}"

        def answered(yes: bool | None) -> None:
            if yes:
                self._ask("run", run)
            else:
                self._set_status("nothing retried")
        self.push_screen(ConfirmScreen(f"Retry {n:,} {what}?"), answered)

    def _got_edit(self, job) -> None:
        """The payload in $EDITOR (the view suspended meanwhile), then `jobctl edit ID --payload`
        with what was saved; unchanged: nothing is written."""
        import json

        from jobctl.errors import InvalidInput
        from jobctl.payloads import compact, parse_json

        before = json.dumps(json.loads(job.payload), indent=2, ensure_ascii=False) + "\n"
        after = self._run_editor(before, f"job-{job.id}-payload.json")
        if after is None:
            return
        try:
            same = compact(parse_json(after)) == job.payload
        except InvalidInput:
            same = False  # (jobctl edit says what is wrong with it)
        if same:
            self._set_status(f"edit: the payload of job {job.id} is unchanged; nothing changed")
            return
        self._ask("act", "edit", actions.Target(job_id=job.id, queue=job.queue, type=job.type, payload_text=after))

    def _run_editor(self, text: str, name: str) -> str | None:
        """`$VISUAL` or `$EDITOR` (else vi) on a private copy of `text`: what was saved, or None
        (said in the status line) when the editor could not run or failed."""
        import os
        import shlex
        import shutil
        import subprocess
        import tempfile

        from textual.app import SuspendNotSupported

        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        folder = tempfile.mkdtemp(prefix="jobctl-edit-")  # (0700: the payload may hold secrets)
        path = os.path.join(folder, name)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            try:
                argv = [*shlex.split(editor), path]
            except ValueError as e:
                self._set_status_error(f"edit: cannot read $EDITOR {editor!r} ({e}); nothing changed")
                return None

            def call(**kw) -> int | OSError:
                """The editor's exit status. It never raises, or the view would not come back from
                suspend: Ctrl-C reaches the editor (its handler is reset on exec) but not this process."""
                import signal

                before = signal.signal(signal.SIGINT, lambda *_: None)
                try:
                    return subprocess.call(argv, **kw)
                except OSError as e:
                    return e
                finally:
                    signal.signal(signal.SIGINT, before)
            try:
                with self.suspend():
                    code = call()
            except SuspendNotSupported:
                if not self.is_headless:
                    self._set_status_error("edit: this terminal cannot hand over to an editor; use `jobctl edit`")
                    return None
                code = call(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # (tests: an editor that is a script)
            if isinstance(code, OSError):
                self._set_status_error(f"edit: cannot run the editor {editor!r} ({code.strerror or code}); set "
                                       "$EDITOR; nothing changed")
                return None
            if code != 0:
                self._set_status_error(f"edit: the editor exited with status {code}; nothing changed")
                return None
            with open(path, encoding="utf-8", errors="surrogateescape") as f:
                return f.read()
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _set_status(self, line: str) -> None:
        self.status_text = line
        self.query_one("#status", Static).update(Text(line))

    def _set_status_error(self, line: str) -> None:
        self.status_text = line
        self.query_one("#status", Static).update(Text(line, style="bold red"))

    # -- drawing ---------------------------------------------------------------------------------

    def _draw(self, snap: Snapshot) -> None:
        width = self.size.width
        self.query_one("#header", Static).update(header_lines(snap, max(width - 2, 20), self.filter.shown,
                                                              self.following))
        self._fill_queues(snap)
        for tab in TABS:
            self._fill_tab(tab, snap)
        tabs = self.query_one(TabbedContent)
        for tab in TABS:
            tabs.get_tab(f"tab-{tab}").label = tab_label(tab, snap, bool(self.filter))

    def _fill_queues(self, snap: Snapshot) -> None:
        table = self.query_one("#queues", QueuesTable)
        figures = snap.figures
        names = [n for n in figures["queues"] if not self.filter.queues or n in self.filter.queues]
        cols = queue_columns(figures, self.wide)
        cells = [queue_cells(name, figures["queues"][name], cols) for name in names]
        # A name takes what the other columns leave (each cell is padded by one on either side), so
        # that a long one (up to 64 characters) never pushes PAUSED off an 80-column screen.
        others = sum(max([len(h), *(c[i].cell_len for c in cells)]) + 2 for i, (_, h) in enumerate(cols) if i)
        room = max(self.size.width - 2 - others - 2, 8)
        for c in cells:
            c[0].truncate(room, overflow="ellipsis")
        key = (tuple(cols), tuple((name, tuple(str(x) for x in c)) for name, c in zip(names, cells)))
        if self._shown.get("queues") == key:
            return
        self._shown["queues"] = key
        self._refill(table, [h for _, h in cols], list(zip(names, cells)))
        self.rows["queues"] = names

    def _fill_tab(self, tab: str, snap: Snapshot) -> None:
        table = self.query_one(f"#table-{tab}", JobsTable)
        rows = [tab_row(tab, r, snap.now, self.wide, self.patterns, snap.held_why, snap.nows) for r in snap.tabs[tab]]
        key = (self.wide, tuple((k, tuple(str(c) for c in cells)) for k, cells in rows))
        if self._shown.get(tab) == key:
            return
        self._shown[tab] = key
        self._refill(table, tab_columns(tab, self.wide), rows)
        self.rows[tab] = snap.tabs[tab]

    @staticmethod
    def _refill(table: DataTable, headers: list[str], rows: list[tuple[str, list]]) -> None:
        """Replace the rows, keeping the cursor on the same row (by key) when it is still there."""
        selected = None
        if table.row_count and table.cursor_row is not None and 0 <= table.cursor_row < table.row_count:
            selected = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
        table.clear(columns=[str(c.label) for c in table.columns.values()] != headers)
        if not table.columns:
            table.add_columns(*headers)
        seen: set[str] = set()
        for key, cells in rows:
            if key in seen:  # (the same job twice cannot happen, but a key must be unique)
                continue
            seen.add(key)
            table.add_row(*cells, key=key)
        if selected is not None and selected in seen:
            table.move_cursor(row=table.get_row_index(selected), animate=False)

    # -- what is selected -----------------------------------------------------------------------

    def _active_tab(self) -> str:
        return (self.query_one(TabbedContent).active or "tab-running").removeprefix("tab-")

    def _covered(self) -> bool:
        """Whether the details cover the jobs (narrower than WIDE): the keys then act on the job shown."""
        return self._base.has_class("-detail") and not self.wide and self.detail is not None

    def _target(self) -> actions.Target | None:
        if self._covered():
            assert self.detail is not None
            job = self.detail.job
            return actions.Target(job_id=job.id, queue=job.queue, type=job.type)
        focused = self.focused
        if isinstance(focused, QueuesTable):
            names = self.rows.get("queues", [])
            i = focused.cursor_row
            return actions.Target(queue=names[i]) if names and 0 <= i < len(names) else None
        tab = self._active_tab()
        table = self.query_one(f"#table-{tab}", JobsTable)
        rows = self.rows.get(tab, [])
        i = table.cursor_row
        if not rows or not 0 <= i < table.row_count:
            return None
        key = table.coordinate_to_cell_key(Coordinate(i, 0)).row_key.value
        for row in rows:
            t = row_target(tab, row)
            if str(t.job_id) == key:
                return t
        return None

    # -- the keys -----------------------------------------------------------------------------------

    def _on_workers(self, name: str) -> bool:
        """Whether the workers pane is shown, where a key of the jobs says so instead of acting."""
        if self._base.has_class("-workers"):
            self._set_status_error(f"{name}: acts on jobs and queues; w or Escape goes back to them")
            return True
        return False

    @_key()
    def action_act(self, name: str) -> None:
        if self._on_workers(name):
            return
        target = self._target()
        if target is None:
            self._set_status_error(f"{name}: select a row first")
            return
        if name == "pause" and not isinstance(self.focused, QueuesTable) and target.type is None:
            target = actions.Target(queue=target.queue)
        if name != "pause" and target.job_id is None:
            self._set_status_error(f"{name}: select a job (in the jobs pane) first")
            return
        group = self._buried_group()
        if name == "retry" and group is not None and group["count"] > 1:
            self._ask("count", "group", self.filter, group)  # the whole group: asks first
            return
        if name == "edit":
            self._ask("edit", target)
            return
        if name in ("cancel", "bury"):  # asked first, naming the job as it is now (_got_ask)
            self._ask("ask", name, target)
            return
        self._ask("act", name, target)

    def _got_ask(self, value) -> None:
        """c and b: the question, naming the job (its type, queue and state) as it was just read;
        a job the command line would refuse was refused before asking."""
        from jobctl.untrusted import safe

        name, target, job, now = value
        from jobctl.models import pending_view

        state = pending_view(job, now) or job.status  # (the tabs' words)
        what = f"job {job.id} ({safe(job.type)} in {safe(job.queue)}, " + (
            f"running on {safe(job.worker or '-')})" if job.status == "running" else f"{state})")
        if name == "bury":
            def reason_given(reason: str | None) -> None:
                if reason is None:
                    self._set_status("nothing buried")
                    return
                target.reason = reason.strip() or None
                self._ask("act", "bury", target)
            self.push_screen(ReasonScreen(f"Bury {what}? It stops until retried."), reason_given)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._ask("act", "cancel", target)
            else:
                self._set_status("nothing cancelled")
        then = ("Its worker is asked to stop it." if job.status == "running"
                else "Cancelled is final: it never runs." if job.status in ("pending", "buried") else "")
        self.push_screen(ConfirmScreen(f"Cancel {what}? {then}".rstrip()), answered)

    def _buried_group(self) -> dict | None:
        """The selected row of the buried tab (a group of jobs), when the jobs pane has the focus."""
        if isinstance(self.focused, QueuesTable) or self._active_tab() != "buried" or self._covered():
            return None
        table = self.query_one("#table-buried", JobsTable)
        if not table.row_count or not 0 <= table.cursor_row < table.row_count:
            return None
        key = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
        return next((g for g in self.rows.get("buried", []) if str(g["latest_id"]) == key), None)

    @_key()
    def action_details(self) -> None:
        if self._on_workers("details"):
            return
        target = self._target()
        if target is None or target.job_id is None:
            self._set_status("select a job first (Tab moves to the jobs pane)")
            return
        self._open_detail(target.job_id)

    def _open_detail(self, job_id: int) -> None:
        self._base.add_class("-detail")
        self._focus_for_details()
        self._ask_detail(job_id)

    def _ask_detail(self, job_id: int | None) -> None:
        self._ask("detail", job_id)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if isinstance(event.data_table, JobsTable):
            self.action_details()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        """Wide screens show the details beside the jobs: they follow the cursor."""
        if isinstance(event.data_table, JobsTable):
            self._details_follow_cursor()

    @_key()
    def action_follow(self) -> None:
        if self._on_workers("follow"):
            return
        target = self._target()
        if self.following is not None and (target is None or target.job_id == self.following
                                           or self.detail is not None and self.detail.job.id == self.following):
            self.following = None
            self._set_status("stopped following")
        elif target is not None and target.job_id is not None:
            self.following = target.job_id
            self._open_detail(target.job_id)
            self._set_status(f"following the output of job {target.job_id} (l stops)")
            return
        if self.snapshot is not None:
            self._shown.clear()
            self._draw(self.snapshot)

    @_key()
    def action_workers(self) -> None:
        """w: the workers pane in place of the queues and jobs (w again, or Escape, goes back)."""
        if self._base.has_class("-workers"):
            self._close_workers()
            return
        self._base.add_class("-workers")
        self._shown.pop("workers", None)
        if self._workers_read is not None:
            self._got_workers(self._workers_read)
        self.query_one("#workers-table", WorkersTable).focus()
        self._ask("workers", True)

    def _close_workers(self) -> None:
        self._base.remove_class("-workers")
        self._ask("workers", False)
        self.query_one(f"#table-{self._active_tab()}", JobsTable).focus()

    @_key()
    def action_drain(self) -> None:
        """d on the workers pane: `jobctl workers drain WORKER`, after asking."""
        table = self.query_one("#workers-table", WorkersTable)
        entry = None
        if self._base.has_class("-workers") and table.row_count and 0 <= table.cursor_row < table.row_count:
            key = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
            entry = self.worker_rows.get(key or "")
        if entry is None or entry["worker"] is None:
            self._set_status_error("drain: select a worker first (w lists them)")
            return
        target = actions.Target(worker=entry["worker"])
        if entry["state"] is None:  # a script's id: the command line's refusal says why, nothing to ask
            self._ask("act", "drain", target)
            return
        from jobctl.untrusted import safe

        def answered(yes: bool | None) -> None:
            if yes:
                self._ask("act", "drain", target)
            else:
                self._set_status("nothing drained")
        self.push_screen(ConfirmScreen(
            f"Drain worker {safe(entry['worker'])} ({safe(entry['host'] or '-')}, pid {entry['pid']})? It claims "
            "nothing more, finishes the jobs it runs, then exits."), answered)

    @_key()
    def action_close(self) -> None:
        if self._base.has_class("-workers"):
            self._close_workers()
            return
        self._base.remove_class("-detail")
        if isinstance(self.focused, DetailPane):
            self.query_one(f"#table-{self._active_tab()}", JobsTable).focus()
        if self.following is not None:
            self.following = None
            self._set_status("stopped following")
        if not self.wide:
            self._ask("detail", None)

    @_key()
    def action_show_tab(self, tab: str) -> None:
        if self._base.has_class("-workers"):
            self._close_workers()
        self.query_one(TabbedContent).active = f"tab-{tab}"
        self.query_one(f"#table-{tab}", JobsTable).focus()

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        tab = (event.pane.id or "").removeprefix("tab-")
        if tab in TABS:
            self.query_one(f"#table-{tab}", JobsTable).focus()
            self._details_follow_cursor()

    def _details_follow_cursor(self) -> None:
        """Wide screens show the details beside the jobs: those of the selected row of the tab shown."""
        if not self.wide or self.following is not None:
            return
        target = self._target()
        if target is not None and target.job_id is not None and (
                self.detail is None or self.detail.job.id != target.job_id):
            self._ask_detail(target.job_id)

    @_key()
    def action_help(self) -> None:
        self.push_screen(HelpScreen(HELP))

    @_key()
    def action_filter(self) -> None:
        def answered(value: str | None) -> None:
            if value is None:
                return
            from jobctl.errors import JobctlError

            try:
                flt = parse(value, self.patterns)
            except JobctlError as e:
                self._set_status_error(f"filter not applied: {e.message}")
                return
            self.filter = flt
            self._shown.clear()
            self._set_status(f"filter: {flt.shown}" if flt else "no filter")
            self._ask("filter", flt)
        self.push_screen(FilterScreen(self.filter.text), answered)

    @_key()
    def action_retry_all(self) -> None:
        if self._on_workers("retry all"):
            return
        self._ask("count", "filter", self.filter, None)
