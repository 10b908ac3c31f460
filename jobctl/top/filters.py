"""The `/` filter of `jobctl top`, in the words of the command line's filters: `type:send-email
error:timeout since:1h` means `--type send-email --error timeout --since 1h`.

A word given twice ORs its values (`type:a type:b`), different words AND, as on the command line.
Pure: no Textual, no database. Words the view cannot apply yet (payload, worker, key, before,
min-attempts: they come with the shared filters of the command line) are refused with that reason,
never silently ignored, so a filter never shows more than it says.
"""

from __future__ import annotations

from jobctl.durations import parse_duration, parse_time, validate_name
from jobctl.errors import InvalidInput
from jobctl.models import Job

WORDS = ("queue", "type", "status", "error", "since")
LATER = ("payload", "worker", "key", "before", "min-attempts")  # the command line's, not applied here yet
# What `status:` accepts: the states, and the views of a pending job.
STATUSES = ("pending", "ready", "scheduled", "blocked", "held", "running", "cancel_requested", "buried",
            "completed", "cancelled")


class Filter:
    """What the view shows: each field a list of accepted values (empty: any)."""

    def __init__(self, queues=(), types=(), statuses=(), errors=(), since_s: float | None = None,
                 since_at: int | None = None, text: str = ""):
        self.queues = list(queues)
        self.types = list(types)
        self.statuses = list(statuses)
        self.errors = list(errors)
        self.since_s = since_s  # a duration: "that long ago", from the database's now
        self.since_at = since_at  # a time, ms
        self.text = text

    def __bool__(self) -> bool:
        return bool(self.queues or self.types or self.statuses or self.errors or self.since_s is not None
                    or self.since_at is not None)

    def __eq__(self, other) -> bool:
        return isinstance(other, Filter) and vars(self) == vars(other)

    def __repr__(self) -> str:
        return f"Filter({self.text!r})"

    def since_ms(self, now: int) -> int | None:
        """The earliest `updated_at` (ms) the filter keeps, or None."""
        if self.since_at is not None:
            return self.since_at
        if self.since_s is not None:
            return now - int(self.since_s * 1000)
        return None

    def keeps_group(self, queue: str, type: str, error: str | None, latest_at: int | None, now: int) -> bool:
        """Whether a group of buried jobs (one queue, type and error) matches."""
        if self.queues and queue not in self.queues:
            return False
        if self.types and type not in self.types:
            return False
        if self.statuses and "buried" not in self.statuses:
            return False
        if self.errors and not any(e.lower() in (error or "").lower() for e in self.errors):
            return False
        since = self.since_ms(now)
        return since is None or (latest_at is not None and latest_at >= since)

    def keeps(self, job: Job, now: int, shown_as: str | None = None) -> bool:
        """Whether a job matches; shown_as: the view it is listed under (ready, scheduled, ...)."""
        return self.keeps_values(job.queue, job.type, job.status, job.error, job.updated_at, now, shown_as)

    def keeps_values(self, queue: str, type: str, status: str, error: str | None, updated_at: int, now: int,
                     shown_as: str | None = None) -> bool:
        if self.queues and queue not in self.queues:
            return False
        if self.types and type not in self.types:
            return False
        if self.statuses and status not in self.statuses and (shown_as or status) not in self.statuses:
            return False
        if self.errors and not any(e.lower() in (error or "").lower() for e in self.errors):
            return False
        since = self.since_ms(now)
        return since is None or updated_at >= since

    def only(self, key: str) -> str | None:
        """The one value of `queues` or `types`, when exactly one is given."""
        values = getattr(self, key)
        return values[0] if len(values) == 1 else None


def parse(text: str) -> Filter:
    """`type:send-email error:timeout since:1h` to a Filter; InvalidInput names the word at fault."""
    f = Filter(text=" ".join(text.split()))
    for word in text.split():
        key, sep, value = word.partition(":")
        key = key.lower()
        if not sep or not value:
            if key in WORDS or key in LATER:
                raise InvalidInput(f"{word}: give a value, as in {key}:VALUE")
            # a bare word: an error text (the most common search), as `error:` would
            f.errors.append(word)
            continue
        if key in LATER:
            raise InvalidInput(f"{key}: is not available in this view yet; use queue, type, status, error or since")
        if key not in WORDS:
            raise InvalidInput(f"unknown filter word {key!r}; use {', '.join(w + ':' for w in WORDS)}")
        if key == "queue":
            f.queues.append(validate_name(value, "queue"))
        elif key == "type":
            f.types.append(validate_name(value, "type"))
        elif key == "status":
            if value not in STATUSES:
                raise InvalidInput(f"invalid status {value!r}: use one of {', '.join(STATUSES)}")
            f.statuses.append(value)
        elif key == "error":
            f.errors.append(value)
        elif key == "since":
            if f.since_s is not None or f.since_at is not None:
                raise InvalidInput("since: given twice; give it once")
            try:
                f.since_s = parse_duration(value, what="since:")
            except InvalidInput:
                try:
                    f.since_at = parse_time(value)
                except (InvalidInput, ValueError):
                    raise InvalidInput(f"since:{value}: give a duration (1h, 30m) or a time (2026-12-01T10:00)") from None
    return f
