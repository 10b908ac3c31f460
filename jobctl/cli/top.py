"""`jobctl top`: the full-screen live view that can act. Textual is imported inside the command
only (jobctl.top), so no other command pays for it."""

from __future__ import annotations

import sys

import typer

from jobctl.cli.app import app, state
from jobctl.errors import InvalidInput


@app.command()
def top(
    ctx: typer.Context,
    interval: str = typer.Option("1s", "--interval", "-i", metavar="DUR", help="Redraw at most this often (default 1s); it redraws when the database changes, and every few seconds anyway."),
):
    """A full-screen live view of the queue that can act: retry, cancel, bury, edit, pause, drain.

    Panes: the database, throughput and workers alive and lost, the queues
    (with held), jobs in tabs (running, buried by error, aging, held,
    scheduled) and a job's details with the tail of its output. Keys:
    arrows or j/k, Enter, l (follow the output), r retry (on a buried
    group: the group, asked first), c cancel (asked first), b bury (asks
    why), e edit the payload in $EDITOR, p pause/resume, R retry all
    buried matching the filter (asks first), / filter in the words of the
    command line's filters (type:T error:TEXT payload:PATH=V worker:W
    since:1h ...), w workers (d drains one, asked first), ? help, q or
    Ctrl-C quit. Below 160 columns the details (Enter) cover the jobs: the
    arrows scroll them and the keys act on the job they show. Needs a
    terminal of at least 80x24; `jobctl stats --watch` is the read-only
    view for a pipe or a second screen.

    Example: jobctl top --interval 2s
    """
    from jobctl.durations import parse_duration

    interval_s = parse_duration(interval, what="--interval")
    if interval_s < 0.1:
        raise InvalidInput(f"--interval {interval} is too short; use 100ms or more")
    if not (sys.stdin.isatty() and sys.stdout.isatty() and sys.stderr.isatty()):  # (it draws on stderr)
        raise InvalidInput("jobctl top draws a full screen and needs a terminal (stdin, stdout and stderr); "
                           "in a pipe, use `jobctl stats` or `jobctl list`")
    st = state(ctx)
    with st.open_queue():  # a missing file or an unreachable server is said here, before the screen is taken
        pass
    from jobctl.top import run

    run(st, interval_s)
