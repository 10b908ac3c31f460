"""The typer app, its global options, and what every command shares.

Command modules register on `app`. They import only what their command needs, inside the
command: the hot commands (enqueue, claim, complete, fail, heartbeat) must start without rich
or sqlite-utils.
"""

from __future__ import annotations

import json
import sys
from typing import Optional

import typer

from jobctl import __version__
from jobctl.cli.state import State

app = typer.Typer(
    name="jobctl",
    help="An operator tool for a persistent job queue kept in a SQLite file or a PostgreSQL database.",
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    context_settings={"help_option_names": ["--help", "-h"]},
    rich_markup_mode=None,
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
