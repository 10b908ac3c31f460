"""The typer app, its global options, and what every command shares.

Command modules register on `app`. They import only what their command needs, inside the
command: the hot commands (enqueue, claim, complete, fail, heartbeat) must start without rich
or sqlite-utils.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Optional

import typer

from jobctl import __version__

if TYPE_CHECKING:
    from jobctl.config import Settings

app = typer.Typer(
    name="jobctl",
    help="An operator tool for a persistent job queue kept in one SQLite file.",
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    context_settings={"help_option_names": ["--help", "-h"]},
    rich_markup_mode=None,
)


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

            self._settings = load_settings(self.config)
            for note in self._settings.notes:  # a config of an older jobctl: still works, says what moved
                sys.stderr.write(f"jobctl: note: {note}\n")
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


def state(ctx: typer.Context) -> State:
    return ctx.find_root().obj


def emit(line: str = "") -> None:
    sys.stdout.write(line + "\n")


def emit_json(obj) -> None:
    """Compact JSON, one object per line; payloads exactly as enqueued (never masked)."""
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n")


def _version(value: bool) -> None:
    if value:
        emit(f"jobctl {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    db: Optional[str] = typer.Option(None, "--db", metavar="PATH|URL", help="The database: a SQLite file path (or sqlite:///PATH), or postgresql://... (else JOBCTL_DB, the config's db, or ~/.local/share/jobctl/jobctl.db)."),
    config: Optional[str] = typer.Option(None, "--config", metavar="PATH", help="The config file (else JOBCTL_CONFIG, ./jobctl.toml, ~/.config/jobctl/config.toml)."),
    busy_timeout: Optional[str] = typer.Option(None, "--busy-timeout", metavar="DUR", help="How long to wait for another process's write lock (default 5s, JOBCTL_BUSY_TIMEOUT)."),
    allow_network_fs: bool = typer.Option(False, "--allow-network-fs", help="Use a database on NFS/SMB/sshfs anyway (SQLite locking is unsafe there)."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
):
    """jobctl: a persistent job queue in one SQLite file.

    Example: jobctl enqueue send-invoice '{"order": 42}'
    """
    ctx.obj = State(db=db, config=config, busy_timeout=busy_timeout, allow_network_fs=allow_network_fs)
