"""The worker's batched path: complete several jobs and claim several in one transaction; and the
dependency flags that let claim and complete skip job_deps for jobs without dependencies."""

import sqlite3

import pytest

from conftest import file_history
from jobctl.config import Settings
from jobctl.errors import StaleToken
from jobctl.queue import Queue


def test_complete_several_and_claim_several_in_one_transaction(tmp_path):
    q = Queue.open(tmp_path / "q.db", Settings(), create=True)
    ids = [q.enqueue("t", {"i": i}).id for i in range(5)]
    a = q.claim(worker="w")
    b = q.claim(worker="w")
    done, claimed = q.complete_many_and_claim([(a.id, a.token, {"r": 1}), (b.id, b.token, None)], claim=2,
                                              actor="w", worker="w")
    assert [j.id for j in done] == [a.id, b.id] and all(j.status == "completed" for j in done)
    assert q.get(a.id).result == '{"r":1}'
    assert [j.id for j in claimed] == ids[2:4]
    assert claimed[0].token != claimed[1].token  # every claim has its own fencing token
    assert all(q.get(j.id).status == "running" for j in claimed)
    # claim=0: only the completions; more wanted than there are: what there is
    done, none = q.complete_many_and_claim([(claimed[0].id, claimed[0].token, None)], worker="w", claim=0)
    assert none == [] and done[0].status == "completed"
    done, last = q.complete_many_and_claim([(claimed[1].id, claimed[1].token, None)], worker="w", claim=3)
    assert [j.id for j in last] == [ids[4]]
    file_history(tmp_path / "q.db")
    runs = sqlite3.connect(tmp_path / "q.db").execute("SELECT count(*) FROM runs").fetchone()[0]
    assert runs == 4


def test_a_stale_token_in_the_batch_changes_nothing(tmp_path):
    q = Queue.open(tmp_path / "q.db", Settings(), create=True)
    for i in range(3):
        q.enqueue("t", {"i": i})
    a, b = q.claim(worker="w"), q.claim(worker="w")
    with pytest.raises(StaleToken):
        q.complete_many_and_claim([(a.id, a.token, None), (b.id, "forged", None)], worker="w", claim=1)
    assert q.get(a.id).status == "running" and q.get(b.id).status == "running"
    assert q.claim(worker="w") is not None  # the third job was not taken by the rolled-back claim


def test_dependency_flags(tmp_path):
    q = Queue.open(tmp_path / "q.db", Settings(), create=True)
    first = q.enqueue("build").id
    done_before = q.enqueue("build").id
    job = q.claim(worker="w", types=["build"])
    assert job.id == first and job.after == []
    q.complete(job.id, token=job.token)
    deploy = q.enqueue("deploy", after=[first, done_before]).id
    flags = dict(sqlite3.connect(tmp_path / "q.db").execute("SELECT id, dep_flags FROM jobs"))
    assert flags == {first: 2, done_before: 2, deploy: 1}
    job = q.claim(worker="w", types=["build"])
    q.complete(job.id, token=job.token)  # the last dependency: deploy becomes ready
    job = q.claim(worker="w")
    assert job.id == deploy and job.after == [first, done_before]
