"""The worker behind `jobctl work`, in three parts:

- loop.py: claim, dispatch, the main loop (signals, heartbeats, housekeeping, wake-ups);
- supervisor.py: handler processes (spawn, timeouts, grace, SIGTERM then SIGKILL to the group,
  reaping), through an injectable launcher and clock;
- outcomes.py: writing results to the queue, and retrying them through outages.
"""

from jobctl.worker.log import Log
from jobctl.worker.loop import (
    HEARTBEAT_MAX_INTERVAL,
    IDLE_MIN_DELAY,
    STDERR_TAIL_BYTES,
    STOP_SIGNALS,
    Worker,
    WorkerOptions,
    check_commands,
    handler_types,
    own_worker_id,
)
from jobctl.worker.outcomes import Outcome, Recorder, Retry
from jobctl.worker.supervisor import PosixLauncher, Proc, Running, SpawnError, Supervisor

__all__ = [
    "HEARTBEAT_MAX_INTERVAL", "IDLE_MIN_DELAY", "STDERR_TAIL_BYTES", "STOP_SIGNALS", "Log", "Outcome",
    "PosixLauncher", "Proc", "Recorder", "Retry", "Running", "SpawnError", "Supervisor", "Worker",
    "WorkerOptions", "check_commands", "handler_types", "own_worker_id",
]
