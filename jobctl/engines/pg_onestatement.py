"""The worker's hot path on PostgreSQL, one statement per step: a claim, a completion, or both.

The general path (the SQL core's) makes a change in a transaction of its own: a BEGIN with the
job's row locked and the server's time, the rule decided in Python on that row, the writes, the
COMMIT. For a worker that completes a job and claims the next that is three round trips, where a
hand-written queue needs one per statement. These builders write the same rows (the job, its run,
its events, its output; the count triggers fire as for any UPDATE) in ONE statement of
data-modifying CTEs, committed as it runs: one round trip, one commit.

- The claim: the best ready job (FOR UPDATE SKIP LOCKED) is taken and its event written.
- The completion of a job that this connection claimed: the rule (transitions.complete, which
  reads no clock) is decided in Python before the statement, on the job as it was claimed, and
  the statement writes only where the row still holds that claim: same id, still running, same
  token, nobody waiting on it. Where it does not (a cancellation was requested, the lease was
  recovered, a job was enqueued after it), the statement changes nothing at all, the claim
  included, and the engine takes the general path, which decides on the row as it is now.

The time is the server's, read once per statement (the CTE t). What these builders do not cover
takes the general path: claims under limits (their counting takes turns under an advisory lock),
several queues in order of preference, reactions, dependents to unblock, an injected clock.
"""

from __future__ import annotations

from functools import lru_cache

from jobctl.engines.base import Change, ClaimRequest
from jobctl.engines.sql import DEPENDED_ON, DEPENDS, NOT_PAUSED
from jobctl.models import Job

NOW = "(SELECT now FROM t)"  # the statement's one reading of the server's clock (a scalar, so plans stay index seeks)


def head(now_sql: str) -> str:
    return f"WITH t AS (SELECT {now_sql} AS now)"


def claims_alone(request: ClaimRequest) -> bool:
    """Whether this claim can be one statement: no limits, at most one queue."""
    return not request.limits and (not request.queues or len(request.queues) == 1)


def completion_ctes(job: Job, change: Change, actor: str) -> tuple[str, list]:
    """CTEs that complete `job` where its row still holds the claim it was decided on: `done` (its
    id, or no row), then its run, its event and its output, written only with it."""
    fields = {k: v for k, v in change.fields.items() if k not in ("status", "updated_at", "finished_at")}
    params = [*fields.values(), job.id, job.token,
              job.queue, job.type, job.worker, job.run_at, job.claimed_at, change.run,
              change.actor or actor, change.message]
    out = change.log
    if out is not None:
        params += [job.claimed_at, bytes(out.head), bytes(out.tail), out.dropped]
    return _completion_sql(tuple(fields), out is not None), params


@lru_cache(maxsize=64)
def _completion_sql(columns: tuple[str, ...], with_log: bool) -> str:
    """(The same text object for the same shape: a worker's statement is looked up, not rebuilt.)"""
    assignments = "".join(f", {k} = ?" for k in columns)
    sql = (f", done AS (UPDATE jobs SET status = 'completed', updated_at = {NOW}, finished_at = {NOW}{assignments} "
           f"WHERE id = ? AND status = 'running' AND token = ? AND dep_flags & {DEPENDED_ON} = 0 RETURNING id)"
           ", done_run AS (INSERT INTO runs (job_id, queue, type, worker, ready_at, started_at, ended_at, outcome) "
           f"SELECT id, ?::text, ?::text, ?::text, ?::bigint, ?::bigint, {NOW}, ?::text FROM done)"
           ", done_event AS (INSERT INTO events (job_id, at, from_status, to_status, actor, message) "
           f"SELECT id, {NOW}, 'running', 'completed', ?::text, ?::text FROM done)")
    if with_log:
        sql += (", done_log AS (INSERT INTO job_logs (job_id, started_at, ended_at, head, tail, dropped) "
                f"SELECT id, ?::bigint, {NOW}, ?::bytea, ?::bytea, ?::bigint FROM done "
                "ON CONFLICT (job_id, started_at) DO UPDATE SET ended_at = excluded.ended_at, head = excluded.head, "
                "tail = excluded.tail, dropped = excluded.dropped)")
    return sql


def claim_ctes(request: ClaimRequest, *, after_done: bool) -> tuple[str, list]:
    """CTEs that take the best ready job for `request` (`taken`: its row, or no row) and write its
    event; with after_done, only when `done` completed its job (all or nothing)."""
    params = [request.worker, request.lease_ms, request.lease_ms, request.token]
    if request.queues:
        params.append(request.queues[0])
    if request.types:
        params += request.types
    return _claim_sql(bool(request.queues), len(request.types or ()), after_done), params


@lru_cache(maxsize=64)
def _claim_sql(by_queue: bool, types: int, after_done: bool) -> str:
    filters = (" AND queue = ?" if by_queue else "") + (f" AND type IN ({','.join('?' * types)})" if types else "")
    pick = (f"SELECT id FROM jobs WHERE status = 'pending' AND waiting_on = 0 AND run_at <= {NOW}{filters}"
            f"{NOT_PAUSED.replace('?', NOW)} ORDER BY priority DESC, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED")
    gate = "EXISTS (SELECT 1 FROM done) AND " if after_done else ""
    sql = (f", taken AS (UPDATE jobs SET status = 'running', attempts = attempts + 1, worker = ?, claimed_at = {NOW}, "
           f"heartbeat_at = {NOW}, lease_ms = COALESCE(?::bigint, timeout_ms), "
           f"lease_expires_at = {NOW} + COALESCE(?::bigint, timeout_ms), token = ?, progress = NULL, "
           f"progress_at = NULL, updated_at = {NOW} "
           f"WHERE {gate}status = 'pending' AND id = ({pick}) RETURNING *)"
           ", taken_event AS (INSERT INTO events (job_id, at, from_status, to_status, actor, message) "
           "SELECT id, claimed_at, 'pending', 'running', worker, 'run ' || attempts || ' of ' || max_attempts "
           "FROM taken)")
    return sql


def statement(now_sql: str, completion: tuple[str, list] | None, claim: tuple[str, list] | None) -> tuple[str, list]:
    """The whole statement. Its one row: jobctl_done (1: the completion was written, 0: nothing
    was; absent without a completion), jobctl_now, then the taken job's columns (NULL when none)
    and jobctl_after (its `after` ids, when it has any)."""
    params = [*(completion[1] if completion else ()), *(claim[1] if claim else ())]
    return _statement_sql(now_sql, completion[0] if completion else None, claim[0] if claim else None), params


@lru_cache(maxsize=64)
def _statement_sql(now_sql: str, completion: str | None, claim: str | None) -> str:
    sql = head(now_sql)
    outputs = []
    if completion is not None:
        sql += completion
        outputs.append("(SELECT count(*) FROM done) AS jobctl_done")
    outputs.append("t.now AS jobctl_now")
    if claim is None:
        return sql + f" SELECT {', '.join(outputs)} FROM t"
    sql += claim
    outputs += ["taken.*", f"CASE WHEN taken.dep_flags & {DEPENDS} <> 0 THEN ARRAY(SELECT after_id FROM job_deps "
                           "WHERE job_id = taken.id ORDER BY after_id) END AS jobctl_after"]
    return sql + f" SELECT {', '.join(outputs)} FROM t LEFT JOIN taken ON true"
