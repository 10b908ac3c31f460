"""Human views over rich, as pure functions (data in, renderables out), plus the console to print them.

Job data is untrusted text: every value goes into a rich Text (never parsed as markup), with
terminal control and bidirectional-override characters shown as escapes, and payload values under
secret-looking keys masked unless --reveal. JSON output never goes through here.
"""

from __future__ import annotations

import json
import re
import unicodedata

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from jobctl.durations import format_duration, to_rfc3339
from jobctl.models import Event, Job

MASK = "***"
STATUS_STYLE = {
    "pending": "cyan", "running": "yellow", "cancel_requested": "magenta", "completed": "green",
    "buried": "bold red", "cancelled": "dim",
}


def console(stderr: bool = False, width: int | None = None) -> Console:
    """markup=False and highlight=False: user data such as `[red]` is never read as markup."""
    return Console(stderr=stderr, markup=False, highlight=False, emoji=False, width=width)


def _escape_char(ch: str) -> str:
    if ch in "\n\t":
        return " "
    cp = ord(ch)
    return f"\\x{cp:02x}" if cp <= 0xFF else f"\\u{cp:04x}"


def safe(value) -> str:
    """Text with control (Cc) and format (Cf: bidi overrides, zero-width) characters escaped."""
    s = "" if value is None else str(value)
    if s.isprintable():
        return s
    return "".join(_escape_char(c) if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp") else c for c in s)


def text(value, style: str | None = None) -> Text:
    return Text(safe(value), style=style or "")


def _secret_matcher(patterns):
    pats = [p.lower() for p in patterns]

    def is_secret(key: str) -> bool:
        k = re.sub(r"[^a-z0-9]", "_", key.lower())
        return any(p in k or p.replace("_", "") in k.replace("_", "") for p in pats)

    return is_secret


def mask(value, patterns, reveal: bool = False):
    """A copy of a JSON value with the values of secret-looking keys replaced by ***."""
    if reveal:
        return value
    is_secret = _secret_matcher(patterns)

    def walk(v):
        if isinstance(v, dict):
            return {k: (MASK if is_secret(str(k)) else walk(x)) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    return walk(value)


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


def jobs_table(jobs: list[Job], now: int, patterns, reveal: bool = False) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for name, kw in (("ID", {"justify": "right"}), ("STATUS", {}), ("QUEUE", {}), ("TYPE", {}),
                     ("PRI", {"justify": "right"}), ("RUNS", {"justify": "right"}), ("RUN AT", {}),
                     ("UPDATED", {}), ("PAYLOAD / ERROR", {"overflow": "ellipsis", "no_wrap": True, "ratio": 1})):
        table.add_column(name, **kw)
    for j in jobs:
        detail = j.error if j.status in ("buried",) or (j.status == "pending" and j.error) else None
        table.add_row(
            str(j.id), status_text(j, now), text(j.queue), text(j.type), str(j.priority),
            f"{j.attempts}/{j.max_attempts}", ago(j.run_at, now) if j.status == "pending" else "-",
            ago(j.updated_at, now),
            text(detail, "red") if detail else text(masked_text(j.payload, patterns, reveal, limit=200)),
        )
    return table


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
        history.add_column(name, overflow="fold" if name == "MESSAGE" else None)
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
    return table
