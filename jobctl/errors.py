"""Every error a user can meet, each carrying its documented exit code.

The CLI turns them into one `jobctl: error: ...` line in exactly one place (jobctl.cli.main).
A class's docstring is its default message.
"""


class JobctlError(Exception):
    """unexpected internal error"""

    exit_code = 1

    def __init__(self, message: str | None = None):
        super().__init__(message or (self.__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self)


class InvalidInput(JobctlError):
    """invalid input"""

    exit_code = 2


class ConfigError(InvalidInput):
    """the config file cannot be used"""


class NoSuchJob(JobctlError):
    """no such job"""

    exit_code = 3

    def __init__(self, job_id: int, where: str = ""):
        super().__init__(f"{where}no job with id {job_id}; `jobctl list` shows the jobs in this database")
        self.job_id = job_id


class NoSuchWorker(JobctlError):
    """no such worker"""

    exit_code = 3


class InvalidState(JobctlError):
    """not allowed in the job's current state"""

    exit_code = 4


class KeyConflict(InvalidState):
    """the idempotency key belongs to a job with another type or payload"""

    def __init__(self, key: str, job_id: int):
        super().__init__(f"idempotency key {key!r} already belongs to job {job_id} with a different type or payload; "
                         f"use another key, or `jobctl show {job_id}`")
        self.key = key
        self.job_id = job_id


class StaleToken(InvalidState):
    """the token is from an older claim"""


class NothingToClaim(JobctlError):
    """no job is ready"""

    exit_code = 5


class DatabaseBusy(JobctlError):
    """the database is locked by another process; nothing changed, safe to retry"""

    exit_code = 6


class CancelRequested(JobctlError):
    """cancellation was requested"""

    exit_code = 7


class DatabaseUnusable(JobctlError):
    """the database cannot be used"""

    exit_code = 8


class CheckFailed(JobctlError):
    """a threshold was crossed"""

    exit_code = 9


class PermissionDenied(DatabaseUnusable):
    """The user lacks a right on the schema or its tables (exit 8, as on an unwritable file)."""


class DiskFull(DatabaseUnusable):
    """the disk holding the database is full; nothing changed"""


class ConnectionLost(DatabaseUnusable):
    """the connection to the database server was lost"""

    # A one-shot command reports it (exit 8, with whether the change may have been made); a
    # worker waits it out and retries, reconnecting (a server restart, a terminated backend).


class StatementCancelled(DatabaseUnusable):
    """the server cancelled a statement (an administrator's pg_cancel_backend); nothing changed"""

    # Not "busy" (exit 6): no lock or timeout gave up. A worker waits it out as an outage.


class DamagedJob(DatabaseUnusable):
    """a stored job cannot be read"""

    def __init__(self, job_id, reason: str):
        super().__init__(f"damaged job {job_id}: {reason}; `jobctl doctor` says more")
        self.job_id = job_id
        self.reason = reason


class WaitTimedOut(JobctlError):
    """the jobs did not finish in time"""

    exit_code = 5
    unfinished = ""  # "timed out after 2s: not finished yet: 11 (pending)", for a caller to word what follows


class CannotRun(JobctlError):
    """the handler could not be started (127: not found; 126: found but cannot be run, as a shell says)"""

    exit_code = 127

    def __init__(self, message: str | None = None, exit_code: int = 127):
        super().__init__(message)
        self.exit_code = exit_code


class HandlerTimedOut(JobctlError):
    """the handler ran past its timeout and was stopped"""

    exit_code = 124
