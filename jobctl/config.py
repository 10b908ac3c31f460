"""Settings: where the database and the config file are, and what the config file says.

Precedence, first match wins: command-line flag > environment > config file > built-in default.
Read with the stdlib tomllib (fast enough for the hot commands); written by `config init/show`
with tomli_w, which is imported only there.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from jobctl.durations import PRIORITY_LABELS, PRIORITY_MAX, PRIORITY_MIN, parse_duration, parse_priority, validate_name
from jobctl.errors import ConfigError, InvalidInput
from jobctl.models import Record

if TYPE_CHECKING:
    from typing import Callable

DEFAULT_TIMEOUT = 600.0
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_BUSY_TIMEOUT = 5.0
DEFAULT_PG_SCHEMA = "jobctl"  # the PostgreSQL schema (namespace) of jobctl's tables
# A schema name jobctl accepts: a plain lowercase identifier, short enough that the name of its
# LISTEN channel ("jobctl." + name) fits PostgreSQL's 63 bytes; pg_ names are the server's own.
PG_SCHEMA_NAME = re.compile(r"^(?!pg_)[a-z_][a-z0-9_]{0,47}\Z")  # \Z: $ would let a final newline in
DEFAULT_SECRET_KEYS = ["password", "passwd", "token", "secret", "api_key", "apikey", "authorization", "private_key", "credential", "cookie", "session"]
BACKOFF_NAMES = ("exponential", "linear", "fixed")


def _xdg(variable: str, default: Path) -> Path:
    """An XDG base folder: its variable when that is an absolute path (the XDG rules ignore an
    empty or relative one), else the default under the home folder."""
    value = os.environ.get(variable)
    return Path(value) if value and os.path.isabs(value) else default


def data_home() -> Path:
    return _xdg("XDG_DATA_HOME", Path.home() / ".local" / "share")


def config_home() -> Path:
    return _xdg("XDG_CONFIG_HOME", Path.home() / ".config")


def default_db_path() -> Path:
    return data_home() / "jobctl" / "jobctl.db"


def default_config_path() -> Path:
    return config_home() / "jobctl" / "config.toml"


class TypeConfig(Record):
    """One `[types.NAME]` table: enqueue defaults for the type and, for workers, its handler."""

    __slots__ = ("name", "command", "queue", "max_attempts", "timeout", "priority", "backoff", "bury_exit_codes",
                 "rate_limit", "concurrency_group", "concurrency_limit", "cost_units", "on_buried", "on_completed",
                 "on_cancelled", "memory_limit",
                 "log_head", "log_tail")  # bytes of a run's output kept (None: [defaults])

    def __init__(self, name: str, command: list[str] | None = None, queue: str | None = None,
                 max_attempts: int | None = None, timeout: float | None = None, priority: int | None = None,
                 backoff: str | None = None, bury_exit_codes: list[int] | None = None,  # None: a new empty list
                 rate_limit: tuple[int, float] | None = None,  # (max starts, window seconds)
                 concurrency_group: str | None = None, concurrency_limit: int | None = None,
                 cost_units: int | None = None,
                 on_buried: str | None = None,  # the type of a job enqueued when one of this type is buried
                 on_completed: str | None = None, on_cancelled: str | None = None,
                 memory_limit: int | None = None):  # bytes for its handler (its tree in a cgroup, else RLIMIT_AS)
        self.name = name
        self.command = command
        self.queue = queue
        self.max_attempts = max_attempts
        self.timeout = timeout
        self.priority = priority
        self.backoff = backoff
        self.bury_exit_codes = [] if bury_exit_codes is None else bury_exit_codes
        self.rate_limit = rate_limit
        self.concurrency_group = concurrency_group
        self.concurrency_limit = concurrency_limit
        self.cost_units = cost_units
        self.on_buried = on_buried
        self.on_completed = on_completed
        self.on_cancelled = on_cancelled
        self.memory_limit = memory_limit
        self.log_head: int | None = None
        self.log_tail: int | None = None


class WorkerSettings(Record):
    """The `[worker]` table: defaults for `jobctl work` (its command-line options win). The one place
    the worker's defaults are written: WorkerOptions takes its own from here."""

    __slots__ = ("concurrency", "poll", "grace", "lease", "kill_grace", "recover_every", "purge_every", "log_format")

    def __init__(self, concurrency: int = 1,
                 poll: float = 1.0,  # longest wait between claims when the queue is empty
                 grace: float = 30.0,  # on SIGTERM/SIGINT: how long running handlers may finish
                 lease: float = 60.0,  # claim lease, renewed while the handler runs; a lost worker's job is recovered after it
                 kill_grace: float = 5.0,  # between SIGTERM and SIGKILL when a handler is stopped
                 recover_every: float = 30.0,  # how often expired leases of other workers are recovered
                 purge_every: float = 600.0,  # how often [retention] is applied
                 log_format: str = "human"):  # or "json"
        self.concurrency = concurrency
        self.poll = poll
        self.grace = grace
        self.lease = lease
        self.kill_grace = kill_grace
        self.recover_every = recover_every
        self.purge_every = purge_every
        self.log_format = log_format


SQLITE_KEYS = ("busy_timeout", "synchronous", "allow_network_fs")  # the [sqlite] table: this engine's own settings
POSTGRES_KEYS = ("schema", "busy_timeout")  # the [postgres] table
MOVED_TO_SQLITE = ("busy_timeout", "synchronous")  # top-level keys of jobctl 0.1.0, still read there
WORKER_KEYS = WorkerSettings.__slots__  # the [worker] table's keys (its defaults: WorkerSettings())


class Settings(Record):
    """Every setting, with its built-in default. A dict or list argument left out (None) is a new
    one each time: the default secret keys, the default retention, no types, default [worker]."""

    __slots__ = ("config_path", "db", "busy_timeout", "synchronous", "allow_network_fs", "pg_schema", "pg_busy_timeout",
                 "max_payload_bytes",
                 "secret_keys", "queue", "priority", "max_attempts", "backoff", "backoff_jitter", "timeout", "retention",
                 "types", "worker", "sources", "notes", "memory_limit", "log_head", "log_tail")

    def __init__(self, config_path: Path | None = None,
                 db: str | None = None,  # from the config file only; resolve_db applies flag and env first
                 busy_timeout: float = DEFAULT_BUSY_TIMEOUT,  # [sqlite] busy_timeout
                 synchronous: str = "full",  # [sqlite] synchronous
                 allow_network_fs: bool = False,  # [sqlite] allow_network_fs
                 pg_schema: str | None = None,  # [postgres] schema (None: the URL's, else "jobctl")
                 pg_busy_timeout: float = DEFAULT_BUSY_TIMEOUT,  # [postgres] busy_timeout
                 max_payload_bytes: int = 1024 * 1024, secret_keys: list[str] | None = None,
                 queue: str = "default", priority: int = 10, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                 backoff: str = "exponential", backoff_jitter: float = 0.0, timeout: float = DEFAULT_TIMEOUT,
                 retention: dict[str, float | None] | None = None, types: dict[str, TypeConfig] | None = None,
                 worker: WorkerSettings | None = None,
                 sources: dict[str, str] | None = None,  # setting -> where its value came from
                 notes: list[str] | None = None,  # one-line notes for the user (a moved key, ...)
                 memory_limit: int | None = None):  # [defaults] memory_limit: bytes, None for no limit
        self.config_path = config_path
        self.db = db
        self.busy_timeout = busy_timeout
        self.synchronous = synchronous
        self.allow_network_fs = allow_network_fs
        self.pg_schema = pg_schema
        self.pg_busy_timeout = pg_busy_timeout
        self.notes = [] if notes is None else notes
        self.memory_limit = memory_limit
        self.log_head = DEFAULT_LOG_HEAD  # bytes kept of the start of a run's output
        self.log_tail = DEFAULT_LOG_TAIL  # and of its end
        self.max_payload_bytes = max_payload_bytes
        self.secret_keys = list(DEFAULT_SECRET_KEYS) if secret_keys is None else secret_keys
        self.queue = queue
        self.priority = priority
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.backoff_jitter = backoff_jitter
        self.timeout = timeout
        self.retention = ({"completed": 7 * 86400.0, "cancelled": 7 * 86400.0, "buried": None}
                          if retention is None else retention)
        self.types = {} if types is None else types
        self.worker = WorkerSettings() if worker is None else worker
        self.sources = {} if sources is None else sources

    def type_config(self, name: str) -> TypeConfig | None:
        return self.types.get(name)

    def memory_limit_of(self, type: str) -> int | None:
        """The handler's address-space cap for a type: its own, else [defaults], else none."""
        tc = self.types.get(type)
        limit = tc.memory_limit if tc is not None and tc.memory_limit is not None else self.memory_limit
        return limit or None  # 0: "none", a type lifting the [defaults] limit


def find_config_file(flag: str | None, env=os.environ) -> tuple[Path | None, bool]:
    """The config file to read and whether it was named explicitly (then it must exist)."""
    if flag == "":  # `--config "$VAR"` with the variable unset: not the default config
        raise ConfigError("--config is empty; give the config file's path (is the variable it came from set?)")
    if flag:
        return Path(flag).expanduser(), True
    if env.get("JOBCTL_CONFIG"):
        return Path(env["JOBCTL_CONFIG"]).expanduser(), True
    local = Path("jobctl.toml")
    if local.is_file():
        return local, False
    xdg = default_config_path()
    if xdg.is_file():
        return xdg, False
    return None, False


def parse_backoff(value, *, where: str = "backoff") -> str:
    """A strategy name or a list of seconds ("10,30,60" or [10, 30, 60]) -> the stored text form."""
    if isinstance(value, str) and value.strip().lower() in BACKOFF_NAMES:
        return value.strip().lower()
    if isinstance(value, str):
        items = [x.strip() for x in value.split(",")]
    elif isinstance(value, list):
        items = value
    else:
        items = None
    try:
        if not items:
            raise ValueError
        seconds = [int(parse_duration(x)) if isinstance(x, str) else x for x in items]
        if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 or s > 365 * 86400 for s in seconds):
            raise ValueError
    except (ValueError, InvalidInput):
        raise InvalidInput(
            f"invalid {where} {value!r}: use exponential, linear, fixed, or a list of seconds such as 10,30,60"
        ) from None
    return ",".join(str(s) for s in seconds)


def parse_command(value, *, where: str) -> list[str]:
    if isinstance(value, str):
        import shlex  # only a string command needs splitting

        try:
            argv = shlex.split(value)
        except ValueError as e:
            raise ConfigError(f"{where}: cannot split the command: {e}") from None
    elif isinstance(value, list) and all(isinstance(x, str) for x in value):
        argv = list(value)
    else:
        raise ConfigError(f"{where}: must be an argv list of strings or a string")
    if not argv:
        raise ConfigError(f"{where}: the command is empty")
    return argv


def _int(value, where: str, lo: int, hi: int) -> int:
    """The one check of every count in the config (max_attempts, cost_units, concurrency_limit, a
    rate limit's starts, concurrency, ...): a TOML integer, never a string ("4"), a float (4.0) or a
    boolean (true, which Python counts as 1); the error names the key."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ConfigError(f"{where}: must be an integer from {lo} to {hi}, not {value!r}")
    return value


def _duration(value, where: str) -> float:
    try:
        return parse_duration(value, what=where)
    except InvalidInput as e:
        raise ConfigError(str(e)) from None


# Durations that only work within a range: (least, most, why), in seconds. Checked alike in the
# config file, on the command line and in the environment.
DURATION_RANGES = {
    # The lease is renewed every third of it; below 1 s it runs out before a renewal can land on a
    # busy machine, another worker recovers the job, and it runs twice.
    "lease": (1.0, 10 * 365 * 86400.0, "a shorter lease expires before it can be renewed and the job runs twice"),
    # SQLite keeps its busy timeout in milliseconds in a 32-bit int: past 24.8 days it wraps to no
    # wait at all. A day is more than any lock should be held.
    "busy timeout": (0.0, 86400.0, "no lock is worth a longer wait; SQLite's own timer overflows at 24.8 days"),
    "poll": (0.01, 3600.0, "a shorter one is a busy loop"),
    "grace": (0.0, 86400.0, "longer would hold a stopping worker for days"),
}


def duration_in_range(value, what: str, kind: str) -> float:
    """A duration checked against DURATION_RANGES[kind]; the error names the value and the range."""
    from jobctl.durations import exact_duration

    lo, hi, why = DURATION_RANGES[kind]
    seconds = parse_duration(value, what=what)
    if not lo <= seconds <= hi:
        raise InvalidInput(f"invalid {what} {value!r}: must be from {exact_duration(lo)} to "
                           f"{exact_duration(hi)} ({why})")
    return seconds


def _duration_in_range(value, where: str, kind: str) -> float:
    try:
        return duration_in_range(value, where, kind)
    except InvalidInput as e:
        raise ConfigError(str(e)) from None


LOG_KEYS = ("log_head", "log_tail")  # [defaults] and [types.X]: how much of a run's output is kept
DEFAULT_LOG_HEAD, DEFAULT_LOG_TAIL = 64 * 1024, 1024 * 1024
MAX_LOG_BYTES = 256 * 1024 * 1024


def parse_size(value, where: str) -> int:
    """A log size in bytes: a number of bytes, or a string like "64KiB", "1MiB", "500kB"."""
    from jobctl.durations import parse_size as size

    try:
        return size(value, what=where, least=0, most=MAX_LOG_BYTES)
    except InvalidInput as e:
        raise ConfigError(str(e)) from None


ENQUEUE_KEYS = ("queue", "max_attempts", "timeout", "priority", "backoff")  # [defaults] and [types.X] alike
MEMORY_LIMIT_RANGE = (16 * 1024**2, 1024**4)  # below 16 MiB not even an interpreter starts


def _memory_limit(value, where: str) -> int:
    """A handler's address-space cap: a size such as "512MiB"; "none" (0) for no limit."""
    if value in ("none", "unlimited", False):
        return 0
    from jobctl.durations import parse_size

    try:
        return parse_size(value, what=where, least=MEMORY_LIMIT_RANGE[0], most=MEMORY_LIMIT_RANGE[1])
    except InvalidInput as e:
        raise ConfigError(str(e)) from None


LIMIT_KEYS = ("rate_limit", "concurrency_group", "concurrency_limit", "cost_units")  # [types.X] only
REACTION_KEYS = ("on_buried", "on_completed", "on_cancelled")  # [types.X] only: the type of a reaction job
MAX_COST_UNITS = 1_000_000


def parse_cost(value, where: str = "cost") -> int:
    """A job's cost units: a whole number from 1 (enqueue --cost, the batch key, cost_units)."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COST_UNITS:
        raise InvalidInput(f"invalid {where} {value!r}: must be a whole number of units from 1 to {MAX_COST_UNITS}")
    return value


def _limit_option(key: str, value, where: str):
    """One admission-control key of a [types.X] table."""
    if key == "rate_limit":
        if not isinstance(value, list) or len(value) != 2:
            raise ConfigError(f"{where}: must be a pair [max_starts, window], such as [10, \"60s\"], not {value!r}")
        n = _int(value[0], f"{where}[0] (max starts)", 1, 10**9)
        window = _duration(value[1], f"{where}[1] (window)")
        if not 0.001 <= window <= 366 * 86400:
            raise ConfigError(f"{where}[1] (window): must be from 1ms to 366d, not {value[1]!r}")
        return (n, window)
    if key == "concurrency_group":
        try:
            return validate_name(value, "concurrency group")
        except InvalidInput as e:
            raise ConfigError(f"{where}: {e}") from None
    if key == "concurrency_limit":
        return _int(value, where, 1, 10**9)
    return _int(value, where, 1, MAX_COST_UNITS)  # cost_units


def _enqueue_option(key: str, value, where: str):
    """One enqueue default of [defaults] or [types.X], checked as its command-line option is."""
    try:
        if key == "queue":
            return validate_name(value, "queue")
        if key == "priority":
            if isinstance(value, str) and value.strip().lower() not in PRIORITY_LABELS:
                # a label, or a TOML integer: a number in quotes is refused as the other counts are
                raise InvalidInput(f"must be a label ({', '.join(PRIORITY_LABELS)}) or an integer from "
                                   f"{PRIORITY_MIN} to {PRIORITY_MAX} without quotes, not {value!r}")
            return parse_priority(value)
        if key == "backoff":
            return parse_backoff(value, where=where)
    except InvalidInput as e:
        raise ConfigError(str(e) if key == "backoff" else f"{where}: {e}") from None
    if key == "max_attempts":
        return _int(value, where, 1, 1000)
    timeout = _duration(value, where)
    if timeout <= 0:
        raise ConfigError(f"{where}: must be more than 0")
    return timeout


def read_trusted(path: Path) -> bytes:
    """The bytes of a config file, which names the commands a worker runs: refused (exit 2) unless
    it is a regular file of yours or root's that nobody else may write, reached through folders
    and links that are yours or root's and closed to others' writes (sticky folders aside)."""
    import stat

    from jobctl.engines import files
    from jobctl.errors import DatabaseUnusable

    try:
        real = files.resolve(path)
    except DatabaseUnusable as e:
        raise ConfigError(f"config file {path}: {e}") from None
    fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"config file {path} is not a regular file")
        if not files.trusted_owner(st.st_uid):
            raise ConfigError(
                f"config file {path} belongs to {files.user_name(st.st_uid)}, not to you "
                f"({files.user_name(os.geteuid())}) or root, and the commands it names would run as you; "
                "use a config file of your own (--config PATH)")
        if st.st_mode & 0o022:
            raise ConfigError(
                f"config file {path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}), so "
                f"anyone could change the commands it runs as you; run `chmod go-w {real}`")
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def load_settings(flag: str | None = None, env=os.environ) -> Settings:
    """Find and read the config file. A named file that is missing or malformed is exit 2."""
    path, explicit = find_config_file(flag, env)
    settings = Settings(config_path=path)
    if path is None:
        return settings
    try:
        raw = read_trusted(path)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist; create one with `jobctl config init {path}`") from None
    except OSError as e:
        raise ConfigError(f"config file {path} cannot be read: {e.strerror}") from None
    import tomllib

    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {path} does not parse: {e}") from None
    try:
        apply_config(settings, data, str(path))
    except ConfigError as e:
        raise ConfigError(f"config file {path}: {e}") from None
    return settings


def apply_config(settings: Settings, data: dict, origin: str) -> None:
    """Validate a parsed config document into settings; errors name the key and what is wrong."""
    known_top = {"db", "max_payload_bytes", "secret_keys", "defaults", "retention", "types", "worker", "sqlite",
                 "postgres",
                 *MOVED_TO_SQLITE}
    for key in data:
        if key not in known_top:
            raise ConfigError(f"unknown key {key!r} (known: {', '.join(sorted(known_top - set(MOVED_TO_SQLITE)))})")

    def src(name):
        settings.sources[name] = origin

    if "db" in data:
        if not isinstance(data["db"], str) or not data["db"]:
            raise ConfigError("db: must be a path (or a database URL) string")
        settings.db = data["db"]
        src("db")
    _apply_sqlite(settings, data, origin, src)
    _apply_postgres(settings, data, src)
    if "max_payload_bytes" in data:
        settings.max_payload_bytes = _int(data["max_payload_bytes"], "max_payload_bytes", 2, 1024**3)
        src("max_payload_bytes")
    if "secret_keys" in data:
        v = data["secret_keys"]
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise ConfigError("secret_keys: must be a list of strings")
        settings.secret_keys = [x.lower() for x in v]
        src("secret_keys")
    _apply_defaults(settings, data, src)
    _apply_retention(settings, data, src)
    _apply_types(settings, data, src)
    _apply_worker(settings, data, src)


def _apply_sqlite(settings: Settings, data: dict, origin: str, src: Callable[[str], None]) -> None:
    """[sqlite], and its keys that jobctl 0.1.0 read at the top (still read there, with a note)."""
    sqlite = data.get("sqlite", {})
    if not isinstance(sqlite, dict):
        raise ConfigError("[sqlite] must be a table")
    moved = [k for k in MOVED_TO_SQLITE if k in data]
    for key in moved:
        if key in sqlite:
            raise ConfigError(f"{key} is set both at the top and in [sqlite]; keep the one in [sqlite]")
        settings.notes.append(f"config file {origin}: `{key}` now belongs in the [sqlite] table; "
                              "it still works at the top, move it there to silence this note")
    for key, value in [*((k, data[k]) for k in moved), *sqlite.items()]:
        where = f"sqlite.{key}"
        if key == "busy_timeout":
            settings.busy_timeout = _duration_in_range(value, where, "busy timeout")
        elif key == "synchronous":
            v = str(value).lower()
            if v not in ("full", "normal"):
                raise ConfigError(f"{where}: must be \"full\" or \"normal\", not {value!r}")
            settings.synchronous = v
        elif key == "allow_network_fs":
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: must be true or false")
            settings.allow_network_fs = value
        else:
            raise ConfigError(f"unknown key {where!r} (known: {', '.join(SQLITE_KEYS)})")
        src(where)


def _apply_postgres(settings: Settings, data: dict, src: Callable[[str], None]) -> None:
    postgres = data.get("postgres", {})
    if not isinstance(postgres, dict):
        raise ConfigError("[postgres] must be a table")
    for key, value in postgres.items():
        where = f"postgres.{key}"
        if key == "schema":
            if not isinstance(value, str) or not PG_SCHEMA_NAME.match(value):
                raise ConfigError(f"{where}: must be a schema name of 1 to 48 lowercase letters, digits and _, "
                                  f"starting with a letter or _ (not pg_), not {value!r}")
            settings.pg_schema = value
        elif key == "busy_timeout":
            settings.pg_busy_timeout = _duration_in_range(value, where, "busy timeout")
        else:
            raise ConfigError(f"unknown key {where!r} (known: {', '.join(POSTGRES_KEYS)})")
        src(where)


def _apply_defaults(settings: Settings, data: dict, src: Callable[[str], None]) -> None:
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise ConfigError("[defaults] must be a table")
    for key, value in defaults.items():
        where = f"defaults.{key}"
        if key in ENQUEUE_KEYS:
            setattr(settings, key, _enqueue_option(key, value, where))
        elif key in LOG_KEYS:
            setattr(settings, key, parse_size(value, where))
        elif key in ("backoff_jitter", "jitter"):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise ConfigError(f"{where}: must be a fraction from 0 to 1, such as 0.1")
            settings.backoff_jitter = float(value)
        elif key == "memory_limit":
            settings.memory_limit = _memory_limit(value, where)
        else:
            raise ConfigError(f"unknown key {where!r}")
        src(where)


def _apply_retention(settings: Settings, data: dict, src: Callable[[str], None]) -> None:
    retention = data.get("retention", {})
    if not isinstance(retention, dict):
        raise ConfigError("[retention] must be a table")
    for key, value in retention.items():
        if key not in ("completed", "cancelled", "buried"):
            raise ConfigError(f"unknown key retention.{key!r} (known: completed, cancelled, buried)")
        if value in (False, "never", "keep"):
            settings.retention[key] = None
        else:
            settings.retention[key] = _duration(value, f"retention.{key}")
        src(f"retention.{key}")


def _apply_types(settings: Settings, data: dict, src: Callable[[str], None]) -> None:
    """[types.X], then the check that no reactions loop."""
    types = data.get("types", {})
    if not isinstance(types, dict):
        raise ConfigError("[types] must be a table of tables")
    for name, table in types.items():
        try:
            validate_name(name, "type")
        except InvalidInput as e:
            raise ConfigError(f"types.{name}: {e}") from None
        if not isinstance(table, dict):
            raise ConfigError(f"types.{name}: must be a table")
        tc = TypeConfig(name=name)
        for key, value in table.items():
            where = f"types.{name}.{key}"
            if key == "command":
                tc.command = parse_command(value, where=where)
            elif key in ENQUEUE_KEYS:
                setattr(tc, key, _enqueue_option(key, value, where))
            elif key == "bury_exit_codes":
                if not isinstance(value, list):
                    raise ConfigError(f"{where}: must be a list of exit codes such as [65]")
                tc.bury_exit_codes = [_int(v, where, 1, 255) for v in value]
            elif key in LIMIT_KEYS:
                setattr(tc, key, _limit_option(key, value, where))
            elif key == "memory_limit":
                tc.memory_limit = _memory_limit(value, where)
            elif key in LOG_KEYS:
                setattr(tc, key, parse_size(value, where))
            elif key in REACTION_KEYS:
                try:
                    reaction = validate_name(value, "type")
                except InvalidInput as e:
                    raise ConfigError(f"{where}: {e}") from None
                if reaction == name:
                    raise ConfigError(f"{where}: a type cannot react to itself; name another type")
                setattr(tc, key, reaction)
            else:
                raise ConfigError(
                    f"unknown key {where!r} (known: command, {', '.join(ENQUEUE_KEYS)}, bury_exit_codes, "
                    f"{', '.join(LIMIT_KEYS)}, {', '.join(REACTION_KEYS)}, memory_limit, {', '.join(LOG_KEYS)})"
                )
        settings.types[name] = tc
        src(f"types.{name}")
    loop = _reaction_loop(settings.types)
    if loop:
        raise ConfigError(f"types react to each other in a loop: {' -> '.join(loop)} (each reaction would "
                          "enqueue the next for ever); remove one of these reactions")


def _apply_worker(settings: Settings, data: dict, src: Callable[[str], None]) -> None:
    worker = data.get("worker", {})
    if not isinstance(worker, dict):
        raise ConfigError("[worker] must be a table")
    for key, value in worker.items():
        where = f"worker.{key}"
        if key == "concurrency":
            settings.worker.concurrency = _int(value, where, 1, 1024)
        elif key == "log_format":
            if value not in ("human", "json"):
                raise ConfigError(f"{where}: must be \"human\" or \"json\", not {value!r}")
            settings.worker.log_format = value
        elif key in ("lease", "poll", "grace"):
            setattr(settings.worker, key, _duration_in_range(value, where, key))
        elif key in WORKER_KEYS:
            seconds = _duration(value, where)
            if seconds <= 0 and key != "grace":
                raise ConfigError(f"{where}: must be more than 0")
            setattr(settings.worker, key, seconds)
        else:
            raise ConfigError(f"unknown key {where!r} (known: {', '.join(WORKER_KEYS)})")
        src(where)


def _reaction_loop(types: dict) -> list[str] | None:
    """A loop of [types.X] reactions (on_buried, on_completed, on_cancelled of any kind: a -> b -> a),
    as the names along it ending where it starts, or None."""
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done (no loop through it)

    def walk(name: str, path: list[str]) -> list[str] | None:
        state[name] = 1
        tc = types.get(name)
        for key in REACTION_KEYS:
            nxt = getattr(tc, key, None) if tc is not None else None
            if nxt is None:
                continue
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], name, nxt] if nxt in path else [name, nxt]
            if state.get(nxt) is None:
                found = walk(nxt, [*path, name])
                if found:
                    return found
        state[name] = 2
        return None

    for name in sorted(types):
        if state.get(name) is None:
            found = walk(name, [])
            if found:
                return found
    return None


def resolve_db_path(flag: str | None, settings: Settings, env=os.environ) -> tuple[str, str]:
    """The database (a path or a URL, as given: engines.open reads it) and where that choice came
    from: --db, JOBCTL_DB, config, default."""
    if flag == "":  # `--db "$VAR"` with the variable unset: never the default database
        raise InvalidInput("--db is empty; give the database's path or URL (is the variable it came from set?)")
    if flag:
        return flag, "--db"
    if env.get("JOBCTL_DB"):
        return env["JOBCTL_DB"], "JOBCTL_DB"
    if settings.db is not None:
        return settings.db, f"config {settings.config_path}"
    return str(default_db_path()), "default"


def resolve_busy_timeout(flag: str | None, settings: Settings, env=os.environ, *, server: bool = False) -> float:
    """--busy-timeout, JOBCTL_BUSY_TIMEOUT, then the config of the database's engine: [sqlite]
    busy_timeout, or for a server database (`server`) [postgres] busy_timeout."""
    if flag is not None:
        return duration_in_range(flag, "--busy-timeout", "busy timeout")
    if env.get("JOBCTL_BUSY_TIMEOUT"):
        return duration_in_range(env["JOBCTL_BUSY_TIMEOUT"], "JOBCTL_BUSY_TIMEOUT", "busy timeout")
    return settings.pg_busy_timeout if server else settings.busy_timeout
