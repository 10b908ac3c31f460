"""The panes of `jobctl top`, drawn from plain values (data.Snapshot, data.Detail). Every value
that comes from a job (names, errors, payloads) goes in as a rich Text through output.text, so a
`[red]` in an error is shown as written, never read as markup, and control characters are escaped."""

from __future__ import annotations

from datetime import datetime

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Input, Static

from jobctl.durations import format_duration
from jobctl.output import ago, buried_error, text
from jobctl.untrusted import safe

SPARK_MINUTES = 30  # minutes of throughput in the header's sparklines
NAME_MAX = 20  # a queue, type or worker name in the jobs tabs below 160 columns (names may be 64)


def age(seconds: float | None) -> str:
    return "-" if seconds is None else format_duration(seconds)


def since(ms: int | None, now: int) -> str:
    return "-" if ms is None else format_duration(max(now - ms, 0) / 1000)


def header_lines(snap, width: int, flt_text: str, following: int | None) -> Group:
    """Three lines: the database and when it was read; throughput with sparklines and workers;
    the filter in force, then what needs a person (stuck, buried, oldest ready)."""
    from jobctl.stats_view import sparkline, summary_line

    stamp = datetime.fromtimestamp(snap.now / 1000).strftime("%H:%M:%S")
    first = Text("jobctl top ", style="bold")
    first.append(safe(snap.location))
    right = f"  read {stamp}"
    if len(first) + len(right) + 1 > width:
        first.truncate(max(width - len(right) - 2, 10))
        first.append("…")
    first.append(" " * max(width - len(first) - len(right), 1))
    first.append(right, style="dim")
    t = snap.figures["throughput"]
    done_rate, failed_rate = f"{t['1m']['completed_per_minute']:.1f}/min ", f"{t['1m']['failed_per_minute']:.1f}/min "
    w = snap.workers
    workers = Text("  workers ")
    if w is None:
        workers.append("n/a", style="dim")  # (a role that may not read the registry: as stats says)
    else:
        workers.append(f"{w['alive']:,} alive", style="bold")
        workers.append(f", {w['lost']:,} lost", style="bold red" if w["lost"] else "")
    fixed = len("done ") + len(done_rate) + len("  failed ") + len(failed_rate) + len(workers)
    minutes = max(min(SPARK_MINUTES if width >= 120 else 15, (width - fixed) // 2), 0)
    second = Text("done ")
    second.append(done_rate, style="bold")
    second.append(sparkline(t["completed_by_minute"][-minutes:]) if minutes else "", style="green")
    second.append("  failed ")
    second.append(failed_rate, style="bold red" if t["1m"]["failed"] else "bold")
    second.append(sparkline(t["failed_by_minute"][-minutes:]) if minutes else "", style="red")
    second.append_text(workers)
    third = Text()
    if flt_text:  # first: what the panes below are read through is never cut off at 80 columns
        third.append("filter: ", style="bold yellow")
        third.append(safe(flt_text), style="yellow")
        third.append("  ")
    third.append_text(summary_line({**snap.figures, "workers": None}))  # (the workers are on the line above)
    if following is not None:
        third.append(f"  following job {following}", style="bold cyan")
    for line in (first, second, third):
        line.truncate(width, overflow="ellipsis")
    return Group(first, second, third)


def queue_columns(figures: dict, wide: bool) -> list[tuple[str, str]]:
    """(key, header) of the queues pane; HELD once the figures carry it."""
    has_held = any("held" in q for q in figures["queues"].values())
    cols = [("name", "QUEUE"), ("ready", "READY")]
    if has_held:
        cols.append(("held", "HELD"))
    cols += [("scheduled", "SCHED")]
    if wide:
        cols += [("blocked", "BLOCKED")]
    cols += [("running", "RUNNING"), ("buried", "BURIED")]
    if wide:
        cols += [("completed", "DONE"), ("cancelled", "CANCELLED")]
    cols += [("oldest_ready_age", "OLDEST READY"), ("paused", "PAUSED")]
    return cols


def queue_cells(name: str, q: dict, cols: list[tuple[str, str]]) -> list:
    from jobctl.stats_view import pause_label

    cells: list = []
    for key, _ in cols:
        if key == "name":
            cells.append(text(name))
        elif key == "oldest_ready_age":
            cells.append(Text(age(q.get(key)), justify="right"))
        elif key == "paused":
            label = pause_label(q)
            cells.append(Text(label or "", style="magenta"))
        else:
            n = q.get(key, 0) or 0
            if key == "running":  # held by a worker, as the running tab counts them: one being cancelled too
                n += q.get("cancel_requested", 0) or 0
            style = "red" if key == "buried" and n else "yellow" if key == "held" and n else ""
            cells.append(Text(f"{n:,}", style=style, justify="right"))
    return cells


# -- the jobs tabs: columns and a row per job or group ------------------------------------------

def tab_columns(tab: str, wide: bool) -> list[str]:
    if tab == "running":
        return ["ID", "TYPE", *(["QUEUE"] if wide else []), "WORKER", "RUNNING FOR", "PROGRESS"]
    if tab == "buried":
        return ["COUNT", "QUEUE", "TYPE", "LATEST", "AGO", "ERROR"]
    if tab == "aging":
        return ["ID", "QUEUE", "TYPE", "PRI", "WAITING"]
    if tab == "held":  # why next to the id, whole beside long names; (the rows are by priority: below WIDE
        return ["ID", "WHY", "QUEUE", "TYPE", *(["PRI"] if wide else []), "READY FOR"]  # its column leaves room)
    return ["ID", "QUEUE", "TYPE", "RUNS IN", *(["RUN AT"] if wide else []), "ATTEMPTS"]


def tab_label(tab: str, snap, filtered: bool) -> str:
    """A tab's name and how many jobs it holds: the whole count from the stats figures without a
    filter (a tab lists the first rows only); with one, the rows read (`200+` when there may be more)."""
    from jobctl.top.data import BURIED_READ, ROWS

    rows = snap.tabs[tab]
    t = snap.figures["totals"]
    whole = {"running": t["running"] + t["cancel_requested"], "buried": t["buried"],
             "aging": t["ready"] - t.get("held", 0), "held": t.get("held", 0), "scheduled": t["scheduled"]}
    if tab == "buried" and filtered:
        n = sum(g["count"] for g in rows)
        more = n >= BURIED_READ
    elif tab in whole and not filtered:
        n, more = whole[tab], False
    else:
        n, more = len(rows), len(rows) >= ROWS
    return f"{tab} {n:,}{'+' if more else ''}" if n else tab


def progress_text(job, patterns=()) -> str:
    """A running job's progress, its secrets masked (as `jobctl list` shows it)."""
    import json

    from jobctl.untrusted import mask_text

    if not job.progress:
        return ""
    p = json.loads(job.progress)
    pct = p.get("percent")
    return safe((f"{pct}% " if pct is not None else "") + mask_text(p.get("message") or "", patterns))


def tab_row(tab: str, row, now: int, wide: bool, patterns=(), held_why: dict[int, str] | None = None,
            nows: dict[int, int] | None = None) -> tuple[str, list]:
    """(row key, cells) of one row of a tab. A buried group's key is its latest job's id. held_why:
    why each held job is held (data.Snapshot.held_why, the words of `jobctl list --held`); nows:
    each running job's "now" on its lease's clock (data.Snapshot.nows)."""
    def num(value) -> Text:
        return Text(str(value), justify="right")

    def name(value: str) -> Text:
        """A queue, type or worker: shortened below WIDE, so the columns after it stay on screen."""
        cell = text(value)
        if not wide:
            cell.truncate(NAME_MAX, overflow="ellipsis")
        return cell
    if tab == "running":
        progress = Text("cancel asked ", style="yellow") if row.status == "cancel_requested" else Text("")
        progress.append(progress_text(row, patterns))
        return str(row.id), [num(str(row.id)), name(row.type), *([name(row.queue)] if wide else []),
                             name(row.worker or "-"), num(since(row.claimed_at, (nows or {}).get(row.id, now))), progress]
    if tab == "buried":
        return str(row["latest_id"]), [num(f"{row['count']:,}"), name(row["queue"]), name(row["type"]),
                                       num(str(row["latest_id"])),
                                       num(ago(row.get("latest_ms"), now).removesuffix(" ago")),
                                       buried_error(row.get("error"))]
    if tab == "aging":
        return str(row["id"]), [num(str(row["id"])), name(row["queue"]), name(row["type"]),
                                num(str(row["priority"])), num(age(row["waiting_for"]))]
    if tab == "held":
        return str(row.id), [num(str(row.id)), text((held_why or {}).get(row.id) or "", "yellow"),
                             name(row.queue), name(row.type), *([num(str(row.priority))] if wide else []),
                             num(since(row.run_at, now))]
    from jobctl.durations import to_rfc3339

    return str(row.id), [num(str(row.id)), name(row.queue), name(row.type),
                         num(format_duration(max(row.run_at - now, 0) / 1000)),
                         *([Text(to_rfc3339(row.run_at) or "")] if wide else []),
                         num(f"{row.attempts} of {row.max_attempts}")]


def row_target(tab: str, row):
    """What the keys act on for a selected row: the job (for a buried group, its latest job)."""
    from jobctl.top.actions import Target

    if tab == "buried":
        return Target(job_id=row["latest_id"], queue=row["queue"], type=row["type"])
    if tab == "aging":
        return Target(job_id=row["id"], queue=row["queue"], type=row["type"])
    return Target(job_id=row.id, queue=row.queue, type=row.type)


def detail_view(detail, patterns, width: int, following: bool) -> Group:
    """The job as `jobctl show` draws it, then the tail of its latest run's output."""
    from jobctl import output

    panel = output.job_panel(detail.job, detail.events, detail.now, patterns, explanation=detail.why,
                             run_output=detail.run_output, width=width)
    title = Text(f"output of job {detail.job.id}" + (
        f", run {detail.run_output.run}" if detail.run_output is not None else ""), style="bold")
    if following:
        title.append(" (following: l stops)", style="cyan")
    body = Text("\n".join(detail.log_lines) if detail.log_lines else "(no output kept)",
                style="" if detail.log_lines else "dim")
    return Group(panel, Text(""), title, body)


# -- the workers pane (w) ---------------------------------------------------------------------------

WORKER_STYLES = {"lost": "bold red", "draining": "yellow", "stopped": "dim"}


def worker_key(entry: dict) -> str:
    """A row's key: the worker id (and its start: the same id may be a lost process and a new one)."""
    return f"{entry['worker'] or ''}\x00{entry['started_at'] or ''}"


def workers_table(entries: list[dict], now: int, width: int) -> tuple[str, list[tuple[str, list]]]:
    """(the header line, (key, [line]) per worker): `jobctl workers`'s own table, fitted to `width`
    as on a terminal, one line per worker (lost ones in red, draining ones in yellow)."""
    from jobctl import workers_view

    if not entries:
        return "", [("", [Text("no worker running; stopped ones: `jobctl workers --all`", style="dim")])]
    lines = workers_view.lines(entries, now, width=width)
    return lines[0], [(worker_key(e), [Text(line, style=WORKER_STYLES.get(e["state"] or "", ""))])
                      for e, line in zip(entries, lines[1:])]


class WorkersTable(DataTable):
    """The workers pane: one row per worker, moved with arrows or j/k; d drains the selected one."""

    BINDINGS = [Binding("j", "cursor_down", "down", show=False), Binding("k", "cursor_up", "up", show=False),
                Binding("d", "app.drain", "drain", show=False)]  # (said in the pane's title)


class JobsTable(DataTable):
    """A table of one tab, moved with arrows or j/k."""

    BINDINGS = [Binding("j", "cursor_down", "down", show=False), Binding("k", "cursor_up", "up", show=False)]


class QueuesTable(DataTable):
    BINDINGS = [Binding("j", "cursor_down", "down", show=False), Binding("k", "cursor_up", "up", show=False)]


class DetailPane(VerticalScroll):
    """The selected job's details and its log's tail; follows the log with `l`."""

    def compose(self) -> ComposeResult:
        yield Static(Text("Enter: the selected job's details and output", style="dim"), id="detail-body")


class HelpScreen(ModalScreen[None]):
    """The keys; any key closes it."""

    def __init__(self, lines: list[tuple[str, str]]):
        super().__init__()
        self.lines = lines

    def compose(self) -> ComposeResult:
        body = Text("jobctl top: keys (any key closes this)\n\n", style="bold")
        for key, what in self.lines:
            body.append(f"  {key:<10}", style="bold")
            body.append(what + "\n")
        body.append("\nEach action runs as the command line's does; its outcome shows in the status line.",
                    style="dim")
        with Vertical(id="help-box"):
            yield Static(body)

    def on_key(self, event) -> None:
        event.stop()
        self.dismiss(None)


class ConfirmScreen(ModalScreen[bool]):
    """An action asks first: y (or Y, as the command line's [y/N]) does it, anything else does not."""

    BINDINGS = [Binding("y,Y", "yes", "yes"), Binding("n,escape,q", "no", "no")]

    def __init__(self, question: str):
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Static(Text(self.question + " [y/N]", style="bold"))

    def action_yes(self) -> None:
        self.dismiss(True)

    def action_no(self) -> None:
        self.dismiss(False)

    def on_key(self, event) -> None:
        if event.key not in ("y", "Y", "n", "escape", "q"):
            event.stop()
            self.dismiss(False)


class ReasonScreen(ModalScreen[str | None]):
    """b: the question before burying, with the reason kept in the job's history (optional):
    Enter buries, Escape does not."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, question: str):
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="reason-box"):
            yield Static(Text(self.question, style="bold"))
            yield Static(Text("Why (optional, kept in its history); Enter buries, Escape does not:", style="dim"))
            yield Input(id="reason-input")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class FilterScreen(ModalScreen[str | None]):
    """`/`: the filter in the command line's words; Enter applies it, Escape leaves it as it was."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, current: str):
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(id="filter-box"):
            yield Static(Text("filter, in the words of the command line's filters (empty: none):\n"
                              "queue:Q type:T status:S error:TEXT payload:PATH=VALUE\n"
                              "worker:W key:K since:1h before:WHEN min-attempts:N", style="bold"))
            yield Input(value=self.current, id="filter-input")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)
