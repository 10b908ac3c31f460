"""What `jobctl workers` and `stats` say of the workers, from the registry rows and the held jobs
(Engine.worker_rows): pure functions, no I/O, no typer, no rich.

A worker is `lost` when its row was not renewed for LOST_AFTER of its own renewal periods (each
row says how often its worker renews it), `draining` once it stops claiming (a signal, a limit or
an operator's order), `stopped` after a clean exit. Rows stopped, or not seen, for a day are
forgotten: left out here, and deleted by the next worker that registers.
"""

from __future__ import annotations

import json

from jobctl.durations import to_rfc3339

LOST_AFTER = 3  # renewal periods without a renewal
FORGET_MS = 86_400_000  # (as engines/sql.py WORKERS_FORGET_MS)
STATES = ("running", "draining", "lost", "stopped")
ALIVE = ("running", "draining")


def state_of(row: dict, now: int) -> str:
    """The row's state; lost judged on its silent_ms where the engine gave it (Engine.worker_rows:
    on the clock that times leases, which a step of the wall clock does not move), else on last_seen."""
    if row["state"] == "stopped":
        return "stopped"
    silent = row.get("silent_ms")
    if (now - row["last_seen"] if silent is None else silent) > LOST_AFTER * row["renew_ms"]:
        return "lost"
    if row["state"] == "draining" or row["request"] in ("drain", "stop"):
        return "draining"
    return "running"


def forgotten(row: dict, now: int) -> bool:
    seen = row["stopped_at"] if row["state"] == "stopped" and row["stopped_at"] is not None else row["last_seen"]
    return now - seen > FORGET_MS


def _json_list(text):
    return None if text is None else json.loads(text)


def view(now: int, rows: list[dict], held: list[tuple[int, str, str | None]], *, all: bool = False) -> list[dict]:
    """One entry per worker process (stopped ones only with `all`), in the order of `jobctl
    workers`, each with the jobs it holds now; jobs held under a worker id with no process row
    (claimed by a script: `jobctl claim --worker ID`) make an entry of their own, with no host,
    pid or state. The keys are those of `workers --json`."""
    entries: list[dict] = []
    holder: dict[str, dict] = {}  # worker id -> the entry its jobs are shown under (its latest process not stopped)
    for row in rows:
        if forgotten(row, now):
            continue
        state = state_of(row, now)
        entry = {"worker": row["worker"], "host": row["host"], "pid": row["pid"], "state": state,
                 "started_at": to_rfc3339(row["started_at"]), "last_seen": to_rfc3339(row["last_seen"]),
                 "jobs": [], "done": row["done"], "failed": row["failed"], "queues": _json_list(row["queues"]),
                 "types": _json_list(row["types"]), "concurrency": row["concurrency"], "version": row["version"],
                 "request": row["request"]}
        if state != "stopped":
            holder[row["worker"]] = entry
        if state != "stopped" or all:
            entries.append(entry)
    scripts: dict[str, dict] = {}
    for job_id, type, worker in held:
        name = worker or ""
        found = holder.get(name) or scripts.get(name)
        if found is None:
            found = scripts[name] = {"worker": worker, "host": None, "pid": None, "state": None,
                                     "started_at": None, "last_seen": None, "jobs": [], "done": None,
                                     "failed": None, "queues": None, "types": None, "concurrency": None,
                                     "version": None, "request": None}
        found["jobs"].append({"id": job_id, "type": type})
    entries += scripts.values()
    entries.sort(key=lambda e: (e["worker"] or "", e["state"] is None, e["started_at"] or ""))
    return entries


def summary(now: int, rows: list[dict]) -> dict:
    """stats' `workers`: {"alive", "lost"} (processes; scripts have none)."""
    alive = lost = 0
    for row in rows:
        if forgotten(row, now):
            continue
        state = state_of(row, now)
        if state in ALIVE:
            alive += 1
        elif state == "lost":
            lost += 1
    return {"alive": alive, "lost": lost}
