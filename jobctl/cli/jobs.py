"""The commands that move jobs: enqueue, claim, complete, fail, heartbeat, progress, cancel,
retry, retry-buried, reschedule. The first five are called from shell loops: keep them free of rich."""

from __future__ import annotations

import itertools
import sys
from typing import List, Optional

import typer

from jobctl.cli import filters
from jobctl.cli.app import app, emit, emit_json, state
from jobctl.cli.state import tell
from jobctl.completion import complete_backoff, complete_priority, complete_queue, complete_type
from jobctl.errors import InvalidInput, JobctlError, NothingToClaim

def _warn(line: str) -> None:
    from jobctl.untrusted import safe

    sys.stderr.write(f"jobctl: warning: {safe(line)}\n")


def _warn_unknown_types(settings, types: dict[str, str | None]) -> None:
    """enqueue's warning for types the config does not declare, when it declares some ([types]):
    cron mails stderr, so a misspelled type is noticed the day it is made. types: {type: where}."""
    if not settings.types:
        return
    known = ", ".join(sorted(settings.types)[:10]) + (" …" if len(settings.types) > 10 else "")
    for type_, where in types.items():
        if type_ not in settings.types:
            _warn(f"{where or ''}the config ({settings.config_path}) declares [types], but none named {type_}; "
                  f"no worker of this config runs it (a misspelling? declared: {known})")


def _warn_created(q) -> None:
    """enqueue's warning when it created the database: a misspelled --db path must not pass in silence."""
    from jobctl.engines import POSTGRES_SCHEMES, scheme_of

    if scheme_of(q.location) in POSTGRES_SCHEMES:
        _warn(f"created jobctl's schema in {q.location}: there was none; if you meant an existing queue, "
              "check --db / JOBCTL_DB (what was enqueued is in this new one)")
    elif not q.engine.made_file:  # (an empty file was there: a queue truncated by mistake must not pass in silence)
        _warn(f"made the empty file {q.location} (0 bytes) a new database; if you meant an existing queue, "
              "check --db / JOBCTL_DB and restore it from a backup (what was enqueued is in this new one)")
    else:
        _warn(f"created a new database {q.location}: there was none; if you meant an existing queue, "
              "check --db / JOBCTL_DB (what was enqueued is in this new one)")


class _collector_paused:
    """Python's cycle collector off while a batch is checked and inserted. Nothing there makes a
    cycle, so reference counting frees every line's objects at once (memory stays flat), and the
    collector's passes, set off by the allocations of every line, were a tenth of the CPU of a
    100,000-line batch (docs/performance.md)."""

    def __enter__(self) -> None:
        import gc

        self.was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc) -> None:
        import gc

        if self.was:
            gc.enable()


def _enqueue_many(st, path: str, *, chain: bool, defaults: dict, as_json: bool, wait: bool, wait_s,
                  quiet: bool = False) -> None:
    """enqueue --batch/--chain: every line checked first, into a JobSpool (memory stays flat however
    many lines), then one transaction inserts them all; the ids are printed once it committed."""
    from jobctl import jobspec
    from jobctl.cli.inputs import batch_lines
    from jobctl.cli.progress import progress_bar
    from jobctl.errors import NoSuchJob
    from jobctl.spool import JobSpool

    settings = st.settings  # bad input is refused before the file is created
    options = {k: v for k, v in defaults.items() if v is not None and k not in jobspec.REACTIONS}
    if options:
        from jobctl.config import Settings

        # A bad option is named once, not as line 1's (its cost is checked against each line's limit).
        jobspec.prepare(Settings(), "batch-options", **options)
    # A chain's first job waits on --after; every later one on the job before it.
    defaults = {k: v for k, v in defaults.items() if v is not None}
    later = {k: v for k, v in defaults.items() if k != "after"} if chain else defaults
    unknown: dict[str, str | None] = {}  # types the config does not declare: {type: its first line}
    templates: dict = {}  # what the checks made of each line's type and options (prepare_batch_line)
    with JobSpool() as spool:
        try:
            with progress_bar("checking") as on_progress, _collector_paused():
                for n, text in batch_lines(path, st.settings.max_payload_bytes, on_progress):
                    job = jobspec.prepare_batch_line(settings, text, n, later if len(spool) else defaults,
                                                     templates)
                    if job is None:
                        continue
                    if chain and len(spool):
                        job.after_previous = True
                    if settings.types and job.type not in settings.types and job.type not in unknown:
                        unknown[job.type] = f"{job.source}: "
                    spool.add(job)
        except KeyboardInterrupt:  # (an endless input ended with Ctrl-C: the database was not even opened)
            from jobctl.cli import _fail

            _fail(f"interrupted before the end of the input{f' (after {len(spool)} jobs)' if len(spool) else ''}; "
                  "nothing was enqueued", 130)
            raise typer.Exit(130) from None
        if chain and not len(spool):
            raise InvalidInput("--chain: no jobs in the input; nothing was enqueued")
        with st.open_queue(create=True) as q:
            with progress_bar("enqueueing", unit="jobs") as on_progress, _collector_paused():
                try:
                    inserted = q.insert_stream(spool, len(spool), on_progress=on_progress)
                except NoSuchJob as e:
                    if e.job_id in (defaults.get("after") or ()):
                        raise NoSuchJob(e.job_id, where="--after: ") from None
                    raise
            if not quiet:  # (once the jobs are in: a refused enqueue says one thing, its error)
                if q.created:
                    _warn_created(q)
                _warn_unknown_types(settings, unknown)
            if wait:  # one line per job, in input order: its result, or null when it did not complete
                return _wait(q, list(inserted.ids()), wait_s, as_json=as_json, placeholders=True)
            if as_json:
                pairs = iter(inserted)
                while chunk := list(itertools.islice(pairs, 1000)):  # the jobs read a thousand at a time
                    by_id = {job.id: job for job in q.get_many(list({i for i, _ in chunk}))}
                    for job_id, created in chunk:
                        emit_json({**by_id[job_id].to_dict(), "created": created})
                return
    for first, last in inserted.id_runs():
        for start in range(first, last + 1, 10_000):
            sys.stdout.write("\n".join(map(str, range(start, min(start + 10_000, last + 1)))) + "\n")


def _wait(q, job_ids: list[int], wait_s, *, as_json: bool, placeholders: bool = False) -> None:
    """enqueue --wait: wait_and_print; timed out or interrupted (Ctrl-C), say which jobs stay queued
    and how to wait again (the enqueue did change something: never "nothing was changed")."""
    from jobctl.cli.foreground import wait_and_print
    from jobctl.errors import WaitTimedOut

    try:
        wait_and_print(q, job_ids, wait_s, results=True, as_json=as_json, placeholders=placeholders)
    except WaitTimedOut as e:
        raise WaitTimedOut(f"{e.unfinished}; {_still_queued(job_ids)}") from None
    except KeyboardInterrupt:
        from jobctl.cli import _fail

        _fail(f"interrupted; {_still_queued(job_ids)}", 130)
        raise typer.Exit(130) from None


def _still_queued(job_ids: list[int]) -> str:
    """What an interrupted `enqueue --wait` leaves: the jobs, which keep their places, and the wait command."""
    ids = list(dict.fromkeys(job_ids))
    if len(ids) == 1:
        return f"job {ids[0]} was enqueued and keeps its place: `jobctl wait {ids[0]}`"
    if ids == list(range(ids[0], ids[0] + len(ids))):
        return (f"jobs {ids[0]} to {ids[-1]} were enqueued and keep their places: "
                f"`jobctl wait $(seq {ids[0]} {ids[-1]})`")
    if len(ids) <= 20:
        shown = " ".join(map(str, ids))
        return f"jobs {shown} were enqueued and keep their places: `jobctl wait {shown}`"
    return (f"{len(ids)} jobs were enqueued ({ids[0]}, {ids[1]}, … {ids[-1]}) and keep their places; "
            "`jobctl list --status pending` shows them")


@app.command()
def enqueue(
    ctx: typer.Context,
    type: Optional[str] = typer.Argument(None, metavar="TYPE", autocompletion=complete_type, help="The job type (its handler's name)."),
    payload: Optional[str] = typer.Argument(None, metavar="[PAYLOAD]", help="The payload as JSON (default {})."),
    payload_file: Optional[str] = typer.Option(None, "--payload-file", metavar="PATH|-", help="Read the payload from a file, or - for stdin."),
    batch: Optional[str] = typer.Option(None, "--batch", metavar="PATH|-", help="Enqueue many jobs from NDJSON (all or nothing)."),
    chain: Optional[str] = typer.Option(None, "--chain", metavar="PATH|-", help="Like --batch, and each job waits for the one before it to complete."),
    queue: Optional[str] = typer.Option(None, "--queue", "-q", autocompletion=complete_queue, help="The queue (default: the type's, else 'default')."),
    priority: Optional[str] = typer.Option(None, "--priority", "-p", autocompletion=complete_priority, help="low, normal, high, critical, or -1000..1000."),
    delay: Optional[str] = typer.Option(None, "--delay", metavar="DUR", help="Run no earlier than this from now (90s, 5m, 2h)."),
    at: Optional[str] = typer.Option(None, "--at", metavar="TIME", help="Run no earlier than this time (ISO 8601)."),
    max_attempts: Optional[int] = typer.Option(None, "--max-attempts", min=1, max=1000, help="Total runs allowed (default 3)."),
    backoff: Optional[str] = typer.Option(None, "--backoff", autocompletion=complete_backoff, help="exponential, linear, fixed, or seconds like 10,30,60."),
    timeout: Optional[str] = typer.Option(None, "--timeout", metavar="DUR", help="Longest a run may take (default 10m)."),
    key: Optional[str] = typer.Option(None, "--key", metavar="K", help="Idempotency key: the same key returns the same job."),
    unique: bool = typer.Option(False, "--unique", help="Return the pending or running job of the same queue, type and payload, however it was enqueued, instead of adding one."),
    after: Optional[List[int]] = typer.Option(None, "--after", metavar="ID", help="Run only after job ID completed (repeatable). With --chain: the first job."),
    cost: Optional[str] = typer.Option(None, "--cost", metavar="N", help="Cost units the job holds of its concurrency limit while it runs (default: the type's cost_units, else 1)."),
    group: Optional[str] = typer.Option(None, "--group", metavar="G", help="Concurrency group whose limit the job counts against (default: the type's concurrency_group)."),
    on_buried: Optional[str] = typer.Option(None, "--on-buried", metavar="TYPE", autocompletion=complete_type, help="When the job is buried, enqueue a job of TYPE with it in the payload (default: the type's on_buried). With --batch/--chain: for every job that names none."),
    on_completed: Optional[str] = typer.Option(None, "--on-completed", metavar="TYPE", autocompletion=complete_type, help="When the job completes, enqueue a job of TYPE (default: the type's on_completed)."),
    on_cancelled: Optional[str] = typer.Option(None, "--on-cancelled", metavar="TYPE", autocompletion=complete_type, help="When the job is cancelled, enqueue a job of TYPE (default: the type's on_cancelled)."),
    as_json: bool = typer.Option(False, "--json", help="Print the job as JSON, with \"created\"."),
    wait: bool = typer.Option(False, "--wait", help="Wait until the job is finished and print its result (JSON) instead of its id: exit 0 completed, 4 buried or cancelled, 5 --wait-timeout passed."),
    wait_timeout: Optional[str] = typer.Option(None, "--wait-timeout", metavar="DUR", help="With --wait: give up waiting after this long (exit 5; the job stays queued)."),
    quiet: bool = typer.Option(False, "--quiet", help="No warnings on stderr (a new database, a type the config does not declare)."),
):
    """Add a job; print its id.

    With --batch or --chain: one JSON object a line (NDJSON), all added or
    none, the ids printed in input order. The keys of a line:

    \b
      type (required), payload, queue, priority, delay, at, max_attempts,
      backoff, timeout, key, unique, after (a list of ids), cost, group,
      on_buried, on_completed, on_cancelled

    each in the form of its option (durations "5m" or seconds). Options given
    with --batch/--chain are the default of each line without that key (a
    line's delay or at replaces both); --key and a payload are refused. With
    --chain, the first job waits on --after and each later job on the one
    before it.

    Warnings go to stderr (exit 0): when this creates the database, and
    when the config declares [types] but none named TYPE. --quiet silences
    them. A job that costs more than its concurrency limit is refused.

    Example: jobctl enqueue send-invoice '{"order": 42}' -q billing -p high --key order-42
    """
    st = state(ctx)
    if wait_timeout is not None and not wait:
        raise InvalidInput("--wait-timeout is a limit of --wait: give --wait too")
    from jobctl.cli.foreground import parse_wait_timeout

    wait_s = parse_wait_timeout(wait_timeout, "--wait-timeout")
    reactions: dict = {"on_buried": on_buried, "on_completed": on_completed, "on_cancelled": on_cancelled}
    if batch is not None and chain is not None:
        raise InvalidInput("give either --batch or --chain, not both")
    if batch is not None or chain is not None:
        flag = "--batch" if batch is not None else "--chain"
        if type is not None or payload is not None or payload_file is not None:
            raise InvalidInput(f"{flag} reads every job from NDJSON; give no TYPE, PAYLOAD or --payload-file with it")
        if key is not None:
            raise InvalidInput(f"--key names one job; with {flag} give each line its own \"key\"")
        # Every option is the default of the lines that do not give its key.
        defaults = {"queue": queue, "priority": priority, "delay": delay, "at": at, "max_attempts": max_attempts,
                    "backoff": backoff, "timeout": timeout, "unique": True if unique else None, "after": after or None,
                    "cost": cost, "group": group, **reactions}
        return _enqueue_many(st, batch if batch is not None else chain, chain=chain is not None,  # type: ignore[arg-type]
                             defaults=defaults, as_json=as_json, wait=wait, wait_s=wait_s, quiet=quiet)
    if type is None:
        raise InvalidInput("missing TYPE: `jobctl enqueue TYPE [PAYLOAD]`, or --batch PATH")
    if payload is not None and payload_file is not None:
        raise InvalidInput("give the payload either as an argument or with --payload-file, not both")
    text: str | bytes | None = payload
    if payload_file is not None:
        from jobctl.cli.inputs import read_payload_file

        text = read_payload_file(payload_file, st.settings.max_payload_bytes)
    from jobctl import jobspec

    new_job = jobspec.prepare(  # bad input is refused before the file is created
        st.settings, type, payload_text=text, queue=queue, priority=priority, delay=delay, at=at,
        max_attempts=max_attempts, backoff=backoff, timeout=timeout, key=key, unique=unique, after=after or [],
        cost=cost, group=group, **reactions)
    with st.open_queue(create=True) as q:
        r = q.insert([new_job])[0]
        if not quiet:  # (once the job is in: a refused enqueue says one thing, its error)
            if q.created:
                _warn_created(q)
            _warn_unknown_types(st.settings, {type: None})
        if wait:
            return _wait(q, [r.id], wait_s, as_json=as_json)
        if as_json:
            emit_json({**q.get(r.id).to_dict(), "created": r.created})
        else:
            emit(str(r.id))


def _held_by_limits(q, queues: list[str] | None, types: list[str] | None) -> str:
    """For `claim` that found nothing under the config's limits: how many ready jobs of what it
    asked for are held back (`; 2 ready job(s) are held back ...`), or ""."""
    if not q.limits:
        return ""
    from jobctl.selection import Selection

    most = 999
    n = q.count_jobs(selection=Selection(queues=queues, types=types, statuses=["held"]), at_most=most)
    if not n:
        return ""
    count = f"more than {most}" if n > most else str(n)
    return f"; {count} ready job(s) are held back by a limit or a pause (`jobctl list --held` says why)"


@app.command()
def claim(
    ctx: typer.Context,
    queue: Optional[List[str]] = typer.Option(None, "--queue", "-q", autocompletion=complete_queue, help="Only this queue (repeatable; earlier first)."),
    type: Optional[List[str]] = typer.Option(None, "--type", "-t", autocompletion=complete_type, help="Only this type (repeatable)."),
    worker: Optional[str] = typer.Option(None, "--worker", metavar="ID", help="Who claims (default JOBCTL_WORKER_ID, else host:pid of the shell)."),
    lease: Optional[str] = typer.Option(None, "--lease", metavar="DUR", help="Lease length (default: the job's timeout)."),
    wait: Optional[str] = typer.Option(None, "--wait", metavar="DUR", help="Poll up to this long for a ready job (a database locked meanwhile is waited out too)."),
    as_json: bool = typer.Option(True, "--json", help="Print the job as JSON (always; accepted for symmetry)."),
):
    """Take the best ready job; print it as one line of JSON (exit 5 when none is ready).

    Example: job=$(jobctl claim -q billing) || exit 0
    """
    from jobctl.durations import parse_duration

    wait_s = parse_duration(wait, what="--wait") if wait is not None else 0
    with state(ctx).open_queue() as q:
        options = dict(worker=worker, queues=queue, types=type, lease=lease)
        try:
            job = q.claim_wait(wait_s, **options) if wait_s else q.claim(**options)
        except KeyboardInterrupt:  # (a claim interrupted before its commit is rolled back)
            from jobctl.cli import _fail

            _fail("interrupted while waiting; nothing was claimed" if wait_s else "interrupted; nothing was claimed", 130)
            raise typer.Exit(130) from None
        if job is None:
            from jobctl.pauses import pauses_in_the_way

            why = pauses_in_the_way(q.pauses(), queue, type, q.now()) + _held_by_limits(q, queue, type)
            raise NothingToClaim("no job is ready" + (f" after waiting {wait}" if wait else "") + why)
        emit_json(job.to_dict(claim=True))


@app.command()
def complete(
    ctx: typer.Context,
    job_id: int = typer.Argument(..., metavar="ID", help="The job's id."),
    token: Optional[str] = typer.Option(None, "--token", metavar="T", help="The claim's token (refused if stale)."),
    result: Optional[str] = typer.Option(None, "--result", metavar="JSON", help="The job's result as JSON."),
    as_json: bool = typer.Option(False, "--json", help="Print the job as JSON."),
):
    """Mark a running job completed; print nothing (with --json, the job).

    Example: jobctl complete 42 --token "$token" --result '{"sent": true}'
    """
    with state(ctx).open_queue() as q:
        job = q.complete(job_id, token=token, result=result)
    if as_json:
        emit_json(job.to_dict())
    else:
        tell(f"job {job.id} completed")


@app.command()
def fail(
    ctx: typer.Context,
    job_id: int = typer.Argument(..., metavar="ID", help="The job's id."),
    token: Optional[str] = typer.Option(None, "--token", metavar="T", help="The claim's token (refused if stale)."),
    error: Optional[str] = typer.Option(None, "--error", metavar="MSG", help="Why it failed (one line)."),
    bury: bool = typer.Option(False, "--bury", help="Do not retry: bury it for a person."),
    retry_in: Optional[str] = typer.Option(None, "--retry-in", metavar="DUR", help="Retry after this instead of the backoff."),
    as_json: bool = typer.Option(False, "--json", help="Print the job as JSON."),
):
    """Report a failed run: retried after its backoff, or buried when no runs are left.

    Example: jobctl fail 42 --token "$token" --error "smtp timeout"
    """
    from jobctl.durations import format_duration, to_rfc3339

    with state(ctx).open_queue() as q:
        job = q.fail(job_id, token=token, error=error, bury=bury, retry_in=retry_in)
        if as_json:
            emit_json(job.to_dict())
        elif job.status == "pending":
            emit(f"pending, retry at {to_rfc3339(job.run_at)} (in {format_duration(max(job.run_at - q.now(), 0) / 1000)})")
        else:
            emit(job.status)


@app.command()
def heartbeat(
    ctx: typer.Context,
    job_id: int = typer.Argument(..., metavar="ID", help="The job's id."),
    token: Optional[str] = typer.Option(None, "--token", metavar="T", help="The claim's token (refused if stale)."),
    extend: Optional[str] = typer.Option(None, "--extend", metavar="DUR", help="New lease from now (default: the claim's lease length)."),
    as_json: bool = typer.Option(False, "--json", help="Print the job as JSON."),
):
    """Extend the lease of a running job; print nothing (exit 7 when cancellation was requested).

    Example: jobctl heartbeat 42 --token "$token" --extend 5m || stop_now
    """
    with state(ctx).open_queue() as q:
        job = q.heartbeat(job_id, token=token, extend=extend)
    if as_json:
        emit_json(job.to_dict())
    elif job.lease_expires_at is not None:
        from jobctl.durations import to_rfc3339

        tell(f"lease of job {job.id} extended to {to_rfc3339(job.lease_expires_at)}")


@app.command()
def progress(
    ctx: typer.Context,
    job_id: int = typer.Argument(..., metavar="ID", help="The job's id."),
    token: Optional[str] = typer.Option(None, "--token", metavar="T", help="The claim's token (refused if stale)."),
    message: Optional[str] = typer.Option(None, "--message", "-m", metavar="M", help="What the job is doing now (one line)."),
    percent: Optional[int] = typer.Option(None, "--percent", metavar="N", help="0 to 100."),
    as_json: bool = typer.Option(False, "--json", help="Print the job as JSON."),
):
    """Record the progress of a running job (each call replaces message and percent); print nothing.

    Example: jobctl progress "$JOBCTL_JOB_ID" --token "$JOBCTL_TOKEN" -m "page 3 of 10" --percent 30
    """
    with state(ctx).open_queue() as q:
        job = q.progress(job_id, token=token, message=message, percent=percent)
    if as_json:
        emit_json(job.to_dict())
    else:
        tell(f"progress of job {job.id} recorded")


def _each(ctx, job_ids: List[int], action, as_json: bool, line=None) -> None:
    """Apply an action to several jobs, each id once, in the order given; report every one.
    An action may return a job or a list of jobs; line(job) is the human line (default: id and state).

    A job the action refuses (its state: exit 4) or that does not exist (exit 3) is said on
    stderr and the others are still acted on; the exit code then does not depend on the order of
    the ids: 3 when any id does not exist, else 4. An error of the database (busy, unusable)
    stops at once: it would meet every id after it."""
    from jobctl.errors import InvalidState, NoSuchJob
    from jobctl.jobspec import validate_job_id

    job_ids = list(dict.fromkeys(validate_job_id(i) for i in job_ids))  # a malformed id is a usage error: nothing is done
    errors: list = []
    done = 0  # ids acted on
    states: dict[str, int] = {}  # for the terminal's summary line: "3 jobs now pending"
    with state(ctx).open_queue() as q:
        for job_id in job_ids:
            try:
                job = action(q, job_id)
            except (NoSuchJob, InvalidState) as e:
                errors.append(e)
                if len(job_ids) > 1:
                    from jobctl.cli import _fail

                    _fail(e.message, e.exit_code)
                continue
            except JobctlError as e:
                if done:  # (its own "nothing changed" is true of this job and those after it)
                    e.args = (f"{ctx.info_name}: {done:,} of {len(job_ids):,} ids done (printed above), then stopped: {e}",)
                raise
            done += 1
            for each in job if isinstance(job, list) else [job]:
                emit_json(each.to_dict()) if as_json else emit(line(each) if line else f"{each.id} {each.status}")
                states[each.status] = states.get(each.status, 0) + 1
    if states and not as_json and line is None:
        n = sum(states.values())
        tell(f"{ctx.info_name}: " + ", ".join(
            (f"{k:,} jobs now {state_}" if k != 1 or n > 1 else f"job {job_ids[0]} is now {state_}")
            for state_, k in states.items()))
    if errors:
        if len(job_ids) > 1:
            raise typer.Exit(NoSuchJob.exit_code if any(isinstance(e, NoSuchJob) for e in errors)
                             else InvalidState.exit_code)
        raise errors[0]


@app.command()
@filters.with_filters
def cancel(
    ctx: typer.Context,
    job_ids: Optional[List[int]] = typer.Argument(None, metavar="[ID...]", help="One or more job ids (or a filter)."),
    reason: Optional[str] = typer.Option(None, "--reason", metavar="R", help="Why, kept in the job's history."),
    token: Optional[str] = typer.Option(None, "--token", metavar="T", help="As the claim's holder: confirm that the job stopped."),
    with_dependents: bool = typer.Option(False, "--with-dependents", help="Also cancel every job that waits on it, directly or not (one transaction)."),
    by: filters.Filters = filters.options(acts="cancel"),
    yes: bool = filters.YES, dry_run: bool = filters.DRY_RUN,
    as_json: bool = filters.JSON_EACH,
):
    """Cancel jobs: pending and buried ones at once, running ones by asking their worker.

    With a filter instead of ids, cancel every matching job not yet started (pending, any kind,
    by default; --status scheduled, blocked, held or buried to choose; never a running one), in
    short transactions; print how many.

    Example: jobctl cancel 42 43 --reason "customer left"; jobctl cancel -q imports --status scheduled
    """
    sel = by.for_action("cancel", job_ids)
    if not sel.empty:
        if token is not None or with_dependents:
            raise InvalidInput("--token and --with-dependents work on job ids, not with a filter")
        return filters.act(ctx, "cancel", sel, dry_run=dry_run, yes=yes, as_json=as_json, reason=reason)
    if dry_run:
        raise InvalidInput("--dry-run works with a filter; with job ids, `jobctl show ID` says what each is")
    if with_dependents:
        if token is not None:
            raise InvalidInput("--with-dependents is an operator's cancel; give no --token with it")
        _each(ctx, job_ids or [], lambda q, i: q.cancel_with_dependents(i, reason=reason), as_json)
        return
    _each(ctx, job_ids or [], lambda q, i: q.cancel(i, token=token, reason=reason), as_json)


@app.command()
@filters.with_filters
def reschedule(
    ctx: typer.Context,
    job_ids: Optional[List[int]] = typer.Argument(None, metavar="ID...", help="One or more pending job ids (or a filter)."),
    now: bool = typer.Option(False, "--now", help="Ready at once."),
    delay: Optional[str] = typer.Option(None, "--in", metavar="DUR", help="Ready this long from now (90s, 5m, 2h)."),
    at: Optional[str] = typer.Option(None, "--at", metavar="TIME", help="Ready at this time (ISO 8601)."),
    by: filters.Filters = filters.options(acts="reschedule"),
    yes: bool = filters.YES, dry_run: bool = filters.DRY_RUN,
    as_json: bool = filters.JSON_EACH,
):
    """Set when pending jobs may run; print each id with its new run_at.

    With a filter instead of ids: every matching pending job, in short transactions; print how many.

    Example: jobctl reschedule 42 --now; jobctl reschedule --type report --status scheduled --in 10m
    """
    from jobctl.durations import to_rfc3339

    from jobctl.jobspec import reschedule_when

    reschedule_when(now, delay, at)  # checked first: a bad time is refused before a filter's question
    _ids_or_filter(ctx, "reschedule", by, job_ids, yes=yes, dry_run=dry_run, as_json=as_json,
                   each=lambda q, i: q.reschedule(i, now=now, delay=delay, at=at),
                   line=lambda job: f"{job.id} {to_rfc3339(job.run_at)}", now=now, delay=delay, at=at)


def _ids_or_filter(ctx, action: str, by: filters.Filters, job_ids, *, yes: bool, dry_run: bool, as_json: bool,
                   each, line=None, **inputs) -> None:
    """retry, bury and reschedule: `each` on the job ids given, or the action on every job the
    filter matches (filters.act: asks on a terminal, short transactions); not both."""
    sel = by.for_action(action, job_ids)
    if not sel.empty:
        return filters.act(ctx, action, sel, dry_run=dry_run, yes=yes, as_json=as_json, **inputs)
    if dry_run:
        raise InvalidInput("--dry-run works with a filter")
    _each(ctx, job_ids or [], each, as_json, line=line)


@app.command()
@filters.with_filters
def retry(
    ctx: typer.Context,
    job_ids: Optional[List[int]] = typer.Argument(None, metavar="ID...", help="One or more job ids (or a filter)."),
    reset_attempts: bool = typer.Option(False, "--reset-attempts", help="Start counting runs from zero again."),
    by: filters.Filters = filters.options(acts="retry"),
    yes: bool = filters.YES, dry_run: bool = filters.DRY_RUN,
    as_json: bool = filters.JSON_EACH,
):
    """Move buried jobs back to pending.

    With a filter instead of ids: every matching buried job, in short transactions, asking first
    on a terminal when more than one matches (--yes does not ask); print how many.

    Example: jobctl retry --type send-email --error timeout --since 1h --dry-run
    """
    _ids_or_filter(ctx, "retry", by, job_ids, yes=yes, dry_run=dry_run, as_json=as_json,
                   each=lambda q, i: q.retry(i, reset_attempts=reset_attempts), reset_attempts=reset_attempts)


@app.command()
@filters.with_filters
def bury(
    ctx: typer.Context,
    job_ids: Optional[List[int]] = typer.Argument(None, metavar="ID...", help="One or more job ids (or a filter)."),
    reason: Optional[str] = typer.Option(None, "--reason", metavar="R", help="Why, kept in the job's history."),
    by: filters.Filters = filters.options(acts="bury"),
    yes: bool = filters.YES, dry_run: bool = filters.DRY_RUN,
    as_json: bool = filters.JSON_EACH,
):
    """Park jobs that have not started as buried; `jobctl retry` brings them back.

    Pending, scheduled and blocked jobs stop where they are, for a person. A running job is
    refused (exit 4): cancel it instead. With a filter instead of ids: every matching job not
    yet started, in short transactions, asking first on a terminal.

    Example: jobctl bury --type import --payload tenant=b --reason "tenant b is migrating"
    """
    _ids_or_filter(ctx, "bury", by, job_ids, yes=yes, dry_run=dry_run, as_json=as_json,
                   each=lambda q, i: q.bury(i, reason=reason), reason=reason)


@app.command()
def edit(
    ctx: typer.Context,
    job_id: int = typer.Argument(..., metavar="ID", help="The job's id."),
    payload: Optional[str] = typer.Option(None, "--payload", metavar="JSON", help="The new payload as JSON."),
    payload_file: Optional[str] = typer.Option(None, "--payload-file", metavar="PATH|-", help="Read the new payload from a file, or - for stdin."),
    queue: Optional[str] = typer.Option(None, "--queue", "-q", autocompletion=complete_queue, help="Move it to this queue."),
    priority: Optional[str] = typer.Option(None, "--priority", "-p", autocompletion=complete_priority, help="low, normal, high, critical, or -1000..1000."),
    max_attempts: Optional[int] = typer.Option(None, "--max-attempts", min=1, max=1000, help="Total runs allowed."),
    timeout: Optional[str] = typer.Option(None, "--timeout", metavar="DUR", help="Longest a run may take."),
    backoff: Optional[str] = typer.Option(None, "--backoff", autocompletion=complete_backoff, help="exponential, linear, fixed, or seconds like 10,30,60."),
    as_json: bool = typer.Option(False, "--json", help="Print the job as JSON."),
):
    """Change a job that is not running: its payload, queue, priority, attempts, timeout, backoff.

    Pending, scheduled, blocked and buried jobs can be edited; a running one is refused (exit 4).
    Its history records what changed (payloads masked in human views, as everywhere); its
    idempotency key stays.

    Example: jobctl edit 42 --payload '{"to": "ops@example.com"}' --priority high
    """
    if payload is not None and payload_file is not None:
        raise InvalidInput("give the payload either with --payload or with --payload-file, not both")
    st = state(ctx)
    text: str | bytes | None = payload
    if payload_file is not None:
        from jobctl.cli.inputs import read_payload_file

        text = read_payload_file(payload_file, st.settings.max_payload_bytes, "nothing was changed")
    with st.open_queue() as q:
        job = q.edit(job_id, payload_text=text, queue=queue, priority=priority, max_attempts=max_attempts,
                     timeout=timeout, backoff=backoff)
    if as_json:
        emit_json(job.to_dict())
    else:
        tell(f"job {job.id} edited")


@app.command("retry-buried")
@filters.with_filters
def retry_buried(
    ctx: typer.Context,
    by: filters.Filters = filters.options(status=False),
    reset_attempts: bool = typer.Option(False, "--reset-attempts", help="Start counting runs from zero again."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only count them."),
    as_json: bool = typer.Option(False, "--json", help="Print {\"count\", \"ids\", \"dry_run\"} as JSON."),
):
    """Move every buried job (that the filters match) back to pending, in short transactions; print how many.

    Example: jobctl retry-buried -q billing --error timeout --dry-run
    """
    sel = by.selection(status=["buried"])
    ids: list[int] = []
    with state(ctx).open_queue() as q:
        matched = q.matching_ids(sel)
        try:
            for job_id, outcome, _ in filters.acting(q, "retry", matched, sel, dry_run=dry_run,
                                                     reset_attempts=reset_attempts):
                if outcome == "changed":
                    ids.append(job_id)
        except (filters.Interrupted, KeyboardInterrupt) as e:
            emit_json({"count": len(ids), "ids": ids, "dry_run": dry_run}) if as_json else emit(str(len(ids)))
            filters.interrupted(e, "retry", len(ids), len(matched), dry_run)
    if as_json:
        emit_json({"count": len(ids), "ids": ids, "dry_run": dry_run})
    else:
        emit(str(len(ids)))
        tell(how_many("would retry" if dry_run else "retried", len(ids), "buried job", None, dry_run))


def how_many(done: str, n: int, noun: str, by: dict | None, dry_run: bool) -> str:
    """`retried 3 buried jobs`, `cancelled 4 jobs (pending 3, scheduled 1)`: the terminal's line
    beside a bare count on stdout."""
    parts = ", ".join(f"{k} {v:,}" for k, v in (by or {}).items() if v)
    return (f"{done} {n:,} {noun}{'' if n == 1 else 's'}" + (f" ({parts})" if parts else "")
            + ("; --dry-run: nothing changed" if dry_run else ""))
