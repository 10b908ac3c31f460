"""The command line. Errors are turned into one `jobctl: error: ...` line and an exit code here,
and only here; JOBCTL_DEBUG=1 shows the traceback instead."""

from __future__ import annotations

import os
import sys

from jobctl.cli.app import app
from jobctl.cli import admin, jobs, views  # noqa: F401  (they register their commands on app)
from jobctl.errors import JobctlError

for _optional in ("jobctl.cli.work", "jobctl.cli.config_cmd", "jobctl.cli.stats"):
    # Command groups that live in their own modules; each registers itself on import.
    try:
        __import__(_optional)
    except ModuleNotFoundError as e:
        if e.name != _optional:
            raise


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"jobctl: error: {message}\n")
    return code


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code (no sys.exit), for main() and tests alike."""
    from typer import Abort, Exit
    from typer._click.exceptions import ClickException, UsageError

    debug = os.environ.get("JOBCTL_DEBUG") == "1"
    if os.environ.get("_JOBCTL_COMPLETE"):  # a TAB in a shell that sourced completions/
        from jobctl.completion import register_shells

        register_shells()
    try:
        # Without standalone mode, a `raise typer.Exit(code)` in a command comes back as the
        # return value (commands themselves return None).
        rv = app(args=argv, prog_name="jobctl", standalone_mode=False)
        return rv if isinstance(rv, int) and not isinstance(rv, bool) else 0
    except Exit as e:
        return e.exit_code
    except JobctlError as e:
        if debug:
            raise
        return _fail(e.message, e.exit_code)
    except UsageError as e:
        hint = f"; see `{e.ctx.command_path} --help`" if e.ctx is not None else ""
        return _fail(" ".join(e.format_message().split()) + hint, 2)
    except ClickException as e:
        return _fail(" ".join(e.format_message().split()), e.exit_code)
    except (Abort, KeyboardInterrupt):
        return _fail("interrupted", 130)
    except BrokenPipeError:
        # The reader went away (`jobctl list | head`): not an error worth a traceback.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except Exception as e:  # the one place an unexpected error becomes one line
        if debug:
            raise
        return _fail(f"unexpected internal error: {type(e).__name__}: {e}; rerun with JOBCTL_DEBUG=1 for details", 1)


def main() -> None:
    code = run()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    sys.exit(code)
