"""`jobctl workers`: who is working on this database, what each runs, and telling one to drain
or stop from any host. The figures come from jobctl.workers (pure); the orders are written to the
workers' registry, which every worker reads through the engine's wake-up."""

from __future__ import annotations

from typing import List, Optional

import typer

from jobctl.cli.app import app, emit, emit_json, state
from jobctl.completion import complete_worker
from jobctl.errors import InvalidInput

workers_app = typer.Typer(
    name="workers", invoke_without_command=True, rich_markup_mode=None,
)
app.add_typer(workers_app, name="workers")


@workers_app.callback()
def workers(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="One worker object per line (NDJSON)."),
    all_: bool = typer.Option(False, "--all", "-a", help="Also workers that stopped in the last day."),
):
    """List the workers of this database: which are alive, what each runs now, what each has done.

    One row per `jobctl work` process: its state (running, draining, lost when not seen for three
    of its renewal periods, stopped with --all), when it started and was last seen, the jobs it
    runs now, jobs done and failed since it started, its queues. Jobs claimed by scripts (`jobctl
    claim`) are shown under their worker id, with no host, pid or state.

    Example: jobctl workers --all
    """
    if ctx.invoked_subcommand is not None:
        if as_json or all_:
            raise InvalidInput(f"--json and --all belong to `jobctl workers` itself; give them after "
                               f"`workers {ctx.invoked_subcommand}` where it takes them")
        return
    st = state(ctx)
    with st.open_queue() as q:
        entries, now = q.workers(all=all_)
        stopped = len(q.workers(all=True)[0]) if not entries and not all_ and not as_json else 0
    if as_json:
        for e in entries:
            emit_json(e)
        return
    _table(entries, now, stopped)


def _table(entries: list[dict], now: int, stopped: int = 0) -> None:
    import os
    import shutil
    import sys

    from jobctl import workers_view

    if not entries and stopped:  # "none has run" would be false: say where the stopped ones are
        emit(f"no worker is running; {stopped} stopped in the last day (`jobctl workers --all` lists them)")
        return
    if not entries:
        emit("no workers (none has run on this database in the last day)")
        return
    terminal = sys.stdout.isatty()
    width = shutil.get_terminal_size().columns if terminal else None  # in a pipe: every line whole, for grep
    colour = terminal and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
    sys.stdout.write("".join(line + "\n" for line in workers_view.lines(entries, now, width=width, colour=colour)))


def _order(ctx: typer.Context, request: str, worker: Optional[List[str]], host: Optional[str], all_: bool,
           as_json: bool, *, command: str) -> None:
    chosen = [bool(worker), host is not None, all_]
    if sum(chosen) != 1:
        raise InvalidInput(f"name the workers to {command}: WORKER..., --host HOST or --all (one of them)")
    if any(not w for w in worker or []) or host == "":
        raise InvalidInput(f"an empty worker id or host: name the workers to {command} as `jobctl workers` shows them")
    st = state(ctx)
    with st.open_queue() as q:
        rows = q.order_workers(request, workers=list(worker) if worker else None, host=host)
    if as_json:
        for r in rows:
            emit_json({"worker": r["worker"], "host": r["host"], "pid": r["pid"], "request": request})
        return
    from jobctl.untrusted import safe

    if not rows:
        emit("no running worker")
        return
    told = "draining: claims nothing more, finishes its jobs, then exits" if request == "drain" else \
        "stopping now: its running jobs go back to pending (the run does not count)"
    for r in rows:
        emit(f"{safe(r['worker'])} ({safe(r['host'])}, pid {r['pid']}): {told}")


# The options of drain and stop, which name the workers told the same way.
WORKERS = typer.Argument(None, metavar="[WORKER...]", autocompletion=complete_worker, help="Worker ids, as `jobctl workers` shows them (or --host, or --all).")
HOST = typer.Option(None, "--host", metavar="HOST", help="Every worker on this host.")
ALL = typer.Option(False, "--all", help="Every worker of this database.")
ORDER_JSON = typer.Option(False, "--json", help="One object per worker told: {worker, host, pid, request}.")


@workers_app.command()
def drain(
    ctx: typer.Context,
    worker: Optional[List[str]] = WORKERS, host: Optional[str] = HOST, all_: bool = ALL,
    as_json: bool = ORDER_JSON,
):
    """Tell workers to claim nothing more, finish the jobs they run and exit, as after SIGTERM.

    Jobs still running after the worker's --grace are stopped and released, as after SIGTERM.
    Each worker notices within 2 seconds, on whatever host it runs. Only live workers are told:
    a worker id (or --host) with none, only stopped ones or only lost ones (killed, not seen for
    three renewals) is exit 3, saying which, and nothing is asked of anyone.

    Example: jobctl workers drain --host web-3
    """
    _order(ctx, "drain", worker, host, all_, as_json, command="drain")


@workers_app.command()
def stop(
    ctx: typer.Context,
    worker: Optional[List[str]] = WORKERS, host: Optional[str] = HOST, all_: bool = ALL,
    now: bool = typer.Option(False, "--now", help="Stop the running jobs at once and release them (the run does not count), as a second SIGTERM."),
    as_json: bool = ORDER_JSON,
):
    """Stop workers: with --now at once, as a second SIGTERM; without it, as `workers drain`.

    With --now the running jobs are stopped and go back to pending without using a run, and the
    worker exits. Each worker notices within 2 seconds, on whatever host it runs.

    Example: jobctl workers stop host-2:4242 --now
    """
    _order(ctx, "stop" if now else "drain", worker, host, all_, as_json, command="stop")
