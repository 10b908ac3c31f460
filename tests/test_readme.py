"""The README's two set-up commands are the ones that work: CI runs the README's test command."""

import re

from conftest import ROOT


def _commands(readme: str, label: str) -> str:
    block = re.search(rf"\*\*{label}\*\*.*?```sh\n(.+?)\n```", readme, re.S)
    assert block, f"README has no {label} command"
    return block.group(1).strip()


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert _commands(readme, "Test it") in ci.splitlines()


def test_the_try_it_command_installs_and_runs_a_job():
    command = _commands((ROOT / "README.md").read_text(), "Try it")
    assert "pip install" in command and "jobctl enqueue" in command and "jobctl work" in command
