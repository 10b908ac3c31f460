"""What .ci/run promises: install from the project's own files, check lint and types, then run
the README's test command; any failure, pytest's exit 5 ("no tests collected") included, fails."""

import os
import subprocess

from conftest import ROOT

CI = ROOT / ".ci" / "run"


def _lines():
    return [line.strip() for line in CI.read_text().splitlines() if line.strip() and not line.startswith("#")]


def test_ci_stops_at_the_first_failure():
    lines = _lines()
    assert lines[0] == "set -euo pipefail", lines
    assert not any("|| true" in line or "|| :" in line or "; true" in line for line in lines), lines
    assert os.access(CI, os.X_OK)


def test_ci_checks_lint_and_types_before_the_tests():
    lines = _lines()
    ruff = lines.index(".venv/bin/ruff check jobctl tests bench tools")
    mypy = lines.index(".venv/bin/mypy jobctl")
    assert lines[-1].endswith("&& .venv/bin/python -m pytest")
    assert ruff < len(lines) - 1 and mypy < len(lines) - 1
    assert "pip install -q -e '.[test]'" in lines[ruff - 1]


def test_the_checkers_come_from_the_test_extra():
    import tomllib

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    assert {x.split(">")[0].split("<")[0] for x in extra} >= {"pytest", "mypy", "ruff"}


def test_pytest_exit_5_fails_a_bash_script_with_set_e(tmp_path):
    """The same shell rules as .ci/run: a pytest that collects nothing (exit 5) fails the script."""
    script = tmp_path / "ci"
    script.write_text("set -euo pipefail\npython3 -c 'import sys; sys.exit(5)'\necho reached\n")
    p = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 5 and "reached" not in p.stdout


def test_ci_runs_the_postgresql_half_and_may_not_skip_it():
    lines = _lines()
    export = [i for i, line in enumerate(lines) if line.startswith("export JOBCTL_TEST_POSTGRES_URL=postgresql://")]
    assert export and export[0] < len(lines) - 1, lines
