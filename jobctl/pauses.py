"""Words for pauses (what `pause` set, as `claim`, `show` and `stats` tell it). Light: `claim` uses it."""

from __future__ import annotations

from typing import Sequence

from jobctl.durations import format_duration, to_rfc3339


def until_text(until: int | None, now: int) -> str:
    """` until … (in …)` for a pause that ends by itself; "" for one that lasts until resumed."""
    if until is None:
        return ""
    return f" until {to_rfc3339(until)} (in {format_duration(max(until - now, 0) / 1000)})"


def pauses_in_the_way(pauses: Sequence[tuple[str, str | None, int | None]], queues: Sequence[str] | None,
                      types: Sequence[str] | None, now: int) -> str:
    """For `claim` that found nothing: the pauses of the queues and types it asked for (every type
    pause of the queues named, when no type was), as
    `; queue billing is paused until … (`jobctl resume billing`)`, or ""."""
    found = []
    for queue, type_, until in pauses:
        if queues and queue not in queues:
            continue
        if type_ is None and queues:
            found.append(f"queue {queue} is paused{until_text(until, now)} (`jobctl resume {queue}`)")
        elif type_ is not None and (type_ in types if types else bool(queues)):
            found.append(f"type {type_} is paused in queue {queue}{until_text(until, now)} "
                         f"(`jobctl resume {queue} --type {type_}`)")
    return "".join("; " + f for f in found)
