"""`jobctl config init` and `jobctl config show`: write a starter config file, print the effective
settings as TOML (and where each came from). tomli_w is imported only here."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Optional

import typer

from jobctl.cli.app import app, emit, emit_json, state
from jobctl.errors import InvalidInput

config_app = typer.Typer(
    name="config", help="Write a starter config file, or print the effective settings.",
    no_args_is_help=True, rich_markup_mode=None,
)
app.add_typer(config_app, name="config")

STARTER = '''\
# jobctl configuration (TOML). Every setting is optional; the values shown commented out are the
# built-in defaults. Precedence: command-line option > environment variable > this file > default.
# Found by --config, JOBCTL_CONFIG, ./jobctl.toml, then ~/.config/jobctl/config.toml.
# Check what is in effect with `jobctl config show --sources`.

# The database file (JOBCTL_DB and --db win). `~` is expanded.
# db = "~/.local/share/jobctl/jobctl.db"

# The largest payload (and result) accepted, in bytes of compact JSON.
# max_payload_bytes = 1048576

# Payload keys whose values human views mask (matched as substrings, case-insensitive).
# secret_keys = ["password", "passwd", "token", "secret", "api_key", "apikey", "authorization", "private_key", "credential", "cookie", "session"]

[sqlite]
# Settings of a SQLite database file (a PostgreSQL database ignores them).
# How long to wait for another process's write lock before giving up (exit 6).
# busy_timeout = "5s"
# "full": every commit survives a power loss. "normal": faster, may lose the last commits on power
# loss (never on a crash).
# synchronous = "full"
# SQLite's locking is unsafe on NFS, SMB and other network filesystems, so such a file is refused.
# allow_network_fs = false

[postgres]
# Settings of a PostgreSQL database (db = "postgresql://user@host:5432/dbname"; a SQLite file
# ignores them). jobctl's tables live in their own schema; a URL's ?options=-csearch_path%3DNAME wins.
# schema = "jobctl"
# How long to wait for a lock (lock_timeout) before giving up (exit 6); a statement may run this
# long plus 30s (statement_timeout).
# busy_timeout = "5s"

[defaults]
# Applied to every job at enqueue, unless its [types.NAME] table or the command line says otherwise.
# queue = "default"
# priority = "normal"          # low, normal, high, critical, or -1000..1000
# max_attempts = 3             # total runs, the first included
# backoff = "exponential"      # exponential (60s, 120s, ... 1h), linear, fixed (60s), or [10, 30, 60]
# jitter = 0.0                 # spread retry delays by up to this fraction (0.1 = +-10%)
# timeout = "10m"              # longest a single run may take
# memory_limit = "none"        # the handler's memory, such as "512MiB" (also per type): its whole tree
#                              # where the worker may make a cgroup, else each process's address space
# log_head = "64KiB"           # of each run's output (stdout and stderr), the first bytes kept
# log_tail = "1MiB"            # and the last (`jobctl logs ID`); also per type

[retention]
# Workers delete finished jobs (and their history) this long after they finished.
# completed = "7d"
# cancelled = "7d"
# buried = "never"             # buried jobs wait for a person unless a duration is set

[worker]
# Defaults for `jobctl work`; its options win.
# concurrency = 1
# poll = "1s"                  # longest wait between claims when the queue is empty
# grace = "30s"                # on SIGTERM/SIGINT: time running jobs get before they are stopped
# lease = "60s"                # renewed while a handler runs; a dead worker's job is retried after it
# kill_grace = "5s"            # between SIGTERM and SIGKILL when a handler is stopped
# recover_every = "30s"        # how often expired leases of lost workers are recovered
# purge_every = "10m"          # how often [retention] is applied
# log_format = "human"         # or "json"

# One table per job type: its handler for workers, and enqueue defaults for its jobs.
# The command is an argv list (or a string split like a shell would, without variables or ~),
# never run by a shell. It gets the payload as JSON on stdin and JOBCTL_JOB_ID, JOBCTL_TOKEN,
# JOBCTL_ATTEMPT, ... in its environment. Exit 0 completes the job (a JSON last line of stdout is
# its result); other exits fail it (retried with backoff); exits in bury_exit_codes bury it at once.
#
# [types.send-invoice]
# command = ["/usr/local/bin/send-invoice", "--live"]
# queue = "billing"
# max_attempts = 1
# timeout = "2m"
# priority = "high"
# bury_exit_codes = [65]
#
# Admission control, across every worker of the database:
# rate_limit = [10, "60s"]       # at most 10 runs may start in any 60 s window
# concurrency_group = "openai"   # shared by every type that names it
# concurrency_limit = 4          # at most 4 cost units of the group (or of this type) running at once
# cost_units = 1                 # what one running job of this type holds of that limit
#
# Reactions: when a job of this type is buried (completed, cancelled), a job of the named type
# is enqueued in the same transaction, its payload {"event": "buried", "job": {...}}:
# on_buried = "alert-oncall"
# on_completed = "notify-customer"
# on_cancelled = "release-stock"
'''


@config_app.command("init")
def config_init(
    ctx: typer.Context,
    path: Optional[str] = typer.Argument(None, metavar="[PATH]", help="Where to write it (default ~/.config/jobctl/config.toml, in $XDG_CONFIG_HOME when set)."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing file."),
    as_json: bool = typer.Option(False, "--json", help="Print {\"path\"} as JSON."),
):
    """Write a commented starter config file; print its path.

    Example: jobctl config init ./jobctl.toml
    """
    from jobctl.config import default_config_path

    target = Path(path).expanduser() if path else default_config_path()
    if target.is_dir():
        raise InvalidInput(f"{target} is a directory; give a file path such as {target / 'config.toml'}")
    if target.exists() and not force:
        raise InvalidInput(f"{target} already exists; pass --force to overwrite it")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(STARTER)
        os.replace(tmp, target)
    except OSError as e:
        raise InvalidInput(f"cannot write {target}: {e.strerror}") from None
    if as_json:
        emit_json({"path": str(target)})
    else:
        emit(str(target))


def _priority_text(value: int):
    labels = {0: "low", 10: "normal", 20: "high", 30: "critical"}
    return labels.get(value, value)


def _backoff_value(text: str):
    return text if text in ("exponential", "linear", "fixed") else [int(x) for x in text.split(",")]


def effective(st) -> list[tuple[str | None, str, object, str]]:
    """(table, key, value, source) for every effective setting, in config-file order."""
    from jobctl.config import DEFAULT_PG_SCHEMA, WORKER_KEYS, resolve_busy_timeout, resolve_db_path
    from jobctl.durations import exact_duration, format_size

    s = st.settings
    src = s.sources

    def origin(key: str) -> str:
        return src.get(key, "default")

    rows: list[tuple[str | None, str, object, str]] = []
    db, db_source = resolve_db_path(st.db, s)
    from jobctl.engines import display, url_schema

    # A password in a database URL is never shown (it stays in the config file, or the environment).
    rows.append((None, "db", display(str(db)), {"--db": "--db", "JOBCTL_DB": "JOBCTL_DB"}.get(db_source, origin("db"))))
    rows.append((None, "max_payload_bytes", s.max_payload_bytes, origin("max_payload_bytes")))
    rows.append((None, "secret_keys", list(s.secret_keys), origin("secret_keys")))

    def busy_timeout(server: bool) -> tuple[str, str]:
        busy = resolve_busy_timeout(st.busy_timeout, s, server=server)
        if st.busy_timeout is not None:
            return exact_duration(busy), "--busy-timeout"
        if os.environ.get("JOBCTL_BUSY_TIMEOUT"):
            return exact_duration(busy), "JOBCTL_BUSY_TIMEOUT"
        return exact_duration(busy), origin("postgres.busy_timeout" if server else "sqlite.busy_timeout")

    rows.append(("sqlite", "busy_timeout", *busy_timeout(False)))
    rows.append(("sqlite", "synchronous", s.synchronous, origin("sqlite.synchronous")))
    allow = st.allow_network_fs or s.allow_network_fs
    rows.append(("sqlite", "allow_network_fs", allow,
                 "--allow-network-fs" if st.allow_network_fs else origin("sqlite.allow_network_fs")))
    in_url = url_schema(str(db))  # the URL's search_path wins over the config's schema
    rows.append(("postgres", "schema", in_url or s.pg_schema or DEFAULT_PG_SCHEMA,
                 "the db URL's search_path" if in_url else origin("postgres.schema")))
    rows.append(("postgres", "busy_timeout", *busy_timeout(True)))

    jitter_source = src.get("defaults.jitter") or src.get("defaults.backoff_jitter") or "default"
    for key, value, source in (
        ("queue", s.queue, origin("defaults.queue")),
        ("priority", _priority_text(s.priority), origin("defaults.priority")),
        ("max_attempts", s.max_attempts, origin("defaults.max_attempts")),
        ("backoff", _backoff_value(s.backoff), origin("defaults.backoff")),
        ("jitter", s.backoff_jitter, jitter_source),
        ("timeout", exact_duration(s.timeout), origin("defaults.timeout")),
        ("memory_limit", format_size(s.memory_limit) if s.memory_limit else "none", origin("defaults.memory_limit")),
        ("log_head", _size_value(s.log_head), origin("defaults.log_head")),
        ("log_tail", _size_value(s.log_tail), origin("defaults.log_tail")),
    ):
        rows.append(("defaults", key, value, source))
    for key in ("completed", "cancelled", "buried"):
        age = s.retention.get(key)
        rows.append(("retention", key, "never" if age is None else exact_duration(age), origin(f"retention.{key}")))
    for key in WORKER_KEYS:
        value = getattr(s.worker, key)
        if isinstance(value, float):
            value = exact_duration(value)
        rows.append(("worker", key, value, origin(f"worker.{key}")))
    for name, tc in s.types.items():
        table = f"types.{_toml_key(name)}"
        where = origin(f"types.{name}")
        if tc.command is not None:
            rows.append((table, "command", list(tc.command), where))
        if tc.queue is not None:
            rows.append((table, "queue", tc.queue, where))
        if tc.max_attempts is not None:
            rows.append((table, "max_attempts", tc.max_attempts, where))
        if tc.timeout is not None:
            rows.append((table, "timeout", exact_duration(tc.timeout), where))
        if tc.priority is not None:
            rows.append((table, "priority", _priority_text(tc.priority), where))
        if tc.backoff is not None:
            rows.append((table, "backoff", _backoff_value(tc.backoff), where))
        if tc.bury_exit_codes:
            rows.append((table, "bury_exit_codes", list(tc.bury_exit_codes), where))
        if tc.rate_limit is not None:
            rows.append((table, "rate_limit", [tc.rate_limit[0], exact_duration(tc.rate_limit[1])], where))
        if tc.concurrency_group is not None:
            rows.append((table, "concurrency_group", tc.concurrency_group, where))
        if tc.concurrency_limit is not None:
            note = where
            group_limit = s.types and tc.concurrency_group and min(
                (t.concurrency_limit for t in s.types.values()
                 if t.concurrency_group == tc.concurrency_group and t.concurrency_limit is not None))
            if group_limit and group_limit != tc.concurrency_limit:
                note = f"{where}{NOTE}group {tc.concurrency_group} runs at {group_limit}, the smallest limit of its types"
            rows.append((table, "concurrency_limit", tc.concurrency_limit, note))
        if tc.cost_units is not None:
            rows.append((table, "cost_units", tc.cost_units, where))
        if tc.memory_limit is not None:
            rows.append((table, "memory_limit", format_size(tc.memory_limit) if tc.memory_limit else "none", where))
        for key in ("on_buried", "on_completed", "on_cancelled"):
            if getattr(tc, key) is not None:
                rows.append((table, key, getattr(tc, key), where))
        for key in ("log_head", "log_tail"):
            if getattr(tc, key) is not None:
                rows.append((table, key, _size_value(getattr(tc, key)), where))
    return rows


def _size_value(n: int):
    """A size as config accepts it back: "64KiB" when exact, else the number of bytes."""
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n and n % size == 0:
            return f"{n // size}{unit}"
    return n


NOTE = "\0"  # separates a row's source from a note that config show prints in any case


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key, ensure_ascii=False)


@config_app.command("show")
def config_show(
    ctx: typer.Context,
    sources: bool = typer.Option(False, "--sources", help="Add a comment after each value saying where it came from."),
):
    """Print the effective settings as TOML (a valid config file).

    Example: jobctl config show --sources
    """
    import tomli_w

    st = state(ctx)
    rows = effective(st)
    # A config of an older jobctl still works, silently everywhere else (cron mails stderr): here,
    # where a person reads the config, it says what moved.
    for note in st.settings.notes:
        sys.stderr.write(f"jobctl: note: {note}\n")
    if st.settings.config_path is not None:
        emit(f"# config file: {st.settings.config_path}")
    else:
        emit("# config file: none found (built-in defaults)")
    current = None
    for table, key, value, source in rows:
        if table != current:
            emit(f"\n[{table}]")
            current = table
        line = tomli_w.dumps({key: value}).rstrip("\n")
        if "\n" in line:  # tomli_w breaks long arrays over lines; keep one line per key
            line = f"{_toml_key(key)} = {_inline(value)}"
        note = source.split(NOTE, 1)[1] if NOTE in source else None  # said with or without --sources
        emit(f"{line}  # {source.replace(NOTE, '; ')}" if sources else f"{line}  # {note}" if note else line)


def _inline(value) -> str:
    import tomli_w

    if isinstance(value, list):
        return "[" + ", ".join(_inline(v) for v in value) + "]"
    return tomli_w.dumps({"v": value}).split("=", 1)[1].strip()
