"""Plain data: job states and the Job record. No I/O here."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum

from jobctl.durations import to_rfc3339


class JobStatus(str, Enum):
    """The six states of SPEC §3.

    pending -> running (claim) -> completed | pending (fail with runs left, recover, release)
    running -> buried (no runs left, --bury) | cancel_requested (operator cancel)
    running, cancel_requested -> cancelled (the holder confirms with its token)
    cancel_requested -> completed | buried | cancelled (recover)
    buried -> pending (retry) | cancelled;  pending -> cancelled.
    completed and cancelled are terminal.
    """

    PENDING = "pending"
    RUNNING = "running"
    CANCEL_REQUESTED = "cancel_requested"
    COMPLETED = "completed"
    BURIED = "buried"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value


TERMINAL = frozenset({JobStatus.COMPLETED, JobStatus.CANCELLED})
FINISHED = frozenset({JobStatus.COMPLETED, JobStatus.CANCELLED, JobStatus.BURIED})
ACTIVE = frozenset({JobStatus.RUNNING, JobStatus.CANCEL_REQUESTED})  # held by a worker

STATES = tuple(s.value for s in JobStatus)


@dataclass
class Job:
    """One row of the queue, with times in epoch milliseconds and JSON kept as text."""

    id: int
    queue: str
    type: str
    payload: str  # compact JSON text, exactly as enqueued
    priority: int
    status: str
    attempts: int
    max_attempts: int
    backoff: str  # "exponential" | "linear" | "fixed" | "10,30,60"
    timeout_ms: int
    run_at: int
    created_at: int
    updated_at: int
    idempotency_key: str | None = None
    worker: str | None = None
    claimed_at: int | None = None
    heartbeat_at: int | None = None
    lease_expires_at: int | None = None
    lease_ms: int | None = None
    token: str | None = None
    progress: str | None = None  # JSON text
    error: str | None = None
    result: str | None = None  # JSON text
    finished_at: int | None = None
    waiting_on: int = 0  # how many `after` jobs are not completed yet
    after: list[int] = field(default_factory=list)

    @classmethod
    def from_row(cls, row: dict, after: list[int] | None = None) -> "Job":
        names = cls.__dataclass_fields__
        job = cls(**{k: row[k] for k in row.keys() if k in names and k != "after"})
        if after is not None:
            job.after = after
        return job

    @property
    def timeout(self) -> float:
        return self.timeout_ms / 1000

    def backoff_json(self):
        if self.backoff in ("exponential", "linear", "fixed"):
            return self.backoff
        return [int(x) for x in self.backoff.split(",")]

    def to_dict(self, *, claim: bool = False) -> dict:
        """The job object of SPEC §2 / §4 `--json`."""
        d = {
            "id": self.id,
            "queue": self.queue,
            "type": self.type,
            "payload": json.loads(self.payload),
            "priority": self.priority,
            "status": self.status,
            "attempts": self.attempts,
            "max_attempts": self.max_attempts,
            "backoff": self.backoff_json(),
            "timeout": self.timeout_ms / 1000 if self.timeout_ms % 1000 else self.timeout_ms // 1000,
            "run_at": to_rfc3339(self.run_at),
            "after": list(self.after),
            "idempotency_key": self.idempotency_key,
            "worker": self.worker,
            "claimed_at": to_rfc3339(self.claimed_at),
            "lease_expires_at": to_rfc3339(self.lease_expires_at),
            "token": self.token,
            "progress": json.loads(self.progress) if self.progress else None,
            "error": self.error,
            "result": json.loads(self.result) if self.result is not None else None,
            "created_at": to_rfc3339(self.created_at),
            "updated_at": to_rfc3339(self.updated_at),
            "finished_at": to_rfc3339(self.finished_at),
        }
        if claim:
            d["attempt"] = self.attempts
        return d


@dataclass
class Event:
    job_id: int
    at: int
    from_status: str | None
    to_status: str
    actor: str
    message: str | None = None
    details: str | None = None  # JSON text: exit code, stderr tail, ...

    def to_dict(self) -> dict:
        d = {
            "at": to_rfc3339(self.at),
            "from": self.from_status,
            "to": self.to_status,
            "actor": self.actor,
            "message": self.message,
        }
        if self.details:
            d["details"] = json.loads(self.details)
        return d
