"""Operator commands on the file and the queue as a whole: init, recover, purge, pause, resume,
doctor, backup, restore, migrate."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from jobctl.cli import filters
from jobctl.cli.app import app, emit, emit_json, state
from jobctl.completion import complete_queue, complete_type
from jobctl.errors import CheckFailed, InvalidInput, JobctlError


@app.command()
def init(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Print {\"path\", \"created\"} as JSON."),
):
    """Create the database if it does not exist (never touches an existing file's jobs); print its path.

    Example: jobctl --db /var/lib/jobctl/jobs.db init
    """
    st = state(ctx)
    with st.open_queue(create=True) as q:
        integrity = next((c for c in q.health_checks() if c.name == "integrity"), None)  # a file's
        if integrity is not None and not integrity.ok:  # the header can be fine while pages are not: say so before anyone trusts it
            from jobctl.errors import DatabaseUnusable

            raise DatabaseUnusable(f"the database {q.location} is corrupt ({integrity.detail}); restore it from a backup")
        if as_json:
            emit_json({"path": q.location, "created": bool(q.created)})
        else:
            emit(q.location)


@app.command()
def recover(
    ctx: typer.Context,
    older_than: Optional[str] = typer.Option(None, "--older-than", metavar="DUR", help="Also treat jobs silent this long as lost."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show what would be done; change nothing."),
    as_json: bool = typer.Option(False, "--json", help="One {\"id\", \"action\"} per line (with --dry-run, also \"dry_run\": true)."),
    quiet: bool = typer.Option(False, "--quiet", help="Print nothing when no lease expired (for cron: mail only when it acted)."),
):
    """Requeue (or bury) running jobs whose lease expired: their worker is gone.

    One run acts on every lease expired at that moment. Leases are timed on a clock that a step
    of the wall clock does not move (SQLite: the host's boot clock; PostgreSQL: the server's), so
    such a step neither expires a live worker's jobs nor delays a dead one's. Workers also sweep by
    themselves every 30s.

    Example: jobctl --db /var/lib/jobctl/jobs.db recover --dry-run
    """
    with state(ctx).open_queue() as q:
        done = q.recover(older_than=older_than, dry_run=dry_run)
        now = q.now()
        nows = {j.id: q.engine.lease_now(j, now) for j, _ in done}  # (a step of the wall clock left out of "ago")
    if as_json:
        for job, action in done:
            emit_json({"id": job.id, "action": action, **({"dry_run": True} if dry_run else {})})
        return
    from jobctl import output

    out = output.console()
    if not done:
        if not quiet:
            out.print("no expired leases")
        return
    rows = [[str(j.id), output.text(j.queue), output.text(j.type), output.text(j.worker or "-"),
             f"{j.attempts}/{j.max_attempts}", output.ago(j.lease_expires_at, nows[j.id]),
             ("would be " if dry_run else "") + action] for j, action in done]
    if out.is_terminal:  # one line per job at the screen's width: names and workers are cut, not folded
        from rich.console import Group

        from jobctl.output import Col

        cols = [Col("ID", right=True), Col("QUEUE", cut=True, soft=32), Col("TYPE", cut=True, drop=2),
                Col("WORKER", cut=True, least=8), Col("RUNS", right=True, drop=1), Col("LEASE EXPIRED", right=True),
                Col("ACTION")]
        out.print(Group(*output.grid_lines(cols, rows, out.width)), crop=False)
    else:
        output.print_view(output.simple_table(["ID", "QUEUE", "TYPE", "WORKER", "RUNS", "LEASE EXPIRED", "ACTION"], rows), out)


@app.command()
@filters.with_filters
def purge(
    ctx: typer.Context,
    completed_older_than: Optional[str] = typer.Option(None, "--completed-older-than", metavar="DUR", help="Delete jobs completed longer ago than this (e.g. 7d)."),
    cancelled_older_than: Optional[str] = typer.Option(None, "--cancelled-older-than", metavar="DUR", help="Delete jobs cancelled longer ago than this."),
    buried_older_than: Optional[str] = typer.Option(None, "--buried-older-than", metavar="DUR", help="Delete jobs buried longer ago than this."),
    by: filters.Filters = filters.options(states="completed, cancelled or buried"),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only count them."),
    as_json: bool = typer.Option(False, "--json", help="Print the counts, by status, as JSON."),
):
    """Delete finished jobs and their history; without ages, as the config's [retention] says.

    The filters narrow what the ages (or the retention) would delete.

    Example: jobctl purge --completed-older-than 7d --type import --payload tenant=b
    """
    from jobctl.cli.progress import progress_bar

    sel = by.selection(allowed=("completed", "cancelled", "buried"))

    ages = {"completed_older_than": completed_older_than, "cancelled_older_than": cancelled_older_than,
            "buried_older_than": buried_older_than}
    with state(ctx).open_queue() as q, progress_bar("purging", unit="jobs") as on_progress:
        counts = q.purge(**ages, dry_run=dry_run, on_progress=on_progress, selection=sel)
        kept = q.kept_for_rate_windows(**ages, dry_run=dry_run)
    total = sum(counts.values())
    if kept:
        import sys

        sys.stderr.write(f"jobctl: note: {kept} finished job(s) of rate-limited types {'would be' if dry_run else 'were'} "
                         "kept: their rate window still counts their runs (they go once it has passed)\n")
    if as_json:
        emit_json({"deleted" if not dry_run else "would_delete": total, "by_status": counts, "dry_run": dry_run})
    else:
        from jobctl.cli.jobs import how_many
        from jobctl.cli.state import tell

        emit(str(total))
        tell(how_many("would delete" if dry_run else "deleted", total, "finished job", counts, dry_run))


@app.command()
def pause(
    ctx: typer.Context,
    queue: str = typer.Argument(..., metavar="QUEUE", autocompletion=complete_queue, help="The queue to pause."),
    type: Optional[str] = typer.Option(None, "--type", "-t", metavar="T", autocompletion=complete_type, help="Pause only the jobs of this type in the queue."),
    for_: Optional[str] = typer.Option(None, "--for", metavar="DUR", help="Resume by itself after this long (90s, 30m, 2h)."),
    until: Optional[str] = typer.Option(None, "--until", metavar="TIME", help="Resume by itself at this time (ISO 8601)."),
    as_json: bool = typer.Option(False, "--json", help="Print {\"queue\", \"type\", \"paused\", \"until\"} as JSON."),
):
    """Stop claims from a queue, or of one type in it; enqueue still works.

    A queue with no jobs yet can be paused ahead. With --for or --until the pause ends by itself;
    `jobctl resume` ends it sooner.

    Example: jobctl pause billing --type send-invoice --for 30m
    """
    import sys

    from jobctl.cli.state import tell
    from jobctl.durations import to_rfc3339

    with state(ctx).open_queue() as q:
        known = q.queue_names()
        end = q.pause(queue, type=type, for_=for_, until=until)
    if as_json:
        emit_json({"queue": queue, "type": type, "paused": True, "until": to_rfc3339(end) if end else None})
    else:
        tell(f"paused {'type ' + type + ' in queue' if type else 'queue'} {queue}"
             + (f" until {to_rfc3339(end)}" if end else " until `jobctl resume`"))
    if queue not in known:  # legitimate ahead of time, but a typo would leave the real queue running
        sys.stderr.write(f"jobctl: note: queue {queue} has no jobs yet; paused ahead of time "
                         f"(known queues: {', '.join(known) or 'none'})\n")


@app.command()
def resume(
    ctx: typer.Context,
    queue: str = typer.Argument(..., metavar="QUEUE", autocompletion=complete_queue, help="The paused queue."),
    type: Optional[str] = typer.Option(None, "--type", "-t", metavar="T", autocompletion=complete_type, help="End only the pause of this type in the queue."),
    as_json: bool = typer.Option(False, "--json", help="Print {\"queue\", \"type\", \"paused\": false} as JSON."),
):
    """Let workers claim from a paused queue again, and from every type paused in it.

    With --type, only that type's pause ends. A queue or type that is not paused is refused (exit 2).

    Example: jobctl resume billing
    """
    import sys

    from jobctl.cli.state import tell

    with state(ctx).open_queue() as q:
        q.resume(queue, type=type)
        if as_json:
            emit_json({"queue": queue, "type": type, "paused": False})
        else:
            tell(f"resumed {'type ' + type + ' in queue' if type else 'queue'} {queue}")
        if type is not None and queue in q.paused_queues():
            sys.stderr.write(f"jobctl: note: type {type} resumed, but the whole queue {queue} is still paused "
                             f"(`jobctl resume {queue}`)\n")


@app.command()
def doctor(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print the checks as one JSON object.")):
    """Check the database and config: integrity, schema, permissions, WAL, leases, stuck and damaged jobs, handlers.

    Exits 0 when all is well, 9 when a check found a problem, 8 when the file cannot be used.

    Example: jobctl doctor || mail -s "jobctl needs a look" ops@example.com
    """
    st = state(ctx)
    with st.open_queue() as q:
        found = q.health_checks()
        location = q.location
    checks = [(c.name, c.ok, c.detail) for c in found]
    ok = all(good for _, good, _ in checks)
    if as_json:
        extra = {k: v for c in found if c.data for k, v in c.data.items()}
        emit_json({"ok": ok, "path": location,
                   "checks": [{"check": c, "ok": good, "detail": d} for c, good, d in checks], **extra})
    else:
        from rich.text import Text

        from jobctl import output

        rows = [[c, Text("ok", style="green") if good else Text("PROBLEM", style="bold red"), output.text(d)]
                for c, good, d in checks]
        output.print_view(output.simple_table(["CHECK", "STATUS", "DETAIL"], rows))
    if not ok:
        raise CheckFailed(f"doctor found {sum(1 for _, g, _ in checks if not g)} problem(s) in {location}")


@app.command()
def backup(
    ctx: typer.Context,
    path: str = typer.Argument(..., metavar="PATH", help="The file to write (refused if it exists, unless --force)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing file at PATH (a regular file only, never the database)."),
    as_json: bool = typer.Option(False, "--json", help="Print {\"path\"} as JSON."),
):
    """Write a consistent copy of the live database (safe while workers run); print its path.

    Example: jobctl backup /var/backups/jobctl-$(date +%F).db
    """
    from jobctl import engines

    dest = Path(path).expanduser()
    if engines.scheme_of(state(ctx).db_path()) not in (None, "sqlite"):
        with state(ctx).open_queue() as q:  # a server database: says to use the server's tools (exit 2)
            q.backup(dest)
    if dest.is_dir():
        raise InvalidInput(f"{dest} is a directory; give a file path for the backup")
    if os.path.lexists(dest) and not force:
        raise InvalidInput(f"{dest} exists; choose another path or pass --force to replace it")
    if not dest.parent.is_dir():
        raise InvalidInput(f"the folder {dest.parent} does not exist")
    from jobctl.cli.progress import progress_bar

    with state(ctx).open_queue() as q, progress_bar("backing up") as on_progress:
        q.backup(dest, on_progress=on_progress)
    if as_json:
        emit_json({"path": str(dest)})
    else:
        emit(str(dest))


@app.command()
def restore(
    ctx: typer.Context,
    backup: str = typer.Argument(..., metavar="BACKUP", help="A file written by `jobctl backup`."),
    force: bool = typer.Option(False, "--force", help="Replace an existing database (all its jobs)."),
):
    """Put a backup back as the database (--db), safely: refused while any process has it open.

    Checks the backup, copies it privately (0600) beside the database, removes the old
    write-ahead log (which would corrupt the restored file) and renames the copy into place.
    Stop the workers first: while any process has the database open it exits 6 and changes
    nothing. Prints the database's path.

    Example: systemctl stop 'jobctl-worker@*' && jobctl restore --force /var/backups/jobctl-2026-01-31.db
    """
    from jobctl.engines import restore as restoring

    from jobctl import engines

    st = state(ctx)
    if engines.scheme_of(st.db_path()) not in (None, "sqlite"):
        raise InvalidInput("restore works on a SQLite file; restore a server database with its own tools "
                           "(for PostgreSQL: psql or pg_restore, from a pg_dump)")
    db = Path(engines.sqlite_path(st.db_path()))
    if not (st.allow_network_fs or st.settings.allow_network_fs):
        from jobctl.engines import files

        files.check_filesystem(db)
    restoring.restore(Path(backup).expanduser(), db, force=force)
    emit(str(db))


@app.command()
def migrate(
    ctx: typer.Context,
    to: str = typer.Option(..., "--to", metavar="PATH|URL", help="The database to copy into: new or empty (postgresql://... or a SQLite path)."),
    as_json: bool = typer.Option(False, "--json", help="Print what was copied as one JSON object."),
):
    """Copy every job, with its history, runs, logs and pauses, into another database (SQLite or PostgreSQL).

    The current database (--db) is read from one consistent snapshot and left unchanged; the target
    (a SQLite file is created if needed; a PostgreSQL database must exist, jobctl creates its
    schema) is written in one transaction, so it receives everything or nothing, and
    the counts of every table are checked before that transaction commits. A refused or interrupted
    copy removes again the file, folders or schema this run had created (unless another process took
    to them meanwhile: the error then says what was left). A target that already
    holds jobs (or any other jobctl data) is refused (exit 2). Ids are kept; new jobs on the target
    get higher ones. Stop the workers first: a job running meanwhile is copied as running, and its
    worker still reports to the old database. Then point JOBCTL_DB (or the config's db) at the target.

    Example: jobctl --db /var/lib/jobctl/jobs.db migrate --to postgresql://jobctl@db.internal/jobs
    """
    import sys

    from jobctl import engines
    from jobctl.cli.progress import progress_bar
    from jobctl.config import resolve_busy_timeout
    from jobctl.engines.transfer import Transfer, copy_database

    st = state(ctx)
    with st.open_queue() as q:
        server = engines.scheme_of(to) in engines.POSTGRES_SCHEMES
        target = engines.open(to, create=True, settings=st.settings,
                              busy_timeout=resolve_busy_timeout(st.busy_timeout, st.settings, server=server),
                              allow_network_fs=True if st.allow_network_fs else None)
        try:
            source = q.engine
            if not isinstance(source, Transfer) or not isinstance(target, Transfer):
                odd = target if isinstance(source, Transfer) else source
                raise InvalidInput(f"{engines.display(odd.location)} cannot take part in a migration: "
                                   "this jobctl cannot copy that kind of database")
            with progress_bar("copying", unit="rows") as on_progress:
                try:
                    done = copy_database(source, target, on_progress=on_progress)
                except BaseException as e:  # (Ctrl-C too) a target this run created is removed again
                    left = target._transfer_undo_create() if target.created else None
                    if left is not None and isinstance(e, JobctlError):
                        e.args = (f"{str(e).replace('nothing was written', 'nothing was copied')}; {left}",)
                    if isinstance(e, KeyboardInterrupt):
                        from jobctl.cli import _fail

                        _fail(f"interrupted; nothing was copied to {engines.display(target.location)}"
                              + (f"; {left}" if left else ""), 130)
                        raise typer.Exit(130) from None
                    raise
            source_at, target_at = engines.display(q.engine.location), engines.display(target.location)
        finally:
            target.close()
    c = done.counts
    if as_json:
        emit_json({"jobs": c["jobs"], "dependencies": c["job_deps"], "events": c["events"], "runs": c["runs"],
                   "logs": c["job_logs"], "pauses": done.pauses, "queues": c["queues"],
                   "paused_types": c["paused_types"], "running": done.running, "from": source_at, "to": target_at})
    else:
        def n(count: int, what: str) -> str:
            return f"{count} {what}" if count == 1 else f"{count} {what}s"

        emit(f"copied {n(c['jobs'], 'job')} ({n(c['events'], 'event')}, {n(c['runs'], 'run')}, "
             f"{n(c['job_logs'], 'log')}, {n(done.pauses, 'pause')}) from {source_at} to {target_at}")
    if done.running:
        were = "job was" if done.running == 1 else "jobs were"
        sys.stderr.write(f"jobctl: warning: {done.running} {were} running; their workers still report to the old "
                         "database: stop workers before migrating (on the new one these jobs run again once their "
                         "leases expire)\n")
