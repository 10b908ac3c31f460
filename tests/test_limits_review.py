"""A review of admission control: limits that must hold exactly, whatever else happens to the
jobs whose runs they count (both engines)."""

import pytest

from conftest import Clock, T0
from jobctl.config import Settings, TypeConfig
from jobctl.queue import Queue


def settings(**types) -> Settings:
    return Settings(types={name: TypeConfig(name, command=["true"], **kw) for name, kw in types.items()})


@pytest.fixture
def make(any_db):
    opened = []

    def _make(s: Settings, clock: Clock):
        q = Queue.open(any_db, s, create=True, clock=clock)
        opened.append(q)
        return q

    yield _make
    for q in opened:
        q.close()


def test_a_purge_keeps_the_starts_that_a_rate_window_still_counts(make):
    # A retention (or `purge --completed-older-than`) shorter than a type's rate window must not
    # make the window forget the starts of the jobs it deletes.
    clock = Clock(T0)
    q = make(settings(api=dict(rate_limit=(2, 3600.0))), clock)
    for _ in range(4):
        q.enqueue("api")
    for _ in range(2):
        j = q.claim(worker="w")
        q.complete(j.id, token=j.token)
    assert q.claim(worker="w") is None  # 2 starts in the hour
    clock.t += 60
    q.purge(completed_older_than="1s")
    assert q.claim(worker="w") is None  # still 2 starts in the hour
    clock.t += 3600
    assert q.purge(completed_older_than="1s")["completed"] == 2  # out of the window: deleted now
    assert q.claim(worker="w") is not None
