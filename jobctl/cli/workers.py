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
    if as_json:
        for e in entries:
            emit_json(e)
        return
    _table(entries, now)


def _table(entries: list[dict], now: int) -> None:
    import sys

    from rich.text import Text

    from jobctl import output
    from jobctl.durations import parse_time
    from jobctl.output import Col, grid_lines
    from jobctl.untrusted import safe

    out = output.console()
    if not entries:
        out.print("no workers (none has run on this database in the last day)")
        return
    styles = {"running": "green", "draining": "yellow", "lost": "bold red", "stopped": "dim"}

    def ago(at: str | None) -> str:
        return "-" if at is None else output.ago(parse_time(at), now)

    def jobs(e: dict) -> str:
        return ", ".join(f"{j['id']} {safe(j['type'])}" for j in e["jobs"]) or "-"

    cols = [Col("WORKER", cut=True, least=8, soft=18), Col("HOST", cut=True, least=6, soft=12, drop=3),
            Col("PID", right=True, drop=2), Col("STATE"), Col("STARTED", drop=4), Col("LAST SEEN"),
            Col("JOBS", cut=True, least=8, soft=16), Col("DONE", right=True, drop=5),
            Col("FAILED", right=True, drop=5), Col("QUEUES", cut=True, least=6, soft=10, drop=1)]
    rows = []
    for e in entries:
        state_ = e["state"]
        rows.append([
            Text(safe(e["worker"] if e["worker"] is not None else "(none)")),
            Text(safe(e["host"]) if e["host"] is not None else "-"),
            Text("-" if e["pid"] is None else str(e["pid"])),
            Text(state_ or "-", style=styles.get(state_ or "", "")),
            Text(ago(e["started_at"])),
            Text(ago(e["last_seen"])),
            Text(jobs(e)),
            Text("-" if e["done"] is None else str(e["done"])),
            Text("-" if e["failed"] is None else str(e["failed"])),
            Text("-" if e["state"] is None else ", ".join(safe(q) for q in e["queues"]) if e["queues"] else "all"),
        ])
    width = out.width if out.is_terminal else 100_000  # in a pipe: every line whole, for grep
    lines = grid_lines(cols, rows, width)
    if out.is_terminal:
        for line in lines:
            out.print(line, crop=False)
    else:
        sys.stdout.write("".join(line.plain.rstrip() + "\n" for line in lines))


def _order(ctx: typer.Context, request: str, worker: Optional[List[str]], host: Optional[str], all_: bool,
           as_json: bool) -> None:
    chosen = [bool(worker), host is not None, all_]
    if sum(chosen) != 1:
        raise InvalidInput(f"name the workers to {request}: WORKER..., --host HOST or --all (one of them)")
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


@workers_app.command()
def drain(
    ctx: typer.Context,
    worker: Optional[List[str]] = typer.Argument(None, metavar="[WORKER...]", autocompletion=complete_worker, help="Worker ids, as `jobctl workers` shows them (or --host, or --all)."),
    host: Optional[str] = typer.Option(None, "--host", metavar="HOST", help="Every worker on this host."),
    all_: bool = typer.Option(False, "--all", help="Every worker of this database."),
    as_json: bool = typer.Option(False, "--json", help="One object per worker told: {worker, host, pid, request}."),
):
    """Tell workers to claim nothing more, finish the jobs they run and exit 0 (as after SIGTERM:
    jobs still running after the worker's --grace are stopped and released). Each worker notices
    within 2 seconds, on whatever host it runs.

    Example: jobctl workers drain --host web-3
    """
    _order(ctx, "drain", worker, host, all_, as_json)


@workers_app.command()
def stop(
    ctx: typer.Context,
    worker: Optional[List[str]] = typer.Argument(None, metavar="[WORKER...]", autocompletion=complete_worker, help="Worker ids, as `jobctl workers` shows them (or --host, or --all)."),
    host: Optional[str] = typer.Option(None, "--host", metavar="HOST", help="Every worker on this host."),
    all_: bool = typer.Option(False, "--all", help="Every worker of this database."),
    now: bool = typer.Option(False, "--now", help="Stop the running jobs at once and release them (the run does not count), as a second SIGTERM."),
    as_json: bool = typer.Option(False, "--json", help="One object per worker told: {worker, host, pid, request}."),
):
    """Stop workers: with --now, as a second SIGTERM (running jobs are stopped and go back to
    pending without using a run, and the worker exits); without it, the same as `workers drain`.

    Example: jobctl workers stop host-2:4242 --now
    """
    _order(ctx, "stop" if now else "drain", worker, host, all_, as_json)
