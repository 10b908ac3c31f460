"""The typer app, its global options, and what every command shares.

Command modules register on `app`. They import only what their command needs, inside the
command: the hot commands (enqueue, claim, complete, fail, heartbeat) must start without rich
or sqlite-utils.
"""

from __future__ import annotations

import json
import sys
from typing import Optional

import re

import typer
from typer._click.core import Context
from typer._click.formatting import HelpFormatter
from typer._click.types import FloatParamType, IntParamType
from typer.core import TyperArgument, TyperGroup, TyperOption

from jobctl import __version__
from jobctl.cli.state import State


# -- help in jobctl's words ------------------------------------------------------------------------
# typer shows an option's type where a name is expected (`--queue <str>`, `--limit <int range>`),
# a required argument in braces (`show {ID}`), and adds `[default: 10; 1<=x<=1000]` after a help
# text that already says "(default 10)". Every command is put right here, once, as the app is
# built, rather than option by option: a new option reads well without anyone remembering to.

METAVARS = {"status": "STATE"}  # an option whose value is better named otherwise than by its own name


def _metavar(p) -> str:
    """A name for an option's value: N for a number, else the option's own name (QUEUE, TYPE)."""
    if isinstance(p.type, (IntParamType, FloatParamType)):
        return "N"
    name = max(p.opts, key=len).lstrip("-")
    return METAVARS.get(name, name.upper().replace("-", "_"))


def readable_number(value) -> str:
    return f"{value:,}" if isinstance(value, int) and abs(value) >= 10_000 else str(value)


def _extras(p, extra: str) -> str:
    """typer's `[default: X; 1<=x<=1000; required]` in words: the default only where the help text
    does not already give it (never a flag's), the range as `1 to 1000`."""
    said = "default" in (p.help or "").lower() or getattr(p, "is_flag", False)
    words = []
    for item in extra.split("; "):
        if item.startswith("default: "):
            if not said:
                words.append("default " + item[len("default: "):])
        elif re.fullmatch(r"\S*x\S*", item):
            t = p.type
            low = None if t.min is None else readable_number(t.min)
            high = None if t.max is None else readable_number(t.max)
            words.append(f"{low} to {high}" if low is not None and high is not None else
                         f"at least {low}" if low is not None else f"at most {high}")
        else:
            words.append(item)
    return f"  [{'; '.join(words)}]" if words else ""


class _Option(TyperOption):
    def get_help_record(self, ctx):
        record = super().get_help_record(ctx)
        if record is None:
            return None
        names, text = record
        own = self.help or ""
        if text.startswith(own) and text[len(own):].lstrip().startswith("["):
            text = own + _extras(self, text[len(own):].strip()[1:-1])
        return names, text


class _Argument(TyperArgument):
    def get_help_record(self, ctx):
        record = super().get_help_record(ctx)
        if record is None:
            return None
        names, text = record  # the usage line already tells a required argument from an optional one
        return names, text.removesuffix("  [required]").removesuffix("[required]")

    def make_metavar(self, ctx, *, usage: bool = False) -> str:
        """ID, ID... or [PAYLOAD]: as a man page writes them (typer: {ID}, ID:<int>)."""
        var = self.metavar or ((self.name or "").upper() + ("..." if self.nargs != 1 else ""))
        if usage and not self.required and not var.startswith("["):
            var = f"[{var}]"
        return var


class _HelpFormatter(HelpFormatter):
    """click's, except that a line never ends inside a word at a hyphen: `--max-ready-age` and
    `run-at` stay whole, as an operator will type them (click cuts them as `--max-ready-` / `age`)."""

    def _whole(self, write, *args, **kwargs) -> None:
        start = len(self.buffer)
        write(*args, **kwargs)
        self.buffer[start:] = [part.replace(_HYPHEN, "-") for part in self.buffer[start:]]

    def write_text(self, text: str) -> None:
        self._whole(super().write_text, text.replace("-", _HYPHEN))

    def write_dl(self, rows, *args, **kwargs) -> None:
        rows = [(first.replace("-", _HYPHEN), second.replace("-", _HYPHEN)) for first, second in rows]
        self._whole(super().write_dl, rows, *args, **kwargs)


_HYPHEN = "\x00"  # stands for "-" while a text is wrapped: one column wide, and no place to cut a line


class _Context(Context):
    formatter_class = _HelpFormatter


def readable(command) -> None:
    """Every option and argument of `command` and of its sub-commands, as jobctl's help shows them."""
    command.context_class = _Context
    for p in command.params:
        if isinstance(p, TyperOption) and not isinstance(p, _Option):
            if p.metavar is None and not p.is_flag and not p.count:
                p.metavar = _metavar(p)
            p.__class__ = _Option
        elif isinstance(p, TyperArgument) and not isinstance(p, _Argument):
            p.__class__ = _Argument
    for sub in getattr(command, "commands", {}).values():
        readable(sub)


class JobctlGroup(TyperGroup):
    """The root command: made readable (above) as it is built, with every command under it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        readable(self)


app = typer.Typer(
    name="jobctl",
    cls=JobctlGroup,
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
    db: Optional[str] = typer.Option(None, "--db", metavar="PATH|URL", help="The database: a SQLite file path (or sqlite:///PATH), or postgresql://... (else JOBCTL_DB, the config's db, or ~/.local/share/jobctl/jobctl.db: in $XDG_DATA_HOME when set)."),
    config: Optional[str] = typer.Option(None, "--config", metavar="PATH", help="The config file (else JOBCTL_CONFIG, ./jobctl.toml, ~/.config/jobctl/config.toml: in $XDG_CONFIG_HOME when set)."),
    busy_timeout: Optional[str] = typer.Option(None, "--busy-timeout", metavar="DUR", help="How long to wait for another process's write lock (default 5s, JOBCTL_BUSY_TIMEOUT)."),
    allow_network_fs: bool = typer.Option(False, "--allow-network-fs", help="Use a database on NFS/SMB/sshfs anyway (SQLite locking is unsafe there)."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
):
    """jobctl: a persistent job queue in one SQLite file.

    Example: jobctl enqueue send-invoice '{"order": 42}'
    """
    ctx.obj = State(db=db, config=config, busy_timeout=busy_timeout, allow_network_fs=allow_network_fs)
