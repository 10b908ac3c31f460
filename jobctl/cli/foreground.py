"""Commands for scripts that want a job's outcome now: wait (for jobs to finish) and run (a
handler in the foreground, with no queue at all). Free of rich, like the hot commands."""

from __future__ import annotations

from typing import List, Optional

import typer

from jobctl.cli.app import app, emit, emit_json, state
from jobctl.completion import complete_type


def parse_wait_timeout(text: str | None, what: str) -> float | None:
    if text is None:
        return None
    from jobctl.durations import parse_duration

    return parse_duration(text, what=what)


def wait_and_print(q, job_ids: list[int], timeout: float | None, *, results: bool, as_json: bool,
                   placeholders: bool = False) -> None:
    """Wait for the jobs, print one line per job, and raise the exit code's error (4: one ended
    buried or cancelled; 5: the timeout passed first). results: print each completed job's result
    (JSON) instead of `ID STATE`; placeholders: `null` for a job that did not complete (--batch)."""
    from jobctl.waiting import outcome_error, wait_finished

    jobs, stuck = wait_finished(q, job_ids, timeout)  # stuck: blocked for ever, printed as they are
    by_id = {j.id: j for j in jobs}
    for job in (by_id[i] for i in job_ids):  # input order, a job twice if asked twice (--batch keys)
        if as_json:
            emit_json(job.to_dict())
        elif not results:
            emit(f"{job.id} {job.status}")
        elif job.status == "completed":
            emit_json(job.to_dict()["result"])
        elif placeholders:
            emit("null")
    error = outcome_error(jobs, stuck, q.settings.secret_keys)
    if error is not None:
        raise error


@app.command()
def wait(
    ctx: typer.Context,
    job_ids: List[int] = typer.Argument(..., metavar="ID...", help="One or more job ids."),
    timeout: Optional[str] = typer.Option(None, "--timeout", metavar="DUR", help="Give up after this long (exit 5; nothing is changed). Default: wait as long as it takes."),
    as_json: bool = typer.Option(False, "--json", help="Print each job as JSON (one per line), as `show --json` without events."),
):
    """Block until every job is finished (completed, buried or cancelled); print `ID STATE` per job.

    Exit 0 when all completed, 4 when any ended buried or cancelled or can never run (it waits on a
    cancelled or deleted job: it is not waited on, and prints as blocked), 5 when --timeout passed first.

    Example: jobctl wait 42 43 --timeout 10m && echo all done
    """
    timeout_s = parse_wait_timeout(timeout, "--timeout")
    from jobctl.jobspec import validate_job_id

    ids = list(dict.fromkeys(validate_job_id(i) for i in job_ids))  # a malformed id is a usage error before any wait
    with state(ctx).open_queue() as q:
        try:
            wait_and_print(q, ids, timeout_s, results=False, as_json=as_json)
        except KeyboardInterrupt:
            from jobctl.cli import _fail

            _fail("interrupted while waiting; nothing was changed", 130)
            raise typer.Exit(130) from None


@app.command()
def run(
    ctx: typer.Context,
    type: str = typer.Argument(..., metavar="TYPE", autocompletion=complete_type, help="The job type whose handler to run."),
    payload: Optional[str] = typer.Argument(None, metavar="[PAYLOAD]", help="The payload as JSON (default {})."),
    payload_file: Optional[str] = typer.Option(None, "--payload-file", metavar="PATH|-", help="Read the payload from a file, or - for stdin."),
):
    """Run a type's handler here and now, as a worker would, with no job in the database.

    The payload goes to its stdin; its stdout and stderr pass through; the type's timeout applies
    (exit 124). jobctl exits with the handler's exit code (128+N for signal N); a type with no
    command, or one missing or not executable, is exit 2 before anything starts. SIGINT and SIGTERM
    are passed on to the handler. The database is not opened, not even created.

    Example: jobctl run send-invoice '{"order": 42}'
    """
    from jobctl.cli.inputs import read_payload_file
    from jobctl.errors import InvalidInput

    st = state(ctx)
    settings = st.settings
    if payload is not None and payload_file is not None:
        raise InvalidInput("give the payload either as an argument or with --payload-file, not both")
    text = read_payload_file(payload_file, settings.max_payload_bytes, "nothing was run") if payload_file is not None else payload
    from jobctl.worker.foreground import run_foreground

    code = run_foreground(settings, type, text, db=st.db_path(),
                          config_path=str(settings.config_path) if st.config and settings.config_path else None)
    if code:
        raise typer.Exit(code)
