"""The rules of every state change, as pure functions of (job, now, inputs) -> Change.

Nothing here reads a clock, draws a random number or does I/O: `now` is the database's time,
read once by the engine inside the transaction that applies the change, and any random draw
(backoff jitter) is made by the caller beforehand. So an engine may call a rule twice (a server
engine retrying a serialization failure) and get the same answer. A rule refuses by raising
InvalidState (exit 4), or StaleToken when a report carries the token of an older claim; it may
return None for "nothing to change".
"""

from __future__ import annotations

from jobctl.durations import format_duration, to_rfc3339
from typing import Callable

from jobctl.engines.base import Change, NewJob
from jobctl.errors import InvalidState, StaleToken
from jobctl.models import HELD, REACTING, Job


# What a finished claim leaves behind: no worker, lease or token.
CLEAR_CLAIM = {"worker": None, "lease_expires_at": None, "lease_ms": None, "token": None, "heartbeat_at": None,
               "lease_boot_ms": None, "lease_boot_id": None}

# What a requeue leaves behind: no claim at all, its start included (a pending job was not claimed).
REQUEUE = {**CLEAR_CLAIM, "claimed_at": None}


def refuse(job: Job, action: str, hint: str = "") -> InvalidState:
    return InvalidState(f"job {job.id} is {job.status}; cannot {action}{hint}")


def check_token(job: Job, token: str | None, action: str) -> None:
    if token is not None and token != job.token:
        raise StaleToken(
            f"job {job.id}: the token is not that of its current claim (it was recovered or claimed "
            f"again; now {job.status}, run {job.attempts}); {action} refused, nothing changed"
        )


def backoff_delay(strategy: str, run: int) -> float:
    """Seconds to wait after run number `run` (1-based) failed."""
    if strategy == "exponential":
        return float(min(2**min(run, 32) * 30, 3600))
    if strategy == "linear":
        return float(run * 60)
    if strategy == "fixed":
        return 60.0
    steps = [int(x) for x in strategy.split(",")]
    return float(steps[min(run, len(steps)) - 1])


def by_holder(change: Change | None, job: Job, token: str | None, actor: str | None) -> Change | None:
    """A report that carries the claim's token is the worker's change: its event names the worker,
    unless the caller named an actor itself."""
    if change is not None and token is not None and actor is None and change.actor is None:
        change.actor = job.worker
    return change


# -- a running job's reports ------------------------------------------------------------------


def complete(job: Job, now: int, *, token: str | None, result_text: str | None) -> Change:
    if job.status not in HELD:
        raise refuse(job, "complete it (only a running job can be completed)")
    check_token(job, token, "complete")
    return Change("completed", {**CLEAR_CLAIM, "result": result_text, "progress": None, "progress_at": None},
                  message="completed", run="completed")


def fail(job: Job, now: int, *, token: str | None, error: str, bury: bool = False, bury_reason: str | None = None,
         retry_in: float | None = None, jitter: float = 1.0, details: dict | None = None) -> Change:
    """retry_in: seconds, overriding the backoff; jitter: the factor a jittered backoff is scaled by
    (drawn by the caller, 1.0 for none)."""
    if job.status not in HELD:
        raise refuse(job, "fail it (only a running job can fail)")
    check_token(job, token, "fail")
    fields: dict = {**CLEAR_CLAIM, "error": error}
    if job.status == "cancel_requested":
        return Change("buried", fields, message=f"{error} (cancellation was requested: not retried)",
                      details=details, run="failed")
    if bury or job.attempts >= job.max_attempts:
        why = (bury_reason or "--bury") if bury else f"no runs left ({job.attempts} of {job.max_attempts})"
        return Change("buried", fields, message=f"{error}; buried: {why}", details=details, run="failed")
    delay = retry_in if retry_in is not None else backoff_delay(job.backoff, job.attempts) * jitter
    fields.update(REQUEUE, run_at=now + int(delay * 1000))
    return Change("pending", fields, details=details, run="failed",
                  message=f"{error}; retry in {format_duration(delay)} (run {job.attempts} of {job.max_attempts})")


def heartbeat(job: Job, now: int, *, token: str | None, extend_ms: int | None) -> Change:
    if job.status not in HELD:
        raise refuse(job, "heartbeat it (only a running job holds a lease)")
    check_token(job, token, "heartbeat")
    ms = extend_ms if extend_ms is not None else (job.lease_ms or job.timeout_ms)
    return Change(job.status, {"lease_expires_at": now + ms, "heartbeat_at": now})  # (the engine times it: _lease)


def progress(job: Job, now: int, *, token: str | None, progress_text: str) -> Change:
    if job.status not in HELD:
        raise refuse(job, "record progress (only a running job has progress)")
    check_token(job, token, "progress")
    if progress_text == job.progress:  # the same report again: progress did not change since progress_at
        return Change(job.status, {"progress": progress_text})
    return Change(job.status, {"progress": progress_text, "progress_at": now})


def release(job: Job, now: int, *, token: str, reason: str) -> Change:
    """A worker gives back a job it could not finish: that run does not count."""
    if job.status not in HELD:
        raise refuse(job, "release it")
    check_token(job, token, "release")
    if job.status == "cancel_requested":
        return Change("cancelled", {**CLEAR_CLAIM}, message=f"stopped ({reason}); cancellation completed",
                      run="cancelled")
    return Change("pending", {**REQUEUE, "attempts": max(job.attempts - 1, 0), "run_at": now},
                  message=f"released: {reason}; this run does not count", run="released")


# -- operators --------------------------------------------------------------------------------


def cancel(job: Job, now: int, *, token: str | None, reason: str | None) -> Change | None:
    note = f": {reason}" if reason else ""
    if job.status == "cancelled":
        raise refuse(job, "cancel it (it is cancelled already; nothing changed)")
    if job.status == "completed":
        raise refuse(job, "cancel it (it has finished)")
    if token is not None:
        if job.status not in HELD:
            # A holder's confirmation, but no run holds the job now: said by its state, as complete
            # and fail say it, not as a token of a claim "recovered or claimed again".
            raise refuse(job, f"cancel it with --token (no run holds it now; `jobctl cancel {job.id}` without "
                              "--token cancels it)")
        check_token(job, token, "cancel")
    if job.status in ("pending", "buried"):
        return Change("cancelled", {}, message=f"cancelled{note}")
    if job.status in HELD and token is not None:
        return Change("cancelled", {**CLEAR_CLAIM}, message=f"stopped and cancelled{note}", run="cancelled")
    if job.status == "running":
        return Change("cancel_requested", {}, message=f"cancellation requested{note}")
    return None  # cancel_requested, asked again: nothing changes, and that is no refusal (the request stands)


def retry(job: Job, now: int, *, reset_attempts: bool) -> Change:
    if job.status != "buried":
        raise refuse(job, "retry it (only a buried job can be retried)")
    fields: dict = {"run_at": now, "claimed_at": None}  # (its last claim's start: a pending job has none)
    if reset_attempts:
        fields["attempts"] = 0
    elif job.attempts >= job.max_attempts:  # one more run allowed, and said so: RUNS reads 3/4, never 4/3
        fields["max_attempts"] = job.attempts + 1
    return Change("pending", fields, message="retried" + (" with attempts reset" if reset_attempts else ""))


BURIED_BY_HAND = "buried by hand"  # the history's word of `jobctl bury` (stats.by_hand_note reads it back)


def bury(job: Job, now: int, *, reason: str | None) -> Change:
    """Park a job that has not started (pending, scheduled, blocked) as buried, for a person: it
    stops, and `retry` brings it back. A running job is refused (its worker would not know):
    cancel it. Buried already is refused too, as every action refuses a job it would not move
    (only a repeated cancel of a job whose cancellation was requested is no refusal)."""
    if job.status == "buried":
        raise refuse(job, f"bury it (it is buried already; nothing changed; `jobctl retry {job.id}` requeues it)")
    if job.status == "cancel_requested":
        raise refuse(job, "bury it (it is running, and its cancellation was requested already)")
    if job.status in HELD:
        raise refuse(job, f"bury it (it is running; `jobctl cancel {job.id}` stops it)")
    if job.status != "pending":
        raise refuse(job, "bury it (it has finished)")
    note = f": {reason}" if reason else ""
    return Change("buried", {}, message=f"{BURIED_BY_HAND}{note}")


EDITABLE = ("payload", "queue", "priority", "max_attempts", "timeout_ms", "backoff")


def edit(job: Job, now: int, *, changes: dict) -> Change | None:
    """Change what a job that is not running will run with (changes: EDITABLE fields, checked by
    the caller; "payload" comes with "payload_hash"). The history says what changed, from what to
    what (payloads as JSON text: human views mask their secrets, as everywhere). Its idempotency
    key is kept. Nothing that differs: None."""
    if job.status in HELD:
        raise refuse(job, "edit it (it is running; cancel it first, or wait for it to finish)")
    if job.status in ("completed", "cancelled"):
        raise refuse(job, "edit it (it has finished; enqueue a new job instead)")
    fields: dict = {}
    said: list[str] = []
    for name in EDITABLE:
        if name not in changes or changes[name] == getattr(job, name):
            continue
        fields[name] = changes[name]
        old, new = getattr(job, name), changes[name]
        if name == "timeout_ms":
            said.append(f"timeout {format_duration(old / 1000)} → {format_duration(new / 1000)}")
        elif name == "payload":
            fields["payload_hash"] = changes["payload_hash"]
            said.append(f"payload {old} → {new}" if len(old) + len(new) <= 2000 else
                        f"payload changed ({len(old):,} → {len(new):,} characters; `jobctl show --json` has it)")
        else:
            said.append(f"{name.replace('_', ' ')} {old} → {new}")
    if not fields:
        return None
    return Change(job.status, fields, message="edited: " + "; ".join(said))


def cancel_dependent(job: Job, now: int, *, reason: str | None) -> Change | None:
    """A job that waits on a cancelled one (cancel --with-dependents): cancelled like it; one that
    has already finished is left as it is."""
    if job.status in ("completed", "cancelled"):
        return None
    return cancel(job, now, token=None, reason=reason)


def reschedule(job: Job, now: int, *, delay_ms: int = 0, not_before: int | None = None) -> Change:
    """Move the earliest start of a pending job to now + delay_ms, or not_before if later (a time
    in the past: now)."""
    if job.status != "pending":
        raise refuse(job, "reschedule it (only a pending job can be rescheduled)")
    when = max(now + delay_ms, not_before or 0)
    blocked = ", once the jobs it waits on complete" if job.waiting_on > 0 else ""
    return Change("pending", {"run_at": when},
                  message=("rescheduled: run now" if when <= now else f"rescheduled to {to_rfc3339(when)}") + blocked)


def with_reaction(change: Change | None, job: Job, prepare: Callable[[str], NewJob]) -> Change | None:
    """A change that makes a job buried, completed or cancelled also enqueues a job of the type the
    job reacts with to that state (job.on_buried, ...), in the same transaction: the Change carries
    it (prepare(type) -> the reaction's NewJob, validated from its own type's config), and the
    engine inserts it with the changed job in its payload."""
    if change is None or change.to_status == job.status or change.to_status not in REACTING:
        return change
    reaction_type = job.reaction_type(change.to_status)
    if reaction_type is not None:
        change.reaction = prepare(reaction_type)
    return change


def recover(job: Job, now: int, *, expired: bool, silent: bool = False) -> Change | None:
    """A held job whose lease expired, or that was silent (no claim or heartbeat) for as long as
    `recover --older-than` says (both judged by the engine on the clock that times its leases, not
    on the wall clock): requeue it, bury it when it has no runs left, or finish its cancellation.
    One sweep decides."""
    if job.status not in HELD:
        return None
    beat = job.heartbeat_at if job.heartbeat_at is not None else job.claimed_at
    if not (expired or silent):
        return None
    lost = f"worker {job.worker} lost: lease expired at {to_rfc3339(job.lease_expires_at)}"
    if not expired:
        lost = f"worker {job.worker} silent since {to_rfc3339(beat)}"
    if job.status == "cancel_requested":
        return Change("cancelled", {**CLEAR_CLAIM}, message=f"{lost}; cancellation completed", run="lost")
    if job.attempts >= job.max_attempts:
        return Change("buried", {**CLEAR_CLAIM, "error": one_line(f"{lost} (no runs left)")},
                      message=f"{lost}; no runs left", run="lost")
    return Change("pending", {**REQUEUE, "run_at": now, "error": one_line(lost)},
                  message=f"{lost}; requeued", run="lost")


ERROR_MAX_CHARS = 500


def one_line(text: str | None, limit: int = ERROR_MAX_CHARS) -> str | None:
    if text is None:
        return None
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
