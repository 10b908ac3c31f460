"""Everything under tests/reliability/ is a torture test: marked `reliability` (select with
`-m reliability`, or run the folder), and still run by the default test command and CI."""

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.reliability)


@pytest.fixture
def env(tmp_path):
    """env(**options) -> a test_worker_torture.Env (a config, a database and its workers); every
    worker it started is stopped at the end."""
    from .test_worker_torture import Env

    made = []

    def make(**kw):
        e = Env(tmp_path, **kw)
        made.append(e)
        return e

    yield make
    for e in made:
        e.stop_all()

