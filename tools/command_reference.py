"""Print the README's "## Command reference" section from the app itself (so it stays true).

    python tools/command_reference.py > /tmp/ref.md   # then paste it over the README section

tests/test_docs.py fails when a command or option is missing from the README or lacks help.
"""

from __future__ import annotations

import sys


def commands():
    """(path, click command) for every command of the app, sub-commands included, in help order."""
    import typer.main

    from jobctl.cli import app

    root = typer.main.get_command(app)

    def walk(group, prefix):
        for name in group.list_commands(None):
            cmd = group.get_command(None, name)
            if cmd is None or cmd.hidden:
                continue
            if hasattr(cmd, "list_commands"):
                yield from walk(cmd, prefix + [name])
            else:
                yield " ".join(prefix + [name]), cmd

    return root, list(walk(root, []))


def options(cmd):
    for p in cmd.params:
        if getattr(p, "hidden", False) or p.param_type_name != "option":
            continue
        yield p


FALLBACK_HELP = {"--json": "Print JSON instead of a table.",
                 "--type": "Only jobs of this type.", "-t": "Only jobs of this type."}


def option_help(p) -> str:
    if p.help:
        return p.help
    for o in p.opts:
        if o in FALLBACK_HELP:
            return FALLBACK_HELP[o]
    words = p.opts[0].lstrip("-").replace("-", " ")
    return f"{words[0].upper()}{words[1:]}."


def summary(cmd) -> tuple[str, str | None]:
    text = (cmd.help or "").strip()
    first = text.split("\n\n")[0].replace("\n", " ").strip()
    example = next((line.strip()[len("Example:"):].strip() for line in text.splitlines()
                    if line.strip().startswith("Example:")), None)
    return first, example


def render() -> str:
    root, cmds = commands()
    out = ["## Command reference", "",
           "Generated from the app by `python tools/command_reference.py`; `jobctl COMMAND --help` says the same.",
           "", "Global options (before the command):", ""]
    for p in options(root):
        if p.name in ("help",):
            continue
        out.append(f"- `{', '.join(p.opts)}`: {option_help(p)}")
    for path, cmd in cmds:
        first, example = summary(cmd)
        args = " ".join(a.human_readable_name for a in cmd.params if a.param_type_name == "argument")
        out += ["", f"### `jobctl {path}{' ' + args if args else ''}`", "", first]
        if example:
            out += ["", f"Example: `{example}`"]
        opts = [p for p in options(cmd) if p.name != "help"]
        if opts:
            out.append("")
            for p in opts:
                names = ", ".join(f"`{o}`" for o in p.opts + list(p.secondary_opts))
                metavar = f" {p.metavar}" if p.metavar and not p.is_flag else ""
                out.append(f"- {names}{metavar}: {option_help(p)}")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
