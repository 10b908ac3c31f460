"""`jobctl work`: run jobs with the handler commands of the config file.

Imported at every start-up of the CLI, so only typer is imported here; the worker loop is
imported inside the command."""

from __future__ import annotations

from typing import List, Optional

import typer

from jobctl.cli.app import app, state
from jobctl.completion import complete_queue, complete_type
from jobctl.errors import InvalidInput


def _duration(value: Optional[str], what: str, *, positive: bool = True) -> Optional[float]:
    from jobctl.durations import parse_duration

    if value is None:
        return None
    seconds = parse_duration(value, what=what)
    if positive and seconds <= 0:
        raise InvalidInput(f"invalid {what} {value!r}: must be more than 0")
    return seconds


@app.command()
def work(
    ctx: typer.Context,
    queue: Optional[List[str]] = typer.Option(None, "--queue", "-q", autocompletion=complete_queue, help="Only this queue (repeatable; earlier first). Default: every queue."),
    type: Optional[List[str]] = typer.Option(None, "--type", "-t", autocompletion=complete_type, help="Only this type (repeatable). Default: every type with a command."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", "-c", min=1, max=1024, help="Handlers run at once (default 1, or [worker] concurrency)."),
    max_jobs: Optional[int] = typer.Option(None, "--max-jobs", min=1, metavar="N", help="Exit after starting N jobs (once they finish)."),
    max_time: Optional[str] = typer.Option(None, "--max-time", metavar="DUR", help="Stop claiming after this long, then stop like on SIGTERM."),
    stop_when_empty: bool = typer.Option(False, "--stop-when-empty", help="Exit once no job it could claim is ready now."),
    poll: Optional[str] = typer.Option(None, "--poll", metavar="DUR", help="Longest wait between claims on an empty queue (default 1s)."),
    worker: Optional[str] = typer.Option(None, "--worker", metavar="ID", help="Worker id in the history (default JOBCTL_WORKER_ID, else host:pid)."),
    grace: Optional[str] = typer.Option(None, "--grace", metavar="DUR", help="On SIGTERM/SIGINT, how long running jobs may finish (default 30s)."),
    log_format: Optional[str] = typer.Option(None, "--log-format", metavar="FORMAT", help="human (default) or json: one line per event on stderr."),
):
    """Claim jobs and run their handler commands until stopped; one log line per job on stderr.

    Handlers come from [types.NAME] command = [...] in the config file. SIGTERM or SIGINT stops
    claiming, waits --grace, then stops the handlers and releases their jobs; a second signal
    does that at once.

    Example: jobctl work --queue billing --concurrency 4 --log-format json
    """
    from jobctl.worker import Worker, WorkerOptions, check_commands, handler_types, own_worker_id

    st = state(ctx)
    settings = st.settings
    ws = settings.worker
    if log_format is not None and log_format not in ("human", "json"):
        raise InvalidInput(f"invalid --log-format {log_format!r}: use human or json")
    if worker is not None and (not worker.strip() or len(worker) > 200):
        raise InvalidInput("invalid --worker: give 1 to 200 characters")
    if queue:
        from jobctl.durations import validate_name

        for q_name in queue:
            validate_name(q_name, "queue")
    from jobctl.config import duration_in_range

    grace_s = duration_in_range(grace, "--grace", "grace") if grace is not None else None
    poll_s = duration_in_range(poll, "--poll", "poll") if poll is not None else None
    options = WorkerOptions(
        worker_id=worker or own_worker_id(),
        queues=list(dict.fromkeys(queue)) if queue else None,
        types=list(type) if type else None,
        concurrency=concurrency or ws.concurrency,
        max_jobs=max_jobs,
        max_time=_duration(max_time, "--max-time"),
        stop_when_empty=stop_when_empty,
        poll=poll_s if poll_s is not None else ws.poll,
        grace=grace_s if grace_s is not None else ws.grace,
        lease=ws.lease,
        kill_grace=ws.kill_grace,
        recover_every=ws.recover_every,
        purge_every=ws.purge_every,
        log_format=log_format or ws.log_format,
        config_path=str(settings.config_path) if st.config and settings.config_path else None,
    )
    # a config problem (no command, or one that cannot be run) is reported before any file is created
    check_commands(settings, handler_types(settings, options.types))
    with st.open_queue(create=True) as q:
        code = Worker(q, settings, options).run()
    if code:
        raise typer.Exit(code)
