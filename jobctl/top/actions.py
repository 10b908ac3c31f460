"""What the keys of `jobctl top` do: the same Queue calls as the command line's `retry` (of one job,
or of the jobs a filter selects), `cancel`, `bury`, `edit`, `pause`/`resume` and `workers drain`,
with the same refusals (a JobctlError's message, the one line the command line prints), turned
into an Outcome for the status line. No Textual here.

Each key's action is a function of (queue, Target) -> Outcome in ACTIONS; a bulk one (R, r on a
buried group) is a count and the action to run once the person said yes.
"""

from __future__ import annotations

from typing import Any, Callable

from jobctl.errors import JobctlError
from jobctl.top.filters import Filter


class Target:
    """What the keys act on: the selected job (id, queue, type), a selected queue alone, or a
    selected worker (its id, as `jobctl workers` shows it)."""

    def __init__(self, job_id: int | None = None, queue: str | None = None, type: str | None = None,
                 worker: str | None = None, reason: str | None = None, payload_text: str | None = None):
        self.job_id = job_id
        self.queue = queue
        self.type = type
        self.worker = worker
        self.reason = reason  # bury: why (optional)
        self.payload_text = payload_text  # edit: the new payload, as edited

    def __repr__(self) -> str:
        return f"Target(job_id={self.job_id}, queue={self.queue!r}, type={self.type!r}, worker={self.worker!r})"


class Outcome:
    """The status line after an action: ok or refused, and one line that says what happened or why not."""

    def __init__(self, ok: bool, message: str):
        self.ok = ok
        self.message = message

    def __repr__(self) -> str:
        return f"Outcome({self.ok}, {self.message!r})"


def _refused(e: JobctlError) -> Outcome:
    return Outcome(False, e.message)


def _act(selected: bool, unselected: str, call: Callable[[], Any], done: Callable[[Any], str],
         refused: str = "") -> Outcome:
    """The action of one selected thing: `unselected` when nothing is selected, else call() and what
    it did in done's words, or its refusal (the JobctlError's message, after `refused`)."""
    if not selected:
        return Outcome(False, unselected)
    try:
        result = call()
    except JobctlError as e:
        return Outcome(False, refused + e.message)
    return Outcome(True, done(result))


def _job_action(q, t: Target, name: str, call: Callable) -> Outcome:
    """One job's action (the command line's `jobctl NAME ID`): its new state, or its refusal."""
    return _act(t.job_id is not None, f"select a job to {name}", call,
                lambda job: f"{name}: job {job.id} is now {job.status}")


def retry(q, t: Target) -> Outcome:
    """`jobctl retry ID`."""
    if t.job_id is None:
        return Outcome(False, "select a job to retry (r acts on the selected job; R on every buried job matching the filter)")
    return _job_action(q, t, "retry", lambda: q.retry(t.job_id))


def cancel(q, t: Target) -> Outcome:
    """`jobctl cancel ID`: pending and buried jobs at once, a running one by asking its worker."""
    return _job_action(q, t, "cancel", lambda: q.cancel(t.job_id))


def pause_or_resume(q, t: Target) -> Outcome:
    """`jobctl pause QUEUE [--type T]`, or `jobctl resume` when that queue or type is paused."""
    if t.queue is None:
        return Outcome(False, "select a queue (or a job, for its type) to pause or resume")
    what = f"type {t.type} in queue {t.queue}" if t.type else f"queue {t.queue}"
    try:
        paused = any(p[0] == t.queue and p[1] == t.type for p in q.pauses())
        if paused:
            q.resume(t.queue, type=t.type)
            return Outcome(True, f"resumed {what}")
        q.pause(t.queue, type=t.type)
    except JobctlError as e:
        return _refused(e)
    return Outcome(True, f"paused {what} until resumed (p again resumes it)")


def drain(q, t: Target) -> Outcome:
    """`jobctl workers drain WORKER`: it claims nothing more, finishes its jobs, then exits."""
    def told(rows) -> str:
        from jobctl.untrusted import safe

        names = "; ".join(f"{safe(r['worker'])} ({safe(r['host'])}, pid {r['pid']})" for r in rows)
        return f"draining {names}: claims nothing more, finishes its jobs, then exits"

    return _act(t.worker is not None, "select a worker to drain (w lists them)",
                lambda: q.order_workers("drain", workers=[t.worker]), told)


def bury(q, t: Target) -> Outcome:
    """`jobctl bury ID [--reason R]`: a job not started yet stops, as buried, until retried."""
    return _job_action(q, t, "bury", lambda: q.bury(t.job_id, reason=t.reason or None))


def edit(q, t: Target) -> Outcome:
    """`jobctl edit ID --payload JSON`: the payload as edited in $EDITOR (checked as enqueue checks it)."""
    return _act(t.job_id is not None and t.payload_text is not None, "select a job to edit",
                lambda: q.edit(t.job_id, payload_text=t.payload_text),
                lambda job: f"edit: job {job.id} edited (its history says what changed)",
                refused="edit refused, nothing changed: ")


def checked(q, name: str, job_id: int):
    """The job a key that asks first (c, b) or opens an editor (e) would act on, as it is now;
    JobctlError when the command line would refuse it (`jobctl cancel`, `bury`, `edit` of a job
    that finished, or is running), or would change nothing (`bury` of a buried job), so that
    nothing is asked and no editor opens for nothing. The rules are transitions.cancel's, bury's
    and edit's."""
    from jobctl import transitions

    job = q.get(job_id)
    now = q.now()
    if name == "cancel":
        transitions.cancel(job, now, token=None, reason=None)
    elif name == "bury":
        if job.status == "buried":  # (refused by `bury` too; here with the key that retries it)
            raise transitions.refuse(job, "bury it (it is buried already; r retries it)")
        transitions.bury(job, now, reason=None)
    else:
        transitions.edit(job, now, changes={})
    return job


def retry_selected(q, sel, what: str) -> tuple[int, Callable[[], Outcome]]:
    """How many buried jobs a selection matches, and the action that retries them (asked first):
    `jobctl retry --status buried --queue ... --error ...`, the same Queue calls (matching_ids, then
    act in short transactions, each job checked again) and the same report of the outcomes."""
    from jobctl.cli.filters import report

    ids = [] if sel is None else q.matching_ids(sel)

    def run() -> Outcome:
        counts: dict[str, int] = {}
        try:
            for _, outcome, _ in q.act("retry", ids, sel):
                word = "retried" if outcome == "changed" else outcome
                counts[word] = counts.get(word, 0) + 1
        except JobctlError as e:
            return _refused(e)
        return Outcome(not counts.get("skipped") and not counts.get("refused"),
                       report("retry", len(ids), counts, False) + f" ({what})")
    return len(ids), run


def buried_matching(q, flt: Filter) -> tuple[int, Callable[[], Outcome]]:
    """R: every buried job the filter matches (`jobctl retry --status buried` with its options)."""
    return retry_selected(q, flt.within(["buried"]), f"buried, matching {flt.shown}" if flt else "buried")


def buried_group(q, flt: Filter, group: dict) -> tuple[int, Callable[[], Outcome]]:
    """r on a group of the buried tab: its jobs, as `jobctl retry --queue Q --type T --error E`
    with the filter's other options would select them (an error is matched as contained, as
    --error matches: a longer error that contains it is retried too)."""
    from jobctl.errors import InvalidInput

    error = group.get("select_error")
    if not error:  # (buried by hand, never failed): --error cannot tell this group from the others
        raise InvalidInput("these jobs have no error to select them by: retry them one by one (Enter shows "
                           "each), or with R under a filter")
    sel = flt.within(["buried"], queues=[group["queue"]], types=[group["type"]], errors=[error])
    return retry_selected(q, sel, f"queue {group['queue']}, type {group['type']}, the group's error")


# The keys' actions by name.
ACTIONS: dict[str, Callable[..., Outcome]] = {
    "retry": retry,
    "cancel": cancel,
    "pause": pause_or_resume,
    "bury": bury,     # asks for a reason first (optional)
    "edit": edit,     # the payload in $EDITOR (the app suspends meanwhile)
    "drain": drain,   # on the workers pane (w)
}
