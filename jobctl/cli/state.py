"""The global options and what they lead to, without typer: shared by the typer app and the
`work` command's start without it (jobctl/cli/fast.py)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobctl.config import Settings


class State:
    """The global options, and the settings and queue they lead to (opened on first use).

    A plain class, not a dataclass: importing dataclasses costs every one-shot command ~1 ms."""

    def __init__(self, db: str | None = None, config: str | None = None, busy_timeout: str | None = None,
                 allow_network_fs: bool = False):
        self.db = db
        self.config = config
        self.busy_timeout = busy_timeout
        self.allow_network_fs = allow_network_fs
        self._settings: Settings | None = None

    @property
    def settings(self):
        if self._settings is None:
            from jobctl.config import load_settings

            self._settings = load_settings(self.config)  # (its notes: said by `config show` alone)
        return self._settings

    def db_path(self):
        from jobctl.config import resolve_db_path

        return resolve_db_path(self.db, self.settings)[0]

    def open_queue(self, *, create: bool = False):
        """Open the queue; only init, enqueue and work pass create=True, so a typo never looks like an empty queue."""
        from jobctl.config import resolve_busy_timeout
        from jobctl.engines import POSTGRES_SCHEMES, scheme_of
        from jobctl.queue import Queue

        db = self.db_path()
        return Queue.open(
            db, self.settings, create=create,
            busy_timeout=resolve_busy_timeout(self.busy_timeout, self.settings,
                                              server=scheme_of(db) in POSTGRES_SCHEMES),
            allow_network_fs=True if self.allow_network_fs else None,  # else the config's [sqlite] says
        )


def tell(line: str) -> None:
    """A one-line confirmation of what a command did, for a person: on stderr, and only when stderr
    is a terminal. stdout keeps what scripts read (an id, a state, a count, or nothing), so a
    script's output never changes with it and cron mails nothing."""
    try:
        if not sys.stderr.isatty():
            return
    except (AttributeError, ValueError):
        return
    from jobctl.untrusted import safe

    sys.stderr.write(safe(line) + "\n")
