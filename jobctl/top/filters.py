"""The `/` filter of `jobctl top`, in the words of the command line's filters: `type:send-email
error:timeout since:1h` is `--type send-email --error timeout --since 1h`. The words are parsed
into the very selection.Selection the command line builds from its options (jobctl.cli.filters.
selection, with its checks and its messages), and the view reads its tabs through it: the jobs a
filter shows are those `jobctl list` lists with the same options, and those `R` retries are those
`jobctl retry` retries.

A word given twice ORs its values (`type:a type:b`), different words AND, as on the command line.
No Textual, no database.
"""

from __future__ import annotations

from jobctl.errors import InvalidInput
from jobctl.selection import STATUSES, VIEWS, WAITING, Selection

# word -> the command line's option it stands for (the argument of jobctl.cli.filters.selection)
WORDS = {"queue": "queue", "type": "type", "status": "status", "error": "error", "payload": "payload",
         "worker": "worker", "key": "key", "since": "since", "before": "before", "min-attempts": "min_attempts"}
ONCE = ("since", "before", "min-attempts")  # given once, as on the command line


class Filter:
    """The filter in force: the Selection the words make (empty: no filter), the words as typed
    (`text`, to edit them) and as shown (`shown`: a secret-looking key's value masked, as job data is)."""

    def __init__(self, selection: Selection | None = None, text: str = "", shown: str | None = None):
        self.selection = selection if selection is not None else Selection()
        self.text = text
        self.shown = text if shown is None else shown

    def __bool__(self) -> bool:
        return not self.selection.empty

    def __eq__(self, other) -> bool:
        return isinstance(other, Filter) and self.text == other.text and self.selection == other.selection

    def __repr__(self) -> str:
        return f"Filter({self.text!r})"

    @property
    def queues(self) -> list[str]:
        return self.selection.queues

    def only(self, key: str) -> str | None:
        """The one value of `queues` or `types`, when exactly one is given."""
        values = getattr(self.selection, key)
        return values[0] if len(values) == 1 else None

    def within(self, statuses: list[str], **narrower) -> Selection | None:
        """The filter ANDed with a tab's states (`statuses`, ORed), and with `narrower` fields
        (queues=[Q]: replacing the filter's own, which they must lie within): a new Selection, or
        None when the filter's own `status:` leaves none of those states (the tab is empty). A
        state is within `status:pending` when it is one of a pending job's views."""
        asked = self.selection.statuses
        kept = [s for s in statuses if not asked or s in asked or (s in (*VIEWS, WAITING) and "pending" in asked)]
        if not kept:
            return None
        fields = {name: getattr(self.selection, name) for name in Selection.__slots__}
        fields.update(narrower, statuses=kept)
        return Selection(**fields)


def parse(text: str, patterns=()) -> Filter:
    """`type:send-email error:timeout since:1h` to a Filter; InvalidInput names the word at fault.
    A bare word is an error text (the most common search), as `error:` would be. `patterns`: the
    secret-looking keys, whose values the filter as shown masks (`payload:password=***`)."""
    from jobctl.cli.filters import selection  # (the command line's own: its checks, its messages)
    from jobctl.untrusted import mask_text

    words = " ".join(text.split())
    options: dict = {}  # option -> its values (since, before, min_attempts: the one value)
    for word in text.split():
        key, sep, value = word.partition(":")
        key = key.lower()
        if not sep or not value:
            if key in WORDS:
                raise InvalidInput(f"{word}: give a value, as in {key}:VALUE")
            options.setdefault("error", []).append(word)
            continue
        if key not in WORDS:
            raise InvalidInput(f"unknown filter word {key!r}; use {', '.join(w + ':' for w in WORDS)}")
        if key in ONCE and WORDS[key] in options:
            raise InvalidInput(f"{key}: given twice; give it once")
        options.setdefault(WORDS[key], []).append(value)
    once = {name: options.pop(name)[0] for name in ("since", "before", "min_attempts") if name in options}
    try:
        return Filter(selection(**options, **once), words, mask_text(words, patterns))
    except InvalidInput as e:  # the command line's message, in the filter's words (since:, not --since)
        message = e.message
        for word in sorted(WORDS, key=len, reverse=True):
            message = message.replace(f"--{word}", f"{word}:")
        raise InvalidInput(message) from None


__all__ = ["Filter", "parse", "STATUSES", "WORDS", "WAITING"]
