"""Human views over rich, as pure functions (data in, renderables out), plus the console to print them.

Job data is untrusted text: every value goes into a rich Text (never parsed as markup), with
terminal control and bidirectional-override characters shown as escapes, and payload values under
secret-looking keys masked unless --reveal. JSON output never goes through here.
"""

from __future__ import annotations

import json
import sys

from rich.cells import cell_len
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from jobctl.durations import format_duration, to_rfc3339
from jobctl.models import Event, Job
from jobctl.untrusted import mask, safe  # noqa: F401  (re-exported: output.safe, output.mask)

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


def status_text(job: Job, now: int) -> Text:
    label = job.status
    if job.status == "pending":
        if job.waiting_on:
            label = "pending (blocked)"
        elif job.run_at > now:
            label = "pending (scheduled)"
    return Text(label, style=STATUS_STYLE.get(job.status, ""))


LIST_COLUMNS = ("ID", "STATUS", "QUEUE", "TYPE", "PRI", "RUNS", "RUN AT", "UPDATED")
LIST_DROP_ORDER = ("PRI", "UPDATED", "RUN AT", "RUNS", "QUEUE")  # on a narrow screen, these go first
PAYLOAD_MIN = 12


def jobs_table(jobs: list[Job], now: int, patterns, reveal: bool = False, width: int | None = None) -> Table:
    """The `list` table. The columns before the payload keep their whole text (a status cut to
    "pend…" would mislead, and break a grep); with a `width`, the payload or error is cut to what
    they leave (print_view fits it), and on a screen too narrow for PAYLOAD_MIN of it whole columns
    are left out (LIST_DROP_ORDER) rather than cut. Without a width nothing is cut."""
    rows = []
    for j in jobs:
        detail = j.error if j.status in ("buried",) or (j.status == "pending" and j.error) else None
        rows.append((
            str(j.id), status_text(j, now), text(j.queue), text(j.type), str(j.priority),
            f"{j.attempts}/{j.max_attempts}", ago(j.run_at, now) if j.status == "pending" else "-",
            ago(j.updated_at, now),
            text(detail, "red") if detail else text(masked_text(j.payload, patterns, reveal, limit=200)),
        ))
    shown = list(LIST_COLUMNS)
    if width is not None:  # decided before the table is built: rich cannot take a column out again
        widths = {name: _widest(name, [r[i] for r in rows]) for i, name in enumerate(LIST_COLUMNS)}
        for name in LIST_DROP_ORDER:
            if width - sum(widths[n] + COLUMN_GAP for n in shown) >= PAYLOAD_MIN:
                break
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
              explanation: str | None = None) -> Group:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    rows = [
        ("status", status_text(job, now)),
        ("queue", text(job.queue)), ("type", text(job.type)), ("priority", str(job.priority)),
        ("attempts", f"{job.attempts} of {job.max_attempts}"),
        ("backoff", job.backoff), ("timeout", format_duration(job.timeout)),
        ("run at", f"{to_rfc3339(job.run_at)} ({ago(job.run_at, now)})"),
        ("after", ", ".join(map(str, job.after)) if job.after else None),
        ("key", text(job.idempotency_key) if job.idempotency_key else None),
        ("worker", text(job.worker) if job.worker else None),
        ("claimed", f"{to_rfc3339(job.claimed_at)} ({ago(job.claimed_at, now)})" if job.claimed_at and job.worker else None),
        ("lease until", f"{to_rfc3339(job.lease_expires_at)} ({ago(job.lease_expires_at, now)})" if job.lease_expires_at else None),
        ("progress", text(_progress(job.progress)) if job.progress else None),
        ("error", text(job.error, "red") if job.error else None),
        ("result", text(masked_text(job.result, patterns, reveal)) if job.result is not None else None),
        ("created", to_rfc3339(job.created_at)), ("updated", to_rfc3339(job.updated_at)),
        ("finished", to_rfc3339(job.finished_at) if job.finished_at else None),
        ("payload", text(masked_text(job.payload, patterns, reveal))),
    ]
    if explanation:
        rows.insert(1, ("why", text(explanation, "yellow")))
    for label, value in rows:
        if value is not None:
            grid.add_row(label, value if isinstance(value, Text) else Text(str(value)))
    history = Table(title="history", box=None, header_style="bold", title_justify="left", pad_edge=False)
    for name in ("AT", "FROM", "TO", "ACTOR", "MESSAGE"):
        history.add_column(name, overflow="fold" if name == "MESSAGE" else None)  # type: ignore[arg-type]
    for e in events:
        history.add_row(to_rfc3339(e.at), e.from_status or "-", e.to_status, text(e.actor), text(e.message or ""))
    return Group(Panel(grid, title=f"job {job.id}", title_align="left", expand=False), history)


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


# -- stats (SPEC §6) -----------------------------------------------------------------------------

SPARK = "▁▂▃▄▅▆▇█"


def _count(n: int) -> str:
    return f"{n:,}" if n else "0"


def _age(seconds: float | None) -> str:
    return format_duration(seconds) if seconds is not None else "-"


def sparkline(values: list[int]) -> str:
    """One block character per value, scaled to the largest (all blank-low when all are 0)."""
    top = max(values, default=0)
    if top <= 0:
        return SPARK[0] * len(values)
    return "".join(SPARK[min(int(v / top * (len(SPARK) - 1) + 0.5), len(SPARK) - 1)] for v in values)


def _section(title: str, table: Table | None, empty: str) -> list:
    if table is None or not table.rows:
        return [Text(f"{title}: {empty}")]
    return [Text(title, style="bold"), table]


def _grid_table(columns: list[tuple[str, dict]]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False, padding=(0, 1))
    for name, kw in columns:
        table.add_column(name, **kw)
    return table


def queues_table(stats: dict, previous: dict | None = None) -> Table:
    """The per-queue counts. With `previous` (the last snapshot of --watch), a growing backlog of
    ready jobs is marked with ↑ and highlighted."""
    right = {"justify": "right", "no_wrap": True}
    table = _grid_table([("QUEUE", {}), ("READY", right), ("SCHED", right), ("BLOCKED", right),
                         ("RUN", right), ("STOPPING", right), ("BURIED", right), ("DONE", right),
                         ("CANCELLED", right), ("OLDEST", right)])
    before = (previous or {}).get("queues", {})
    for name, q in stats["queues"].items():
        growing = name in before and q["ready"] > before[name]["ready"]
        ready = Text(_count(q["ready"]) + (" ↑" if growing else ""), style="bold yellow" if growing else "")
        label = text(name)
        if q["paused"]:
            label.append(" (paused)", style="magenta")
        table.add_row(
            label, ready, _count(q["scheduled"]), _count(q["blocked"]), _count(q["running"]),
            _count(q["cancel_requested"]), Text(_count(q["buried"]), style="red" if q["buried"] else ""),
            _count(q["completed"]), _count(q["cancelled"]), _age(q["oldest_ready_age"]),
        )
    if len(stats["queues"]) > 1:
        t = stats["totals"]
        table.add_row(Text("(all)", style="bold"), _count(t["ready"]), _count(t["scheduled"]), _count(t["blocked"]),
                      _count(t["running"]), _count(t["cancel_requested"]), _count(t["buried"]),
                      _count(t["completed"]), _count(t["cancelled"]), _age(t["oldest_ready_age"]))
    return keep_whole(table)


def _stuck_table(stats: dict, highlight: bool) -> Table:
    table = _grid_table([("ID", {"justify": "right"}), ("QUEUE", {}), ("TYPE", {}),
                         ("WORKER", {"overflow": "ellipsis", "no_wrap": True, "max_width": 24}),
                         ("RUNNING FOR", {"justify": "right"}), ("WHY", {})])
    for j in stats["stuck"]:
        table.add_row(str(j["id"]), text(j["queue"]), text(j["type"]), text(j["worker"] or "-"),
                      _age(j["running_for"]), text(j["stuck_reason"]), style="bold red" if highlight else None)
    return keep_whole(table)


def _buried_table(stats: dict, now: int) -> Table:
    table = _grid_table([("ID", {"justify": "right"}), ("QUEUE", {}), ("TYPE", {}), ("RUNS", {"justify": "right"}),
                         ("BURIED", {"no_wrap": True}), ("ERROR", {"overflow": "ellipsis", "no_wrap": True, "max_width": 80})])
    from jobctl.durations import parse_time

    for j in stats["buried"]:
        finished = parse_time(j["finished_at"]) if j["finished_at"] else None
        table.add_row(str(j["id"]), text(j["queue"]), text(j["type"]), f"{j['attempts']}/{j['max_attempts']}",
                      ago(finished, now), text(j["error"] or "", "red"))
    return keep_whole(table)


def _aging_table(stats: dict) -> Table:
    table = _grid_table([("ID", {"justify": "right"}), ("QUEUE", {}), ("TYPE", {}), ("PRI", {"justify": "right"}),
                         ("WAITING", {"justify": "right"})])
    for j in stats["aging"]:
        table.add_row(str(j["id"]), text(j["queue"]), text(j["type"]), str(j["priority"]), _age(j["waiting_for"]))
    return keep_whole(table)


def throughput_table(stats: dict, spark: bool = False) -> Table:
    t = stats["throughput"]
    table = _grid_table([("RUNS/MIN", {}), ("1m", {"justify": "right"}), ("15m", {"justify": "right"}),
                         ("60m", {"justify": "right"})] + ([("LAST HOUR", {"no_wrap": True})] if spark else []))
    for outcome, style in (("completed", "green"), ("failed", "red")):
        row: list[str | Text] = [outcome, *(f"{t[w][outcome + '_per_minute']:g}" for w in ("1m", "15m", "60m"))]
        if spark:
            row.append(Text(sparkline(t[f"{outcome}_by_minute"]), style=style))
        table.add_row(*row)
    return table


def durations_line(stats: dict) -> Text:
    t = stats["throughput"]
    rt = t["run_time"]
    if not rt["runs"]:
        return Text("run time: no runs finished in the last hour")
    runs = f"{rt['runs']:,} run" + ("s" if rt["runs"] != 1 else "")
    return Text(f"run time (last hour, {runs}): median {_age(rt['median'])}, p95 {_age(rt['p95'])}\n"
                f"wait from ready to start: median {_age(t['wait']['median'])}")


def stats_view(stats: dict, now: int, *, previous: dict | None = None, watch: bool = False) -> Group:
    """Everything `jobctl stats` shows, as one renderable (pure: the same stats give the same text)."""
    parts: list = []
    if stats["queues"]:
        parts.append(queues_table(stats, previous))
    else:
        parts.append(Text("queues: no jobs yet"))
    parts.append(Text(""))
    stuck_total = stats["totals"]["stuck"]
    stuck_title = "stuck" if stuck_total <= len(stats["stuck"]) else f"stuck ({len(stats['stuck'])} of {stuck_total})"
    parts += _section(stuck_title, _stuck_table(stats, watch), "none")
    parts.append(Text(""))
    buried_total = stats["totals"]["buried"]
    buried_title = ("buried" if buried_total <= len(stats["buried"])
                    else f"buried (latest {len(stats['buried'])} of {buried_total:,})")
    parts += _section(buried_title, _buried_table(stats, now), "none")
    parts.append(Text(""))
    parts += _section("aging (ready jobs waiting longest)", _aging_table(stats), "no ready jobs")
    parts.append(Text(""))
    parts.append(throughput_table(stats, spark=watch))
    parts.append(durations_line(stats))
    return Group(*parts)


def watch_view(stats: dict, now: int, *, previous: dict | None, interval: float) -> Group:
    """The --watch frame: the stats view with highlights and sparklines, and a footer."""
    from datetime import datetime

    stamp = datetime.fromtimestamp(now / 1000).strftime("%H:%M:%S")
    footer = Text(f"refreshed {stamp} · every {format_duration(interval)} · Ctrl-C to quit", style="dim")
    return Group(stats_view(stats, now, previous=previous, watch=True), Text(""), footer)
