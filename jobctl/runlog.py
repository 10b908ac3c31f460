"""A run's stored output as text: the kept head and tail, and a marker line where bytes were
dropped between them. Pure functions (no rich): `logs`, `show` and the tests use them."""

from __future__ import annotations

import re

from jobctl.untrusted import mask_text, safe

_CLAIM_MESSAGE = re.compile(r"run (\d+) of \d+")


def claim_attempts(events) -> list[tuple[int, int]]:
    """(claimed at, run number) of each start in a job's history of (at, from, to, message),
    oldest first. The number is the attempt the claim's event names ("run 3 of 5": the job's
    attempts after that claim, what the worker and JOBCTL_ATTEMPT call the run), else the count
    of starts so far. `show`, `logs --run N` and the worker number runs alike with it."""
    starts: list[tuple[int, int]] = []
    for at, from_status, to_status, message in events:
        if from_status == "pending" and to_status == "running":
            starts.append((at, run_number(message, len(starts) + 1)))
    return starts


def run_number(claim_message: str | None, fallback: int) -> int:
    """The run a claim's event names ("run 3 of 5" -> 3), else `fallback`."""
    m = _CLAIM_MESSAGE.fullmatch(claim_message or "")
    return int(m.group(1)) if m else fallback


def marker(dropped: int) -> bytes:
    return f"[jobctl: {dropped:,} bytes of output dropped here]\n".encode()


def since(log, printed: int, at_line_start: bool = True) -> tuple[bytes, int]:
    """The bytes of `log` (a RunLog) after the first `printed` bytes of the run's whole output,
    with a marker line for those no longer kept; and the new `printed`. The whole text: since(log, 0)."""
    head, tail = log.head, log.tail
    out = bytearray()
    if printed < len(head):
        out += head[printed:]
        printed = len(head)
    tail_start = len(head) + log.dropped
    if printed < tail_start:
        if out:
            at_line_start = out.endswith(b"\n")
        if not at_line_start:
            out += b"\n"
        out += marker(tail_start - printed)
        printed = tail_start
    out += tail[printed - tail_start:]
    return bytes(out), tail_start + len(tail)


def text(log) -> str:
    """The run's output as stored, the marker included, decoded (bad UTF-8 replaced)."""
    return since(log, 0)[0].decode("utf-8", errors="replace")


def human_lines(data: str, patterns, reveal: bool = False) -> list[str]:
    """Lines for a terminal: control characters escaped, secret-looking key=value pairs masked."""
    if not data:
        return []
    lines = data.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [safe(mask_text(line, patterns, reveal)) for line in lines]


def last_lines(log, n: int, patterns, reveal: bool = False) -> list[str]:
    """The last n non-empty lines of a run's output, for a terminal."""
    tail = log.tail if log.tail else log.head
    lines = [line for line in human_lines(tail[-16384:].decode("utf-8", errors="replace"), patterns, reveal)
             if line.strip()]
    return lines[-n:]
