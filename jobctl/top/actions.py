"""What the keys of `jobctl top` do: the same Queue calls as the command line's `retry`, `cancel`,
`pause`/`resume`, `retry-buried` and `workers drain`, with the same refusals (a JobctlError's
message, the one line the command line prints), turned into an Outcome for the status line. No
Textual here.

An action that another part of jobctl brings later is None in ACTIONS until then, and its key
already says so; wiring it is one line there, a function of (queue, Target) -> Outcome, say
`"bury": lambda q, t: _job_action(q, t, "bury", lambda: q.bury(t.job_id))`. (`edit` also needs the
app to suspend while $EDITOR runs: App.suspend(), around reading the new payload.)
"""

from __future__ import annotations

from typing import Callable

from jobctl.errors import JobctlError
from jobctl.top.filters import Filter

NOT_YET = "not available yet in this version of jobctl"


class Target:
    """What the keys act on: the selected job (id, queue, type), a selected queue alone, or a
    selected worker (its id, as `jobctl workers` shows it)."""

    def __init__(self, job_id: int | None = None, queue: str | None = None, type: str | None = None,
                 worker: str | None = None):
        self.job_id = job_id
        self.queue = queue
        self.type = type
        self.worker = worker

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


def _job_action(q, t: Target, name: str, call: Callable) -> Outcome:
    """One job's action (the command line's `jobctl NAME ID`): its new state, or its refusal."""
    if t.job_id is None:
        return Outcome(False, f"select a job to {name}")
    try:
        job = call()
    except JobctlError as e:
        return _refused(e)
    return Outcome(True, f"{name}: job {job.id} is now {job.status}")


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
    if t.worker is None:
        return Outcome(False, "select a worker to drain (w lists them)")
    from jobctl.untrusted import safe

    try:
        rows = q.order_workers("drain", workers=[t.worker])
    except JobctlError as e:
        return _refused(e)
    told = "; ".join(f"{safe(r['worker'])} ({safe(r['host'])}, pid {r['pid']})" for r in rows)
    return Outcome(True, f"draining {told}: claims nothing more, finishes its jobs, then exits")


def buried_matching(q, flt: Filter) -> tuple[int, Callable[[], Outcome]]:
    """How many buried jobs the filter matches, and the action that retries them (asked first).

    A filter of at most one queue and one type is `jobctl retry-buried -q Q -t T` (one transaction);
    one with an error text or a time is `jobctl retry ID...` of the jobs it matches, one by one, so
    a job that changed meanwhile is refused alone and counted."""
    if not flt.errors and flt.since_s is None and flt.since_at is None and len(flt.queues) <= 1 \
            and len(flt.types) <= 1 and (not flt.statuses or "buried" in flt.statuses):
        queue, type = flt.only("queues"), flt.only("types")
        n = len(q.retry_buried(queue=queue, type=type, dry_run=True))

        def run_whole() -> Outcome:
            try:
                done = q.retry_buried(queue=queue, type=type)
            except JobctlError as e:
                return _refused(e)
            return Outcome(True, f"retried {len(done):,} buried job{'' if len(done) == 1 else 's'}")
        return n, run_whole
    now = q.now()
    ids = [j.id for j in q.list_jobs(statuses=["buried"], queue=flt.only("queues"), type=flt.only("types"),
                                     limit=0, sort="oldest") if flt.keeps(j, now, "buried")]

    def run_each() -> Outcome:
        done, refused = 0, []
        for job_id in ids:
            try:
                q.retry(job_id)
                done += 1
            except JobctlError as e:
                refused.append(e.message)
        line = f"retried {done:,} buried job{'' if done == 1 else 's'}"
        if refused:
            line += f"; {len(refused):,} refused (changed meanwhile): {refused[0]}"
        return Outcome(not refused, line)
    return len(ids), run_each


# The keys' actions by name: None until the feature exists (the key then says NOT_YET).
ACTIONS: dict[str, Callable[..., Outcome] | None] = {
    "retry": retry,
    "cancel": cancel,
    "pause": pause_or_resume,
    "bury": None,     # comes with `jobctl bury`
    "edit": None,     # comes with `jobctl edit` (the payload in $EDITOR)
    "drain": drain,   # on the workers pane (w)
}
