"""The figures of `jobctl stats`, the --check probe, the Prometheus text, and the
explanation `jobctl show` gives for a job that is not running.

Pure functions over one engine snapshot (engine.stats_snapshot): no typer, no rich here, so
`stats --json`, `--check` and `--format prometheus` start without loading rich.
"""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING, Any, Sequence

from jobctl.durations import format_duration, parse_time, to_rfc3339
from jobctl.models import HELD, Job
from jobctl.pauses import until_text as _until

if TYPE_CHECKING:
    pass

COUNT_KEYS = ("ready", "scheduled", "blocked", "running", "cancel_requested", "buried", "completed", "cancelled")
WINDOWS = (("1m", 1), ("15m", 15), ("60m", 60))
FAILED_OUTCOMES = ("failed", "lost")  # a run whose worker was lost failed too


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else round(ms / 1000, 3)


def _percentile(sorted_values: list, q: float):
    """Nearest-rank percentile of an already sorted list (None when empty)."""
    if not sorted_values:
        return None
    return sorted_values[max(math.ceil(q * len(sorted_values)) - 1, 0)]


def collect(snap: dict, *, queues: list[str] | None = None, limit: int = 10,
            also_known: frozenset[str] | set[str] = frozenset(),
            also_types: frozenset[str] | set[str] = frozenset()) -> dict:
    """The `stats --json` object from one engine snapshot (Engine.stats_snapshot, taken with the
    same `queues`).

    With `queues`, only those queues (their counts, stuck, buried and aging jobs, and runs) are
    reported, and a name that no job, pause or `also_known` (the config's queues) has ever used is
    refused: a typo must not report an empty, healthy queue. `also_types`: types listed under
    `types` even without a job or a run (the config's)."""
    now = snap["now"]
    wanted = set(queues) if queues else None
    names = sorted(set(snap["counts"]) | set(snap["paused"]))
    if wanted is not None:
        known = set(snap["known"]) | set(also_known)
        unknown = sorted(wanted - known)
        if unknown:
            from jobctl.errors import InvalidInput

            raise InvalidInput(
                f"no queue named {', '.join(unknown)} in the database "
                f"or the config; known queues: {', '.join(sorted(known)) or 'none'}")
        names = sorted(wanted)
    per_queue = {}
    for name in names:
        c = snap["counts"].get(name, {})
        scheduled = snap["scheduled"].get(name, 0)
        oldest = snap["oldest_ready"].get(name)
        oldest_held = snap.get("oldest_held", {}).get(name)
        per_queue[name] = {
            "ready": c.get("pending", 0) - scheduled,
            "held": snap.get("held", {}).get(name, 0),
            "scheduled": scheduled,
            "blocked": c.get("blocked", 0),
            "running": c.get("running", 0),
            "cancel_requested": c.get("cancel_requested", 0),
            "buried": c.get("buried", 0),
            "completed": c.get("completed", 0),
            "cancelled": c.get("cancelled", 0),
            "oldest_ready_age": _seconds(now - oldest) if oldest is not None else None,
            "oldest_held_age": _seconds(now - oldest_held) if oldest_held is not None else None,
            "paused": snap["paused"].get(name, False),
            "paused_until": to_rfc3339(snap.get("paused_until", {}).get(name)),
            "paused_types": {t: to_rfc3339(u) for t, u in sorted(snap.get("paused_types", {}).get(name, {}).items())},
        }

    def keep(jobs: list[Job]) -> list[Job]:
        return [j for j in jobs if wanted is None or j.queue in wanted][:limit]

    stuck = []
    for j in keep(snap["stuck"]):
        expired = (j.id in snap["stuck_expired"] if "stuck_expired" in snap
                   else j.lease_expires_at is not None and j.lease_expires_at < now)
        ran = snap.get("running_ms", {}).get(j.id)  # (on the clock that times leases)
        if ran is None:
            ran = now - (j.claimed_at or now)
        stuck.append({**j.to_dict(), "stuck_reason": "lease expired" if expired else "over its timeout",
                      "running_for": _seconds(max(ran, 0))})
    stuck_total = snap["stuck_total"]
    aging = [{**j.to_dict(), "waiting_for": _seconds(now - j.run_at)} for j in keep(snap["aging"])]
    ages = [q["oldest_ready_age"] for q in per_queue.values() if q["oldest_ready_age"] is not None]
    held_ages = [q["oldest_held_age"] for q in per_queue.values() if q["oldest_held_age"] is not None]
    totals = {k: sum(q[k] for q in per_queue.values()) for k in COUNT_KEYS}
    totals["held"] = sum(q["held"] for q in per_queue.values())
    totals["stuck"] = stuck_total
    totals["oldest_ready_age"] = max(ages) if ages else None
    totals["oldest_held_age"] = max(held_ages) if held_ages else None
    return {
        "generated_at": to_rfc3339(now),
        "queues": per_queue,
        "totals": totals,
        "stuck": stuck,
        "buried": [j.to_dict() for j in keep(snap["buried"])],
        "buried_by_error": [  # (a damaged row's time or error is left out here: doctor names the row)
            {"queue": q, "type": t, "error": e if isinstance(e, str) else None, "count": n, "latest_id": i,
             "latest_at": to_rfc3339(at) if type(at) is int and 0 <= at <= MAX_TIME_MS else None}
            for q, t, e, n, at, i in snap.get("buried_groups", []) if wanted is None or q in wanted][:limit],
        "aging": aging,
        "throughput": _throughput(snap),
        "types": _types(snap, also_types),
        "damaged_jobs": [{"id": i, "why": why} for i, why in snap.get("damaged", [])],
    }


def _types(snap: dict, also: frozenset[str] | set[str]) -> dict:
    """The `types` object of `stats --json`: per type, its jobs (ready, held, running, being
    cancelled (cancel_requested: still running, as the queues count it), buried), its
    runs of the last 15 and 60 minutes, failure rate (15 min) and run times (60 min)."""
    now = snap["now"]
    types: dict[str, dict] = {}

    def entry(t: str) -> dict:
        if t not in types:
            types[t] = {"ready": 0, "held": 0, "running": 0, "cancel_requested": 0, "buried": 0,
                        "runs": {w: {"completed": 0, "failed": 0} for w in ("15m", "60m")},
                        "failure_rate": None, "p50": None, "p95": None, "stuck": 0}
        return types[t]

    for t, ready in snap.get("ready_by_type", {}).items():
        entry(t)["ready"] += ready
    for (queue, t), (held, _first) in snap.get("held_by_type", {}).items():
        entry(t)["held"] += held
    for t, status, n in snap.get("states_by_type", []):
        entry(t)[status] += n
    for t, n in snap.get("stuck_by_type", {}).items():
        entry(t)["stuck"] += n
    for minute, outcome, t, n in snap.get("runs_by_type_minute", []):
        kind = "completed" if outcome == "completed" else "failed" if outcome in FAILED_OUTCOMES else None
        if kind is None or not 0 <= minute < 60:
            continue
        e = entry(t)
        e["runs"]["60m"][kind] += n
        if minute < 15:
            e["runs"]["15m"][kind] += n
    run_ms: dict[str, list] = {}
    for t, ms in snap.get("run_ms_by_type", []):
        run_ms.setdefault(t, []).append(ms)
    for t in also:
        entry(t)
    for t, first in snap.get("oldest_by_type", {}).items():  # (asked for by a check of types' ready age)
        if t in types:  # (a type the lookup was asked about is not a type that has figures: a typo stays one)
            types[t]["oldest_ready_age"] = _seconds(now - first) if first is not None else None
    for t, e in types.items():
        recent = e["runs"]["15m"]
        total = recent["completed"] + recent["failed"]
        e["failure_rate"] = round(recent["failed"] / total, 4) if total else None
        values = sorted(run_ms.get(t, []))
        e["p50"] = _seconds(statistics.median(values)) if values else None  # (as run_time's median)
        e["p95"] = _seconds(_percentile(values, 0.95))
    return {t: types[t] for t in sorted(types)}


MAX_TIME_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: the last time RFC 3339 can write


def _throughput(snap: dict) -> dict:
    completed, failed = [0] * 60, [0] * 60
    for minute, outcome, n in snap["runs_by_minute"]:
        if 0 <= minute < 60:
            if outcome == "completed":
                completed[minute] += n
            elif outcome in FAILED_OUTCOMES:
                failed[minute] += n
    out: dict[str, Any] = {}
    for key, minutes in WINDOWS:
        c, f = sum(completed[:minutes]), sum(failed[:minutes])
        out[key] = {"completed": c, "failed": f, "completed_per_minute": round(c / minutes, 2),
                    "failed_per_minute": round(f / minutes, 2)}
    run_ms, wait_ms = sorted(snap["run_ms"]), sorted(snap["wait_ms"])
    out["run_time"] = {"median": _seconds(statistics.median(run_ms)) if run_ms else None,
                       "p95": _seconds(_percentile(run_ms, 0.95)), "runs": len(run_ms)}
    out["wait"] = {"median": _seconds(statistics.median(wait_ms)) if wait_ms else None}
    # Oldest minute first, for sparklines.
    out["completed_by_minute"] = completed[::-1]
    out["failed_by_minute"] = failed[::-1]
    return out


# -- the --check probe -----------------------------------------------------------------------

def check(stats: dict, *, max_ready_age: float | None = None, max_buried: int | None = None,
          max_stuck: int | None = None, max_failure_rate: float | None = None, max_p95: float | None = None,
          types: Sequence[str] | None = None, min_workers: int | None = None) -> tuple[bool, str]:
    """(all thresholds hold, one summary line naming every figure and what was crossed).

    max_failure_rate is a fraction (0-1) of the runs of the last 15 minutes, max_p95 seconds; both
    hold for each type alone. `types` scopes every threshold to those types (their oldest ready
    job, their buried and stuck jobs, their runs); min_workers counts every worker alive."""
    crossed, held = [], []
    scope = f" of type {', '.join(types)}" if types else ""
    per_type = {t: e for t, e in stats.get("types", {}).items() if not types or t in types}
    if types:
        for t in types:  # a type with no figures at all: no jobs and no runs
            per_type.setdefault(t, {"oldest_ready_age": None, "buried": 0, "stuck": 0, "failure_rate": None,
                                    "p95": None, "runs": {"15m": {"completed": 0, "failed": 0}}})
    if max_ready_age is not None:
        if types:
            worst = [(e["oldest_ready_age"], f"type {t}") for t, e in per_type.items()
                     if e.get("oldest_ready_age") is not None]
        else:
            worst = [(q["oldest_ready_age"], f"queue {name}" + (" (paused)" if q["paused"] else ""))
                     for name, q in stats["queues"].items() if q["oldest_ready_age"] is not None]
        age, where = min(worst, key=lambda w: (-w[0], w[1])) if worst else (None, None)
        if age is not None and age > max_ready_age:
            (age_said,), limit_said = _apart([age], max_ready_age)
            crossed.append(f"oldest ready job waited {age_said} in {where} (max {limit_said})")
        else:
            held.append(f"oldest ready{scope} {format_duration(age) if age is not None else 'none'} "
                        f"(max {format_duration(max_ready_age)})")
    if max_buried is not None:
        if types:
            n = sum(e["buried"] for e in per_type.values())
            where = ", ".join(f"{t} {e['buried']}" for t, e in per_type.items() if e["buried"])
        else:
            n = stats["totals"]["buried"]
            where = ", ".join(f"{name} {q['buried']}" for name, q in stats["queues"].items() if q["buried"])
        if n > max_buried:
            crossed.append(f"{n} buried{scope} (max {max_buried}: {where})")
        else:
            held.append(f"{n} buried{scope} (max {max_buried})")
    if max_stuck is not None:
        n = sum(e["stuck"] for e in per_type.values()) if types else stats["totals"]["stuck"]
        (crossed if n > max_stuck else held).append(f"{n} stuck{scope} (max {max_stuck})")
    if max_failure_rate is not None:
        rates = sorted(((e["failure_rate"], t) for t, e in per_type.items() if e["failure_rate"] is not None),
                       key=lambda r: (-r[0], r[1]))
        over = [(r, t) for r, t in rates if r > max_failure_rate]
        limit_text = f"max {_percent(max_failure_rate)}"
        if over:
            crossed.append("failure rate over 15m " + ", ".join(
                f"{_percent(r)} of type {t} ({per_type[t]['runs']['15m']['failed']} of "
                f"{per_type[t]['runs']['15m']['failed'] + per_type[t]['runs']['15m']['completed']} runs)"
                for r, t in over) + f" ({limit_text})")
        else:
            top = f"at most {_percent(rates[0][0])} (type {rates[0][1]})" if rates else "no runs"
            held.append(f"failure rate over 15m{scope} {top} ({limit_text})")
    if max_p95 is not None:
        p95s = sorted(((e["p95"], t) for t, e in per_type.items() if e["p95"] is not None),
                      key=lambda r: (-r[0], r[1]))
        over = [(p, t) for p, t in p95s if p > max_p95]
        if over:
            texts, limit_said = _apart([p for p, _ in over], max_p95)
            crossed.append("p95 run time over 60m " + ", ".join(f"{d} of type {t}" for d, (_, t) in zip(texts, over))
                           + f" (max {limit_said})")
        else:
            top = f"at most {format_duration(p95s[0][0])} (type {p95s[0][1]})" if p95s else "no runs"
            held.append(f"p95 run time over 60m{scope} {top} (max {format_duration(max_p95)})")
    if min_workers is not None:
        if stats.get("workers") is None:
            from jobctl.errors import PermissionDenied

            raise PermissionDenied("--min-workers needs to read the workers table, which this user may not (its "
                                   "rights were granted before jobctl added that table); as the schema's owner, run "
                                   "the GRANT ... ON ALL TABLES IN SCHEMA of the README again")
        alive, lost = stats["workers"]["alive"], stats["workers"]["lost"]
        said = f"{alive} worker(s) alive" + (f", {lost} lost" if lost else "")
        (crossed if alive < min_workers else held).append(f"{said} (min {min_workers})")
    if crossed:
        return False, "CRITICAL: " + "; ".join(crossed) + (f" | ok: {', '.join(held)}" if held else "")
    return True, "OK: " + ", ".join(held)


def _apart(values: list[float], limit: float) -> tuple[list[str], str]:
    """Durations that crossed `limit`, and the limit, as text (format_duration); to the
    millisecond (`4.9s`) where rounding made a value read as the limit ("5s (max 5s)")."""
    said, limit_said = [format_duration(v) for v in values], format_duration(limit)
    if limit_said not in said:
        return said, limit_said

    def exact(seconds: float) -> str:
        return f"{seconds:.3f}".rstrip("0").rstrip(".") + "s"

    return [exact(v) if t == limit_said else t for v, t in zip(values, said)], exact(limit)


def _percent(fraction: float) -> str:
    """0.125 -> "12.5%" (no needless decimals)."""
    text = f"{fraction * 100:.1f}".rstrip("0").rstrip(".")
    return f"{text}%"


def parse_percent(value: str, what: str) -> float:
    """A percentage from the command line (`5`, `5%`, `0.5`), from 0 to 100, as a fraction."""
    from jobctl.errors import InvalidInput

    text = value.strip().removesuffix("%").strip()
    try:
        pct = float(text)
    except ValueError:
        pct = math.nan
    if not math.isfinite(pct) or not 0 <= pct <= 100:
        raise InvalidInput(f"invalid {what} {value!r}: give a percentage from 0 to 100, such as 5 or 2.5%")
    return pct / 100


# -- Prometheus text format --------------------------------------------------------------------

def _label(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(value) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return repr(round(value, 3))
    return str(value)


def prometheus(stats: dict) -> str:
    """The figures in the Prometheus text exposition format (for node_exporter's textfile collector).

    Everything is a gauge: job counts fall when finished jobs are purged, and run counts are over
    sliding windows, so neither is a monotonic counter."""
    lines: list[str] = []

    def family(name: str, help_: str, samples: list[tuple[dict, object]]) -> None:
        lines.append(f"# HELP {name} {help_}")
        lines.append(f"# TYPE {name} gauge")
        for labels, value in samples:
            label_text = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
            lines.append(f"{name}{{{label_text}}} {_num(value)}" if label_text else f"{name} {_num(value)}")

    queues = stats["queues"]
    family("jobctl_jobs", "Jobs per queue and state (ready, scheduled and blocked are kinds of pending).",
           [({"queue": q, "state": k}, v[k]) for q, v in queues.items() for k in COUNT_KEYS])
    family("jobctl_oldest_ready_age_seconds", "How long the oldest ready job of the queue has waited (0: none).",
           [({"queue": q}, v["oldest_ready_age"] or 0.0) for q, v in queues.items()])
    family("jobctl_held_jobs", "Ready jobs of the queue that a pause or a limit holds back (counted in ready too).",
           [({"queue": q}, v["held"]) for q, v in queues.items()])
    family("jobctl_oldest_held_age_seconds", "How long the oldest held job of the queue has been ready (0: none).",
           [({"queue": q}, v["oldest_held_age"] or 0.0) for q, v in queues.items()])
    family("jobctl_queue_paused", "1 when the queue is paused.", [({"queue": q}, v["paused"]) for q, v in queues.items()])
    family("jobctl_stuck_jobs", "Running jobs whose lease expired or that ran past their timeout.",
           [({}, stats["totals"]["stuck"])])
    t = stats["throughput"]
    family("jobctl_runs", "Runs that ended in the window, by outcome (failed includes lost workers).",
           [({"outcome": o, "window": w}, t[w][o]) for w, _ in WINDOWS for o in ("completed", "failed")])
    family("jobctl_runs_per_minute", "Runs per minute over the window, by outcome.",
           [({"outcome": o, "window": w}, float(t[w][f"{o}_per_minute"])) for w, _ in WINDOWS
            for o in ("completed", "failed")])
    # Precomputed over a sliding hour, so gauges with their own names: a `quantile` label belongs
    # to a summary, whose _sum and _count would have to be counters (promtool refuses it on gauges).
    family("jobctl_run_duration_median_seconds", "Median run time of the runs of the last hour (0: no runs).",
           [({}, t["run_time"]["median"] or 0.0)])
    family("jobctl_run_duration_p95_seconds", "95th percentile run time of the runs of the last hour (0: no runs).",
           [({}, t["run_time"]["p95"] or 0.0)])
    family("jobctl_run_duration_runs", "How many runs of the last hour the run time figures are taken from.",
           [({}, t["run_time"]["runs"])])
    family("jobctl_wait_median_seconds", "Median wait from ready to start over the runs of the last hour (0: no runs).",
           [({}, t["wait"]["median"] or 0.0)])
    if stats.get("workers") is not None:
        family("jobctl_workers", "Worker processes: alive (running or draining) and lost (not seen for 3 renewal periods).",
               [({"state": k}, stats["workers"][k]) for k in ("alive", "lost")])
    types = stats.get("types", {})
    family("jobctl_type_jobs", "Jobs per type and state (held: ready jobs held back, counted in ready too).",
           [({"type": t, "state": k}, e[k]) for t, e in types.items()
            for k in ("ready", "held", "running", "cancel_requested", "buried")])
    family("jobctl_type_runs", "Runs of the type that ended in the window, by outcome (failed includes lost workers).",
           [({"type": t, "outcome": o, "window": w}, e["runs"][w][o]) for t, e in types.items()
            for w in ("15m", "60m") for o in ("completed", "failed")])
    # Absent, not 0, for a type without runs: no runs is not a failure rate of 0.
    family("jobctl_type_failure_ratio", "Failed share (0-1) of the type's runs of the last 15 minutes; absent without runs.",
           [({"type": t}, float(e["failure_rate"])) for t, e in types.items() if e["failure_rate"] is not None])
    family("jobctl_type_run_duration_median_seconds", "Median run time of the type's runs of the last hour; absent without runs.",
           [({"type": t}, float(e["p50"])) for t, e in types.items() if e["p50"] is not None])
    family("jobctl_type_run_duration_p95_seconds", "95th percentile run time of the type's runs of the last hour; absent without runs.",
           [({"type": t}, float(e["p95"])) for t, e in types.items() if e["p95"] is not None])
    family("jobctl_stats_generated_timestamp_seconds",
           "When these figures were read (Unix time): a stale textfile shows as an old timestamp.",
           [({}, parse_time(stats["generated_at"]) / 1000)])
    return "\n".join(lines) + "\n"


# -- why a job is not running (jobctl show) ----------------------------------------------------

def explain(job: Job, now: int, *, dependencies: Sequence[tuple[int, str | None]] = (),
            paused: set[str] | frozenset = frozenset(), held: str | None = None,
            pauses: Sequence[tuple[str, str | None, int | None]] = (),
            lease_expired: bool | None = None, running_ms: int | None = None,
            buried_by_hand: str | None = None) -> str | None:
    """One or two sentences saying why this job is where it is and what would move it; None for a
    running job that is fine, or a finished job. lease_expired: whether its lease expired as
    `recover` judges it (the engine's lease clock); None: judged on lease_expires_at. running_ms:
    how long its run has lasted on that clock (Engine.running_ms); None: since claimed_at.
    buried_by_hand: for a job `jobctl bury` parked, its history's word of it (by_hand_note)."""
    reasons = []
    if job.status == "pending":
        waiting = [(d, s) for d, s in dependencies if s != "completed"]
        if job.waiting_on and waiting:
            parts = [f"job {d} ({s or 'deleted'})" for d, s in waiting]
            hints = []
            for d, s in waiting:
                if s == "buried":  # a retried dependency that completes lets this job continue
                    hints.append(f"job {d} will not complete by itself (it is buried): `jobctl retry {d}`; "
                                 "this job runs once it completes")
                elif s == "cancelled":
                    hints.append(f"job {d} was cancelled and will never complete: `jobctl cancel {job.id}` "
                                 f"(this job), or `jobctl cancel {d} --with-dependents` (every job waiting on it)")
                elif s is None:
                    hints.append(f"job {d} was deleted and will never complete: `jobctl cancel {job.id}`")
            reasons.append("blocked by " + ", ".join(parts) + "".join(f"; {h}" for h in hints[:2]))
        if job.run_at > now:
            reasons.append(f"scheduled: not before {to_rfc3339(job.run_at)} "
                           f"(in {format_duration((job.run_at - now) / 1000)})")
        reasons += _paused(job, now, pauses, paused)
        if held and not reasons:
            reasons.append(f"held back by a limit: {held}")
        if not reasons:
            reasons.append(f"ready for {format_duration((now - job.run_at) / 1000)} but not claimed: "
                           f"is a worker serving queue {job.queue} and type {job.type}?")
        if job.attempts >= job.max_attempts:
            reasons.append(f"all {job.max_attempts} runs used ({job.attempts}), but a retry lets it run once "
                           f"more: one more failure buries it")
    elif job.status == "buried":
        if buried_by_hand:
            reasons.append(f"{buried_by_hand}: `jobctl retry {job.id}` requeues it")
        elif job.attempts >= job.max_attempts:
            reasons.append(f"no runs left ({job.attempts} of {job.max_attempts} used): `jobctl retry {job.id}` "
                           f"(add --reset-attempts for a fresh set)")
        else:
            reasons.append(f"buried without retry ({job.attempts} of {job.max_attempts} runs used; "
                           f"--bury or a bury exit code): `jobctl retry {job.id}`")
    elif job.status in ("running", "cancel_requested"):
        if lease_expired is None:
            lease_expired = job.lease_expires_at is not None and job.lease_expires_at < now
        if lease_expired:
            # (its wall-clock end may look ahead when the wall clock stepped back: no "ago" then)
            ago = now - job.lease_expires_at if job.lease_expires_at is not None else 0
            when = f" {format_duration(ago / 1000)} ago" if ago > 0 else ""
            from jobctl.transitions import recover

            change = recover(job, now, expired=True)
            does = {"buried": "bury it (no runs left)", "cancelled": "mark it cancelled (as asked)"}.get(
                change.to_status if change is not None else "", "requeue it")
            reasons.append(f"lease expired{when}: worker {job.worker} looks lost; `jobctl recover` (or any "
                           f"worker) will {does}")
        else:
            ran = running_ms if running_ms is not None or job.claimed_at is None else now - job.claimed_at
            if ran is not None and ran > job.timeout_ms:
                reasons.append(f"running for {format_duration(ran / 1000)}, past its timeout of "
                               f"{format_duration(job.timeout)}")
    return "; ".join(reasons) or None


def by_hand_note(events: Sequence) -> str | None:
    """How the history says a person parked the job (`buried by hand: REASON (by ACTOR)`), when
    its latest move to buried was `jobctl bury`'s; else None (a failure buried it)."""
    from jobctl.transitions import BURIED_BY_HAND

    last = next((e for e in reversed(events) if e.to_status == "buried"), None)
    if last is None or not (last.message or "").startswith(BURIED_BY_HAND):
        return None
    return f"{last.message} (by {last.actor})"


def explain_job(q, job: Job, events: Sequence, now: int) -> tuple[str | None, int]:
    """explain() of a job, with what the queue `q` knows of it, as `show` and top's details give
    it; and the time to show its times against (a held job's lease clock: a step of the wall
    clock since its lease was set is left out)."""
    if job.status in HELD:
        now = q.engine.lease_now(job, now)
    ready = job.status == "pending" and not job.waiting_on and job.run_at <= now
    why = explain(job, now, dependencies=q.dependencies(job.id) if job.after else [],
                  pauses=q.pauses() if job.status == "pending" else [],
                  held=q.held_because(job) if ready else None,
                  lease_expired=q.engine.lease_expired(job, now) if job.status in HELD else None,
                  running_ms=q.engine.running_ms(job, now) if job.status in HELD else None,
                  buried_by_hand=by_hand_note(events) if job.status == "buried" else None)
    return why, now


def _paused(job: Job, now: int, pauses: Sequence[tuple[str, str | None, int | None]],
            paused: set[str] | frozenset = frozenset(), *, short: bool = False) -> list[str]:
    """The pauses that hold a pending job back (of its queue, or of its type in it), and how to end
    them; short: in a few words (`queue billing paused (1h59m left)`)."""
    reasons = []
    mine = [(t, u) for q, t, u in pauses if q == job.queue and t in (None, job.type)]
    for type_, until in mine:
        what = f"queue {job.queue}" if type_ is None else f"type {job.type}"
        if short:
            left = f" ({format_duration(max(until - now, 0) / 1000)} left)" if until is not None else ""
            reasons.append(f"{what} paused{left}")  # (a type's pause in the job's own queue)
        elif type_ is None:
            reasons.append(f"{what} is paused{_until(until, now)}: `jobctl resume {job.queue}`")
        else:
            reasons.append(f"{what} is paused in queue {job.queue}{_until(until, now)}: "
                           f"`jobctl resume {job.queue} --type {job.type}`")
    if job.queue in paused and not any(t is None for t, _ in mine):
        reasons.append(f"queue {job.queue} {'paused' if short else f'is paused: `jobctl resume {job.queue}`'}")
    return reasons


def held_reason(job: Job, now: int, *, pauses: Sequence[tuple[str, str | None, int | None]] = (),
                held: str | None = None) -> str | None:
    """Why a ready job is held back, in a few words, for `list`: explain's pauses of its queue or
    type, else the limit that holds it (held: Queue.held_because(short=True)); None when nothing does."""
    return "; ".join(_paused(job, now, pauses, short=True)) or held


def limits_of_queues(figures: dict, queues: list[str], types_config: dict) -> dict:
    """The `limits` of `stats -q Q`: the types of those queues (a type's config queue, else
    "default", or a type with a job in the lists shown) and the concurrency groups of those types;
    not every limited type of the database."""
    types = {name for name, tc in types_config.items() if (tc.queue or "default") in queues}
    types |= {j["type"] for which in ("stuck", "buried", "aging") for j in figures.get(which, [])}
    groups = {types_config[t].concurrency_group for t in types if t in types_config} - {None}
    limits = figures["limits"]
    return {"types": {t: e for t, e in limits["types"].items() if t in types},
            "groups": {g: e for g, e in limits["groups"].items() if g in groups}}


def masked(figures: dict, now: int, patterns) -> tuple[dict, int]:
    """The figures for a human view: secret-looking `key=value` pairs in errors and stuck reasons
    masked (untrusted.mask_text). `--json` and Prometheus output use the figures as they are."""
    from jobctl.untrusted import mask_text

    shown = dict(figures)
    for which in ("stuck", "buried", "aging"):
        shown[which] = [{**j, "error": mask_text(j.get("error"), patterns) if j.get("error") else j.get("error"),
                         **({"stuck_reason": mask_text(j["stuck_reason"], patterns)} if "stuck_reason" in j else {})}
                        for j in figures[which]]
    shown["buried_by_error"] = [{**g, "error": mask_text(g["error"], patterns) if g.get("error") else g.get("error")}
                                for g in figures.get("buried_by_error", [])]
    return shown, now

