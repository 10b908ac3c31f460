"""`jobctl work`: run jobs with the handler commands of the config file.

Imported at every start-up of the CLI, so only typer is imported here; the worker loop is
imported inside the command. A plain `work` command line does not come here at all: main() starts
the worker without typer (fast.py), through the same start_worker()."""

from __future__ import annotations

from typing import List, Optional

import typer

from jobctl.cli.app import app, state
from jobctl.completion import complete_queue, complete_type


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
    from jobctl.cli.fast import start_worker

    code = start_worker(state(ctx), queue=queue, type=type, concurrency=concurrency, max_jobs=max_jobs,
                        max_time=max_time, stop_when_empty=stop_when_empty, poll=poll, worker=worker, grace=grace,
                        log_format=log_format)
    if code:
        raise typer.Exit(code)
