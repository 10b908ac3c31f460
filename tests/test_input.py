"""Issue 2, test 9: bad input. Invalid or deep JSON, NaN/Infinity, lone surrogates, oversized
payloads, bad names, out-of-range numbers, bad durations: exit 2, one line, nothing changed."""

import json

import pytest

from jobctl import payloads
from jobctl.errors import InvalidInput
from jobctl.queue import Queue
from conftest import snapshot


@pytest.fixture
def running(db):
    """A file with one running job (id 1, token returned) and one pending job (id 2)."""
    with Queue.open(db, create=True) as q:
        q.enqueue("t")
        token = q.claim(worker="w").token
        q.enqueue("t")
    return token


def refused(cli, db, *args, input=None, code=2):
    before = snapshot(db)
    r = cli(*args, input=input)
    assert r.exit_code == code, r.output[:3000]
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("jobctl: error: "), r.stderr[:3000]
    assert len(lines[0]) < 600, "an error line should be short"
    assert snapshot(db) == before
    return lines[0]


DEEP = "[" * 200_000 + "]" * 200_000


@pytest.mark.parametrize("payload,words", [
    ("{bad", "not JSON"),
    ("{'single': 'quotes'}", "not JSON"),
    ('{"a": 1} trailing', "not JSON"),
    ("{}{}", "not JSON"),
    ("", "empty"),
    ("   ", "empty"),
    ('{"x": NaN}', "NaN"),
    ('{"x": Infinity}', "Infinity"),
    ('[-Infinity]', "Infinity"),
    ('{"x": "\\ud800"}', "surrogate"),
    ('["\\udfff", 1]', "surrogate"),
    ('{"\\ud83d": 1}', "surrogate"),
    ("[" * 257 + "]" * 257, "deeper than 256"),
    (DEEP, "deeper than 256"),
    ('{"a": ' * 300 + "1" + "}" * 300, "deeper than 256"),
])
def test_bad_payloads(cli, db, running, tmp_path, payload, words):
    f = tmp_path / "payload.json"
    f.write_text(payload, encoding="utf-8")
    # as a file, on stdin, and (when it fits in one argument) on the command line
    line = refused(cli, db, "enqueue", "t", "--payload-file", f)
    assert words in line, line
    if len(payload) < 100_000:
        refused(cli, db, "enqueue", "t", payload)
    else:
        refused(cli, db, "enqueue", "t", "--payload-file", "-", input=payload)
    batch_line = json.dumps({"type": "t"})[:-1] + ', "payload": ' + (payload or '""') + "}"
    if payload.strip():
        line = refused(cli, db, "enqueue", "--batch", "-", input=json.dumps({"type": "t"}) + "\n" + batch_line + "\n")
        assert "line 2" in line


def test_deep_but_allowed(cli, db, running):
    r = cli("enqueue", "t", "[" * 256 + "]" * 256)
    assert r.exit_code == 0, r.output


def test_payload_not_utf8(cli, db, running, tmp_path):
    f = tmp_path / "p.json"
    f.write_bytes(b'{"a": "\xff\xfe"}')
    assert "UTF-8" in refused(cli, db, "enqueue", "t", "--payload-file", f)


def test_oversized_payload_default_limit(cli, db, running, tmp_path):
    f = tmp_path / "big.json"
    limit = 1024 * 1024
    f.write_text(json.dumps("x" * (limit - 2)))  # exactly 1 MiB compact: allowed
    assert cli("enqueue", "t", "--payload-file", f).exit_code == 0
    f.write_text(json.dumps("x" * (limit - 1)))
    line = refused(cli, db, "enqueue", "t", "--payload-file", f)
    assert "too large" in line and str(limit) in line


def test_oversized_payload_config_limit(cli, db, running, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("max_payload_bytes = 100\n")
    ok = json.dumps({"k": "x" * 92})  # compact form: 100 bytes
    spaced = json.dumps({"k": "x" * 92}, indent=8)  # over 100 as typed, but the compact form counts
    assert cli("--config", cfg, "enqueue", "t", spaced).exit_code == 0
    assert cli("--config", cfg, "enqueue", "t", ok).exit_code == 0
    line = refused(cli, db, "--config", cfg, "enqueue", "t", json.dumps({"k": "x" * 93}))  # 101 bytes
    assert "too large" in line and "100" in line
    # multi-byte characters count in bytes
    refused(cli, db, "--config", cfg, "enqueue", "t", json.dumps({"k": "é" * 50}, ensure_ascii=False))
    # results are held to the same limit
    refused(cli, db, "--config", cfg, "complete", "1", "--result", json.dumps("y" * 200))


@pytest.mark.parametrize("name", ["", "bad name", "-dash", "_under", ".dot", "a" * 65, "tab\there", "ünï",
                                  "semi;colon", "slash/x", "a\nb", "[bold]x[/bold]"])
def test_bad_names(cli, db, running, name):
    refused(cli, db, "enqueue", name)
    line = refused(cli, db, "enqueue", "t", "--queue", name)
    assert "name" in line
    # every other place a name is taken refuses it too (through the core: fast)
    before = snapshot(db)
    with Queue.open(db) as q:
        for call in (lambda: q.enqueue_batch([json.dumps({"type": name})]), lambda: q.claim(queues=[name]),
                     lambda: q.claim(types=[name]), lambda: q.pause(name), lambda: q.resume(name),
                     lambda: q.retry_buried(queue=name), lambda: q.retry_buried(type=name),
                     lambda: q.list_jobs(type=name), lambda: q.list_jobs(queue=name)):
            with pytest.raises(InvalidInput):
                call()
    assert snapshot(db) == before


@pytest.mark.parametrize("args", [["enqueue", "--batch", "-"], ["claim", "--queue", "a b"], ["claim", "--type", "a b"],
                                  ["pause", "a b"], ["retry-buried", "--queue", "a b"], ["list", "--type", "a b"]])
def test_bad_names_elsewhere_in_the_cli(cli, db, running, args):
    refused(cli, db, *args, input=json.dumps({"type": "a b"}) + "\n")


@pytest.mark.parametrize("name", ["a", "A9", "billing.eu-1:high_prio", "9" + "x" * 63])
def test_good_names(cli, db, running, name):
    assert cli("enqueue", name, "-q", name).exit_code == 0


@pytest.mark.parametrize("args", [
    ["enqueue", "t", "-p", "1001"],
    ["enqueue", "t", "-p", "-1001"],
    ["enqueue", "t", "-p", "extreme"],
    ["enqueue", "t", "-p", "1e3"],
    ["enqueue", "t", "-p", "99999999999999999999999"],
    ["enqueue", "t", "--max-attempts", "0"],
    ["enqueue", "t", "--max-attempts", "1001"],
    ["enqueue", "t", "--max-attempts", "-1"],
    ["enqueue", "t", "--max-attempts", "two"],
    ["enqueue", "t", "--after", str(2**63)],
    ["enqueue", "t", "--after", "0"],
    ["enqueue", "t", "--after", "-4"],
    ["show", str(2**63)],
    ["show", "0"],
    ["show", "-1"],
    ["show", "one"],
    ["complete", str(2**63)],
    ["fail", str(2**64)],
    ["cancel", "1", str(2**63)],
    ["retry", "0"],
    ["progress", "1", "--percent", "101"],
    ["progress", "1", "--percent", "-1"],
    ["list", "--limit", "-1"],
    ["list", "--status", "done"],
    ["enqueue", "t", "--backoff", "sometimes"],
    ["enqueue", "t", "--backoff", "10,-5"],
    ["enqueue", "t", "--backoff", ""],
    ["complete", "1", "--result", "{nope"],
    ["complete", "1", "--result", "NaN"],
    ["enqueue", "t", "--key", ""],
    ["enqueue", "t", "--key", "k" * 256],
    ["enqueue", "t", "--at", "tomorrow"],
    ["enqueue", "t", "--at", "2031-13-01T00:00:00Z"],
])
def test_bad_values(cli, db, running, args):
    refused(cli, db, *args)


@pytest.mark.parametrize("option", ["--delay", "--timeout"])
@pytest.mark.parametrize("value", ["5 minutes", "-5m", "1y", "5m3", "m", "1.5.2s", "nan", "inf", "99999999999d",
                                   "0x10", ""])
def test_bad_durations(cli, db, running, option, value):
    line = refused(cli, db, "enqueue", "t", option, value)
    assert "duration" in line or "invalid" in line


@pytest.mark.parametrize("args", [
    ["enqueue", "t", "--timeout", "0"],
    ["claim", "--lease", "0"],
    ["claim", "--lease", "soon"],
    ["claim", "--wait", "-1"],
    ["heartbeat", "1", "--extend", "0"],
    ["heartbeat", "1", "--extend", "later"],
    ["fail", "1", "--retry-in", "whenever"],
    ["recover", "--older-than", "5 min"],
    ["purge", "--completed-older-than", "old"],
    ["--busy-timeout", "long", "list"],
])
def test_bad_durations_elsewhere(cli, db, running, args):
    refused(cli, db, *args)


def test_good_durations(cli, db, running):
    from jobctl.durations import parse_duration

    assert [parse_duration(x) for x in ("90", "500ms", "90s", "5m", "2h", "1d", "1h30m", "1.5s")] == \
        [90, 0.5, 90, 300, 7200, 86400, 5400, 1.5]
    assert cli("enqueue", "t", "--delay", "1h30m", "--timeout", "500ms").exit_code == 0


def test_a_refused_fail_changes_nothing(cli, db, running):
    refused(cli, db, "fail", "1", "--token", running, "--retry-in", "nope")
    assert cli("fail", "1", "--token", running, "--retry-in", "1s").exit_code == 0


def test_long_errors_are_kept_to_one_short_line(cli, db, running):
    r = cli("fail", "1", "--token", running, "--error", "line one\nline two\r\n" + "x" * 5000)
    assert r.exit_code == 0, r.output
    with Queue.open(db) as q:
        error = q.get(1).error
    assert "\n" not in error and error.startswith("line one line two") and len(error) <= 500


def test_the_core_refuses_python_values_too():
    with pytest.raises(InvalidInput):
        payloads.compact({"x": float("nan")})
    with pytest.raises(InvalidInput):
        payloads.compact({"x": "\ud800"})
    deep = []
    for _ in range(300):
        deep = [deep]
    with pytest.raises(InvalidInput):
        payloads.compact(deep)
