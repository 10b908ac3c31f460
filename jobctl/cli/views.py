"""Read-only views: list and show."""

from __future__ import annotations

from typing import Optional

import typer

from jobctl.cli import filters
from jobctl.cli.app import app, emit_json, state
from jobctl.completion import complete_sort


COUNT_AT_MOST = 10_000  # `list` counts the jobs past its page up to this many ("of more than 10,000")
COUNT_WITHIN_S = 0.25  # ... and for at most this long (the first page comes first)


@app.command("list")
@filters.with_filters
def list_jobs(
    ctx: typer.Context,
    by: filters.Filters = filters.options(),
    stuck: bool = typer.Option(False, "--stuck", help="Only running jobs whose lease expired or that ran past their timeout."),
    held: bool = typer.Option(False, "--held", help="Only ready jobs held back by a paused queue or type, or by a rate or concurrency limit of the config (as --status held)."),
    older_than: Optional[str] = typer.Option(None, "--older-than", metavar="DUR", help="Only jobs created longer ago than this (e.g. 1h)."),
    sort: str = typer.Option("newest", "--sort", metavar="ORDER", autocompletion=complete_sort, help="newest (default), oldest, priority (claim order), run-at, updated."),
    limit: int = typer.Option(50, "--limit", "-n", min=0, max=1_000_000, help="At most this many (default 50; 0: all). Says so on stderr when more match."),
    reveal: bool = typer.Option(False, "--reveal", help="Show values of secret-looking payload keys."),
    as_json: bool = typer.Option(False, "--json", help="One job object per line (NDJSON), payloads unmasked."),
):
    """List jobs, newest first (or in the --sort order).

    A repeated filter matches any of its values (--status buried --status cancelled), different
    filters all of them. --payload PATH=VALUE compares the payload's value at a dotted path (a
    number is a list index); --since and --before take a time or a duration meaning that long ago,
    and compare the job's last change. The same filters select jobs for retry, cancel, reschedule,
    bury, purge and retry-buried.

    Example: jobctl list --type send-email --status buried --error timeout --since 1h
    """
    st = state(ctx)
    sel = by.selection()
    options = dict(stuck=stuck, older_than=older_than, held=held, selection=sel)
    damaged: list = []  # rows that cannot be decoded: the others are still listed, these named on stderr
    with st.open_queue() as q:
        jobs = q.list_jobs(**options, limit=limit, sort=sort, damaged=damaged)
        # Never stop at the limit without a word: a script or a person would take it for all of them.
        # Counted up to a bound, so that the first page stays quick over millions of jobs.
        total = (q.count_jobs(**options, at_most=COUNT_AT_MOST, within_s=COUNT_WITHIN_S) if limit and len(jobs) >= limit
                 else len(jobs))
        now = q.now()
        held_why = {} if as_json else q.held_reasons(jobs, now)  # (why each held job is held, as `show` says it)
        from jobctl.models import HELD

        nows = {j.id: q.engine.lease_now(j, now) for j in jobs if j.status in HELD}  # (as `show`)
    import sys

    from jobctl.untrusted import safe

    for e in damaged:
        sys.stderr.write(f"jobctl: warning: job {e.job_id} is damaged and left out: {safe(e.reason)}; "
                         "`jobctl doctor` says more\n")
    if total is None:
        sys.stderr.write(f"showing {len(jobs):,}; more match (counting them takes long); --limit 0 for all\n")
    elif total > COUNT_AT_MOST:
        sys.stderr.write(f"showing {len(jobs):,} of more than {COUNT_AT_MOST:,}; --limit 0 for all\n")
    elif total > len(jobs) + len(damaged):
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
    output.print_view(output.jobs_table(jobs, now, st.settings.secret_keys, reveal, width=width, held=held_why,
                                        nows=nows), out)


@app.command()
def show(
    ctx: typer.Context,
    job_id: Optional[int] = typer.Argument(None, metavar="ID", help="The job's id (or --key K)."),
    key: Optional[str] = typer.Option(None, "--key", metavar="K", help="The job with this idempotency key, instead of an id."),
    reveal: bool = typer.Option(False, "--reveal", help="Show values of secret-looking payload keys."),
    as_json: bool = typer.Option(False, "--json", help="The job object with its \"events\"."),
):
    """Show one job and its event history.

    Example: jobctl show 42; jobctl show --key order-42
    """
    from jobctl.errors import InvalidInput

    if (job_id is None) == (key is None):
        raise InvalidInput("give a job id or --key K (one of them)")
    st = state(ctx)
    with st.open_queue() as q:
        job = q.get(job_id) if job_id is not None else q.get_by_key(key or "")
        job_id = job.id
        events = q.events(job_id)
        now = q.now()
        if as_json:
            emit_json({**job.to_dict(), "events": [e.to_dict() for e in events]})
            return
        from jobctl.stats import explain_job

        why, now = explain_job(q, job, events, now)
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
