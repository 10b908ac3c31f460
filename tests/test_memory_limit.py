"""memory_limit: a type's handler runs with its address space capped (RLIMIT_AS); a run that hits
the cap fails with an error that says so, not a bare exit code.

This file is about the per-process cap, which applies where no cgroup can hold a handler's tree:
JOBCTL_MEMORY_CGROUP=0 asks for it everywhere (the tree cap is tests/test_memory_cgroup.py's)."""

import json
import shutil
import subprocess
import textwrap

import pytest

from conftest import JOBCTL, run_cli
from jobctl.config import load_settings

@pytest.fixture(autouse=True)
def per_process_cap(monkeypatch):
    monkeypatch.setenv("JOBCTL_MEMORY_CGROUP", "0")


HOG = "import sys; b = bytearray(int(sys.argv[1]) * 1024 * 1024); print('allocated')"


def config(tmp_path, limit: str, mib: int, **extra) -> str:
    cfg = tmp_path / "jobctl.toml"
    cfg.write_text(textwrap.dedent(f"""
        [types.hog]
        command = ["python3", "-c", "{HOG}", "{mib}"]
        memory_limit = "{limit}"
        max_attempts = 1
        [worker]
        poll = "100ms"
    """))
    return str(cfg)


def work(db, cfg):
    return subprocess.run([*JOBCTL, "--db", str(db), "--config", cfg, "work", "--stop-when-empty"],
                          capture_output=True, text=True, timeout=60)


def test_a_handler_over_its_memory_limit_fails_saying_so(tmp_path, db):
    cfg = config(tmp_path, "256MiB", 512)
    r = run_cli("--config", cfg, "--db", db, "enqueue", "hog")
    assert r.exit_code == 0, r.output
    w = work(db, cfg)
    assert w.returncode == 0, w.stderr
    job = run_cli("--config", cfg, "--db", db, "show", "1", "--json").stdout
    assert '"status":"buried"' in job
    assert "out of memory: the handler hit its memory limit of 256MiB" in job, job


def test_a_handler_within_its_memory_limit_runs(tmp_path, db):
    cfg = config(tmp_path, "512MiB", 64)
    assert run_cli("--config", cfg, "--db", db, "enqueue", "hog").exit_code == 0
    w = work(db, cfg)
    assert w.returncode == 0, w.stderr
    assert '"status":"completed"' in run_cli("--config", cfg, "--db", db, "show", "1", "--json").stdout


def test_run_applies_the_memory_limit_too(tmp_path, db):
    cfg = config(tmp_path, "256MiB", 512)
    r = subprocess.run([*JOBCTL, "--db", str(db), "--config", cfg, "run", "hog"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0 and "MemoryError" in r.stderr, r.stderr
    assert not db.exists()  # run never touches the database
    cfg = config(tmp_path, "512MiB", 64)
    r = subprocess.run([*JOBCTL, "--db", str(db), "--config", cfg, "run", "hog"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and "allocated" in r.stdout, r.stderr


@pytest.mark.parametrize("value, message", [('"lots"', "memory_limit"), ('"1MiB"', "from 16MiB"), ("1.5", "memory_limit")])
def test_bad_memory_limits_are_refused_at_load(tmp_path, value, message):
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[types.t]\ncommand = ["true"]\nmemory_limit = {value}\n')
    with pytest.raises(Exception) as exc:
        load_settings(str(cfg))
    assert message in str(exc.value) and exc.value.exit_code == 2


def test_defaults_give_every_type_a_limit_and_a_type_may_lift_it(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[defaults]\nmemory_limit = "1GiB"\n[types.a]\ncommand = ["true"]\n'
                   '[types.b]\ncommand = ["true"]\nmemory_limit = "none"\n[types.c]\ncommand = ["true"]\nmemory_limit = 67108864\n')
    s = load_settings(str(cfg))
    assert (s.memory_limit_of("a"), s.memory_limit_of("b"), s.memory_limit_of("c"), s.memory_limit_of("zzz")) == (
        1024**3, None, 64 * 1024**2, 1024**3)


# -- allocation failures of other runtimes: the same message, only under a limit ------------------

BASH_HOG = 'x=$(head -c 300000000 /dev/zero | tr "\\0" a); echo ${#x}'  # bash: xrealloc: cannot allocate …
NODE_HOG = "const a = []; while (true) a.push(new Array(1e6).fill(1.5))"  # Allocation failed - JavaScript heap …
CPP_HOG = "#include <vector>\nint main() { std::vector<char> v(500000000); return v[1]; }\n"  # std::bad_alloc


def hog_config(tmp_path, command: list[str], limit: str | None) -> str:
    cfg = tmp_path / "jobctl.toml"
    lines = ["[types.hog]", f"command = {json.dumps(command)}", "max_attempts = 1"]
    if limit:
        lines.append(f'memory_limit = "{limit}"')
    cfg.write_text("\n".join(lines + ["[worker]", 'poll = "100ms"', ""]))
    return str(cfg)


def cpp_hog(tmp_path) -> list[str]:
    if shutil.which("g++") is None:
        pytest.skip("no g++ here")
    (tmp_path / "hog.cpp").write_text(CPP_HOG)
    subprocess.run(["g++", "-o", str(tmp_path / "hog"), str(tmp_path / "hog.cpp")], check=True, timeout=120)
    return [str(tmp_path / "hog")]


HOGS = {
    "bash": (lambda tmp_path: ["bash", "-c", BASH_HOG], "64MiB", "cannot allocate"),
    "python": (lambda tmp_path: ["python3", "-c", HOG, "512"], "128MiB", "MemoryError"),
    "node": (lambda tmp_path: ["node", "-e", NODE_HOG] if shutil.which("node") else pytest.skip("no node here"),
             "1GiB", "heap out of memory"),
    "c++": (cpp_hog, "128MiB", "bad_alloc"),
}


@pytest.mark.slow
@pytest.mark.parametrize("runtime", HOGS)
def test_an_allocation_failure_under_a_memory_limit_says_so_whatever_the_runtime(tmp_path, db, runtime):
    make, limit, words = HOGS[runtime]
    cfg = hog_config(tmp_path, make(tmp_path), limit)
    assert run_cli("--config", cfg, "--db", db, "enqueue", "hog").exit_code == 0
    assert work(db, cfg).returncode == 0
    job = json.loads(run_cli("--config", cfg, "--db", db, "show", "1", "--json").stdout)
    assert job["status"] == "buried"
    assert job["error"].startswith(f"out of memory: the handler hit its memory limit of {limit} ("), job["error"]
    assert words in json.dumps(job), job


def test_an_allocation_message_without_a_memory_limit_is_a_plain_failure(tmp_path, db):
    cfg = hog_config(tmp_path, ["bash", "-c", "echo 'bash: xrealloc: cannot allocate 62566400 bytes' >&2; exit 2"],
                     None)
    assert run_cli("--config", cfg, "--db", db, "enqueue", "hog").exit_code == 0
    assert work(db, cfg).returncode == 0
    job = json.loads(run_cli("--config", cfg, "--db", db, "show", "1", "--json").stdout)
    assert job["error"] == "exit 2: bash: xrealloc: cannot allocate 62566400 bytes"


def test_run_says_the_memory_limit_of_a_run_that_failed_under_one(tmp_path, db):
    cfg = hog_config(tmp_path, ["bash", "-c", BASH_HOG], "64MiB")
    r = subprocess.run([*JOBCTL, "--db", str(db), "--config", cfg, "run", "hog"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2
    assert "xrealloc: cannot allocate" in r.stderr
    assert "jobctl: the handler of hog failed (exit 2) under a memory limit of 64MiB" in r.stderr, r.stderr
    cfg = hog_config(tmp_path, ["bash", "-c", "echo fine"], "64MiB")
    r = subprocess.run([*JOBCTL, "--db", str(db), "--config", cfg, "run", "hog"], capture_output=True, text=True,
                       timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (0, "fine\n", "")  # a run that succeeds: not a word


def test_doctor_says_the_memory_limits_are_per_process_only_when_a_type_has_one(tmp_path, db):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[types.hog]\ncommand = ["true"]\nmemory_limit = "200MiB"\n[types.free]\ncommand = ["true"]\n')
    assert run_cli("--config", cfg, "--db", db, "init").exit_code == 0
    r = run_cli("--config", cfg, "--db", db, "doctor", "--json")
    assert r.exit_code == 0, r.output  # a note, not a problem
    report = json.loads(r.stdout)
    check = next(c for c in report["checks"] if c["check"] == "memory limits")
    assert check["ok"] and check["detail"].startswith("memory_limit caps each process only (its address space, RLIMIT_AS)"), check
    assert "(hog 200MiB)" in check["detail"] and "JOBCTL_MEMORY_CGROUP=0" in check["detail"], check
    assert report["memory_limit_scope"] == "process" and report["memory_cgroup"] is None
    cfg.write_text('[types.free]\ncommand = ["true"]\n')
    r = run_cli("--config", cfg, "--db", db, "doctor", "--json")
    assert "memory limits" not in [c["check"] for c in json.loads(r.stdout)["checks"]]
