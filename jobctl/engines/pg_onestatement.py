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

The SQL is the general path's own (engines/sql.py builds the claim and the held completion once),
at the statement's time: the server's, read once per statement (the CTE t), or a test's injected
clock passed as its parameter, so tests run what production runs. What these builders do not cover
takes the general path: claims under limits (their counting takes turns under an advisory lock),
several queues in order of preference, reactions, dependents to unblock.
"""

from __future__ import annotations

from functools import lru_cache

from jobctl.engines.base import Change, ClaimRequest
from jobctl.engines.sql import (CLAIM_MESSAGE_SQL, DEPENDS, INTO_EVENTS, INTO_LOGS, INTO_RUNS, LOGS_UPSERT,
                                _completion_sql, _pick_sql, _take_sql, completion_fields, completion_statement,
                                pick_params, take_params)
from jobctl.models import Job

NOW = "(SELECT now FROM t)"  # the statement's one reading of the server's clock (a scalar, so plans stay index seeks)
SKIP_LOCKED = " FOR UPDATE SKIP LOCKED"


def head(now_sql: str) -> str:
    return f"WITH t AS (SELECT {now_sql} AS now)"


def claims_alone(request: ClaimRequest) -> bool:
    """Whether this claim can be one statement: no limits, at most one queue."""
    return not request.limits and (not request.queues or len(request.queues) == 1)


def completion_ctes(job: Job, change: Change, actor: str) -> tuple[str, list]:
    """CTEs that complete `job` where its row still holds the claim it was decided on: `done` (its
    id, or no row), then its run, its event and its output, written only with it."""
    fields = completion_fields(change)
    _, params = completion_statement(job, fields, None, NOW)
    params += [job.queue, job.type, job.worker, job.run_at, job.claimed_at, change.run,
               change.actor or actor, change.message]
    out = change.log
    if out is not None:
        params += [job.claimed_at, bytes(out.head), bytes(out.tail), out.dropped]
    return _completion_ctes(tuple(fields), tuple(v is None for v in fields.values()), out is not None), params


@lru_cache(maxsize=64)
def _completion_ctes(columns: tuple[str, ...], nulls: tuple[bool, ...], with_log: bool) -> str:
    """The held completion's own UPDATE (sql._completion_sql), then the rows the general path
    writes with it, as SELECTs from it (typed: a CTE's parameters have no column to infer from)."""
    sql = (f", done AS ({_completion_sql(columns, nulls, NOW)} RETURNING id)"
           f", done_run AS ({INTO_RUNS}SELECT id, ?::text, ?::text, ?::text, ?::bigint, ?::bigint, {NOW}, ?::text "
           "FROM done)"
           f", done_event AS ({INTO_EVENTS}SELECT id, {NOW}, 'running', 'completed', ?::text, ?::text, NULL "
           "FROM done)")
    if with_log:
        sql += (f", done_log AS ({INTO_LOGS}SELECT id, ?::bigint, {NOW}, ?::bytea, ?::bytea, ?::bigint FROM done"
                f"{LOGS_UPSERT})")
    return sql


def claim_ctes(request: ClaimRequest, *, after_done: bool) -> tuple[str, list]:
    """CTEs that take the best ready job for `request` (`taken`: its row, or no row) and write its
    event; with after_done, only when `done` completed its job (all or nothing)."""
    queue = request.queues[0] if request.queues else None
    types = request.types or []
    params = take_params(request, None) + pick_params(None, queue, types, True)
    return _claim_ctes(queue is not None, len(types), after_done), params


@lru_cache(maxsize=64)
def _claim_ctes(by_queue: bool, types: int, after_done: bool) -> str:
    """The general claim's UPDATE and pick (sql._take_sql, sql._pick_sql) at the statement's time,
    and its event as a SELECT from it."""
    pick = _pick_sql("", by_queue, types, SKIP_LOCKED, True, NOW)
    take = _take_sql(pick, False, NOW, "EXISTS (SELECT 1 FROM done) AND " if after_done else "")
    return (f", taken AS ({take})"
            f", taken_event AS ({INTO_EVENTS}SELECT id, claimed_at, 'pending', 'running', worker, "
            f"{CLAIM_MESSAGE_SQL}, NULL FROM taken)")


def statement(now_sql: str, clock: int | None, completion: tuple[str, list] | None,
              claim: tuple[str, list] | None) -> tuple[str, list]:
    """The whole statement, whose time is now_sql's (with `clock` its one parameter: the engine's
    CLOCK). Its one row: jobctl_done (1: the completion was written, 0: nothing was; absent
    without a completion), jobctl_now, then the taken job's columns (NULL when none) and
    jobctl_after (its `after` ids, when it has any)."""
    params = [clock, *(completion[1] if completion else ()), *(claim[1] if claim else ())]
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
