"""Read-only views: list and show."""

from __future__ import annotations

from typing import List, Optional

import typer

from jobctl.cli.app import app, emit_json, state
from jobctl.completion import complete_queue, complete_sort, complete_status, complete_type


@app.command("list")
def list_jobs(
    ctx: typer.Context,
    status: Optional[List[str]] = typer.Option(None, "--status", "-s", autocompletion=complete_status, help="Only jobs in this state (repeatable)."),
    queue: Optional[str] = typer.Option(None, "--queue", "-q", autocompletion=complete_queue, help="Only jobs of this queue."),
    type: Optional[str] = typer.Option(None, "--type", "-t", autocompletion=complete_type, help="Only jobs of this type."),
    stuck: bool = typer.Option(False, "--stuck", help="Only running jobs whose lease expired or that ran past their timeout."),
    held: bool = typer.Option(False, "--held", help="Only ready jobs that a rate or concurrency limit of the config holds back."),
    older_than: Optional[str] = typer.Option(None, "--older-than", metavar="DUR", help="Only jobs created longer ago than this (e.g. 1h)."),
    sort: str = typer.Option("newest", "--sort", metavar="ORDER", autocompletion=complete_sort, help="newest (default), oldest, priority (claim order), run-at, updated."),
    limit: int = typer.Option(50, "--limit", "-n", min=0, max=1_000_000, help="At most this many (default 50; 0: all). Says so on stderr when more match."),
    reveal: bool = typer.Option(False, "--reveal", help="Show values of secret-looking payload keys."),
    as_json: bool = typer.Option(False, "--json", help="One job object per line (NDJSON), payloads unmasked."),
):
    """List jobs, newest first (or in the --sort order).

    Example: jobctl list --status pending --older-than 1h --sort oldest -q billing
    """
    st = state(ctx)
    filters = dict(statuses=status or [], queue=queue, type=type, stuck=stuck, older_than=older_than, held=held)
    damaged: list = []  # rows that cannot be decoded: the others are still listed, these named on stderr
    with st.open_queue() as q:
        jobs = q.list_jobs(**filters, limit=limit, sort=sort, damaged=damaged)
        # Never stop at the limit without a word: a script or a person would take it for all of them.
        total = q.count_jobs(**filters) if limit and len(jobs) >= limit else len(jobs)
        now = q.now()
    import sys

    from jobctl.untrusted import safe

    for e in damaged:
        sys.stderr.write(f"jobctl: warning: job {e.job_id} is damaged and left out: {safe(e.reason)}; "
                         "`jobctl doctor` says more\n")
    if total > len(jobs) + len(damaged):
        sys.stderr.write(f"showing {len(jobs):,} of {total:,}; --limit 0 for all\n")
    if as_json:
        for job in jobs:
            emit_json(job.to_dict())
        return
    from jobctl import output

    out = output.console()
    if not jobs:
        out.print("no jobs match")
        return
    # On a screen the payload column takes what is left of its width; in a pipe nothing is cut.
    width = out.width if out.is_terminal else None
    output.print_view(output.jobs_table(jobs, now, st.settings.secret_keys, reveal, width=width), out)


@app.command()
def show(
    ctx: typer.Context,
    job_id: int = typer.Argument(..., metavar="ID", help="The job's id."),
    reveal: bool = typer.Option(False, "--reveal", help="Show values of secret-looking payload keys."),
    as_json: bool = typer.Option(False, "--json", help="The job object with its \"events\"."),
):
    """Show one job and its event history.

    Example: jobctl show 42
    """
    st = state(ctx)
    with st.open_queue() as q:
        job = q.get(job_id)
        events = q.events(job_id)
        now = q.now()
        if as_json:
            emit_json({**job.to_dict(), "events": [e.to_dict() for e in events]})
            return
        from jobctl.stats import explain

        ready = job.status == "pending" and not job.waiting_on and job.run_at <= now
        why = explain(job, now, dependencies=q.dependencies(job.id) if job.after else [],
                      pauses=q.pauses() if job.status == "pending" else [],
                      held=q.held_because(job) if ready else None)
        run_output = q.run_output(job_id)
    from jobctl import output

    out = output.console()  # in a pipe: COLUMNS, else 80 columns (the history never folds a timestamp)
    panel = output.job_panel(job, events, now, st.settings.secret_keys, reveal, explanation=why,
                             run_output=run_output, width=out.width)
    if out.is_terminal:
        out.print(panel)
        return
    with out.capture() as captured:  # in a pipe, no padding at the ends of lines
        out.print(panel)
    import sys

    sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
