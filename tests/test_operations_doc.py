"""docs/operations.md, tried as an admin would: the metric names it (and every other doc) gives
are the ones `stats --format prometheus` prints, the install steps create every folder the
recipes write to, the metrics cron line leaves nothing behind when it fails, and the way it says
to run commands as the user `jobs` works where running them as root does not."""

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import JOBCTL, run_cli, run_inproc

ROOT = Path(__file__).resolve().parent.parent
OPERATIONS = (ROOT / "docs" / "operations.md").read_text()
METRIC = re.compile(r"\b(jobctl_[a-z0-9_]+)(?:\{([a-z_,]*)\})?")


def printed_metrics(db) -> dict[str, set[str]]:
    """{family: its label names} as `stats --format prometheus` prints them."""
    r = run_cli("--db", db, "stats", "--format", "prometheus")
    assert r.exit_code == 0, r.output
    families: dict[str, set[str]] = {}
    for line in r.stdout.splitlines():
        if line.startswith("# TYPE "):
            families.setdefault(line.split()[2], set())
        elif not line.startswith("#"):
            name, _, labels = line.split(" ")[0].partition("{")
            families[name] |= {pair.split("=")[0] for pair in labels.rstrip("}").split(",") if pair}
    return families


def test_every_metric_the_docs_name_is_printed_with_the_labels_they_give(db):
    assert run_cli("--db", db, "enqueue", "t").exit_code == 0  # a queue, so that per-queue families have samples
    assert run_inproc("--db", db, "enqueue", "t").exit_code == 0  # and a run, so that per-type run figures have
    assert run_inproc("--db", db, "claim", "--worker", "w").exit_code == 0
    assert run_inproc("--db", db, "complete", "1").exit_code == 0
    printed = printed_metrics(db)
    named = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for m in METRIC.finditer(doc.read_text()):
            named.append((doc.name, m.group(1), m.group(2)))
    assert "jobctl_jobs" in {name for _, name, _ in named}  # the scan works
    wrong = [f"{doc}: {name}" + (f"{{{labels}}}" if labels is not None else "") for doc, name, labels in named
             if name not in printed or (labels is not None and set(labels.split(",")) != printed[name])]
    assert not wrong, f"named in the docs but not printed so: {wrong}; printed: {printed}"


def _block_after(heading: str) -> str:
    section = OPERATIONS.split(heading, 1)[1]
    return section.split("```sh\n", 1)[1].split("```", 1)[0]


def _metrics_cron_line() -> str:
    line = next(line for line in OPERATIONS.splitlines() if "--format prometheus" in line and line.startswith("*"))
    return line.split("jobs  ", 1)[1]  # the command, without the schedule and the user column


def test_the_install_steps_use_the_system_python_and_create_every_folder_the_recipes_write_to():
    install = _block_after("## Installing")
    assert install.startswith("/usr/bin/python3 -m venv /opt/jobctl ")
    made = {word for line in install.splitlines() if line.startswith("install -d") for word in line.split()
            if word.startswith("/")}
    target = re.search(r"\bf=(\S+);", _metrics_cron_line()).group(1)
    assert os.path.dirname(target) in made
    assert "runuser -u jobs -- /opt/jobctl/bin/jobctl" in install  # the database is created as its owner


def _run_metrics_line(db, folder: Path) -> subprocess.CompletedProcess:
    """The cron line as cron runs it (sh -c, PATH=/usr/bin:/bin), on a test database and folder."""
    line = (_metrics_cron_line().replace("/opt/jobctl/bin/jobctl", " ".join(map(shlex.quote, JOBCTL)))
            .replace("/var/lib/jobctl/jobs.db", shlex.quote(str(db)))
            .replace("/var/lib/node_exporter", shlex.quote(str(folder))))
    return subprocess.run(["/bin/sh", "-c", line], capture_output=True, text=True, cwd=folder,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(folder), "PYTHONPATH": str(ROOT)})


def test_the_metrics_cron_line_renames_a_whole_file_and_leaves_no_temporary_file_when_it_fails(tmp_path):
    db, folder = tmp_path / "q" / "jobs.db", tmp_path / "textfile"
    folder.mkdir()
    assert run_cli("--db", db, "enqueue", "t").exit_code == 0
    r = _run_metrics_line(db, folder)
    assert r.returncode == 0 and r.stderr == "", r
    assert [p.name for p in folder.iterdir()] == ["jobctl.prom"]
    good = (folder / "jobctl.prom").read_text()
    assert "jobctl_jobs{queue=\"default\",state=\"ready\"} 1" in good
    r = _run_metrics_line(tmp_path / "gone" / "jobs.db", folder)  # jobctl fails: exit 8, one line (mailed by cron)
    assert r.returncode != 0 and r.stderr.startswith("jobctl: error: "), r
    assert [p.name for p in folder.iterdir()] == ["jobctl.prom"]  # no jobctl.prom.PID left behind
    assert (folder / "jobctl.prom").read_text() == good  # the last whole file stays


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None, reason="needs root and runuser")
def test_as_root_a_command_is_refused_and_runuser_as_the_owner_works():
    owner = "nobody"  # stands in for `jobs`: any user other than root
    base = Path(tempfile.mkdtemp(prefix="jobctl-ops-", dir="/tmp"))  # reachable by that user, as /var/lib is
    try:
        base.chmod(0o755)
        folder = base / "lib"
        folder.mkdir(mode=0o700)
        shutil.chown(folder, owner, None)
        env = {"PATH": "/usr/bin:/bin", "JOBCTL_DB": str(folder / "jobs.db"), "PYTHONPATH": str(ROOT)}
        as_root = subprocess.run([*JOBCTL, "stats"], capture_output=True, text=True, env=env)
        assert as_root.returncode == 8 and f"belongs to {owner}" in as_root.stderr, as_root.stderr
        runuser = [shutil.which("runuser"), "-u", owner, "--", sys.executable]
        if subprocess.run([*runuser, "-c", "import jobctl"], capture_output=True, env=env).returncode != 0:
            pytest.skip(f"this Python ({sys.executable}) cannot be run by {owner}; the refusal as root was checked")
        assert subprocess.run([*runuser, "-m", "jobctl", "init"], capture_output=True, env=env).returncode == 0
        r = subprocess.run([*runuser, "-m", "jobctl", "stats", "--check", "--max-stuck", "0"], capture_output=True,
                           text=True, env=env)
        assert r.returncode == 0 and r.stdout.startswith("OK"), r.stderr
    finally:
        shutil.rmtree(base)
