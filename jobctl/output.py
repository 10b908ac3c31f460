"""Human views over rich, as pure functions (data in, renderables out), plus the console to print them.

Job data is untrusted text: every value goes into a rich Text (never parsed as markup), with
terminal control and bidirectional-override characters shown as escapes, and payload values under
secret-looking keys masked unless --reveal. JSON output never goes through here.
"""

from __future__ import annotations

import json
import sys

from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from jobctl.durations import format_duration, to_rfc3339
from jobctl.models import Event, Job, pending_view
from jobctl.untrusted import mask, mask_text, safe  # noqa: F401  (re-exported: output.safe, output.mask)

STATUS_STYLE = {
    "pending": "cyan", "running": "yellow", "cancel_requested": "magenta", "completed": "green",
    "buried": "bold red", "cancelled": "dim",
}


def console(stderr: bool = False, width: int | None = None) -> Console:
    """markup=False and highlight=False: user data such as `[red]` is never read as markup."""
    return Console(stderr=stderr, markup=False, highlight=False, emoji=False, width=width)


def print_view(renderable, out: Console | None = None) -> None:
    """Print a view of tables on stdout. In a terminal, the columns made to be cut (a payload, an
    error, a worker id) share what the others leave of the screen's width, and the view is never
    drawn narrower than its other columns need (rich would leave whole columns out; the terminal
    wraps the lines instead). In a pipe or a file every line is whole, without the padding that
    lines up a screen, so that grep and diff see the whole text."""
    out = out or console()
    if out.is_terminal:
        width = max(out.width, _least_width(renderable))
        fit(renderable, width)
        (console(width=width) if width > out.width else out).print(renderable)
        return
    wide = console(width=100_000)
    with wide.capture() as captured:
        wide.print(renderable)
    sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))


CUT_MIN = 8  # the narrowest a column made to be cut gets
COLUMN_GAP = 2  # between two columns: the cells' padding (0, 1); none at the table's edges


def _tables(renderable):
    if isinstance(renderable, Group):
        for r in renderable.renderables:
            yield from _tables(r)
    elif isinstance(renderable, Table):
        yield renderable


def _cut_columns(table: Table) -> list:
    """Columns made to be cut: overflow="ellipsis", no_wrap and a max_width (a payload, an error)."""
    return [c for c in table.columns if c.overflow == "ellipsis" and c.no_wrap and c.max_width]


def _kept_width(table: Table, cut: list) -> int:
    """What the columns not made to be cut take, gaps included (their min_width: keep_whole)."""
    return sum(c.min_width or 1 for c in table.columns if c not in cut) + COLUMN_GAP * (len(table.columns) - 1)


def _least_width(renderable) -> int:
    """The narrowest screen on which every table fits, its cut columns at CUT_MIN."""
    return max((_kept_width(t, cut) + CUT_MIN * len(cut) for t in _tables(renderable)
                for cut in [_cut_columns(t)]), default=0)


def fit(renderable, width: int):
    """Give each table's cut columns an equal share of what its other columns leave of `width`;
    return the renderable. (`stats --watch` redraws in place, so it can only fit, never widen.)"""
    for t in _tables(renderable):
        cut = _cut_columns(t)
        if cut:
            share = max((width - _kept_width(t, cut)) // len(cut), CUT_MIN)
            for c in cut:
                c.max_width = min(c.max_width, share)
    return renderable


def _widest(header: str, cells) -> int:
    return max([cell_len(header)] + [c.cell_len if isinstance(c, Text) else cell_len(str(c)) for c in cells])


def keep_whole(table: Table, *, fold: tuple[str, ...] = ("QUEUE", "TYPE"),
               wrap: tuple[str, ...] = ("DETAIL", "WHY")) -> Table:
    """No cell of `table` is cut with "…" except in the columns made to be cut (overflow="ellipsis",
    no_wrap and a max_width: a payload, an error). On a narrow screen, names in `fold` break inside
    their cell (a queue cut to "billing-…" would be another queue), sentences in `wrap` wrap at
    their words, and every other column keeps its whole width."""
    for column in table.columns:
        if column.overflow == "ellipsis" and column.no_wrap and column.max_width:
            continue  # made to be cut: print_view gives it what the others leave
        widest = _widest(str(column.header), column.cells)
        if column.header in fold:
            column.overflow, column.min_width = "fold", min(widest, 9)
        elif column.header in wrap:
            column.overflow, column.min_width = "fold", min(widest, 24)
        else:
            column.no_wrap, column.min_width = True, widest
    return table


def text(value, style: str | None = None) -> Text:
    return Text(safe(value), style=style or "")


def buried_error(error: str | None) -> Text:
    """A group of buried jobs' error; none at all means they were buried by hand before any run
    failed (their reasons are in their history: `jobctl show ID`)."""
    return text(error, "red") if error else Text("buried by hand", style="dim")


def masked_text(value_text: str | None, patterns, reveal: bool = False, limit: int | None = None) -> str:
    if value_text is None:
        return ""
    shown = json.dumps(mask(json.loads(value_text), patterns, reveal), ensure_ascii=False, separators=(",", ":"))
    if limit and len(shown) > limit:
        shown = shown[: limit - 1] + "…"
    return safe(shown)


def ago(ms: int | None, now: int) -> str:
    if ms is None:
        return "-"
    delta = (now - ms) / 1000
    return f"{format_duration(abs(delta))} ago" if delta >= 0 else f"in {format_duration(-delta)}"


def status_text(job: Job, now: int, held: bool = False) -> Text:
    """The state, and for a pending job why it is not ready (blocked, scheduled) or, held, not claimed."""
    label = job.status
    view = pending_view(job, now) or ("held" if held and job.status == "pending" else None)
    if view is not None:
        label = f"pending ({view})"
    return Text(label, style=STATUS_STYLE.get(job.status, ""))


LIST_COLUMNS = ("ID", "STATUS", "QUEUE", "TYPE", "PRI", "RUNS", "WHEN", "WORKER", "UPDATED")
LIST_DROP_ORDER = ("PRI", "UPDATED", "RUNS", "QUEUE", "WORKER", "WHEN")  # on a narrow screen, these go first
PAYLOAD_MIN = 12
PAYLOAD_WANT = 40  # on a narrow screen, minor columns leave until the payload or error has a third of it, up to this


def when_text(job: Job, now: int) -> str:
    """What a state needs to be told by time: a pending job when it may run (`in 5m`, `ready 3s
    ago`), a running one how long it has run (`for 2m10s`); a finished one "-" (UPDATED says when)."""
    if job.status == "pending":
        return "waits" if job.waiting_on else ("in " + format_duration((job.run_at - now) / 1000)
                                               if job.run_at > now else f"ready {ago(job.run_at, now)}")
    if job.status in ("running", "cancel_requested"):
        return f"for {format_duration(max(now - job.claimed_at, 0) / 1000)}" if job.claimed_at else "-"
    return "-"


def jobs_table(jobs: list[Job], now: int, patterns, reveal: bool = False, width: int | None = None,
               held: dict[int, str] | None = None, nows: dict[int, int] | None = None) -> Table:
    """The `list` table, with what each state needs: WHEN (a pending job's start, how long a
    running one has run), WORKER (of running jobs; the column only
    when one is listed), and in the last column a running job's progress (else its payload), a
    buried or retried job's error, and for a ready job that something holds back (held: {id: why},
    Queue.held_reasons) why, its state "pending (held)". The columns before the last keep their whole text (a status
    cut to "pend…" would mislead, and break a grep); with a `width`, the last column is cut to what
    they leave (print_view fits it), and while it would get less than a third of the screen (at
    least PAYLOAD_MIN, at most PAYLOAD_WANT) whole columns are left out (LIST_DROP_ORDER) rather
    than cut: at 80 columns an error of 12 characters says nothing. Without a width nothing is cut.
    nows: {id: the time a held job's relative times are measured against} (Engine.lease_now)."""
    rows = []
    list_now = now
    for j in jobs:
        now = (nows or {}).get(j.id, list_now)
        detail = j.error if j.status in ("buried",) or (j.status == "pending" and j.error) else None
        running = j.status in ("running", "cancel_requested")
        why = (held or {}).get(j.id)
        if why:  # before a retried job's error: what keeps it from running now
            last = text(why, "yellow")
        elif detail:
            last = text(mask_text(detail, patterns, reveal), "red")
        elif running and j.progress:
            last = text("progress: " + mask_text(_progress(j.progress), patterns, reveal) + _changed(j.progress_at, now),
                        "cyan")
        else:
            last = text(masked_text(j.payload, patterns, reveal, limit=200))
        rows.append((
            str(j.id), status_text(j, now, held=why is not None), text(j.queue), text(j.type), str(j.priority),
            f"{j.attempts}/{j.max_attempts}", when_text(j, now), text(j.worker) if running and j.worker else "-",
            ago(j.updated_at, now), last,
        ))
    shown = list(LIST_COLUMNS)
    if not any(j.status in ("running", "cancel_requested") for j in jobs):
        shown.remove("WORKER")  # nothing runs: no column of dashes
    if width is not None:  # decided before the table is built: rich cannot take a column out again
        widths = {name: _widest(name, [r[i] for r in rows]) for i, name in enumerate(LIST_COLUMNS)}
        want = max(PAYLOAD_MIN, min(PAYLOAD_WANT, width // 3))
        reasons = [cell_len(why) for why in (held or {}).values()]
        if reasons:  # why a job is held is short and cut says nothing ("next in 5…"): whole where it can be
            want = max(want, min(PAYLOAD_WANT, max(reasons)))
        for name in LIST_DROP_ORDER:
            if width - sum(widths[n] + COLUMN_GAP for n in shown) >= want:
                break
            if name in shown:
                shown.remove(name)
    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in shown:
        table.add_column(name, justify="right" if name in ("ID", "PRI", "RUNS") else "left")
    table.add_column("PAYLOAD / ERROR", overflow="ellipsis", no_wrap=True, max_width=width)
    keep = [LIST_COLUMNS.index(n) for n in shown] + [len(LIST_COLUMNS)]
    for r in rows:
        table.add_row(*(r[i] for i in keep))
    return keep_whole(table, fold=())


def job_panel(job: Job, events: list[Event], now: int, patterns, reveal: bool = False,
              explanation: str | None = None, run_output=None, width: int | None = None) -> Group:
    """run_output: the latest run's stored output (engines.base.RunLog) or None. width: the
    screen's (None: the console's; in a pipe COLUMNS or 80)."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    rows = [
        ("status", status_text(job, now)),
        ("queue", text(job.queue)), ("type", text(job.type)), ("priority", priority_label(job.priority)),
        ("attempts", f"{job.attempts} of {job.max_attempts}"),
        ("backoff", job.backoff), ("timeout", format_duration(job.timeout)),
        ("run at", f"{to_rfc3339(job.run_at)} ({ago(job.run_at, now)})"),
        ("after", ", ".join(map(str, job.after)) if job.after else None),
        ("key", text(job.idempotency_key) if job.idempotency_key else None),
        ("reactions", text(", ".join(f"{state}: {kind}" for state, kind in (
            ("buried", job.on_buried), ("completed", job.on_completed), ("cancelled", job.on_cancelled)) if kind))
         if job.on_buried or job.on_completed or job.on_cancelled else None),
        ("worker", text(job.worker) if job.worker else None),
        ("claimed", f"{to_rfc3339(job.claimed_at)} ({ago(job.claimed_at, now)})" if job.claimed_at and job.worker else None),
        ("lease until", f"{to_rfc3339(job.lease_expires_at)} ({ago(job.lease_expires_at, now)})" if job.lease_expires_at else None),
        ("progress", text(mask_text(_progress(job.progress), patterns, reveal) + _changed(job.progress_at, now))
         if job.progress else None),
        ("error", text(mask_text(job.error, patterns, reveal), "red") if job.error else None),
        ("result", text(masked_text(job.result, patterns, reveal)) if job.result is not None else None),
        ("created", to_rfc3339(job.created_at)), ("updated", to_rfc3339(job.updated_at)),
        ("finished", to_rfc3339(job.finished_at) if job.finished_at else None),
        ("payload", text(masked_text(job.payload, patterns, reveal))),
    ]
    if explanation:  # (a reason a person typed, `jobctl bury --reason`, may hold a secret)
        rows.insert(1, ("why", text(mask_text(explanation, patterns, reveal), "yellow")))
    if run_output is not None:
        other = "; --run N for another run" if run_output.runs > 1 else ""
        rows.append(("output", f"`jobctl logs {job.id}` (run {run_output.run}, {_size(run_output.size)}{other})"))
    runs = failed_runs(events)
    if runs:  # the latest failed run's exit, next to the error it explains
        at = next(i for i, (label, _) in enumerate(rows) if label == "error") + 1
        rows.insert(at, ("last failure", runs[-1][1]))
    for label, value in rows:
        if value is not None:
            grid.add_row(label, value if isinstance(value, Text) else Text(str(value)))
    parts: list[RenderableType] = [Panel(grid, title=f"job {job.id}", title_align="left", expand=False)]
    parts += history_view(events, width or console().width, patterns, reveal)
    parts += list(_last_lines(job, runs, run_output, patterns, reveal))
    return Group(*parts)


def history_view(events: list[Event], width: int, patterns, reveal: bool = False) -> list[RenderableType]:
    """The event history, one line per event: time, from → to, actor, and the message when it
    fits beside them; a longer message goes below, indented, wrapped at the screen's width. A
    timestamp is never wrapped (a column of 26 cells beside three others would fold it)."""
    from rich.padding import Padding

    out: list[RenderableType] = [Text("history", style="bold")]
    moves = [f"{e.from_status or '-'} → {e.to_status}" for e in events]
    actors = [text(e.actor) for e in events]
    move_width = max((cell_len(m) for m in moves), default=0)
    actor_width = max((a.cell_len for a in actors), default=0)
    aligned = 24 + 2 + move_width + 2 + actor_width <= width * 2 // 3  # a long worker id: no padding
    for e, move, actor in zip(events, moves, actors):
        how = exit_summary(_details(e))
        message = text(mask_text(e.message or "", patterns, reveal))
        if how:
            message.append(f"{' ' if e.message else ''}({how})", style="dim")
        line = Text(f"{to_rfc3339(e.at)}  {move.ljust(move_width)}  ")
        line.append_text(actor)
        if aligned:
            line.pad_right(actor_width - actor.cell_len)
        if not message.plain:
            out.append(line)
        elif line.cell_len + 2 + message.cell_len <= width:
            out.append(line + Text("  ") + message)
        else:
            line.rstrip()
            out += [line, Padding(message, (0, 0, 0, 4), expand=False)]
    return out


def _last_lines(job: Job, runs: list, run_output, patterns, reveal: bool) -> list[Text]:
    """The last lines of the latest failed run, once: its kept output (stdout and stderr in the
    order written) when that run kept some, else the stderr tail its history holds."""
    from jobctl.runlog import last_lines

    latest = runs[-1] if runs else None
    if run_output is not None and run_output.outcome in ("failed", "lost") and (
            latest is None or run_output.run >= latest[0]):
        lines = last_lines(run_output, 10, patterns, reveal)
        if lines:
            how = latest[1] if latest is not None and latest[0] == run_output.run else run_output.outcome
            return ([Text(""), Text(f"last lines of run {run_output.run} ({how}):", style="bold")]
                    + [Text(line) for line in lines]
                    + [Text(f"all of its output: `jobctl logs {job.id} --run {run_output.run}`", style="dim")])
    if latest is not None and latest[2]:
        run, how, tail = latest
        return [Text(""), Text(f"last lines of run {run}'s stderr ({how}):", style="bold")] + [
            text(mask_text(line, patterns, reveal), "red") for line in tail.rstrip("\n").split("\n")]
    return []


def _size(n: int) -> str:
    for unit, size in (("MiB", 1024**2), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


PRIORITY_NAMES = {0: "low", 10: "normal", 20: "high", 30: "critical"}


def priority_label(priority: int) -> str:
    """`normal (10)` for a priority that has a label, else the number."""
    name = PRIORITY_NAMES.get(priority)
    return f"{name} ({priority})" if name else str(priority)


def _details(event: Event) -> dict:
    if not event.details:
        return {}
    try:
        d = json.loads(event.details)
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}


def exit_summary(details: dict) -> str | None:
    """`exit code 65 after 12ms`, `killed by SIGKILL after 10m` from a failed run's details."""
    if "exit_code" not in details and "signal" not in details:
        return None
    if details.get("signal"):
        how = f"killed by {safe(details['signal'])}"
    elif details.get("exit_code") is not None:
        how = f"exit code {safe(details['exit_code'])}"
    else:
        how = "no exit code"
    duration = details.get("duration")
    if isinstance(duration, (int, float)) and not isinstance(duration, bool):
        how += f" after {format_duration(duration)}"
    return how


def failed_runs(events: list[Event]) -> list[tuple[int, str, str | None]]:
    """(run number, how it ended, stderr tail) of each run whose end the history details, oldest
    first; runs numbered as their claims say ("run 2 of 3"), as the worker and `logs --run` do."""
    from jobctl.runlog import run_number

    runs, run, starts = [], 0, 0
    for e in events:
        if e.to_status == "running" and e.from_status == "pending":
            starts += 1
            run = run_number(e.message, starts)
        d = _details(e)
        how = exit_summary(d)
        if how:
            tail = d.get("stderr_tail")
            runs.append((run, how, tail if isinstance(tail, str) and tail.strip() else None))
    return runs


def _changed(at: int | None, now: int) -> str:
    """When a job's progress last changed: a stalled job (the same report, or none, for long) is
    told from a live one."""
    return f" · changed {ago(at, now)}" if at is not None else ""


def _progress(progress_text: str) -> str:
    p = json.loads(progress_text)
    parts = [f"{p['percent']}%" if p.get("percent") is not None else None, p.get("message")]
    return " ".join(x for x in parts if x)


def simple_table(columns: list[str], rows: list[list]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for c in columns:
        table.add_column(c)
    for r in rows:
        table.add_row(*[v if isinstance(v, Text) else text(v) for v in r])
    return keep_whole(table)


# -- a screen grid: one line per row at a given width (the stats screen, `recover` on a terminal) --


class Col:
    """A column of a screen grid. cut: may be cut with "…", first down to `soft` cells (before any
    column is dropped), then down to `least`; drop: leaves the grid when the screen is too narrow
    (higher first)."""

    __slots__ = ("header", "right", "cut", "least", "soft", "drop")

    def __init__(self, header: str, right: bool = False, cut: bool = False, least: int = 6, soft: int = 16,
                 drop: int = 0):
        self.header, self.right, self.cut, self.least, self.soft, self.drop = header, right, cut, least, soft, drop


class Cell:
    """A cell cut at its main part only: `billing-invo… (paused)` keeps its suffix."""

    __slots__ = ("main", "suffix")

    def __init__(self, main: Text, suffix: Text | None = None):
        self.main, self.suffix = main, suffix or Text("")

    @property
    def cell_len(self) -> int:
        return self.main.cell_len + self.suffix.cell_len

    SUFFIX_LEAST = 10  # " (paused …": what is kept of a suffix before the name itself is cut

    def render(self, width: int) -> Text:
        """The name whole and as much of the suffix as fits; only when even the suffix's first
        SUFFIX_LEAST cells do not fit beside it is the name cut (a long pause note must never
        hide which queue it is about)."""
        main, suffix = self.main.copy(), self.suffix.copy()
        if main.cell_len + suffix.cell_len <= width:
            return main + suffix
        keep = min(suffix.cell_len, self.SUFFIX_LEAST)
        if main.cell_len + keep <= width:
            suffix.truncate(width - main.cell_len, overflow="ellipsis")
            return main + suffix
        suffix.truncate(keep, overflow="ellipsis")
        main.truncate(max(width - keep, 1), overflow="ellipsis")
        out = main + suffix
        if out.cell_len > width:
            out.truncate(width, overflow="ellipsis")
        return out


def _as_cell(value) -> Cell:
    if isinstance(value, Cell):
        return value
    return Cell(value if isinstance(value, Text) else Text(str(value)))


def grid_lines(cols: list[Col], rows: list[list], width: int, *, gap: int = 2, header_style: str = "bold") -> list[Text]:
    """A table as lines of at most `width` cells: columns at their natural width; when that is too
    wide, droppable columns leave (highest drop first), then cut columns shrink (the widest first)
    down to their `least`; whatever still does not fit is cut at the screen's edge."""
    cells = [[_as_cell(v) for v in r] for r in rows]
    keep = list(range(len(cols)))
    widths = [max([cell_len(c.header)] + [r[i].cell_len for r in cells]) for i, c in enumerate(cols)]

    def total(idx):
        return sum(widths[i] for i in idx) + gap * (len(idx) - 1)

    def shrink(floor_of) -> None:
        while total(keep) > width:
            cuttable = [i for i in keep if cols[i].cut and widths[i] > floor_of(i)]
            if not cuttable:
                return
            widest = max(cuttable, key=lambda i: widths[i])
            widths[widest] = max(floor_of(widest), widths[widest] - (total(keep) - width))

    def floor(i) -> int:
        return max(cols[i].least, cell_len(cols[i].header))

    shrink(lambda i: max(floor(i), cols[i].soft))
    for i in sorted((i for i, c in enumerate(cols) if c.drop), key=lambda i: -cols[i].drop):
        if total(keep) <= width:
            break
        keep.remove(i)
    shrink(floor)
    lines = []
    for row in [[Cell(Text(c.header, style=header_style)) for c in cols]] + cells:
        line = Text("")
        for n, i in enumerate(keep):
            cell = row[i].render(widths[i])
            if n < len(keep) - 1 or cols[i].right:
                cell.align("right" if cols[i].right else "left", widths[i])
            if n:
                line.append(" " * gap)
            line.append_text(cell)
        line.rstrip()
        if line.cell_len > width:
            line.truncate(width, overflow="ellipsis")
        lines.append(line)
    return lines
