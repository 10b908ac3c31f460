"""`jobctl stats`: the queue at a glance, live with --watch, as JSON, as Prometheus
text, or as a probe with --check. The figures come from jobctl.stats (one consistent read); the
drawing from jobctl.stats_view (pure renderers); this module only wires options to them and runs the
refresh loop."""

from __future__ import annotations

import sys
import time
from typing import List, Optional

import typer

from jobctl.cli.app import app, emit, emit_json, state
from jobctl.completion import complete_queue, complete_stats_by, complete_stats_format, complete_type
from jobctl.errors import CheckFailed, InvalidInput

FORMATS = ("table", "json", "prometheus")


@app.command()
def stats(
    ctx: typer.Context,
    queue: Optional[List[str]] = typer.Option(None, "--queue", "-q", autocompletion=complete_queue,
                                              help="Only this queue (repeatable); --check then looks at it alone."),
    watch: bool = typer.Option(False, "--watch", "-w", help="Redraw in place every --interval until Ctrl-C (on a terminal)."),
    interval: str = typer.Option("2s", "--interval", "-i", metavar="DUR", help="Time between redraws of --watch (default 2s); only with --watch."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object; same as --format json."),
    fmt: str = typer.Option("table", "--format", "-f", metavar="FORMAT", autocompletion=complete_stats_format, help="table, json or prometheus (text format for node_exporter's textfile collector)."),
    limit: int = typer.Option(10, "--limit", "-n", min=1, max=1000, help="Rows in the stuck, buried and aging lists (default 10)."),
    check: bool = typer.Option(False, "--check", help="Probe: print one summary line; exit 9 when a threshold (--max-*, --min-workers) is crossed, else 0."),
    max_ready_age: Optional[str] = typer.Option(None, "--max-ready-age", metavar="DUR", help="--check: the oldest ready job may wait at most this long."),
    max_buried: Optional[int] = typer.Option(None, "--max-buried", metavar="N", min=0, help="--check: at most N buried jobs."),
    max_stuck: Optional[int] = typer.Option(None, "--max-stuck", metavar="N", min=0, help="--check: at most N stuck jobs."),
    min_workers: Optional[int] = typer.Option(None, "--min-workers", metavar="N", min=0, help="--check: at least N workers alive (`jobctl workers`)."),
    max_failure_rate: Optional[str] = typer.Option(None, "--max-failure-rate", metavar="PCT", help="--check: at most PCT percent of a type's runs of the last 15 minutes failed (each type alone)."),
    max_p95: Optional[str] = typer.Option(None, "--max-p95", metavar="DUR", help="--check: a type's 95th percentile run time over the last hour is at most DUR (each type alone)."),
    check_type: Optional[List[str]] = typer.Option(None, "--type", "-t", autocompletion=complete_type, help="--check: only these types (repeatable): every threshold except --min-workers (workers serve every type) looks at their jobs and runs alone."),
    by: str = typer.Option("queue", "--by", metavar="queue|type", autocompletion=complete_stats_by, help="The table's rows: one per queue (default) or one per type (ready, held, running, being cancelled, buried, runs, failure rate, run times); --json and Prometheus always have both; not with --check."),
    quiet: bool = typer.Option(False, "--quiet", help="--check: print nothing when all thresholds hold (a crossing still prints its line)."),
):
    """Show the queue at a glance: counts per queue (or per type), stuck, buried and aging jobs, throughput.

    Ready jobs that a pause or a limit holds back count as held: they are
    part of ready, but not of the oldest ready age, the aging list or
    --max-ready-age.

    Example: jobctl stats --check --max-ready-age 10m --max-failure-rate 5 --max-p95 2m
    """
    from jobctl.durations import parse_duration
    from jobctl.stats import check as run_check, parse_percent, prometheus

    if fmt not in FORMATS:
        raise InvalidInput(f"invalid --format {fmt!r}: use one of {', '.join(FORMATS)}")
    if as_json:
        if fmt not in ("table", "json"):
            raise InvalidInput("--json and --format prometheus are two different outputs; give one")
        fmt = "json"
    interval_s = parse_duration(interval, what="--interval")
    if interval_s < 0.1:
        raise InvalidInput(f"--interval {interval} is too short; use 100ms or more")
    age_s = parse_duration(max_ready_age, what="--max-ready-age") if max_ready_age is not None else None
    rate = parse_percent(max_failure_rate, "--max-failure-rate") if max_failure_rate is not None else None
    p95_s = parse_duration(max_p95, what="--max-p95") if max_p95 is not None else None
    thresholds = (age_s is not None or max_buried is not None or max_stuck is not None or rate is not None
                  or p95_s is not None or min_workers is not None)
    if check and not thresholds:
        raise InvalidInput("--check needs at least one threshold: --max-ready-age DUR, --max-buried N, --max-stuck N, "
                           "--max-failure-rate PCT, --max-p95 DUR, --min-workers N")
    if thresholds and not check:
        raise InvalidInput("--max-ready-age, --max-buried, --max-stuck, --max-failure-rate, --max-p95 and "
                           "--min-workers are thresholds of --check; add --check")
    if check_type and not check:
        raise InvalidInput("--type scopes the thresholds of --check to types; add --check (or use --by type "
                           "for the figures of every type)")
    if by not in ("queue", "type"):
        raise InvalidInput(f"invalid --by {by!r}: use queue or type")
    if quiet and not check:
        raise InvalidInput("--quiet belongs to --check (print nothing when all thresholds hold); add --check")
    if check and (watch or fmt != "table"):
        raise InvalidInput("--check prints one summary line; leave out --watch, --json and --format")
    if watch and fmt != "table":
        raise InvalidInput("--watch draws tables on a terminal; for JSON or Prometheus text, call stats repeatedly")

    # An option that would do nothing in this combination is an error, not silently dropped.
    def given(name: str) -> bool:  # (by the source's name: typer carries its own copy of click's enum)
        source = ctx.get_parameter_source(name)
        return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")

    if given("interval") and not watch:
        raise InvalidInput("--interval is the time between redraws of --watch; add --watch")
    if given("by") and check:
        raise InvalidInput("--by chooses the rows of the table, which --check does not print; leave out --by "
                           "(--type scopes the thresholds of --check to types)")
    if given("limit") and (check or fmt == "prometheus"):
        raise InvalidInput("--limit sets the rows of the stuck, buried and aging lists, which "
                           f"{'--check' if check else '--format prometheus'} does not print; leave out --limit")
    from jobctl.durations import validate_name

    for name in queue or ():
        validate_name(name, "queue")
    for name in check_type or ():
        validate_name(name, "type")

    st = state(ctx)
    # Queues that exist before their first job: the config's, and the default one.
    configured = {tc.queue for tc in st.settings.types.values() if tc.queue} | {"default"}
    with st.open_queue() as q:
        def snapshot() -> tuple[dict, int]:
            ages = list(dict.fromkeys(check_type)) if check and check_type and age_s is not None else None
            figures, now = q.stats(queues=queue, limit=limit, also_known=configured, type_ages=ages)
            if queue and figures.get("limits"):  # only the limits of the queues asked for
                from jobctl.stats import limits_of_queues

                figures["limits"] = limits_of_queues(figures, queue, st.settings.types)
            return figures, now

        if watch and sys.stdout.isatty():
            from jobctl.stats import masked

            _watch(lambda: masked(*snapshot(), st.settings.secret_keys), interval_s, q.location, by)
            return
        figures, now = snapshot()
    from jobctl.untrusted import safe

    for d in figures.get("damaged_jobs", []):  # left out of the lists: named, so a person runs doctor
        sys.stderr.write(f"jobctl: warning: job {d['id']} is damaged and left out: {safe(d['why'])}; "
                         "`jobctl doctor` says more\n")

    if check:
        types = list(dict.fromkeys(check_type)) if check_type else None
        unknown = [t for t in types or () if st.settings.types and t not in st.settings.types
                   and t not in figures["types"]]
        if unknown:  # a typo must not make a check that always holds
            raise InvalidInput(f"no type named {', '.join(unknown)} in the config or among the jobs; "
                               f"known types: {', '.join(sorted(set(st.settings.types) | set(figures['types'])))}")
        unseen = [t for t in types or () if not st.settings.types and t not in figures["types"]]
        if unseen and not quiet:  # no [types] to tell a typo from a quiet type: say what the check sees
            sys.stderr.write(f"jobctl: warning: no job of type {', '.join(unseen)} is waiting, running, buried or "
                             "ran in the last hour, so its thresholds hold; declare [types] in the config to "
                             "make an unknown type an error\n")
        ok, line = run_check(figures, max_ready_age=age_s, max_buried=max_buried, max_stuck=max_stuck,
                             max_failure_rate=rate, max_p95=p95_s, types=types, min_workers=min_workers)
        if not (ok and quiet):
            emit(line)
        if not ok:
            raise typer.Exit(CheckFailed.exit_code)
        return
    if fmt == "json":
        emit_json(figures)
        return
    if fmt == "prometheus":
        sys.stdout.write(prometheus(figures))
        return
    from jobctl import output, stats_view
    from jobctl.stats import masked

    figures, now = masked(figures, now, st.settings.secret_keys)  # human views only: --json stays exact
    out = output.console()
    if out.is_terminal:  # fitted to the screen's width: one line per row, nothing folded
        out.print(stats_view.render(figures, now, width=out.width, by=by), crop=False)
        return
    output.print_view(stats_view.render(figures, now, by=by))  # in a pipe: every line whole, for grep


def _watch(snapshot, interval: float, location: str, by: str = "queue") -> None:
    """Redraw until Ctrl-C (exit 0). Each snapshot is its own short read, so checkpoints go on."""
    from rich.live import Live

    from jobctl import output, stats_view

    out = output.console()

    def frame(figures, now, previous):  # fitted to the screen's size of the moment
        width, height = out.size
        return stats_view.render(figures, now, width=width, height=height, previous=previous,
                                 title=stats_view.watch_title(now, interval, location), highlight=True, by=by)

    previous = None
    try:
        figures, now = snapshot()
        with Live(frame(figures, now, None), console=out, auto_refresh=False, screen=False,
                  redirect_stdout=False, redirect_stderr=False) as live:
            while True:
                time.sleep(interval)
                previous = figures
                figures, now = snapshot()
                live.update(frame(figures, now, previous), refresh=True)
    except KeyboardInterrupt:
        return
