"""The `jobctl workers` table as plain lines (pure: entries in, text out), without rich: a hundred
workers are drawn in a few milliseconds, and the command starts as fast as `workers --json`.

On a terminal the table fits its width: columns leave (DONE and FAILED first, then STARTED, HOST,
PID, QUEUES), then the worker ids, jobs, hosts and queues are cut with "…"; states are coloured
unless NO_COLOR. In a pipe every line is whole. Names are untrusted text: shown through safe().
"""

from __future__ import annotations

from rich.cells import cell_len  # (rich.cells alone: a few ms, not rich's console)

from jobctl.durations import format_duration, parse_time
from jobctl.untrusted import safe

# header, right-aligned, may be cut (down to its least width), drop order (higher leaves first; 0: never),
# and the width a cut column is brought down to before any column leaves
COLUMNS = (("WORKER", False, 10, 0, 20), ("HOST", False, 6, 3, 12), ("PID", True, None, 2, 0),
           ("STATE", False, None, 0, 0), ("STARTED", False, None, 4, 0), ("LAST SEEN", False, None, 0, 0),
           ("JOBS", False, 8, 0, 16), ("DONE", True, None, 5, 0), ("FAILED", True, None, 5, 0),
           ("QUEUES", False, 6, 1, 10))
GAP = 2
COLOURS = {"running": "32", "draining": "33", "lost": "1;31", "stopped": "2"}


def _ago(at: str | None, now: int) -> str:
    if at is None:
        return "-"
    delta = (now - parse_time(at)) / 1000
    return f"{format_duration(abs(delta))} ago" if delta >= 0 else f"in {format_duration(-delta)}"


def _width(s: str) -> int:
    return len(s) if s.isascii() else cell_len(s)


def _cut(s: str, width: int) -> str:
    if _width(s) <= width:
        return s
    out, used = "", 0
    for ch in s:
        w = _width(ch)
        if used + w > width - 1:
            break
        out, used = out + ch, used + w
    return out + "…"


def rows(entries: list[dict], now: int) -> list[list[str]]:
    out = []
    for e in entries:
        none = e["state"] is None  # jobs claimed by a script: no process behind the id
        out.append([
            safe(e["worker"]) if e["worker"] is not None else "(none)",
            "-" if e["host"] is None else safe(e["host"]),
            "-" if e["pid"] is None else str(e["pid"]),
            e["state"] or "-",
            _ago(e["started_at"], now),
            _ago(e["last_seen"], now),
            ", ".join(f"{j['id']} {safe(j['type'])}" for j in e["jobs"]) or "-",
            "-" if e["done"] is None else str(e["done"]),
            "-" if e["failed"] is None else str(e["failed"]),
            "-" if none else ", ".join(safe(q) for q in e["queues"]) if e["queues"] else "all",
        ])
    return out


def lines(entries: list[dict], now: int, *, width: int | None = None, colour: bool = False) -> list[str]:
    """The table: fitted to `width` cells (a terminal), or every line whole (None: a pipe)."""
    body = rows(entries, now)
    widths = [max([len(c[0])] + [_width(r[i]) for r in body]) for i, c in enumerate(COLUMNS)]
    keep = list(range(len(COLUMNS)))

    def total() -> int:
        return sum(widths[i] for i in keep) + GAP * (len(keep) - 1)

    def shrink(floor, width: int) -> None:  # cut the widest column that may be cut, down to floor(i), until it fits
        while total() > width:
            cuttable = [i for i in keep if COLUMNS[i][2] is not None and widths[i] > floor(i)]
            if not cuttable:
                return
            i = max(cuttable, key=lambda i: widths[i])
            widths[i] = max(floor(i), widths[i] - (total() - width))

    def least(i: int) -> int:
        return max(COLUMNS[i][2] or 0, len(COLUMNS[i][0]))

    if width is not None:
        shrink(lambda i: max(least(i), COLUMNS[i][4]), width)
        for i in sorted((i for i, c in enumerate(COLUMNS) if c[3]), key=lambda i: -COLUMNS[i][3]):
            if total() <= width:
                break
            keep.remove(i)
        shrink(least, width)
    out = []
    for n, row in enumerate([[c[0] for c in COLUMNS]] + body):
        cells = []
        for k, i in enumerate(keep):
            text = _cut(row[i], widths[i])
            pad = " " * (widths[i] - _width(text))
            last = k == len(keep) - 1
            cell = pad + text if COLUMNS[i][1] else text + ("" if last else pad)
            if colour and n == 0:
                cell = f"\x1b[1m{cell}\x1b[0m"
            elif colour and COLUMNS[i][0] == "STATE" and row[i] in COLOURS:
                cell = f"\x1b[{COLOURS[row[i]]}m{text}\x1b[0m{pad}"
            cells.append(cell)
        line = (" " * GAP).join(cells).rstrip()
        if width is not None and not colour and _width(line) > width:
            line = _cut(line, width)
        out.append(line)
    return out
