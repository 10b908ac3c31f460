"""The recipes of README.md and docs/ work as written, taken from the documents themselves so that
they cannot drift: the blocks marked `<!-- runnable -->` run in a temporary folder; the cron lines
run under an environment as bare as cron's; the systemd unit parses and agrees with the worker; the
config examples load; every `jobctl` command line in a code block names real commands and options.

Recipes name the server layout of docs/operations.md (/opt/jobctl, /var/lib/jobctl, ...); a test
maps those paths into its temporary folder and nothing else.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import command_reference  # noqa: E402

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent  # the venv the tests run in, where `jobctl` is installed
JOBCTL = BIN / "jobctl"
UNIT = ROOT / "docs" / "jobctl-worker@.service"
SERVER_PATHS = ("/var/lib/jobctl", "/var/backups/jobctl", "/var/lib/node_exporter", "/etc/jobctl")
PROGRAM = "/opt/jobctl/bin/jobctl"
DB = "/var/lib/jobctl/jobs.db"
ROOT_CMD, COMMANDS = command_reference.commands()
BY_PATH = dict(COMMANDS)

pytestmark = pytest.mark.skipif(not JOBCTL.exists(), reason=f"jobctl is not installed beside {sys.executable}")


def code_blocks(doc: Path, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", doc.read_text(), re.S | re.M)


def runnable_blocks(doc: Path) -> list[str]:
    return re.findall(r"^<!-- runnable -->\n```sh\n(.*?)^```", doc.read_text(), re.S | re.M)


def server(tmp: Path, text: str) -> str:
    """A recipe's text with the server's paths mapped into `tmp`."""
    text = text.replace(PROGRAM, str(JOBCTL))
    for p in SERVER_PATHS:
        text = text.replace(p, str(tmp / p.lstrip("/")))
    return text


CONFIG = "/etc/jobctl/config.toml"
SERVER_CONFIG = """\
[types.hello]
command = ["true"]

[types.nightly-report]
command = ["true"]
max_attempts = 1
"""


def make_server(tmp: Path) -> None:
    """The folders of operations.md, and a config with a handler for the jobs the tests enqueue."""
    for p in SERVER_PATHS:
        (tmp / p.lstrip("/")).mkdir(parents=True, exist_ok=True, mode=0o700)
    (tmp / "home").mkdir(exist_ok=True)
    Path(server(tmp, CONFIG)).write_text(SERVER_CONFIG)


def jobctl(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(JOBCTL), "--db", server(tmp, DB), *args], capture_output=True, text=True,
                          timeout=60, env=_user_env(tmp))


def _user_env(tmp: Path) -> dict:
    return {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(tmp / "home"), "LANG": "C.UTF-8", "NO_COLOR": "1",
            "COLUMNS": "120", "XDG_DATA_HOME": str(tmp / "xdg-data"), "XDG_CONFIG_HOME": str(tmp / "xdg-config")}


def has_option(path: str, option: str) -> bool:
    return any(option in p.opts for p in BY_PATH[path].params)


# -- blocks marked runnable ----------------------------------------------------------------------

RUNNABLE = [d for d in DOCS if runnable_blocks(d)]


def test_the_documents_mark_their_recipes_runnable():
    names = {d.name for d in RUNNABLE}
    assert {"README.md", "operations.md"} <= names, names


@pytest.mark.parametrize("doc", RUNNABLE, ids=[d.name for d in RUNNABLE])
def test_runnable_blocks_run_as_written(doc, tmp_path):
    """A reader's session: the document's runnable blocks in order, in one shell, in an empty
    folder, with jobctl on the PATH and nothing else of the developer's."""
    make_server(tmp_path)
    made = jobctl(tmp_path, "enqueue", "hello", '{"n": 1}')  # what a server has: a database with a job
    assert made.returncode == 0, made.stderr
    work = tmp_path / "work"
    work.mkdir()
    script = ["set -e"]
    for i, block in enumerate(runnable_blocks(doc), 1):
        script += [f"echo '>>> block {i}' >&2", server(tmp_path, block)]
    r = subprocess.run(["sh", "-c", "\n".join(script)], cwd=work, env=_user_env(tmp_path), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, f"{doc.name}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    assert "Traceback" not in r.stderr and "jobctl: error" not in r.stderr, r.stderr


def test_the_tour_leaves_what_it_says(tmp_path):
    """The README's tour: job 1 and 3 completed by the end, job 2 still scheduled."""
    make_server(tmp_path)
    script = "set -e\n" + "\n".join(runnable_blocks(ROOT / "README.md"))
    r = subprocess.run(["sh", "-c", script], cwd=tmp_path, env=_user_env(tmp_path), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    with sqlite3.connect(tmp_path / "tour.db") as conn:
        states = dict(conn.execute("SELECT id, status FROM jobs"))
    assert states == {1: "completed", 2: "pending", 3: "completed"}
    assert not (tmp_path / "xdg-data" / "jobctl").exists(), "the tour must not touch the default database"


def test_restore_puts_the_latest_backup_in_place(tmp_path):
    """operations.md: backup, then restore; the restored file is private and holds the jobs of the
    copy, and the damaged one is kept aside."""
    make_server(tmp_path)
    jobctl(tmp_path, "enqueue", "hello", '{"kept": 1}')
    backup, restore = [server(tmp_path, b) for b in runnable_blocks(ROOT / "docs" / "operations.md")]
    env = _user_env(tmp_path)
    assert subprocess.run(["sh", "-ec", backup], env=env, cwd=tmp_path, timeout=60).returncode == 0
    jobctl(tmp_path, "enqueue", "hello", '{"lost": 1}')
    r = subprocess.run(["sh", "-ec", restore], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    db = Path(server(tmp_path, DB))
    assert db.stat().st_mode & 0o777 == 0o600
    assert (db.parent / "damaged" / "jobs.db").exists()
    listed = jobctl(tmp_path, "list", "--json")
    assert '"lost"' not in listed.stdout and '"kept"' in listed.stdout, listed.stdout


# -- cron ----------------------------------------------------------------------------------------

def cron_lines() -> list[tuple[str, str, str]]:
    """(schedule, user, command) of each line of operations.md's /etc/cron.d file."""
    (block,) = code_blocks(ROOT / "docs" / "operations.md", "cron")
    out = []
    for line in block.splitlines():
        if not line.strip() or line.lstrip().startswith("#") or re.match(r"^[A-Z_]+=", line):
            continue
        fields = line.split(None, 6)
        out.append((" ".join(fields[:5]), fields[5], fields[6]))
    return out


def as_cron_runs(command: str) -> str:
    """What cron hands to /bin/sh: an unescaped % would end the command (the rest becomes its
    stdin), and \\% becomes %."""
    assert not re.search(r"(?<!\\)%", command), f"an unescaped % cuts this cron command short: {command}"
    return command.replace("\\%", "%")


def run_as_cron(tmp: Path, command: str) -> subprocess.CompletedProcess:
    """cron's environment: SHELL, PATH=/usr/bin:/bin, HOME, LOGNAME and nothing else; cwd HOME."""
    line = server(tmp, as_cron_runs(command))
    return subprocess.run(["env", "-i", "SHELL=/bin/sh", "PATH=/usr/bin:/bin", f"HOME={tmp / 'home'}", "LOGNAME=jobs",
                           "/bin/sh", "-c", line], cwd=tmp / "home", capture_output=True, text=True, timeout=60)


def cron_line(word: str) -> str:
    (command,) = [c for _, _, c in cron_lines() if word in c]
    return command


def unit() -> dict[str, list[str]]:
    """The unit's keys (a key may repeat: Environment=)."""
    keys: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, sep, value = line.partition("=")
        assert sep, f"not a key=value line: {line!r}"
        keys.setdefault(key, []).append(value)
    return keys


def unit_environment() -> dict[str, str]:
    env = {}
    for value in unit()["Environment"]:
        for assignment in shlex.split(value):
            k, _, v = assignment.partition("=")
            env[k] = v
    return env


def test_cron_lines_name_the_program_and_the_workers_database():
    """cron's PATH has no jobctl, and without --db a line would use the cron user's own default
    database, not the one the workers (the systemd unit) use."""
    lines = cron_lines()
    assert len(lines) >= 4
    for _, user, command in lines:
        # (a line may set a shell variable first, as the metrics line names its file)
        calls = command.split(PROGRAM)[1:]
        assert calls and all(c.startswith(f" --db {DB} ") for c in calls), command
        before = command.split(PROGRAM)[0].strip()
        assert before == "" or before.endswith(";"), command  # nothing runs before it but an assignment
        assert user == unit()["User"][0], f"cron runs {command!r} as {user}, the workers run as {unit()['User']}"
    assert f"--config {CONFIG} enqueue" in cron_line(" enqueue "), "an enqueue takes its type's defaults from the config"
    assert unit_environment()["JOBCTL_DB"] == DB and unit_environment()["JOBCTL_CONFIG"] == CONFIG
    assert unit()["ExecStart"][0].split()[0] == PROGRAM


def test_cron_enqueue_line_is_quiet_and_idempotent(tmp_path):
    make_server(tmp_path)
    assert jobctl(tmp_path, "init").returncode == 0  # as the install steps do (else enqueue warns it made the file)
    line = cron_line(" enqueue ")
    for _ in range(2):  # cron firing twice
        r = run_as_cron(tmp_path, line)
        assert (r.returncode, r.stdout, r.stderr) == (0, "", ""), r
    listed = jobctl(tmp_path, "list", "--json")
    jobs = listed.stdout.splitlines()
    assert len(jobs) == 1 and '"nightly-report"' in jobs[0] and time.strftime("%Y-%m-%d") in jobs[0], listed
    assert '"max_attempts":1' in jobs[0], "the type's defaults come from the workers' config"
    assert not (tmp_path / "home" / ".local").exists(), "the line must not create a database of cron's user"


def test_cron_backup_line_is_quiet_and_keeps_14_days(tmp_path):
    make_server(tmp_path)
    jobctl(tmp_path, "enqueue", "x", "{}")
    backups = tmp_path / "var" / "backups" / "jobctl"
    old, recent = backups / "jobs-2000-01-01.db", backups / "jobs-2000-01-02.db"
    for f, days in ((old, 20), (recent, 2)):
        f.write_bytes(b"")
        t = time.time() - days * 86400
        os.utime(f, (t, t))
    r = run_as_cron(tmp_path, cron_line(" backup "))
    assert (r.returncode, r.stdout, r.stderr) == (0, "", ""), r
    assert (backups / f"jobs-{time.strftime('%Y-%m-%d')}.db").exists()
    assert not old.exists() and recent.exists()


def test_cron_prometheus_line_writes_the_file_atomically(tmp_path):
    make_server(tmp_path)
    jobctl(tmp_path, "enqueue", "x", "{}")
    r = run_as_cron(tmp_path, cron_line("prometheus"))
    assert (r.returncode, r.stdout, r.stderr) == (0, "", ""), r
    folder = tmp_path / "var" / "lib" / "node_exporter"
    assert [p.name for p in folder.iterdir()] == ["jobctl.prom"]
    assert "jobctl_jobs{" in (folder / "jobctl.prom").read_text()


def _stuck_job(tmp: Path) -> None:
    jobctl(tmp, "enqueue", "hello", "{}")
    r = jobctl(tmp, "claim", "--lease", "1s")
    assert r.returncode == 0, r.stderr
    time.sleep(1.3)


@pytest.mark.skipif(not has_option("stats", "--quiet"), reason="`stats --check --quiet` is not in this build yet")
def test_cron_probe_line_is_silent_until_a_threshold_is_crossed(tmp_path):
    make_server(tmp_path)
    jobctl(tmp_path, "init")
    line = cron_line("stats --check")
    r = run_as_cron(tmp_path, line)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", ""), r
    _stuck_job(tmp_path)
    r = run_as_cron(tmp_path, line)
    assert r.returncode == 9 and len(r.stdout.splitlines()) == 1 and "stuck" in r.stdout, r


@pytest.mark.skipif(not has_option("recover", "--quiet"), reason="`recover --quiet` is not in this build yet")
def test_cron_recover_line_speaks_only_when_it_recovered(tmp_path):
    make_server(tmp_path)
    jobctl(tmp_path, "init")
    line = cron_line(" recover")
    r = run_as_cron(tmp_path, line)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", ""), r
    _stuck_job(tmp_path)
    r = run_as_cron(tmp_path, line)  # one run acts on the expired lease
    assert r.returncode == 0 and r.stdout.strip() and not r.stderr, "the run that recovers a job says so"
    assert jobctl(tmp_path, "list", "--status", "pending", "--json").stdout.strip(), "the job is pending again"
    r = run_as_cron(tmp_path, line)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", ""), r


def test_the_old_cron_line_fails_under_cron(tmp_path):
    """Why the recipe names the program in full: cron's PATH does not find an installed jobctl."""
    make_server(tmp_path)
    r = run_as_cron(tmp_path, "jobctl stats")
    assert r.returncode == 127 and "not found" in r.stderr


# -- systemd -------------------------------------------------------------------------------------

def work_options():
    """The unit's `jobctl work` options, parsed by the command itself (without running it)."""
    argv = shlex.split(unit()["ExecStart"][0].replace("%H", "host").replace("%i", "1"))
    assert argv[:2] == [PROGRAM, "work"], argv
    ctx = BY_PATH["work"].make_context("work", argv[2:])
    return ctx.params


def test_unit_stops_the_worker_alone_and_waits_longer_than_its_grace():
    from jobctl.config import WorkerSettings
    from jobctl.durations import parse_duration

    keys = unit()
    assert keys["KillMode"] == ["mixed"], "SIGTERM must reach the worker alone, not its handlers"
    assert keys.get("KillSignal", ["SIGTERM"]) == ["SIGTERM"]
    params = work_options()
    grace = parse_duration(params["grace"]) if params.get("grace") else WorkerSettings().grace
    kill_grace = WorkerSettings().kill_grace
    stop = parse_duration(keys["TimeoutStopSec"][0])
    assert grace + kill_grace + 5 <= stop, f"TimeoutStopSec={stop}s leaves no room after --grace {grace}s"
    text = (ROOT / "docs" / "operations.md").read_text()
    assert f"TimeoutStopSec={keys['TimeoutStopSec'][0]}" in text and f"--grace {params['grace']}" in text


def test_unit_creates_the_database_folder():
    keys = unit()
    db = Path(unit_environment()["JOBCTL_DB"])
    assert db.parent == Path("/var/lib") / keys["StateDirectory"][0], "StateDirectory= must be the database's folder"
    assert keys.get("StateDirectoryMode") == ["0700"]
    assert keys["User"] and keys["User"] != ["root"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_unit_passes_systemd_analyze_verify(tmp_path):
    """systemd's own parser: unknown keys or bad values print warnings, which must not appear."""
    instance = tmp_path / "jobctl-worker@1.service"
    instance.write_text(UNIT.read_text().replace(PROGRAM, str(JOBCTL)))
    r = subprocess.run(["systemd-analyze", "verify", str(instance)], capture_output=True, text=True, timeout=60)
    ours = [line for line in (r.stdout + r.stderr).splitlines() if "jobctl-worker" in line]
    assert r.returncode == 0 and not ours, r.stdout + r.stderr


# -- config examples -----------------------------------------------------------------------------

TOML = [(d, i, b) for d in DOCS for i, b in enumerate(code_blocks(d, "toml"), 1)]


@pytest.mark.parametrize("doc, i, block", TOML, ids=[f"{d.name}-{i}" for d, i, _ in TOML])
def test_config_examples_load(doc, i, block, tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text(block)
    r = subprocess.run([str(JOBCTL), "--config", str(cfg), "config", "show"], capture_output=True, text=True,
                       timeout=60, env=_user_env(tmp_path))
    assert r.returncode == 0, f"{doc.name} toml block {i}: {r.stderr}"


# -- every jobctl command line in a code block ---------------------------------------------------

GLOBAL_WITH_VALUE = {o for p in command_reference.options(ROOT_CMD) if not p.is_flag for o in p.opts}
# Options the recipes use that another change adds; checked by the tests above once they exist.
COMING = {("recover", "--quiet"), ("stats", "--quiet")}


def command_lines():
    """(where, argv after `jobctl`) for each jobctl call in the documents' sh and cron blocks, the
    systemd unit, and the examples of --help."""
    found = []
    sources = [(f"{d.name} {lang}", b) for d in DOCS for lang in ("sh", "cron") for b in code_blocks(d, lang)]
    sources.append((UNIT.name, "\n".join(unit()["ExecStart"])))
    sources += [(f"jobctl {p} --help", command_reference.summary(c)[1] or "") for p, c in COMMANDS]
    for where, text in sources:
        for line in text.splitlines():
            lex = shlex.shlex(line.replace("\\%", "%"), posix=True, punctuation_chars=True)
            lex.whitespace_split = True
            try:
                tokens = list(lex)
            except ValueError:  # a line continued on the next one: not in these documents
                pytest.fail(f"{where}: cannot split {line!r}")
            for i, tok in enumerate(tokens):
                if (tok in ("jobctl", "$(jobctl") or tok.endswith("/bin/jobctl")) and _command_position(tokens[:i]):
                    argv = []
                    for t in tokens[i + 1:]:
                        if t and set(t) <= set(";&|()<>"):
                            break
                        argv.append(t)
                    found.append((f"{where}: {line.strip()}", argv))
    return found


def _command_position(before: list[str]) -> bool:
    """Whether the next word is a command's name (not an argument of another command)."""
    if not before:
        return True
    prev = before[-1]
    return (set(prev) <= set(";&|()") or prev in ("if", "then", "else", "do", "while", "until", "!", "$", "time")
            or bool(re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", prev)) and _command_position(before[:-1])
            or bool(re.match(r"^(\*|[0-9*/,-]+)$", prev)) or prev == "jobs")  # cron's schedule and user


LINES = command_lines()


def test_the_documents_have_command_lines():
    assert len(LINES) > 40


@pytest.mark.parametrize("where, argv", LINES, ids=[str(i) for i in range(len(LINES))])
def test_command_lines_name_real_commands_and_options(where, argv):
    args = iter(argv)
    path = None
    for a in args:
        if a.startswith("-"):
            name = a.split("=")[0]
            assert any(name in p.opts for p in ROOT_CMD.params), f"{where}: {a} is not a global option"
            if name in GLOBAL_WITH_VALUE and "=" not in a:
                next(args)
            continue
        path = a
        sub = next(args, None)  # a command of a group (`config show`, `workers drain`)
        if sub is not None and f"{path} {sub}" in BY_PATH:
            path = f"{path} {sub}"
        elif sub is not None:
            args = iter([sub, *args])
        break
    if path is None:  # `jobctl --version`, `jobctl --help`
        return
    assert path in BY_PATH, f"{where}: no command `jobctl {path}`"
    cmd = BY_PATH[path]
    names = {o for p in cmd.params for o in p.opts + list(getattr(p, "secondary_opts", []))} | {"--help", "-h"}
    for a in args:
        if a == "--":
            break
        if a.startswith("-") and len(a) > 1 and not re.match(r"^-\d", a):
            name = a.split("=")[0]
            if (path, name) in COMING and name not in names:
                continue
            assert name in names, f"{where}: `jobctl {path}` has no option {name}"


# -- scripts of docs/workers.md ------------------------------------------------------------------

def _workers_block(first_line: str) -> str:
    (block,) = [b for b in code_blocks(ROOT / "docs" / "workers.md", "sh") if first_line in b]
    return block


@pytest.mark.slow
@pytest.mark.shared  # outcomes only: runs beside other tests
@pytest.mark.skipif(shutil.which("jq") is None, reason="the shell worker reads the job with jq, which is not installed")
def test_the_shell_worker_runs_jobs_and_stops_when_idle(tmp_path):
    """The shell worker of workers.md completes the jobs its program takes, fails the others
    (with the program's exit code), then ends once nothing was ready for its wait. The script
    runs as written except that wait: 2 s instead of the document's 30 s (the loop's end is the
    same `claim` exit 5 after any wait; the other 28 s proved nothing more)."""
    make_server(tmp_path)
    env = {**_user_env(tmp_path), "JOBCTL_DB": str(tmp_path / "jobs.db")}
    program = tmp_path / "resize-image"
    program.write_text('#!/bin/sh\ngrep -q \'"ok"\' || exit 3\n')
    program.chmod(0o755)
    for payload in ('{"ok": 1}', '{"bad": 1}'):
        r = subprocess.run([str(JOBCTL), "enqueue", "resize", payload, "-q", "images", "--max-attempts", "1"], env=env,
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    script = tmp_path / "worker.sh"
    block = _workers_block("jobctl claim -q images")
    assert block.count("--wait 30s") == 1, block
    script.write_text(block.replace("--wait 30s", "--wait 2s"))
    start = time.monotonic()
    r = subprocess.run(["sh", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr == "jobctl: error: no job is ready after waiting 2s\n", r.stderr  # the loop ends there
    assert time.monotonic() - start >= 1.9
    with sqlite3.connect(tmp_path / "jobs.db") as conn:
        rows = dict(conn.execute("SELECT id, status || ' ' || coalesce(error, '') FROM jobs"))
    assert rows == {1: "completed ", 2: "buried resize-image exited 3"}, rows


def test_several_workers_script_stops_every_worker_on_sigterm(tmp_path):
    make_server(tmp_path)
    (tmp_path / "jobctl.toml").write_text('[types.nap]\ncommand = ["sleep", "1"]\n')
    env = {**_user_env(tmp_path), "JOBCTL_DB": str(tmp_path / "jobs.db")}
    subprocess.run([str(JOBCTL), "init"], env=env, check=True, capture_output=True)
    for _ in range(6):
        subprocess.run([str(JOBCTL), "enqueue", "nap"], env=env, check=True, capture_output=True)
    script = tmp_path / "workers.sh"
    script.write_text(_workers_block("for i in 1 2 3 4"))
    proc = subprocess.Popen(["sh", str(script)], cwd=tmp_path, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        logs = [tmp_path / f"worker-{i}.log" for i in (1, 2, 3, 4)]
        while not all(f.exists() and "started" in f.read_text() for f in logs):
            assert time.monotonic() < deadline, [f.read_text() if f.exists() else None for f in logs]
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0 or proc.returncode is not None
        for f in logs:
            assert "stopped" in f.read_text(), f.read_text()
        with sqlite3.connect(tmp_path / "jobs.db") as conn:
            running = conn.execute("SELECT count(*) FROM jobs WHERE status = 'running'").fetchone()[0]
        assert running == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


# -- the README's try-it command -----------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.shared  # outcomes only: runs beside other tests
def test_the_try_it_command_works_on_a_fresh_checkout(tmp_path):
    """The README's first command, run as written in a copy of the repository's files: a fresh
    venv, pip install, one job run by a worker, the list. (It needs what pip needs: an index.)"""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    checkout = tmp_path / "checkout"
    for name in filter(None, files):
        src = ROOT / name.decode()
        if src.is_file():
            (checkout / name.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, checkout / name.decode())
    (command,) = re.findall(r"\*\*Try it\*\*.*?```sh\n(.+?)\n```", (ROOT / "README.md").read_text(), re.S)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBCTL_", "XDG_", "VIRTUAL_ENV"))}
    env["HOME"] = str(tmp_path / "home")
    r = subprocess.run(["sh", "-c", command], cwd=checkout, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "completed" in r.stdout and '{"name":"world"}' in r.stdout, r.stdout
    assert (tmp_path / "home" / ".local" / "share" / "jobctl" / "jobctl.db").exists()


def test_completion_install_lines_work_in_a_fresh_home(tmp_path):
    (block,) = [b for b in code_blocks(ROOT / "docs" / "operations.md", "sh") if "completions/" in b]
    home = tmp_path / "home"
    home.mkdir()
    r = subprocess.run(["sh", "-ec", block], cwd=ROOT, env={"PATH": "/usr/bin:/bin", "HOME": str(home)},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    installed = {".local/share/bash-completion/completions/jobctl": "jobctl.bash", ".zfunc/_jobctl": "_jobctl",
                 ".config/fish/completions/jobctl.fish": "jobctl.fish"}
    for where, name in installed.items():
        assert (home / where).read_text() == (ROOT / "completions" / name).read_text()
    if shutil.which("bash"):
        r = subprocess.run(["bash", "-c", f". {home}/.local/share/bash-completion/completions/jobctl && complete -p jobctl"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "jobctl" in r.stdout, r.stderr
