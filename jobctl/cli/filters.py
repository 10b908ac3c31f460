"""The filters every command that selects jobs shares (list, retry, cancel, reschedule, bury,
purge, retry-buried), defined once here, and acting on what they select: the count, the question
on a terminal, short transactions with a progress bar, and the report per outcome."""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, TypeVar

import typer

from jobctl.cli.app import emit, emit_json, state
from jobctl.completion import complete_queue, complete_selection_status, complete_type
from jobctl.errors import InvalidInput, JobctlError

if TYPE_CHECKING:
    from jobctl.selection import Selection

F = TypeVar("F", bound=Callable[..., Any])

# One definition of each option, added to every command that selects jobs by `with_filters`.
QUEUE = typer.Option(None, "--queue", "-q", autocompletion=complete_queue, help="Only jobs of this queue (repeatable: any of them).")
TYPE = typer.Option(None, "--type", "-t", autocompletion=complete_type, help="Only jobs of this type (repeatable).")
STATUS = typer.Option(None, "--status", "-s", metavar="STATE", autocompletion=complete_selection_status,
                      help="Only jobs in this state (repeatable): a state, or scheduled, blocked, held.")
ERROR = typer.Option(None, "--error", metavar="TEXT", help="Only jobs whose last error contains TEXT, in any case (repeatable).")
PAYLOAD = typer.Option(None, "--payload", metavar="PATH=VALUE", help="Only jobs whose payload holds VALUE at PATH (user.id=42, items.0.sku=A-1; VALUE as JSON, else text; repeatable).")
WORKER = typer.Option(None, "--worker", metavar="W", help="Only jobs that worker W runs now or ran last (repeatable).")
KEY = typer.Option(None, "--key", metavar="K", help="Only the job with idempotency key K (repeatable).")
SINCE = typer.Option(None, "--since", metavar="WHEN", help="Only jobs changed at or after WHEN: a time, or a duration meaning that long ago (1h).")
BEFORE = typer.Option(None, "--before", metavar="WHEN", help="Only jobs last changed before WHEN (a time, or a duration: that long ago).")
MIN_ATTEMPTS = typer.Option(None, "--min-attempts", metavar="N", help="Only jobs that used at least N runs.")
YES = typer.Option(False, "--yes", "-y", help="Do not ask on a terminal before acting on several jobs.")
DRY_RUN = typer.Option(False, "--dry-run", help="Print what would change (how many jobs; on a terminal also their ids; --json: one line per job); change nothing.")
JSON_EACH = typer.Option(False, "--json", help="Print each job as JSON (one per line); with a filter one {\"id\", \"action\"} per job.")


def selection(*, queue: Optional[List[str]] = None, type: Optional[List[str]] = None,
              status: Optional[List[str]] = None, error: Optional[List[str]] = None,
              payload: Optional[List[str]] = None, worker: Optional[List[str]] = None,
              key: Optional[List[str]] = None, since: Optional[str] = None, before: Optional[str] = None,
              min_attempts: Optional[str] = None, allowed=None):
    """The options checked into a selection.Selection (bad input: exit 2, before anything opens)."""
    from jobctl.selection import parse

    n = None
    if min_attempts is not None:
        try:
            n = int(min_attempts)
        except ValueError:
            raise InvalidInput(f"invalid --min-attempts {min_attempts!r}: give a number of runs, 0 or more") from None
    return parse(queues=queue, types=type, statuses=status, errors=error, payload=payload, workers=worker,
                 keys=key, since=since, before=before, min_attempts=n, allowed_statuses=allowed)


# The filter options in the order of --help, as parameters of a command's signature.
_FILTERS = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=option, annotation=kind)
            for name, kind, option in [
                ("queue", Optional[List[str]], QUEUE), ("type", Optional[List[str]], TYPE),
                ("status", Optional[List[str]], STATUS), ("error", Optional[List[str]], ERROR),
                ("payload", Optional[List[str]], PAYLOAD), ("worker", Optional[List[str]], WORKER),
                ("key", Optional[List[str]], KEY), ("since", Optional[str], SINCE),
                ("before", Optional[str], BEFORE), ("min_attempts", Optional[str], MIN_ATTEMPTS)]]


class _Place:
    """Where a command's signature takes the filter options (see `options`)."""

    def __init__(self, status: bool, states: Optional[str]) -> None:
        self.params = [p for p in _FILTERS if status or p.name != "status"]
        if states:
            option = typer.Option(None, "--status", "-s", metavar="STATE", autocompletion=complete_selection_status,
                                  help=f"Only jobs in this state (repeatable): {states}.")
            self.params = [p.replace(default=option) if p.name == "status" else p for p in self.params]


def options(*, status: bool = True, states: Optional[str] = None, acts: Optional[str] = None) -> Any:
    """The default of the one parameter that stands for all the filter options in a command decorated
    with `with_filters`; status=False leaves --status out (a command that chooses the state itself);
    states: the states --status takes, in words, where a command takes fewer than every one; acts:
    the action by filter (retry, cancel, ...) whose states --status takes (models.ACTS_ON)."""
    if acts is not None:
        from jobctl.models import ACTS_ON

        allowed, default = ACTS_ON[acts]
        states = (", ".join(allowed[:-1]) + " or " + allowed[-1] if len(allowed) > 1 else f"{allowed[0]} only")
        states += f"; without it, {' and '.join(default)} jobs" if default != allowed else ""
    return _Place(status, states)


class Filters:
    """The filter options of one command line as given; `selection()` checks them."""

    def __init__(self, values: dict) -> None:
        self.values = values

    def selection(self, *, allowed=None, status: Optional[List[str]] = None):
        """A selection.Selection (bad input: exit 2); status: the states, for a command without --status."""
        values = {**self.values, "status": status} if status is not None else self.values
        return selection(**values, allowed=allowed)

    def for_action(self, action: str, job_ids) -> Selection:
        """The selection of retry, cancel, reschedule or bury (the states it may act on: models.ACTS_ON),
        checked against the job ids given: ids or a filter."""
        from jobctl.models import ACTS_ON

        sel = self.selection(allowed=ACTS_ON[action][0])
        ids_or_filter(job_ids, sel, action)
        return sel


def with_filters(command: F) -> F:
    """Puts the filter options (--queue ... --min-attempts) in a command's signature, where its parameter
    whose default is `options()` stands, and passes that parameter the options given, as one `Filters`.

    typer builds a command from `inspect.signature`, so the command's --help, completion and parsing
    are those of the options written out in its signature."""
    signature = inspect.signature(command)  # (its annotations as written: typer resolves them as for any command)
    params = list(signature.parameters.values())
    at, place = next((i, p) for i, p in enumerate(params) if isinstance(p.default, _Place))
    added = [p if p.kind == place.kind else p.replace(kind=place.kind) for p in place.default.params]
    names = [p.name for p in added]

    @functools.wraps(command)
    def run(*args, **kwargs):
        kwargs[place.name] = Filters({name: kwargs.pop(name, None) for name in names})
        return command(*args, **kwargs)

    params[at:at + 1] = added
    run.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    run.__annotations__ = {**{k: v for k, v in command.__annotations__.items() if k != place.name},
                           **{p.name: p.annotation for p in added}}  # (typer resolves the command's own)
    return run  # type: ignore[return-value]


# Words for the report: what a change to a state is called, per action.
DONE = {"retry": "retried", "cancel": "cancelled", "bury": "buried", "reschedule": "rescheduled"}
DOING = {"retry": "retrying", "cancel": "cancelling", "bury": "burying", "reschedule": "rescheduling"}


def _on_a_terminal() -> bool:
    try:
        return sys.stdin.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def act(ctx, action: str, sel, *, dry_run: bool, yes: bool, as_json: bool, **inputs) -> None:
    """Act on every job a selection matches: count them, ask on a terminal when more than one
    (unless --yes or --dry-run), then change them in short transactions with a bar on a terminal.
    Prints the number changed on stdout and the count per outcome on stderr; with --json one
    {"id", "action"} per job. Nothing matched: a count of 0, exit 0."""
    from jobctl.models import ACTS_ON

    allowed, default = ACTS_ON[action]
    if not sel.statuses:
        sel.statuses = list(default)
    with state(ctx).open_queue() as q:
        ids = q.matching_ids(sel)
        if len(ids) > 1 and not yes and not dry_run and _on_a_terminal():
            sys.stderr.write(f"{action.capitalize()} {len(ids):,} jobs? [y/N] ")
            sys.stderr.flush()
            answer = sys.stdin.readline().strip().lower()
            if answer not in ("y", "yes"):  # declined: nothing changed, and that is not a failure
                if not as_json:  # (with --json: no job line, since no job changed)
                    emit("0")
                sys.stderr.write("not confirmed: nothing changed\n")
                return
        counts: dict[str, int] = {}
        would: list[int] = []  # (--dry-run: the jobs it would change, for a person to check)
        try:
            for job_id, outcome, detail in acting(q, action, ids, sel, dry_run=dry_run, **inputs):
                word = _word(action, outcome, detail)
                counts[word] = counts.get(word, 0) + 1
                if dry_run and outcome == "changed":
                    would.append(job_id)
                if as_json:
                    emit_json({"id": job_id, "action": word, **({"dry_run": True} if dry_run else {})})
        except (Interrupted, KeyboardInterrupt) as e:
            if not as_json:
                emit(str(_changed(counts)))
            interrupted(e, action, _changed(counts), len(ids), dry_run)
    if not as_json:
        emit(str(_changed(counts)))
    from jobctl.cli.state import tell

    tell(report(action, len(ids), counts, dry_run, states=sel.statuses, would=would))


class Interrupted(Exception):
    """Ctrl-C was pressed during an action (`acting`): it stopped after the transaction under way."""


def acting(q, action: str, ids: list[int], sel, *, dry_run: bool, **inputs):
    """Queue.act with a progress bar on a terminal, stopped by a first Ctrl-C once the transaction
    under way is done and every one of its jobs yielded (then Interrupted is raised); a second
    Ctrl-C raises KeyboardInterrupt at once. An error that stops it part way says how many jobs
    the transactions before had changed."""
    from jobctl.cli import progress

    with _ctrl_c_between_transactions() as asked, progress.progress_bar(DOING[action], unit="jobs") as bar:
        def on_progress(done: int, total: int) -> None:  # (after each transaction, its jobs yielded)
            if bar is not None:
                bar(done, total)
            if asked and done < total:  # (after the last one: all done, nothing to stop)
                raise Interrupted

        changed = 0
        try:
            for item in q.act(action, ids, sel, dry_run=dry_run, on_progress=on_progress, **inputs):
                changed += item[1] == "changed" and not dry_run
                yield item
        except JobctlError as e:
            # An error (a lock, a lost connection) that stops the action after some transactions
            # committed: its own "nothing changed" speaks of the last transaction only. Running
            # the action again goes on with the rest.
            if changed:
                e.args = (f"{DONE[action]} {changed:,} of {len(ids):,} jobs, then stopped: "
                          + str(e).replace("nothing changed", "nothing more changed"),)
            raise


def interrupted(e: BaseException, action: str, changed: int, matched: int, dry_run: bool):
    """The error line of an action stopped by Ctrl-C (`acting`), and exit 130."""
    from jobctl.cli import _fail

    # (a second Ctrl-C stops at once: a transaction under way may have been kept, or not)
    n = f"{changed:,}" if isinstance(e, Interrupted) else f"at least {changed:,}"
    _fail("interrupted; --dry-run: nothing changed" if dry_run else
          f"interrupted after {DOING[action]} {n} of {matched:,} jobs; the others are unchanged: "
          "run the same command again for the rest", 130)
    raise typer.Exit(130) from None


@contextlib.contextmanager
def _ctrl_c_between_transactions():
    """While an action runs, a first Ctrl-C (SIGINT) only asks it to stop once the transaction under
    way is done and counted (the list yielded is then true); a second one interrupts at once.
    Ctrl-C ignored on purpose (SIG_IGN: nohup, a background job) stays ignored."""
    import signal

    from jobctl.cli import sigint_handler

    asked: list[bool] = []

    def on_sigint(signum, frame):
        if asked:
            raise KeyboardInterrupt
        asked.append(True)

    with sigint_handler(on_sigint, replaces=lambda before: before is not signal.SIG_IGN):
        yield asked


def _changed(counts: dict[str, int]) -> int:
    return sum(n for word, n in counts.items() if word not in ("skipped", "refused", "unchanged"))


def _word(action: str, outcome: str, detail) -> str:
    if outcome != "changed":
        return outcome
    if action == "cancel" and detail == "cancel_requested":
        return "cancel_requested"
    return DONE[action]


SHOWN_IDS = 20  # at most this many ids in --dry-run's line (--json lists them all)


def report(action: str, matched: int, counts: dict[str, int], dry_run: bool, states: Optional[List[str]] = None,
           would: Sequence[int] = ()) -> str:
    """`retried 1,234 jobs; skipped 3 (changed meanwhile)`, `would cancel 2 jobs (4, 7); --dry-run:
    nothing changed` (would: the ids a dry run would change)."""
    why = {"skipped": "changed meanwhile", "refused": "not allowed in their state", "unchanged": "nothing to change"}
    done = sum(n for word, n in counts.items() if word not in why)
    line = f"{'would ' + action if dry_run else DONE[action]} {done:,} job{'' if done == 1 else 's'}"
    if would:
        more = f" and {len(would) - SHOWN_IDS:,} more: --json lists them" if len(would) > SHOWN_IDS else ""
        line += f" ({', '.join(map(str, would[:SHOWN_IDS]))}{more})"
    if counts.get("cancel_requested"):
        line += f" ({counts['cancel_requested']:,} running: cancellation requested)"
    line += "".join(f"; {word} {counts[word]:,} ({reason})" for word, reason in why.items() if counts.get(word))
    if not matched:
        line += f"; no {' or '.join(states or [])}{' ' if states else ''}job matches"  # (states: those looked in)
    return line + ("; --dry-run: nothing changed" if dry_run else "")


def ids_or_filter(job_ids, sel, command: str) -> None:
    """Job ids and a filter together are a usage error; neither is one too."""
    if job_ids and not sel.empty:
        raise InvalidInput(f"give job ids or a filter ({sel.describe() or '--since/--before/--min-attempts'}), not both")
    if not job_ids and sel.empty:
        raise InvalidInput(f"missing job ids or a filter: `jobctl {command} ID...`, or `jobctl {command} --queue Q "
                           "--type T --error TEXT ...` (see --help)")
