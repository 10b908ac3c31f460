"""Shell completion: the queue-name callback, and the generator of the scripts in completions/.

    python -m jobctl.completion            # rewrite completions/jobctl.{bash,zsh,fish}
    python -m jobctl.completion --check    # exit 1 when a committed script is stale

The scripts are typer's: each TAB runs `jobctl` with _JOBCTL_COMPLETE set, so commands and options
always match the installed jobctl. This module stays light (no rich, no sqlite-utils): the hot
commands import complete_queue for their --queue options.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

PROG = "jobctl"
COMPLETE_VAR = "_JOBCTL_COMPLETE"
SHELLS = {"bash": "jobctl.bash", "zsh": "_jobctl", "fish": "jobctl.fish"}


def _queue_names(db: str, incomplete: str) -> list[str]:
    from jobctl import engines

    # No waiting on locks, never creating or migrating the file: a TAB must not hang or change anything.
    engine = engines.open(db, busy_timeout=0.2, read_only=True)
    try:
        return [name for name in engine.queue_names() if name.startswith(incomplete)]
    finally:
        engine.close()


def _worker_ids(db: str, incomplete: str) -> list[str]:
    from jobctl import engines

    engine = engines.open(db, busy_timeout=0.2, read_only=True)
    try:
        _now, rows, _held = engine.worker_rows(jobs=False)
        return sorted({r["worker"] for r in rows if r["state"] != "stopped" and r["worker"].startswith(incomplete)})
    finally:
        engine.close()


def complete_worker(ctx, incomplete: str) -> list[str]:
    """Ids of the workers not stopped, from the registry (`jobctl workers`); [] on any problem."""
    return _from_db(ctx, incomplete, _worker_ids)


def complete_queue(ctx, incomplete: str) -> list[str]:
    """Queue names from the database named by --db / JOBCTL_DB / the config; [] on any problem."""
    return _from_db(ctx, incomplete, _queue_names)


def _from_db(ctx, incomplete: str, names) -> list[str]:
    """names(db, incomplete) of the database named by --db / JOBCTL_DB / the config; [] on any problem."""
    try:
        root = ctx.find_root()
        params = root.params or {}
        from jobctl.config import load_settings, resolve_db_path

        settings = load_settings(params.get("config"))
        db = resolve_db_path(params.get("db"), settings)[0]
        from jobctl.engines import scheme_of, sqlite_path

        if scheme_of(db) in (None, "sqlite") and not os.path.isfile(sqlite_path(db)):
            return []
        return names(db, incomplete or "")
    except Exception:  # noqa: BLE001 - completion must stay silent, whatever happens
        return []


def _choices(values, incomplete: str) -> list[str]:
    return [v for v in values if v.startswith(incomplete or "")]


def complete_status(ctx, incomplete: str) -> list[str]:
    from jobctl.models import STATES

    return _choices(STATES, incomplete)


def complete_selection_status(ctx, incomplete: str) -> list[str]:
    """--status of the commands that select jobs: a state, or one of the views."""
    from jobctl.selection import STATUSES

    return _choices(STATUSES, incomplete)


def complete_sort(ctx, incomplete: str) -> list[str]:
    from jobctl.models import LIST_SORTS

    return _choices(LIST_SORTS, incomplete)


def complete_stats_format(ctx, incomplete: str) -> list[str]:
    return _choices(("table", "json", "prometheus"), incomplete)


def complete_stats_by(ctx, incomplete: str) -> list[str]:
    return _choices(("queue", "type"), incomplete)


def complete_priority(ctx, incomplete: str) -> list[str]:
    return _choices(("low", "normal", "high", "critical"), incomplete)


def complete_backoff(ctx, incomplete: str) -> list[str]:
    return _choices(("exponential", "linear", "fixed"), incomplete)


def complete_type(ctx, incomplete: str) -> list[str]:
    """The types of the config's [types] (from --config / JOBCTL_CONFIG / the usual places)."""
    try:
        from jobctl.config import load_settings

        settings = load_settings((ctx.find_root().params or {}).get("config"))
        return _choices(sorted(settings.types), incomplete)
    except Exception:  # noqa: BLE001 - completion must stay silent, whatever happens
        return []


def register_shells() -> None:
    """Teach the app's click the bash, zsh and fish protocols (typer does this only for apps built
    with add_completion=True, which would add --install-completion to jobctl's options)."""
    from typer._completion_classes import completion_init

    completion_init()


ZSH_SCRIPT = """\
#compdef jobctl

_jobctl_completion() {
  eval "$(env _TYPER_COMPLETE_ARGS="${words[1,$CURRENT]}" _JOBCTL_COMPLETE=complete_zsh jobctl)"
}

# Autoloaded from $fpath (compinit runs this file as the function _jobctl on the first TAB):
# complete now, not only from the second TAB on. Sourced: register the function.
if [[ "${funcstack[1]}" == "_jobctl" ]]; then
  _jobctl_completion "$@"
else
  compdef _jobctl_completion jobctl
fi
"""


def script(shell: str) -> str:
    """The completion script for `shell`: typer's, except zsh's, which typer writes for `source`
    only (autoloaded from $fpath, its first TAB would only register the function)."""
    if shell == "zsh":
        return ZSH_SCRIPT
    from typer._completion_shared import get_completion_script

    return get_completion_script(prog_name=PROG, complete_var=COMPLETE_VAR, shell=shell) + "\n"


def default_folder() -> Path:
    return Path(__file__).resolve().parent.parent / "completions"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    check = "--check" in args
    folder = Path(next((a for a in args if not a.startswith("--")), default_folder()))
    stale = []
    for shell, name in SHELLS.items():
        path = folder / name
        wanted = script(shell)
        current = path.read_text() if path.exists() else None
        if current != wanted:
            stale.append(str(path))
            if not check:
                folder.mkdir(parents=True, exist_ok=True)
                path.write_text(wanted)
    if check and stale:
        sys.stderr.write("stale completion scripts: " + ", ".join(stale) + "; run `python -m jobctl.completion`\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
