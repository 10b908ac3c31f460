"""Every command has a one-line summary and an example in --help; docs/commands.md holds exactly
what tools/command_reference.py generates from the app; the documents stand alone and their links
lead somewhere."""

import re
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import command_reference  # noqa: E402

ROOT_CMD, COMMANDS = command_reference.commands()
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def section(path, title: str, level: int = 2) -> str:
    text = path.read_text()
    hashes = "#" * level
    m = re.search(rf"^{hashes} {re.escape(title)}\n(.*?)(?=^#{{1,{level}}} |\Z)", text, re.S | re.M)
    assert m, f"{path.name} has no '{hashes} {title}' section"
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


def test_the_command_reference_is_what_the_app_generates():
    current = command_reference.current(command_reference.DOC.read_text())
    assert current, "docs/commands.md lost its GENERATED markers"
    assert current == command_reference.render(), (
        "docs/commands.md is out of date: run `.venv/bin/python tools/command_reference.py --write`")


@pytest.mark.parametrize("path, cmd", COMMANDS, ids=[p for p, _ in COMMANDS])
def test_reference_names_every_command_and_option(path, cmd):
    ref = section(ROOT / "docs" / "commands.md", "Commands")
    m = re.search(rf"^### `jobctl {re.escape(path)}\b[^\n]*\n(.*?)(?=^### |\Z)", ref, re.S | re.M)
    assert m, f"`jobctl {path}` is missing from docs/commands.md; run tools/command_reference.py --write"
    body = m.group(1)
    for p in command_reference.options(cmd):
        if p.name == "help":
            continue
        assert f"`{p.opts[0]}`" in body, f"{p.opts[0]} of `jobctl {path}` is missing from docs/commands.md"


def test_reference_has_the_global_options():
    ref = section(ROOT / "docs" / "commands.md", "Commands")
    for p in command_reference.options(ROOT_CMD):
        if p.name != "help":
            assert f"`{p.opts[0]}" in ref


def test_operations_documents_stats_json_keys():
    text = section(ROOT / "docs" / "operations.md", "`stats --json`", level=3)
    for key in ("generated_at", "queues", "ready", "scheduled", "blocked", "running", "cancel_requested", "buried",
                "completed", "cancelled", "oldest_ready_age", "paused", "stuck", "aging", "throughput", "totals"):
        assert f"`{key}`" in text, key


def test_configuration_documents_every_setting(tmp_path):
    """Every key that `jobctl config show` prints has a row in docs/configuration.md."""
    import tomllib

    from conftest import run_cli

    r = run_cli("config", "show")
    assert r.exit_code == 0, r.output
    table = section(ROOT / "docs" / "configuration.md", "The config file")
    for name, value in tomllib.loads(r.stdout).items():
        if isinstance(value, dict) and name != "types":
            for key in value:
                assert re.search(rf"^\| `\[{name}\]`[^|]*`{key}`", table, re.M), f"[{name}] {key} is not documented"
        elif name != "types":
            assert f"| `{name}` |" in table, f"{name} is not documented"


@pytest.mark.parametrize("doc", [*DOCS, ROOT / "CHANGELOG.md"], ids=[*(d.name for d in DOCS), "CHANGELOG.md"])
def test_documents_stand_alone(doc):
    """Users have only this repository: no reference to the outside contract or its section signs."""
    text = doc.read_text()
    for word in ("SPEC", "§", "../shared"):
        assert word not in text, f"{doc.name} mentions {word!r}"


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_links_lead_somewhere(doc):
    text = doc.read_text()
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        assert file.exists(), f"{doc.name} links to {target}, which does not exist"
        if anchor and file.suffix == ".md":
            anchors = {_slug(h) for h in re.findall(r"^#+ (.+)$", file.read_text(), re.M)}
            assert anchor in anchors, f"{doc.name} links to {target}: no such heading in {file.name}"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def test_help_texts_stand_alone():
    for path, cmd in [("", ROOT_CMD), *COMMANDS]:
        texts = [cmd.help or ""] + [p.help or "" for p in cmd.params if hasattr(p, "help")]
        for text in texts:
            assert "SPEC" not in text and "§" not in text, f"`jobctl {path} --help` cites {text!r}"


@pytest.mark.parametrize("path, cmd", COMMANDS, ids=[p for p, _ in COMMANDS])
def test_help_examples_are_commands_to_type(path, cmd):
    """An example is what a user types at a shell: a crontab line there would teach the cron line
    that fails (no full path, no --db); docs/operations.md has the working ones."""
    _, example = command_reference.summary(cmd)
    assert not re.match(r"^[*0-9@]", example), f"`jobctl {path} --help` example looks like a crontab line: {example}"
