"""Everything under tests/reliability/ is a torture test: marked `reliability` (select with
`-m reliability`, or run the folder), and still run by the default test command and CI."""

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.reliability)
