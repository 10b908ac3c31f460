"""The command line. Errors are turned into one `jobctl: error: ...` line and an exit code here,
and only here; JOBCTL_DEBUG=1 shows the traceback instead."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from typing import TYPE_CHECKING

from jobctl.errors import JobctlError

if TYPE_CHECKING:
    from typer import Typer


def typer_app() -> "Typer":
    """The typer app with every command registered (imported on first use: a plain `work` runs
    without typer, see fast.py)."""
    from jobctl.cli.app import app
    # Import order is the order of `jobctl --help`: the job lifecycle first, then views, then the file.
    from jobctl.cli import jobs, foreground, work, views, workers, logs, stats, top, admin, config_cmd  # noqa: F401,I001  (each registers its commands)

    return app


_said = [0]  # error lines written by _fail


@contextlib.contextmanager
def sigint_handler(handler, *, replaces):
    """`handler` answers SIGINT (Ctrl-C) while the block runs; then the handler before it again.
    Only the main thread may set a signal's handler, so elsewhere (a command run from a thread)
    nothing is installed; nor when replaces(the handler in place) is false. Yields whether it
    was installed. Shared by `_ctrl_c_noticed` and filters' `_ctrl_c_between_transactions`."""
    import signal
    import threading

    before = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not replaces(before):
        yield False
        return
    signal.signal(signal.SIGINT, handler)
    try:
        yield True
    finally:
        signal.signal(signal.SIGINT, before)


@contextlib.contextmanager
def _ctrl_c_noticed():
    """A list that gets an item when Ctrl-C (SIGINT) raised KeyboardInterrupt through Python's own
    handler (not a command's: `run` passes it to its handler, the worker stops by it)."""
    import signal

    seen: list[bool] = []

    def on_sigint(signum, frame):
        seen.append(True)
        raise KeyboardInterrupt

    with sigint_handler(on_sigint, replaces=lambda before: before is signal.default_int_handler):
        yield seen


def _fail(message: str, code: int) -> int:
    """Print an error: every error line of the CLI is written here."""
    from jobctl.untrusted import safe

    _said[0] += 1

    # One line, always: a path or a value with a newline in it must not split the message; and
    # inert: terminal escapes, C1 and bidi controls from paths, keys or values are shown escaped.
    one_line = safe(message.replace("\r", "\\r").replace("\n", "\\n"))
    sys.stderr.write(f"jobctl: error: {one_line}\n")
    return code


_GLOBAL_OPTIONS_WITH_VALUE = {"--db", "--config", "--busy-timeout"}


def _only_the_command_run(argv: list[str]):
    """The registered command that argv runs, alone; None to keep them all (help, unknown names).

    typer turns every registered command into a click command on every call, which cost ~6 ms of
    each one-shot `enqueue`/`claim`/`complete` here (bench/run.py, enqueue workload); building only
    the command being run leaves its parsing, help and errors exactly as they were.
    """
    from typer.main import get_command_name

    app = typer_app()
    args = iter(argv)
    for arg in args:
        if arg in _GLOBAL_OPTIONS_WITH_VALUE:
            next(args, None)
        elif not arg.startswith("-"):
            found = [c for c in app.registered_commands
                     if get_command_name(c.name or c.callback.__name__) == arg]  # type: ignore[union-attr]
            if found:
                return found, []
            groups = [g for g in app.registered_groups if g.name == arg]  # `workers`: the group alone
            return ([], groups) if groups else None
    return None


_GLOBAL_FLAGS = {"--allow-network-fs", "--version"}


def _global_option_hint(e, argv: list[str]) -> str | None:
    """For a global option given after the command (`jobctl list --db x`): where to put it."""
    name = e.option_name
    if e.ctx is None or e.ctx.parent is None or name not in _GLOBAL_OPTIONS_WITH_VALUE | _GLOBAL_FLAGS:
        return None
    import shlex

    path = e.ctx.command_path.split()[1:]  # the command (and subcommand) words after `jobctl`
    moved, rest, args = [], [], iter(argv)
    for arg in args:
        if arg == name or arg.startswith(name + "="):
            moved.append(arg)
            if name in _GLOBAL_OPTIONS_WITH_VALUE and "=" not in arg:
                value = next(args, None)
                if value is not None:
                    moved.append(value)
        else:
            rest.append(arg)
    # Keep any global options already before the command where they were.
    first = next((i for i, a in enumerate(rest) if a == path[0]), 0) if path else 0
    fixed = ["jobctl", *rest[:first], *moved, *rest[first:]]
    return (f"{name} is a global option: put it before the command: "
            f"{' '.join(shlex.quote(a) for a in fixed)}")


def _usage_error(e) -> str:
    """A usage error of the command line in jobctl's words, ending with where to read more:
    `no such command 'enqeue'; did you mean 'enqueue'? See `jobctl --help``, `missing argument ID;
    see `jobctl show --help``, `invalid --limit 'abc': must be a whole number from 0 to 1,000,000`."""
    import re

    from typer._click.exceptions import BadParameter, MissingParameter, NoSuchOption
    from typer._click.types import FloatParamType, IntParamType

    param = getattr(e, "param", None)
    name = None
    if param is not None:
        # an argument by its name alone: `invalid ID 'abc'`, not the usage line's `[ID...]`
        name = (max(param.opts, key=len) if param.param_type_name == "option"
                else param.human_readable_name.strip("[]").removesuffix("..."))
    if isinstance(e, NoSuchOption):
        text = f"no such option {e.option_name}"
        if e.possibilities:
            text += f"; did you mean {' or '.join(sorted(e.possibilities))}?"
    elif isinstance(e, MissingParameter) and param is not None:
        text = f"missing {param.param_type_name} {name}"
    elif isinstance(e, BadParameter) and param is not None:
        text = f"invalid {name}: {_sentences(e.message)}"
        m = re.fullmatch(r"(.+?) is not (?:a valid .+|in the range .+)\.?", " ".join(e.message.split()))
        if m and isinstance(param.type, (IntParamType, FloatParamType)):
            from jobctl.cli.app import readable_number

            whole = isinstance(param.type, IntParamType)
            low, high = getattr(param.type, "min", None), getattr(param.type, "max", None)
            span = (f" from {readable_number(low)} to {readable_number(high)}" if low is not None and high is not None else
                    f" of at least {readable_number(low)}" if low is not None else
                    f" of at most {readable_number(high)}" if high is not None else "")
            text = f"invalid {name} {m.group(1)}: must be {'a whole number' if whole else 'a number'}{span}"
    else:
        message = " ".join(e.format_message().split())
        m = re.fullmatch(r"Got unexpected extra argument\(s\) \((.*)\)", message)
        text = f"unexpected extra argument(s): {m.group(1)}" if m else _sentences(message)
    if e.ctx is None:
        return text
    see = f"`{e.ctx.command_path} --help`"
    return f"{text} See {see}" if text.endswith("?") else f"{text}; see {see}"


def _sentences(message: str) -> str:
    """click's sentences as one jobctl phrase: `No such command 'x'. Did you mean 'y'?` becomes
    `no such command 'x'; did you mean 'y'?`."""
    import re

    parts = [p for p in re.split(r"(?<=[.?])\s+", " ".join(message.split())) if p]
    out = []
    for part in parts:
        part = part[:-1] if part.endswith(".") else part
        out.append(part[:1].lower() + part[1:] if part[1:2].islower() or part[1:2] == " " else part)
    return "; ".join(out)


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code (no sys.exit), for main() and tests alike."""
    from typer import Abort, Exit
    from typer._click.exceptions import ClickException, NoArgsIsHelpError, NoSuchOption, UsageError

    debug = os.environ.get("JOBCTL_DEBUG") == "1"
    app = typer_app()
    commands, groups = app.registered_commands, app.registered_groups
    if os.environ.get("_JOBCTL_COMPLETE"):  # a TAB in a shell that sourced completions/: every command
        from jobctl.completion import register_shells

        register_shells()
        only = None
    else:
        only = _only_the_command_run(sys.argv[1:] if argv is None else list(argv))
    if only:
        app.registered_commands, app.registered_groups = only
    try:
        # Without standalone mode, a `raise typer.Exit(code)` in a command comes back as the
        # return value (commands themselves return None).
        with _ctrl_c_noticed() as ctrl_c:
            said = _said[0]
            rv = app(args=argv, prog_name="jobctl", standalone_mode=False)
        if rv == 130 and ctrl_c and _said[0] == said:  # typer's silent answer to a Ctrl-C no command caught
            return _fail("interrupted", 130)
        return rv if isinstance(rv, int) and not isinstance(rv, bool) else 0
    except Exit as e:
        return e.exit_code
    except NoArgsIsHelpError as e:
        # `jobctl` alone: its help, a success (like git). A group alone (`jobctl config`): its usage
        # and subcommands on stderr, and the usage error's exit code: a script that forgot the
        # subcommand did not do what it meant.
        if e.ctx is None or e.ctx.parent is None:
            sys.stdout.write(e.format_message().rstrip("\n") + "\n")
            return 0
        sys.stderr.write(e.format_message().rstrip("\n") + "\n")
        return 2
    except NoSuchOption as e:
        hint = _global_option_hint(e, sys.argv[1:] if argv is None else list(argv))
        if hint:
            return _fail(hint, 2)
        return _fail(_usage_error(e), 2)
    except UsageError as e:
        return _fail(_usage_error(e), 2)
    except ClickException as e:
        return _fail(" ".join(e.format_message().split()), e.exit_code)
    except Abort:
        return _fail("interrupted", 130)
    except SystemExit as e:
        # typer turns a broken pipe met in a command into exit 1; it is the reader going away
        # (`jobctl list --json | head -1`), which _common_error answers.
        if isinstance(e.__context__, BrokenPipeError):
            return _common_error(e.__context__, debug) or 0
        raise
    except BaseException as e:
        code = _common_error(e, debug)
        if code is None:
            raise
        return code
    finally:
        app.registered_commands, app.registered_groups = commands, groups


def _common_error(e: BaseException, debug: bool) -> int | None:
    """The exit code of an error that is not typer's (printed as one line); None: re-raise it."""
    if isinstance(e, JobctlError):
        return None if debug else _fail(e.message, e.exit_code)
    if isinstance(e, KeyboardInterrupt):
        return _fail("interrupted", 130)
    if isinstance(e, BrokenPipeError):
        # The reader went away (`jobctl list | head`): not an error worth a traceback.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    if (isinstance(e, OSError) and e.filename is None and e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO)
            and not debug):
        # Writing the answer failed (stdout on a full disk): what the command changed stays changed.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return _fail(f"cannot write to standard output: {e.strerror}; any change the command made was kept "
                     "(`jobctl list` shows the jobs)", 1)
    if isinstance(e, UnicodeEncodeError) and e.reason == "surrogates not allowed" and not debug:
        # Bytes that are not UTF-8 in an argument (the shell passes them as they are): a database
        # takes only text; the statement was refused before it ran.
        from jobctl.untrusted import safe

        bad = e.object[e.start:e.end] if isinstance(e.object, str) else ""
        return _fail(f"invalid input: a value given is not UTF-8 text (it holds {safe(bad)}); nothing changed; "
                     "give it as UTF-8", 2)
    if isinstance(e, Exception) and not debug:  # the one place an unexpected error becomes one line
        return _fail(f"unexpected internal error: {type(e).__name__}: {e}; rerun with JOBCTL_DEBUG=1 for details", 1)
    return None


def _fast_work(argv: list[str]) -> int | None:
    """A plain `jobctl ... work ...` command line, run without loading typer (fast.py); None when
    argv is anything else, for typer to run."""
    if os.environ.get("_JOBCTL_COMPLETE"):
        return None
    from jobctl.cli import fast

    parsed = fast.parse_work(argv)
    if parsed is None:
        return None
    st, args = parsed
    try:
        return fast.start_worker(st, **args)
    except BaseException as e:
        code = _common_error(e, os.environ.get("JOBCTL_DEBUG") == "1")
        if code is None:
            raise
        return code


def main() -> None:
    # Started with stdout or stderr closed (`jobctl enqueue t >&-`): Python leaves it None; the
    # caller wants no output there, as with > /dev/null.
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w"))
    code = _fast_work(sys.argv[1:])
    if code is None:
        code = run()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    except OSError as e:  # the last of the answer could not be written (a full disk): said, as in run()
        code = _common_error(e, False) or 1
        sys.stdout = open(os.devnull, "w")  # (so that the interpreter's own flush at exit is quiet)
    sys.exit(code)
