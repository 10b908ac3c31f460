"""The name jobctl is installed under: `jobctl` on the Python Package Index is another project's,
so the distribution is jobctl-queue (the command stays `jobctl`), and no text tells anyone to
`pip install jobctl`, which would fetch that other project."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_distribution_is_jobctl_queue_and_installs_the_jobctl_command():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "jobctl-queue"
    assert project["scripts"] == {"jobctl": "jobctl.cli:main"}
    readme = (ROOT / "README.md").read_text()
    assert "**`jobctl-queue`**" in readme and "pip install '.[postgres]'" in readme


def test_no_text_installs_the_other_projects_jobctl():
    wrong = re.compile(r"pip install (-\S+ )*['\"]?jobctl(\[|['\"\s]|$)", re.M)
    files = [ROOT / "README.md", ROOT / "pyproject.toml", *(ROOT / "docs").glob("*.md"),
             *(ROOT / "jobctl").rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").glob("*.py")]
    found = [f"{f.relative_to(ROOT)}: {m.group(0)}" for f in files for m in wrong.finditer(f.read_text())]
    assert not found, found
