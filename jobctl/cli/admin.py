"""Operator commands on the file and the queue as a whole: init, recover, purge, pause, resume,
doctor, backup."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from jobctl.cli.app import app, emit, emit_json, state
from jobctl.completion import complete_queue
from jobctl.errors import CheckFailed, InvalidInput

WAL_WARN_BYTES = 64 * 1024 * 1024


@app.command()
def init(ctx: typer.Context):
    """Create the database if it does not exist (never touches an existing file's jobs); print its path.

    Example: jobctl --db /var/lib/jobctl/jobs.db init
    """
    st = state(ctx)
    with st.open_queue(create=True) as q:
        integrity = q.engine.file_report()["integrity"]
        if integrity != "ok":  # the header can be fine while pages are not: say so before anyone trusts it
            from jobctl.errors import DatabaseUnusable

            raise DatabaseUnusable(f"the database {q.engine.path} is corrupt ({integrity}); restore it from a backup")
        emit(q.engine.path)


@app.command()
def recover(
    ctx: typer.Context,
    older_than: Optional[str] = typer.Option(None, "--older-than", metavar="DUR", help="Also treat jobs silent this long as lost."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show what would be done; change nothing."),
    as_json: bool = typer.Option(False, "--json", help="One {\"id\", \"action\"} per line."),
):
    """Requeue (or bury) running jobs whose lease expired: their worker is gone.

    Example: */5 * * * * jobctl recover --json >> /var/log/jobctl-recover.log
    """
    with state(ctx).open_queue() as q:
        done = q.recover(older_than=older_than, dry_run=dry_run)
        now = q.now()
    if as_json:
        for job, action in done:
            emit_json({"id": job.id, "action": action, **({"dry_run": True} if dry_run else {})})
        return
    from jobctl import output

    out = output.console()
    if not done:
        out.print("no expired leases")
        return
    rows = [[str(j.id), j.queue, j.type, j.worker or "-", f"{j.attempts}/{j.max_attempts}",
             output.ago(j.lease_expires_at, now), ("would be " if dry_run else "") + action] for j, action in done]
    output.print_view(output.simple_table(["ID", "QUEUE", "TYPE", "WORKER", "RUNS", "LEASE EXPIRED", "ACTION"], rows), out)


@app.command()
def purge(
    ctx: typer.Context,
    completed_older_than: Optional[str] = typer.Option(None, "--completed-older-than", metavar="DUR", help="Delete jobs completed longer ago than this (e.g. 7d)."),
    cancelled_older_than: Optional[str] = typer.Option(None, "--cancelled-older-than", metavar="DUR", help="Delete jobs cancelled longer ago than this."),
    buried_older_than: Optional[str] = typer.Option(None, "--buried-older-than", metavar="DUR", help="Delete jobs buried longer ago than this."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only count them."),
    as_json: bool = typer.Option(False, "--json", help="Print the counts, by status, as JSON."),
):
    """Delete finished jobs and their history; without options, as the config's [retention] says.

    Example: jobctl purge --completed-older-than 7d --cancelled-older-than 7d
    """
    from jobctl.cli.progress import progress_bar

    with state(ctx).open_queue() as q, progress_bar("purging", unit="jobs") as on_progress:
        counts = q.purge(completed_older_than=completed_older_than, cancelled_older_than=cancelled_older_than,
                         buried_older_than=buried_older_than, dry_run=dry_run, on_progress=on_progress)
    total = sum(counts.values())
    if as_json:
        emit_json({"deleted" if not dry_run else "would_delete": total, "by_status": counts, "dry_run": dry_run})
    else:
        emit(str(total))


@app.command()
def pause(ctx: typer.Context, queue: str = typer.Argument(..., metavar="QUEUE", autocompletion=complete_queue,
                                                          help="The queue to pause.")):
    """Stop claims from a queue (enqueue still works).

    Example: jobctl pause billing
    """
    with state(ctx).open_queue() as q:
        q.pause(queue)


@app.command()
def resume(ctx: typer.Context, queue: str = typer.Argument(..., metavar="QUEUE", autocompletion=complete_queue,
                                                           help="The paused queue.")):
    """Let workers claim from a paused queue again.

    Example: jobctl resume billing
    """
    with state(ctx).open_queue() as q:
        q.resume(queue)


@app.command()
def doctor(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print the checks as one JSON object.")):
    """Check the file: integrity, schema, permissions, WAL size, expired leases, unrunnable jobs, handler commands.

    Exits 0 when all is well, 9 when a check found a problem, 8 when the file cannot be used.
    Example: jobctl doctor || mail -s "jobctl needs a look" ops@example.com
    """
    from jobctl.engines.schema import SCHEMA_VERSION

    st = state(ctx)
    checks: list[tuple[str, bool, str]] = []
    with st.open_queue() as q:
        report = q.engine.file_report()
        expired = q.engine.count_expired(q.now())
        pending_types = q.engine.pending_types()
    checks.append(("integrity", report["integrity"] == "ok", report["integrity"]))
    checks.append(("schema", report["schema_version"] == SCHEMA_VERSION, f"v{report['schema_version']}"))
    checks.append(("journal mode", report["journal_mode"] == "wal", report["journal_mode"]))
    loose = {p: m for p, m in report["modes"].items() if m & 0o077}
    checks.append(("permissions", not loose,
                   "owner only (0600)" if not loose else ", ".join(f"{p} is {m:04o}; run chmod 600 {p}" for p, m in loose.items())))
    wal = report["wal_bytes"]
    checks.append(("wal size", wal <= WAL_WARN_BYTES,
                   f"{wal / 1048576:.1f} MiB" + ("" if wal <= WAL_WARN_BYTES else
                                                  "; a long-running reader may be blocking checkpoints")))
    checks.append(("expired leases", expired == 0,
                   "none" if expired == 0 else f"{expired} job(s); run `jobctl recover` (workers also do it)"))
    runnable = {name for name, tc in st.settings.types.items() if tc.command}
    orphans = {t: n for t, n in pending_types.items() if t not in runnable}
    checks.append(("handlers", not orphans,
                   "every pending type has a command" if not orphans else
                   "no [types.X] command for: " + ", ".join(f"{t} ({n} pending)" for t, n in sorted(orphans.items()))
                   + " (fine if workers use --type or scripts claim them)"))
    from jobctl.handlers import command_problems

    broken = command_problems(st.settings)
    checks.append(("handler commands", not broken,
                   "every command can be run" if not broken else
                   "; ".join(f"type {t}: {p}" for t, p in broken.items()) + " (workers refuse to start)"))
    ok = all(good for _, good, _ in checks)
    if as_json:
        emit_json({"ok": ok, "path": str(q.engine.path),
                   "checks": [{"check": c, "ok": good, "detail": d} for c, good, d in checks]})
    else:
        from rich.text import Text

        from jobctl import output

        rows = [[c, Text("ok", style="green") if good else Text("PROBLEM", style="bold red"), d] for c, good, d in checks]
        output.print_view(output.simple_table(["CHECK", "STATUS", "DETAIL"], rows))
    if not ok:
        raise CheckFailed(f"doctor found {sum(1 for _, g, _ in checks if not g)} problem(s) in {q.engine.path}")


@app.command()
def backup(
    ctx: typer.Context,
    path: str = typer.Argument(..., metavar="PATH", help="The file to write (refused if it exists, unless --force)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing file at PATH."),
):
    """Write a consistent copy of the live database (safe while workers run); print its path.

    Example: jobctl backup /var/backups/jobctl-$(date +%F).db
    """
    dest = Path(path).expanduser()
    if dest.is_dir():
        raise InvalidInput(f"{dest} is a directory; give a file path for the backup")
    if dest.exists() and not force:
        raise InvalidInput(f"{dest} exists; choose another path or pass --force to replace it")
    if not dest.parent.is_dir():
        raise InvalidInput(f"the folder {dest.parent} does not exist")
    from jobctl.cli.progress import progress_bar

    with state(ctx).open_queue() as q, progress_bar("backing up") as on_progress:
        q.engine.backup(dest, on_progress=on_progress)
    emit(str(dest))
