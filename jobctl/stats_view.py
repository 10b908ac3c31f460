"""The stats screen of `jobctl stats`: one renderer for a terminal, a pipe and --watch (and, later,
an interactive view). Pure functions from the figures of jobctl.stats (already masked) and a width
to rich renderables, one per section: queues, pauses and the summary line, limits, stuck, buried by
error, aging, throughput; no I/O.

Each section is built once and laid out two ways. With a width (a terminal), one line per row, cut
and thinned to fit: `stats --watch` redraws in place, so a frame must fit the terminal, and its
line count must be exact. Without (a pipe or a file), whole tables under their titles, which
print_view writes with every line whole, for grep.
"""

from __future__ import annotations

from typing import NamedTuple

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from jobctl.durations import format_duration
from jobctl.output import Cell, Col, ago, buried_error, grid_lines, keep_whole, text
from jobctl.untrusted import safe

SPARK = "▁▂▃▄▅▆▇█"


# -- the sections -------------------------------------------------------------------------------


def queues(stats: dict, width: int | None = None, *, previous: dict | None = None,
           max_rows: int | None = None) -> list[RenderableType]:
    """The per-queue counts and an (all) line. With a `width`: one line per queue, at most
    `max_rows` queue lines, a growing backlog of ready jobs marked ↑ against `previous` (the last
    snapshot of --watch). Without: a whole table."""
    if not stats["queues"]:
        return [Text("queues: no jobs yet")]
    if width is not None:
        return list(queue_lines(stats, width, previous, max_rows))
    return [queues_table(stats)]


def queue_rows(stats: dict, names: list[str], *, previous: dict | None = None) -> list[tuple[Cell, dict]]:
    """A row of each queue in `names` and, when there is more than one queue, the (all) row: its
    label (a Cell, so that a pause note is cut before the name) and its cells by QUEUE_COLUMNS key,
    every count exact (12,345: ready - held must be read off the screen). A backlog of ready jobs that grew since `previous`
    (the last snapshot of --watch) is marked ↑."""
    before = (previous or {}).get("queues", {})
    records: list[tuple[str | None, dict]] = [(name, stats["queues"][name]) for name in names]
    if len(stats["queues"]) > 1:
        records.append((None, stats["totals"]))
    rows = []
    for name, r in records:
        if name is None:
            label = Cell(Text("(all)", style="bold"))
        else:
            paused = pause_label(r)
            label = Cell(text(name), Text(f" ({paused})", style="magenta") if paused else None)
        cells: dict[str, Text | str] = {}
        for key, _, _ in QUEUE_COLUMNS:
            if key == "oldest_ready_age":
                cells[key] = _age(r[key])
            elif key == "ready" and name is not None and name in before and r["ready"] > before[name]["ready"]:
                cells[key] = Text(f"{r[key]:,}↑", style="bold yellow")
            elif key == "buried" and r[key]:
                cells[key] = Text(f"{r[key]:,}", style="red")
            else:
                cells[key] = f"{r[key]:,}"
        rows.append((label, cells))
    return rows


def throughput(stats: dict, width: int | None = None, *, full: bool = True) -> list[RenderableType]:
    """Runs per minute and run times. With a `width`: two lines, or (`full`) a table with the
    sparklines of the last hour that fit beside it. Without: a whole table and two lines."""
    if width is not None:
        return list(throughput_lines(stats, width, full))
    return [throughput_table(stats), durations_line(stats)]


def render(stats: dict, now: int, *, width: int | None = None, height: int | None = None,
           previous: dict | None = None, title: Text | None = None, highlight: bool = False,
           by: str = "queue") -> Group:
    """The stats screen, as one renderable (pure: the same figures give the same text). With a
    `width` (a terminal): one line per row, at most `width` cells and `height` lines (None: all),
    with the --watch `title`, `previous` snapshot and `highlight`. Without (a pipe or a file):
    whole tables under their titles, for print_view to write every line whole. `by`: "queue"
    (a row per queue) or "type" (a row per type, with its runs, failure rate and run times)."""
    if width is not None:
        return Group(*screen_lines(stats, now, width=width, height=height, previous=previous, title=title,
                                   highlight=highlight, by=by))
    parts = types_view(stats) if by == "type" else queues(stats)
    paused = pauses_line(stats, now)
    if stats["queues"] and paused is not None:
        parts.append(paused)
    parts.append(Text(""))
    sections = [stuck(stats), buried(stats, now), aging(stats)] + ([limits(stats)] if stats.get("limits") else [])
    for section in sections:
        parts += section_view(section) + [Text("")]
    parts += throughput(stats)
    if stats.get("workers") is not None:
        parts += [Text(""), workers_text(stats["workers"])]
    return Group(*parts)


RIGHT = {"justify": "right"}


class Section(NamedTuple):
    """One list of the screen (limits, stuck, buried by error, aging), built once for every layout:
    its rows; its columns on a screen grid (cut and left out to fit a width); and, for a pipe, the
    title above its whole table, what it says when empty, and that table's columns."""

    title: str
    empty: str
    cols: list[Col]
    whole: list[tuple[str, dict]]
    rows: list[list]


def section_lines(section: Section, width: int, rows: int | None = None) -> list[Text]:
    """The section's header and its first `rows` rows (None: all), one line each of at most `width` cells."""
    return grid_lines(section.cols, section.rows[:rows], width)


def section_view(section: Section, width: int | None = None, rows: int | None = None) -> list[RenderableType]:
    """With a `width`: section_lines. Without: its title and whole table, or one line saying that
    it is empty."""
    if width is not None:
        return list(section_lines(section, width, rows))
    if not section.rows:
        return [Text(f"{section.title}: {section.empty}")]
    table = Table(box=None, header_style="bold", pad_edge=False, padding=(0, 1))
    for name, kw in section.whole:
        table.add_column(name, **kw)
    for row in section.rows:
        table.add_row(*row)
    return [Text(section.title, style="bold"), keep_whole(table)]


def stuck(stats: dict, highlight: bool = False) -> Section:
    """Running jobs that need a person (an expired lease, a stop not obeyed), `highlight`ed by --watch."""
    total, shown = stats["totals"]["stuck"], len(stats["stuck"])
    style = "bold red" if highlight else ""
    return Section(
        "stuck" if total <= shown else f"stuck ({shown} of {total})", "none",
        [Col("STUCK", right=True), Col("QUEUE", cut=True, soft=32), Col("TYPE", cut=True, drop=2),
         Col("WORKER", cut=True, least=8), Col("FOR", right=True), Col("WHY", cut=True, least=8, drop=1)],
        [("ID", RIGHT), ("QUEUE", {}), ("TYPE", {}),
         ("WORKER", {"overflow": "ellipsis", "no_wrap": True, "max_width": 24}), ("RUNNING FOR", RIGHT), ("WHY", {})],
        [[Text(str(j["id"]), style=style), text(j["queue"]), text(j["type"]), text(j["worker"] or "-"),
          _age(j["running_for"]), text(j["stuck_reason"])] for j in stats["stuck"]])


def buried(stats: dict, now: int) -> Section:
    """Buried jobs, one row per queue, type and error (the same failure ten times is one row), with
    how many and the latest one (to `show`)."""
    from jobctl.durations import parse_time

    total, grouped = stats["totals"]["buried"], stats.get("buried_by_error", [])
    rows = []
    for g in grouped:
        latest = parse_time(g["latest_at"]) if g["latest_at"] else None
        rows.append([f"{g['count']:,}", text(g["queue"]), text(g["type"]), str(g["latest_id"]),
                     ago(latest, now).removesuffix(" ago"), buried_error(g["error"])])
    return Section(
        "buried" if not grouped else "buried, by error" if total <= sum(g["count"] for g in grouped)
        else f"buried, by error (the latest {len(grouped)} errors of {total:,} jobs)", "none",
        [Col("BURIED", right=True), Col("QUEUE", cut=True, soft=32), Col("TYPE", cut=True, drop=1),
         Col("LATEST", right=True, drop=2), Col("AGO", right=True), Col("ERROR", cut=True, least=12, soft=24)],
        [("BURIED", RIGHT), ("QUEUE", {}), ("TYPE", {}), ("LATEST", RIGHT), ("AGO", {**RIGHT, "no_wrap": True}),
         ("ERROR", {"overflow": "ellipsis", "no_wrap": True, "max_width": 80})],
        rows)


def aging(stats: dict) -> Section:
    """The ready jobs waiting longest for a worker (held jobs are not waiting for one)."""
    held = stats["totals"].get("held", 0)
    empty = f"no ready job waits for a worker ({held:,} held by a pause or a limit)" if held else "no ready jobs"
    return Section(
        "aging (ready jobs waiting longest)", empty,
        [Col("AGING", right=True), Col("QUEUE", cut=True, soft=32), Col("TYPE", cut=True),
         Col("PRI", right=True, drop=1), Col("WAITING", right=True)],
        [("ID", RIGHT), ("QUEUE", {}), ("TYPE", {}), ("PRI", RIGHT), ("WAITING", RIGHT)],
        [[str(j["id"]), text(j["queue"]), text(j["type"]), str(j["priority"]), _age(j["waiting_for"])]
         for j in stats["aging"]])


def limits(stats: dict) -> Section:
    """Per limited type and group: units running of the limit, starts in the window of the rate,
    and ready jobs held back (with when the next start is possible)."""
    rows = []
    found = stats.get("limits") or {"types": {}, "groups": {}}
    for kind in ("groups", "types"):
        for name, e in found[kind].items():
            running = f"{e['units_running']}/{e['concurrency_limit']}" if e["concurrency_limit"] else "-"
            rate = e.get("rate_limit")
            starts = f"{e['starts_in_window']}/{rate['max_starts']} per {format_duration(rate['window'])}" if rate else "-"
            held = Text(f"{e['ready_held']:,}", style="yellow" if e["ready_held"] else "")
            nxt = e.get("next_start_in")
            rows.append([text(f"{kind[:-1]} {name}"), running, starts, held,
                         "-" if nxt is None else f"in {format_duration(nxt)}"])
    cols = [Col("LIMIT", cut=True, soft=32), Col("RUNNING", right=True), Col("STARTS", right=True),
            Col("HELD", right=True), Col("NEXT START", right=True, drop=1)]
    return Section("limits", "none", cols, [(c.header, RIGHT if c.right else {}) for c in cols], rows)


def pause_label(q: dict) -> str | None:
    """What is paused in a queue, short enough for its cell: `paused`, `1 type paused`. When and
    until when: pauses_line, below the table (a long note beside the name pushed the counts off
    an 80-column screen)."""
    if q.get("paused"):
        return "paused"
    n = len(q.get("paused_types") or {})
    return f"{n} type{'s' if n != 1 else ''} paused" if n else None


def pauses_line(stats: dict, now: int) -> Text | None:
    """Every pause of the queues shown, in one line: `paused: queue idle; type render in media until … (in 2h)`."""
    from jobctl.durations import parse_time

    def until(at: str | None) -> str:
        return f" until {at} ({ago(parse_time(at), now)})" if at else ""

    found = []
    for name, q in stats["queues"].items():
        if q.get("paused"):
            found.append(f"queue {safe(name)}{until(q.get('paused_until'))}")
        for type_, at in (q.get("paused_types") or {}).items():
            found.append(f"type {safe(type_)} in {safe(name)}{until(at)}")
    if not found:
        return None
    line = Text("paused: ", style="magenta")
    line.append("; ".join(found))
    return line

SPARK = "▁▂▃▄▅▆▇█"


# -- per type (stats --by type) -------------------------------------------------------------------

TYPE_COLUMNS = (  # key, header, drop order on a narrow screen (higher leaves first)
    ("ready", "READY", 0), ("held", "HELD", 1), ("running", "RUN", 0), ("cancel_requested", "STOPPING", 6),
    ("buried", "BURIED", 0), ("done15", "DONE 15m", 3), ("failed15", "FAILED 15m", 0), ("done60", "DONE 60m", 5),
    ("failed60", "FAILED 60m", 4), ("failure_rate", "FAIL% 15m", 0), ("p50", "P50", 2), ("p95", "P95", 0),
)


def _percent(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.1f}%"


def type_rows(stats: dict, names: list[str]) -> list[tuple[Cell, dict]]:
    """A row of each type in `names`: its label and its cells by TYPE_COLUMNS key (counts exact)."""
    records = []
    for name in names:
        e = stats["types"][name]
        runs = e["runs"]
        records.append((name, {"ready": e["ready"], "held": e["held"], "running": e["running"],
                               "cancel_requested": e.get("cancel_requested", 0), "buried": e["buried"],
                               "done15": runs["15m"]["completed"], "failed15": runs["15m"]["failed"],
                               "done60": runs["60m"]["completed"], "failed60": runs["60m"]["failed"],
                               "failure_rate": e["failure_rate"], "p50": e["p50"], "p95": e["p95"]}))
    counts = [k for k, _, _ in TYPE_COLUMNS if k not in ("failure_rate", "p50", "p95")]
    rows = []
    for name, r in records:
        cells: dict[str, Text | str] = {}
        for key in counts:
            bad = key in ("buried", "failed15", "failed60") and r[key]
            cells[key] = Text(f"{r[key]:,}", style="red") if bad else f"{r[key]:,}"
        cells["failure_rate"] = (Text(_percent(r["failure_rate"]), style="red") if r["failure_rate"]
                                 else _percent(r["failure_rate"]))
        cells["p50"], cells["p95"] = _age(r["p50"]), _age(r["p95"])
        rows.append((Cell(text(name)), cells))
    return rows


def types_view(stats: dict) -> list[RenderableType]:
    """The per-type figures as a whole table (a pipe)."""
    if not stats["types"]:
        return [Text("types: no jobs or runs yet")]
    right = {"justify": "right", "no_wrap": True}
    table = _grid_table([("TYPE", {})] + [(header, right) for _, header, _ in TYPE_COLUMNS])
    for label, cells in type_rows(stats, list(stats["types"])):
        table.add_row(label.main, *(cells[key] for key, _, _ in TYPE_COLUMNS))
    return [keep_whole(table)]


def type_lines(stats: dict, width: int, max_rows: int | None = None) -> list[Text]:
    """The per-type figures, one line per type, at most `max_rows` lines (the types that need a
    look first: buried, failing, then the longest waits)."""
    names = list(stats["types"])
    shown = names
    if max_rows is not None and len(names) > max_rows:
        ts = stats["types"]
        urgent = sorted(names, key=lambda n: (not ts[n]["buried"], -(ts[n]["failure_rate"] or 0),
                                              -(ts[n]["ready"] - ts[n]["held"]), n))
        keep = set(urgent[:max(max_rows, 1)])
        shown = [n for n in names if n in keep]
    cols = [Col("TYPE", cut=True, least=8, soft=64)] + [Col(h, right=True, drop=_drop(k, d, stats["types"].values()))
                                                        for k, h, d in TYPE_COLUMNS]
    rows = [[label, *(cells[key] for key, _, _ in TYPE_COLUMNS)]
            for label, cells in type_rows(stats, shown)]
    lines = grid_lines(cols, rows, width)
    if len(shown) < len(names):
        lines.append(Text(f"… {len(names) - len(shown)} more types: a taller window, or stats --json", style="dim"))
    return lines


def summary_line(stats: dict) -> Text:
    """What needs a person, in one line: stuck, buried, held, the workers, and the ready job
    waiting longest last (its queue's name, whole in the table, is what a narrow screen cuts)."""
    t = stats["totals"]
    line = Text("")
    line.append(f"stuck {t['stuck']:,}", style="bold red" if t["stuck"] else "")
    line.append(" · ")
    line.append(f"buried {t['buried']:,}", style="red" if t["buried"] else "")
    line.append(" · ")
    if t.get("held"):
        line.append(f"held {t['held']:,}", style="magenta")
        line.append(" · ")
    if stats.get("workers") is not None:
        line.append_text(workers_text(stats["workers"]))
        line.append(" · ")
    ages = [(q["oldest_ready_age"], name) for name, q in stats["queues"].items() if q["oldest_ready_age"] is not None]
    if ages:
        age, name = max(ages, key=lambda a: (a[0], a[1]))
        line.append(f"oldest ready {_age(age)} in {safe(name)}")
        paused = pause_label(stats["queues"][name])
        if paused:
            line.append(f" ({paused})", style="magenta")
    else:
        line.append("no ready jobs" if not t.get("ready") else "no ready job waits for a worker")
    return line


def workers_text(workers: dict) -> Text:
    """`workers 2 alive, 1 lost` (the lost ones in red): worker processes of `jobctl workers`."""
    line = Text(f"workers {workers['alive']:,} alive")
    if workers["lost"]:
        line.append(f", {workers['lost']:,} lost", style="bold red")
    return line


def watch_title(now: int, interval: float, location: str | None) -> Text:
    from datetime import datetime

    stamp = datetime.fromtimestamp(now / 1000).strftime("%H:%M:%S")
    line = Text(f"refreshed {stamp} · every {format_duration(interval)} · Ctrl-C to quit", style="dim")
    if location:
        line.append(f" · {safe(location)}", style="dim")
    return line


# -- without a width: whole tables for a pipe --------------------------------------------------


def _age(seconds: float | None) -> str:
    return format_duration(seconds) if seconds is not None else "-"


def _rate(v: float) -> str:
    return f"{v:.2f}"


def sparkline(values: list[int]) -> str:
    """One block character per value, scaled to the largest (all blank-low when all are 0)."""
    top = max(values, default=0)
    if top <= 0:
        return SPARK[0] * len(values)
    return "".join(SPARK[min(int(v / top * (len(SPARK) - 1) + 0.5), len(SPARK) - 1)] for v in values)


def _grid_table(columns: list[tuple[str, dict]]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False, padding=(0, 1))
    for name, kw in columns:
        table.add_column(name, **kw)
    return table


WHOLE_ORDER = ("ready", "held", "scheduled", "blocked", "running", "cancel_requested", "buried", "completed", "cancelled",
               "oldest_ready_age")  # the columns of the whole table, after QUEUE


def queues_table(stats: dict) -> Table:
    """The per-queue counts as a whole table (a pipe)."""
    right = {"justify": "right", "no_wrap": True}
    headers = {key: header for key, header, _ in QUEUE_COLUMNS}
    table = _grid_table([("QUEUE", {})] + [(headers[key], right) for key in WHOLE_ORDER])
    for label, cells in queue_rows(stats, list(stats["queues"])):
        table.add_row(label.main + label.suffix, *(cells[key] for key in WHOLE_ORDER))
    return keep_whole(table)


def throughput_table(stats: dict) -> Table:
    t = stats["throughput"]
    table = _grid_table([("RUNS/MIN", {}), ("1m", {"justify": "right"}), ("15m", {"justify": "right"}),
                         ("60m", {"justify": "right"})])
    for outcome in ("completed", "failed"):
        table.add_row(outcome, *(_rate(t[w][outcome + "_per_minute"]) for w in ("1m", "15m", "60m")))
    return table


def durations_line(stats: dict) -> Text:
    t = stats["throughput"]
    rt = t["run_time"]
    if not rt["runs"]:
        return Text("run time: no runs finished in the last hour")
    runs = f"{rt['runs']:,} run" + ("s" if rt["runs"] != 1 else "")
    return Text(f"run time (last hour, {runs}): median {_age(rt['median'])}, p95 {_age(rt['p95'])}\n"
                f"wait from ready to start: median {_age(t['wait']['median'])}")


# -- with a width: lines fitted to a terminal's width and height ---------------------------------
#
# Built line by line rather than with rich tables, so that the line count is exact. What matters
# comes first: the refresh line, the per-queue counts, a summary of what needs a person (stuck,
# buried, the oldest ready job), then the limits, stuck, buried and aging lists (each at least one
# row, more as room allows), then throughput and run times.


QUEUE_COLUMNS = (  # key, header, drop order on a narrow screen (higher leaves first)
    ("ready", "READY", 0), ("oldest_ready_age", "OLDEST", 0), ("running", "RUN", 0), ("buried", "BURIED", 0),
    ("held", "HELD", 1),
    ("scheduled", "SCHED", 2), ("blocked", "BLOCKED", 3), ("cancel_requested", "STOPPING", 4),
    ("completed", "DONE", 5), ("cancelled", "CANCELLED", 6),
)


STAYS = ("held", "cancel_requested")  # columns that never leave a narrow screen while a count in them is not 0


def _drop(key: str, drop: int, entries) -> int:
    """A column's drop order on a narrow screen: HELD leaves only when no job is held (ready - held
    is what waits for a worker, so with held jobs it stays and a long name is cut instead), and
    STOPPING only when no job is (RUN does not count them: without it, a queue whose only job is
    being cancelled would read as one where nothing runs); the minor counts leave instead."""
    return 0 if key in STAYS and any(e.get(key) for e in entries) else drop


def queue_lines(stats: dict, width: int, previous: dict | None = None, max_rows: int | None = None) -> list[Text]:
    """The per-queue counts, one line per queue (and an (all) line), at most `max_rows` queue lines."""
    names = list(stats["queues"])
    shown = names
    if max_rows is not None and len(names) > max_rows:  # the room goes to the queues that need a look
        qs = stats["queues"]
        urgent = sorted(names, key=lambda n: (not qs[n]["buried"], -(qs[n]["oldest_ready_age"] or 0), n))
        keep = set(urgent[:max(max_rows, 1)])
        shown = [n for n in names if n in keep]
    # A queue name is cut only when dropping the minor counts was not enough ("billing-…" could be another queue).
    cols = [Col("QUEUE", cut=True, least=8, soft=64)] + [Col(h, right=True, drop=_drop(k, d, stats["queues"].values()))
                                                         for k, h, d in QUEUE_COLUMNS]
    rows = [[label, *(cells[key] for key, _, _ in QUEUE_COLUMNS)]
            for label, cells in queue_rows(stats, shown, previous=previous)]
    lines = grid_lines(cols, rows, width)
    if len(shown) < len(names):
        lines.insert(len(shown) + 1, Text(f"… {len(names) - len(shown)} more queues: a taller window, or stats -q NAME",
                                          style="dim"))
    return lines


def throughput_lines(stats: dict, width: int, full: bool) -> list[Text]:
    """Runs per minute and run times: 2 lines, or (full) a table with the last hour's sparklines."""
    t = stats["throughput"]
    rt = t["run_time"]
    if rt["runs"]:
        runs = f"{rt['runs']:,} run" + ("s" if rt["runs"] != 1 else "")
        times = Text(f"run time ({runs}, last hour): median {_age(rt['median'])}, p95 {_age(rt['p95'])}"
                     f" · wait: median {_age(t['wait']['median'])}")
    else:
        times = Text("run time: no runs finished in the last hour")
    if not full:
        rates = Text("runs/min (1m, 15m, 60m): ")
        for n, (outcome, style) in enumerate((("completed", "green"), ("failed", "red"))):
            rates.append(" · " if n else "")
            rates.append(outcome + " ", style=style)
            rates.append(", ".join(_rate(t[w][outcome + "_per_minute"]) for w in ("1m", "15m", "60m")))
        lines = [rates, times]
    else:
        cols = [Col("RUNS/MIN"), Col("1m", right=True), Col("15m", right=True), Col("60m", right=True)]
        rows = [[Text(o, style=s)] + [_rate(t[w][o + "_per_minute"]) for w in ("1m", "15m", "60m")]
                for o, s in (("completed", "green"), ("failed", "red"))]
        base = grid_lines(cols, rows, width)
        room = width - max(line.cell_len for line in base) - 2
        if room >= 10:  # the most recent minutes that fit, oldest on the left
            minutes = min(room, 60)
            label = f"LAST {minutes} MIN" if minutes < 60 else "LAST HOUR"
            head_width = max(line.cell_len for line in base)
            for line, extra in zip(base, [Text(label[:minutes], style="bold")] + [
                    Text(sparkline(t[f"{o}_by_minute"][-minutes:]), style=s)
                    for o, s in (("completed", "green"), ("failed", "red"))]):
                line.pad_right(head_width - line.cell_len + 2)
                line.append_text(extra)
        lines = base + [times]
    for line in lines:
        if line.cell_len > width:
            line.truncate(width, overflow="ellipsis")
    return lines


def screen_lines(stats: dict, now: int, *, width: int, height: int | None = None, previous: dict | None = None,
                 title: Text | None = None, highlight: bool = False, by: str = "queue") -> list[Text]:
    """The stats screen as lines, each at most `width` cells, at most `height` lines (None: all)."""
    if height is not None:
        height = max(height, 1)
    top = [title] if title is not None else []
    line = pauses_line(stats, now)
    paused = [line] if line is not None else []
    fixed = len(top) + len(paused) + 1  # the title, what is paused, and the summary line
    lists = {"limits": limits(stats), "stuck": stuck(stats, highlight), "buried": buried(stats, now), "aging": aging(stats)}
    present = [w for w in lists if lists[w].rows]
    # Room kept below the queues: a header and a row of each list, and two lines of rates;
    # the queue table's own header, (all) and "… more queues" lines.
    spare = None if height is None else max(height - fixed - 2 * len(present) - 2 - 3, 1)
    if by == "type":
        counts = type_lines(stats, width, max_rows=spare) if stats["types"] else [Text("types: no jobs or runs yet")]
    else:
        counts = queue_lines(stats, width, previous, max_rows=spare) if stats["queues"] else [Text("queues: no jobs yet")]
    throughput_full = throughput_lines(stats, width, full=True)
    throughput_short = throughput_lines(stats, width, full=False)
    rates: list[Text]
    if height is None:
        take = {w: len(lists[w].rows) for w in present}
        rates = throughput_full
        gaps = True
    else:
        left = height - fixed - len(counts)
        take = {w: 0 for w in present}
        rates = []
        for w in present:  # each list: its header and one row, as long as there is room
            if left >= 2:
                take[w], left = 1, left - 2
        if left >= len(throughput_short):
            rates, left = throughput_short, left - len(throughput_short)
        more = True
        while more and left > 0:  # then one more row to each list in turn
            more = False
            for w in present:
                if left > 0 and 0 < take[w] < len(lists[w].rows):
                    take[w], left, more = take[w] + 1, left - 1, True
        extra = len(throughput_full) - len(rates)
        if rates and left >= extra:
            rates, left = throughput_full, left - extra
        blocks = 1 + sum(1 for w in present if take[w]) + (1 if rates else 0)
        gaps = left >= blocks  # blank lines between blocks only when everything else fits
    out = top + counts + paused + [summary_line(stats)]
    for w in present:
        if take.get(w):
            out += ([Text("")] if gaps else []) + section_lines(lists[w], width, take[w])
    if rates:
        out += ([Text("")] if gaps else []) + rates
    for line in out:
        if line.cell_len > width:
            line.truncate(width, overflow="ellipsis")
    return out if height is None else out[:height]
