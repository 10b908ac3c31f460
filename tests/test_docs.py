"""Every command has a one-line summary and an example in --help, and appears, with each of its
options, in the README's command reference (tools/command_reference.py regenerates it)."""

import re
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import command_reference  # noqa: E402

ROOT_CMD, COMMANDS = command_reference.commands()


def readme_section(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, f"README.md has no '## {title}' section"
    return m.group(1)


def test_the_app_has_commands():
    names = {path for path, _ in COMMANDS}
    assert {"enqueue", "claim", "stats", "list", "show"} <= names


@pytest.mark.parametrize("path, cmd", COMMANDS, ids=[p for p, _ in COMMANDS])
def test_help_has_a_summary_and_an_example(path, cmd):
    first, example = command_reference.summary(cmd)
    assert first and len(first) <= 120, f"`jobctl {path} --help` needs a one-line summary"
    assert example and example.startswith("jobctl") or example and "jobctl " in example, (
        f"`jobctl {path} --help` needs a line 'Example: jobctl {path} ...'")


@pytest.mark.parametrize("path, cmd", COMMANDS, ids=[p for p, _ in COMMANDS])
def test_readme_reference_names_every_command_and_option(path, cmd):
    ref = readme_section("Command reference")
    m = re.search(rf"^### `jobctl {re.escape(path)}\b[^\n]*\n(.*?)(?=^### |\Z)", ref, re.S | re.M)
    assert m, f"`jobctl {path}` is missing from the README's command reference; run tools/command_reference.py"
    body = m.group(1)
    for p in command_reference.options(cmd):
        if p.name == "help":
            continue
        assert f"`{p.opts[0]}`" in body, f"{p.opts[0]} of `jobctl {path}` is missing from the README's reference"


def test_readme_reference_has_the_global_options():
    ref = readme_section("Command reference")
    for p in command_reference.options(ROOT_CMD):
        if p.name != "help":
            assert f"`{p.opts[0]}" in ref


def test_readme_documents_stats_json_keys():
    section = readme_section("Operating jobctl: stats and alerts")
    for key in ("generated_at", "queues", "ready", "scheduled", "blocked", "running", "cancel_requested", "buried",
                "completed", "cancelled", "oldest_ready_age", "paused", "stuck", "aging", "throughput", "totals"):
        assert f"`{key}`" in section, key
