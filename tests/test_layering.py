"""Layering and start-up weight: the policy (queue, worker) and the mechanism (engines) never import
typer or rich; the hot commands (enqueue, claim, complete, fail, heartbeat) never import rich or
sqlite-utils, on success or on error. Checked in fresh interpreters, from sys.modules."""

import json
import pkgutil
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import jobctl
import jobctl.engines
from conftest import run_cli

UI = {"typer", "rich", "click"}
HEAVY = {"rich", "sqlite_utils"}


def modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.splitlines()[-1]))


def top(mods: set[str]) -> set[str]:
    return {m.split(".")[0] for m in mods}


def _core_modules():
    names = ["jobctl.queue", "jobctl.jobspec", "jobctl.models", "jobctl.config", "jobctl.payloads", "jobctl.durations",
             "jobctl.errors"]
    names += [f"jobctl.engines.{m.name}" for m in pkgutil.iter_modules(jobctl.engines.__path__)]
    for optional in ("jobctl.worker", "jobctl.stats"):
        try:
            __import__(optional)
            names.append(optional)
        except ModuleNotFoundError:
            pass
    return names


@pytest.mark.parametrize("module", _core_modules())
def test_core_never_imports_ui_libraries(module):
    loaded = top(modules_after(f"import {module}"))
    assert not loaded & UI, f"{module} pulls in {sorted(loaded & UI)}"


@pytest.mark.parametrize("module", ["jobctl.queue", "jobctl.engines.sqlite"])
def test_core_does_not_load_sqlite_utils_until_it_migrates(module):
    assert "sqlite_utils" not in top(modules_after(f"import {module}"))


def test_opening_an_existing_file_does_not_load_sqlite_utils(db):
    assert run_cli("init", db=db).exit_code == 0
    loaded = top(modules_after(
        f"from jobctl.queue import Queue\nq = Queue.open({str(db)!r})\nq.enqueue('t')\nq.claim(worker='w')\nq.close()"))
    assert not loaded & (HEAVY | UI)


def test_cli_package_import_is_light():
    loaded = top(modules_after("import jobctl.cli"))
    assert not loaded & HEAVY, sorted(loaded & HEAVY)


RUN = textwrap.dedent(
    """
    import atexit, json, runpy, sys

    out = sys.argv[1]
    def dump():
        with open(out, "w") as f:
            json.dump(sorted(sys.modules), f)
    atexit.register(dump)
    sys.argv = ["jobctl", *sys.argv[2:]]
    runpy.run_module("jobctl", run_name="__main__", alter_sys=True)
    """
)


def cli_modules(tmp_path, *args, input=None):
    out = tmp_path / "modules.json"
    p = subprocess.run([sys.executable, "-c", RUN, str(out), *map(str, args)], capture_output=True, text=True,
                       input=input, timeout=60)
    return p, top(set(json.loads(out.read_text())))


def test_hot_commands_never_import_rich_or_sqlite_utils(tmp_path, db):
    assert run_cli("init", db=db).exit_code == 0
    d = ["--db", db]
    steps = [
        (["enqueue", "t", '{"a": 1}'], 0),
        (["enqueue", "t", "--json", "--key", "k"], 0),
        (["enqueue", "--batch", "-"], 0),
        (["claim", "--worker", "w"], 0),
        (["heartbeat", 1], 0),
        (["fail", 1, "--error", "x"], 0),
        (["claim"], 0),  # job 2: job 1 waits out its backoff
        (["complete", 2], 0),
        # errors too: the one-line error path must not load them either
        (["complete", 2], 4),
        (["fail", 99], 3),
        (["enqueue", "t", "{bad"], 2),
        (["claim", "-q", "empty"], 5),
        (["heartbeat", 1], 4),
    ]
    for args, code in steps:
        p, loaded = cli_modules(tmp_path, *d, *args, input='{"type": "t"}\n')
        assert p.returncode == code, (args, p.stdout, p.stderr)
        assert not loaded & HEAVY, f"jobctl {' '.join(map(str, args))} imported {sorted(loaded & HEAVY)}"


def test_views_may_use_rich(tmp_path, db):
    """A sanity check of the harness: it does see rich when a command loads it."""
    assert run_cli("enqueue", "t", db=db).exit_code == 0
    p, loaded = cli_modules(tmp_path, "--db", db, "list")
    assert p.returncode == 0, p.stderr
    assert "rich" in loaded


def _source_files():
    root = Path(jobctl.__file__).parent
    return {str(p.relative_to(root.parent)): p.read_text() for p in sorted(root.rglob("*.py"))}


# The PostgreSQL engine's modules: the adapter (psycopg2 as the SQL core uses it), the URL target
# (connecting, the driver's messages), the engine (the driver's errors by class), and the copy's
# PostgreSQL side (a function-level import). None of them is imported until a PostgreSQL URL is opened.
DRIVER_IMPORTERS = {"jobctl/engines/pg_driver.py", "jobctl/engines/pg_target.py", "jobctl/engines/postgres.py",
                    "jobctl/engines/transfer.py"}


def test_only_the_postgresql_modules_import_the_driver():
    importers = {path for path, text in _source_files().items()
                 if re.search(r"^\s*(import|from)\s+psycopg2\b", text, re.M)}
    assert importers <= DRIVER_IMPORTERS, sorted(importers - DRIVER_IMPORTERS)
    module_level = {path for path, text in _source_files().items()
                    if re.search(r"^(import|from)\s+psycopg2\b", text, re.M)}
    assert module_level <= DRIVER_IMPORTERS - {"jobctl/engines/transfer.py"}, sorted(module_level)


def test_a_sqlite_queue_and_the_cli_never_load_the_driver(db):
    assert run_cli("init", db=db).exit_code == 0
    loaded = top(modules_after(
        f"import jobctl.cli, jobctl.worker, jobctl.engines.sql, jobctl.engines.transfer\n"
        f"from jobctl.queue import Queue\nq = Queue.open({str(db)!r})\nq.enqueue('t')\n"
        f"j = q.claim(worker='w')\nq.complete(j.id, token=j.token)\nq.close()"))
    assert "psycopg2" not in loaded


def test_engine_capabilities_are_declared_not_probed():
    """The worker, the wait loops and the queue read what an engine can do from what it declares
    (engines/base.py: files, wakes, reconnects, STORES_NUL), never by getattr/hasattr on it."""
    probing = re.compile(r"\b(getattr|hasattr)\(\s*[\w.()]*engine\b")
    found = [f"{path}:{n}" for path, text in _source_files().items()
             if path.startswith("jobctl/worker/") or path in ("jobctl/waiting.py", "jobctl/queue.py")
             for n, line in enumerate(text.splitlines(), 1) if probing.search(line)]
    assert not found, found


def test_checking_what_to_enqueue_needs_no_engine():
    """jobctl.jobspec checks a job's options with no database: importing and using it loads no
    engine (nor its drivers), only the engine contract's NewJob record."""
    loaded = modules_after("from jobctl import jobspec\nfrom jobctl.config import Settings\n"
                           "jobspec.prepare(Settings(), 't', payload_text='{}')\n"
                           "jobspec.prepare_batch_line(Settings(), '{\"type\": \"t\"}', 1)")
    engines = {m for m in loaded if m.startswith("jobctl.engines.")} - {"jobctl.engines.base"}
    assert not engines, sorted(engines)
    assert not top(loaded) & (UI | HEAVY | {"sqlite3", "psycopg2"}), sorted(top(loaded))
    assert "jobctl.queue" not in loaded
    source = _source_files()["jobctl/jobspec.py"]
    assert not re.search(r"^\s*(import|from)\s+jobctl\.(queue|engines\.(?!base\b))", source, re.M)


def test_no_module_builds_a_queue_without_an_engine_to_check_input():
    found = [path for path, text in _source_files().items() if "Queue(None" in text]
    assert not found, found


def test_the_cli_command_modules_do_not_import_each_other_in_a_circle():
    """cli/jobs.py (enqueue, ...) uses cli/foreground.py's wait; foreground (wait, run) never reaches
    back into jobs: what both read from a file or stdin is in cli/inputs.py, which imports no command."""
    imports = re.compile(r"^\s*from\s+jobctl\.cli\.(\w+)\s+import|^\s*from\s+jobctl\.cli\s+import\s+(\w+)", re.M)
    uses = {Path(path).stem: {a or b for a, b in imports.findall(text)}
            for path, text in _source_files().items() if path.startswith("jobctl/cli/")}
    assert "jobs" not in uses["foreground"] and "foreground" in uses["jobs"]
    assert not uses["inputs"]
    both_ways = sorted((a, b) for a in uses for b in uses[a] if a < b and a in uses.get(b, ()))
    assert not both_ways, both_ways
