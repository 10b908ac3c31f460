"""`jobctl work` started without typer.

Importing typer and building its command costs a worker ~150 ms of start-up (bench/run.py, work
workload), against ~40 ms for a plain Python process. A worker started by a supervisor or a
cron line is a plain `jobctl [global options] work [options]`, so main() tries this strict
reading of the command line first: every word must be one of the options below, written the
ordinary way (`--opt VALUE`, `--opt=VALUE`, or a short option followed by its value), with a
value typer would accept as it is. Anything else (help, completion, an unknown or misplaced option,
a value out of range, a value that starts with `-`) goes to typer, which gives its usual help and
errors. Both ways end in start_worker(), so the worker and its checks are the same.
"""

from __future__ import annotations

from jobctl.cli.state import State
from jobctl.errors import InvalidInput

# The global options (before the command): name -> State field.
GLOBAL_VALUES = {"--db": "db", "--config": "config", "--busy-timeout": "busy_timeout"}
GLOBAL_FLAGS = {"--allow-network-fs": "allow_network_fs"}

# `work`'s options: spelling -> (parameter, kind); kind "list" is repeatable.
WORK_VALUES = {
    "--queue": ("queue", "list"), "-q": ("queue", "list"),
    "--type": ("type", "list"), "-t": ("type", "list"),
    "--concurrency": ("concurrency", "int"), "-c": ("concurrency", "int"),
    "--max-jobs": ("max_jobs", "int"),
    "--max-time": ("max_time", "str"),
    "--poll": ("poll", "str"),
    "--worker": ("worker", "str"),
    "--grace": ("grace", "str"),
    "--log-format": ("log_format", "str"),
}
WORK_FLAGS = {"--stop-when-empty": "stop_when_empty"}
INT_RANGES = {"concurrency": (1, 1024), "max_jobs": (1, None)}  # as the typer options declare them


def _words(argv: list[str], values: dict, flags: dict, stop_at: str | None = None):
    """(name, value) pairs of the options at the start of argv, then the index of the first word
    that is not one; None for anything this reading does not take as it is."""
    i = 0
    out: list[tuple[str, str | bool]] = []
    while i < len(argv):
        word = argv[i]
        if word == stop_at:
            return out, i
        name, eq, value = word.partition("=") if word.startswith("--") else (word, "", "")
        if name in flags and not eq:
            out.append((name, True))
            i += 1
            continue
        if name not in values:
            return None
        if not eq:
            if i + 1 >= len(argv):
                return None
            value = argv[i + 1]
            i += 1
        if not value or value.startswith("-"):  # typer may read these differently: let it say
            return None
        out.append((name, value))
        i += 1
    return (out, i) if stop_at is None else None


def parse_work(argv: list[str]) -> tuple[State, dict] | None:
    """(the global options, work's arguments) when argv is a plain `work` command line; else None."""
    found = _words(argv, GLOBAL_VALUES, GLOBAL_FLAGS, stop_at="work")
    if found is None:
        return None
    pairs, at = found
    st = State()
    for name, value in pairs:  # the last one wins, as with typer
        setattr(st, GLOBAL_VALUES.get(name) or GLOBAL_FLAGS[name], value)
    found = _words(argv[at + 1:], WORK_VALUES, WORK_FLAGS)
    if found is None:
        return None
    args: dict = {}
    for name, value in found[0]:
        if name in WORK_FLAGS:
            args[WORK_FLAGS[name]] = True
            continue
        param, kind = WORK_VALUES[name]
        if kind == "list":
            args.setdefault(param, []).append(value)
        elif kind == "int":
            low, high = INT_RANGES[param]
            if not (value.isascii() and value.isdigit()):
                return None
            number = int(value)
            if number < low or (high is not None and number > high):
                return None
            args[param] = number
        else:
            args[param] = value
    return st, args


def start_worker(st: State, *, queue: list[str] | None = None, type: list[str] | None = None,
                 concurrency: int | None = None, max_jobs: int | None = None, max_time: str | None = None,
                 stop_when_empty: bool = False, poll: str | None = None, worker: str | None = None,
                 grace: str | None = None, log_format: str | None = None) -> int:
    """Check the options, open the queue and run the worker until it stops; its exit code."""
    early = _EarlySignals()
    try:
        early.hold()
        return _start_worker(st, early, queue=queue, type=type, concurrency=concurrency, max_jobs=max_jobs,
                             max_time=max_time, stop_when_empty=stop_when_empty, poll=poll, worker=worker,
                             grace=grace, log_format=log_format)
    finally:
        early.let_go()


def _start_worker(st: State, early: "_EarlySignals", *, queue: list[str] | None, type: list[str] | None,
                  concurrency: int | None, max_jobs: int | None, max_time: str | None, stop_when_empty: bool,
                  poll: str | None, worker: str | None, grace: str | None, log_format: str | None) -> int:
    from jobctl.config import duration_in_range
    from jobctl.durations import parse_duration
    from jobctl.worker import Worker, WorkerOptions, check_commands, handler_types, own_worker_id

    settings = st.settings
    ws = settings.worker
    if log_format is not None and log_format not in ("human", "json"):
        raise InvalidInput(f"invalid --log-format {log_format!r}: use human or json")
    if worker is not None and (not worker.strip() or len(worker) > 200):
        raise InvalidInput("invalid --worker: give 1 to 200 characters")
    if queue:
        from jobctl.durations import validate_name

        for q_name in queue:
            validate_name(q_name, "queue")
    grace_s = duration_in_range(grace, "--grace", "grace") if grace is not None else None
    poll_s = duration_in_range(poll, "--poll", "poll") if poll is not None else None
    max_time_s = None
    if max_time is not None:
        max_time_s = parse_duration(max_time, what="--max-time")
        if max_time_s <= 0:
            raise InvalidInput(f"invalid --max-time {max_time!r}: must be more than 0")
    options = WorkerOptions(
        worker_id=worker or own_worker_id(),
        queues=list(dict.fromkeys(queue)) if queue else None,
        types=list(type) if type else None,
        concurrency=concurrency or ws.concurrency,
        max_jobs=max_jobs,
        max_time=max_time_s,
        stop_when_empty=stop_when_empty,
        poll=poll_s if poll_s is not None else ws.poll,
        grace=grace_s if grace_s is not None else ws.grace,
        lease=ws.lease,
        kill_grace=ws.kill_grace,
        recover_every=ws.recover_every,
        purge_every=ws.purge_every,
        log_format=log_format or ws.log_format,
        config_path=str(settings.config_path) if st.config and settings.config_path else None,
    )
    # a config problem (no command, or one that cannot be run) is reported before any file is created
    check_commands(settings, handler_types(settings, options.types))
    with st.open_queue(create=True) as q:
        w = Worker(q, settings, options)
        early.hand_to(w)
        return w.run()


class _EarlySignals:
    """A stop signal (SIGTERM, SIGINT, SIGHUP: the worker's own) that arrives while the worker
    starts (its options checked, the database opened) is kept and handed to the worker, which
    then stops at once, cleanly, exit 0, having claimed nothing: the signal neither kills the
    process nor interrupts it half-way through opening the database."""

    def __init__(self) -> None:
        self.got: list[int] = []
        self.worker = None
        self.saved: dict = {}

    def hold(self) -> None:
        import signal

        from jobctl.handlers import STOP_SIGNALS

        try:
            for s in STOP_SIGNALS:
                self.saved[s] = signal.signal(s, self)
        except ValueError:  # not the main thread (a test's worker): nothing to hold
            pass

    def let_go(self) -> None:
        """The handlers found before, back (in a process that goes on after the worker: a test)."""
        import signal

        for s, h in self.saved.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)

    def __call__(self, signum, frame) -> None:
        if self.worker is not None:
            self.worker.on_signal(signum)
        else:
            self.got.append(signum)

    def hand_to(self, worker) -> None:
        self.worker = worker
        for signum in self.got:
            worker.on_signal(signum)

