"""`jobctl logs`: a run's output (combined stdout and stderr), as the worker stored it."""

from __future__ import annotations

import sys
import time
from typing import Optional

import typer

from jobctl.cli.app import app, emit_json, state
from jobctl.models import HELD

FOLLOW_POLL = 0.5  # the worker stores output every few seconds; a look twice a second is enough
LOST_CHECK = 2.0  # seconds between asks whether a running job's worker is lost (a dry run of recover)
ENDS = {"completed": "completed the job", "failed": "failed", "cancelled": "was cancelled",
        "released": "was released by its worker (it does not count)", "lost": "lost its worker"}


def _json(log, job_id: int) -> dict:
    from jobctl import runlog
    from jobctl.durations import to_rfc3339

    return {"job_id": job_id, "run": log.run, "started_at": to_rfc3339(log.started_at),
            "ended_at": to_rfc3339(log.ended_at) if log.ended_at is not None else None,
            "outcome": log.outcome, "truncated": log.dropped > 0, "dropped": log.dropped,
            "text": runlog.text(log)}


def _end_error(log, job):
    """None when the run completed the job; else the error (exit 4) that says how it ended. For a
    finished job whose last run is not `log` (that run printed nothing), the job's end decides."""
    from jobctl.errors import InvalidState
    from jobctl.models import FINISHED

    if log is None:
        return None if job.status == "completed" else \
            InvalidState(f"job {job.id} ended {job.status} with no output kept (`jobctl show {job.id}`)")
    if job.status in FINISHED and log.run < job.attempts:
        return None if job.status == "completed" else \
            InvalidState(f"run {job.attempts} of job {job.id} printed nothing; the job is {job.status} "
                         f"(`jobctl show {job.id}`)")
    if log.outcome == "completed":
        return None
    how = ENDS.get(log.outcome or "", "ended")
    return InvalidState(f"run {log.run} of job {job.id} {how}; the job is {job.status} (`jobctl show {job.id}`)")


@app.command()
def logs(
    ctx: typer.Context,
    job_id: int = typer.Argument(..., metavar="ID", help="The job's id."),
    run: Optional[int] = typer.Option(None, "--run", min=1, metavar="N", help="Run N of the job, numbered as `show` and the worker number them (run 2 of 3). Default: the latest run that printed anything."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing the output of the run going on as the worker stores it (every few seconds) until it ends; wait for a run to start if none has."),
    reveal: bool = typer.Option(False, "--reveal", help="Show values of secret-looking key=value pairs."),
    as_json: bool = typer.Option(False, "--json", help="One object: job_id, run, started_at, ended_at, outcome, truncated, dropped, text (exact, unmasked)."),
):
    """Print a run's output: its stdout and stderr together, in the order they arrived.

    Kept: the first 64KiB and the last 1MiB of each run (log_head and log_tail in the config), with
    a marker line where bytes were dropped. A run that printed nothing keeps nothing: it prints
    nothing, with a note on stderr (exit 0); so does a job with no output kept yet. With --follow:
    exit 0 when the run completed the job, 4 when it ended otherwise (failed, cancelled, released,
    lost), or when its worker is gone (the lease expired; `jobctl recover`).

    Example: jobctl logs 42 --follow
    """
    st = state(ctx)
    patterns = st.settings.secret_keys
    with st.open_queue() as q:
        job = q.get(job_id)
        log = q.run_output(job_id, run)
        if log is None and not follow:
            if run is not None:
                from jobctl.errors import InvalidInput

                have = f"its latest is run {job.attempts}" if job.attempts else "it has not run yet"
                raise InvalidInput(f"job {job_id} has no run {run}; {have} (`jobctl show {job_id}` lists its runs)")
            if job.status == "pending" and not job.attempts:
                sys.stderr.write(f"job {job_id} has not run yet\n")
            else:
                sys.stderr.write(f"job {job_id} has no output kept (it is {job.status}; a run that prints "
                                 "nothing keeps none)\n")
            return
        if log is not None and not log.kept and not follow:
            how = f" ({ENDS.get(log.outcome, 'ended')})" if log.outcome else " (still running)" if log.ended_at is None else ""
            sys.stderr.write(f"run {log.run} of job {job_id}{how} printed nothing\n")
            if as_json:
                emit_json(_json(log, job_id))
            return
        if log is not None and run is None and not follow and log.run < log.runs:
            sys.stderr.write(f"run {log.run}, the latest with output (the job's latest is run {log.runs})\n")
        if not follow:
            assert log is not None
            if as_json:
                emit_json(_json(log, job_id))
                return
            from jobctl import runlog

            data, _ = runlog.since(log, 0)
            _write_lines(data.decode("utf-8", errors="replace"), patterns, reveal)
            return
        try:
            _follow(q, job_id, run, patterns, reveal, as_json)
        except KeyboardInterrupt:
            from jobctl.cli import _fail

            _fail(f"interrupted while following the log of job {job_id}; nothing was changed", 130)
            raise typer.Exit(130) from None


def _write_lines(text: str, patterns, reveal: bool) -> None:
    from jobctl import runlog

    lines = runlog.human_lines(text, patterns, reveal)
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()


def _lost_worker(q, job) -> None:
    """Raise (exit 4) when the job is held by a worker that is gone: its lease has expired, as
    `jobctl recover` judges it (a dry run of it), so no run will end until someone recovers the job."""
    from jobctl.errors import DatabaseBusy, InvalidState

    if job.status not in HELD:
        return
    try:
        found = next((j for j, _ in q.recover(dry_run=True) if j.id == job.id), None)
    except DatabaseBusy:
        return  # ask again at the next look
    if found is not None:
        from jobctl.durations import to_rfc3339

        what = ("finish its cancellation" if found.status == "cancel_requested"
                else "requeue the job (or bury it when no runs are left)")
        raise InvalidState(f"the worker of job {job.id} ({found.worker}) was lost: its lease expired at "
                           f"{to_rfc3339(found.lease_expires_at)}; run `jobctl recover` to {what}")


def _follow(q, job_id: int, run: int | None, patterns, reveal: bool, as_json: bool) -> None:
    """Print the run's output as it is stored, until the run ends (or its worker is lost); then its
    end decides the exit code."""
    from jobctl import runlog
    from jobctl.errors import JobctlError

    printed = 0
    pending = b""  # an unfinished last line: printed once it ends (so masking sees whole lines)
    at_line_start = True
    want = run
    lost_check_at = time.monotonic()  # a worker lost long ago is told at once
    while True:
        job = q.get(job_id)
        if want is None and job.attempts and job.status in HELD:
            want = job.attempts  # the run going on now, even before it stored any output: not an earlier one
        log = q.run_output(job_id, want)
        if log is None:
            if run is None and job.status in ("completed", "cancelled", "buried"):
                error = _end_error(None, job)
                if error is not None:
                    raise error
                sys.stderr.write(f"job {job_id} ended ({job.status}) with no output kept\n")
                return
            if time.monotonic() >= lost_check_at:
                lost_check_at = time.monotonic() + LOST_CHECK
                _lost_worker(q, job)
            time.sleep(FOLLOW_POLL)
            continue
        if want is None:
            want = log.run  # follow this run to its end, even if another starts meanwhile
        ended = log.ended_at is not None
        if not as_json:
            data, printed = runlog.since(log, printed, at_line_start)
            if data:
                at_line_start = data.endswith(b"\n")
            data = pending + data
            cut = len(data) if ended else data.rfind(b"\n") + 1
            pending = data[cut:]
            _write_lines(data[:cut].decode("utf-8", errors="replace"), patterns, reveal)
        if ended:
            if as_json and log.kept:  # a run that printed nothing: nothing on stdout, as before it started
                emit_json(_json(log, job_id))
            error = _end_error(log, job)
            if error is not None:
                raise error
            return
        if time.monotonic() >= lost_check_at:
            lost_check_at = time.monotonic() + LOST_CHECK
            try:
                _lost_worker(q, job)
            except JobctlError:
                if not as_json and pending:  # the last line the handler printed, unfinished
                    _write_lines(pending.decode("utf-8", errors="replace"), patterns, reveal)
                if as_json and log.kept:
                    emit_json(_json(log, job_id))
                raise
        time.sleep(FOLLOW_POLL)
