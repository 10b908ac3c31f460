"""Issue 2, test 9: bad input. Invalid or deep JSON, NaN/Infinity, lone surrogates, oversized
payloads, bad names, out-of-range numbers, bad durations: exit 2, one line, nothing changed."""

import hashlib
import json
import resource
import sqlite3

import pytest

from jobctl import jobspec, payloads
from jobctl.config import Settings, load_settings
from jobctl.errors import InvalidInput
from jobctl.queue import Queue
from conftest import refused_line, snapshot


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


def test_a_payload_file_is_measured_in_its_compact_form(cli, db, tmp_path):
    """A file written by `jq .` (indented, a newline at the end) whose compact form fits is taken,
    from a file as from stdin: the limit counts the compact form, as for an argument."""
    cfg = tmp_path / "c.toml"
    cfg.write_text("max_payload_bytes = 100\n")
    pretty = json.dumps({"k": "x" * 92}, indent=8) + "\n"  # 100 bytes compact, more as typed
    assert len(pretty.encode()) > 100
    f = tmp_path / "p.json"
    f.write_text(pretty)
    for args, given in ((("--payload-file", f), None), (("--payload-file", "-"), pretty)):
        r = cli("--config", cfg, "enqueue", "t", *args, "--json", input=given)
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["payload"] == {"k": "x" * 92}
    f.write_text(json.dumps({"k": "x" * 93}, indent=8))  # 101 bytes compact: refused, in those words
    assert "101 bytes in compact form" in refused(cli, db, "--config", cfg, "enqueue", "t", "--payload-file", f)


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


# -- integers of more than 4300 digits are invalid input -------------------------------------------

HUGE = "9" * 5000  # more digits than int() converts by default (4300)


def test_enqueue_with_a_huge_integer_is_exit_2_and_creates_nothing(cli, db):
    refused_line(cli("enqueue", "t", '{"n": ' + HUGE + "}"), "invalid payload", "4300 digits")
    assert not db.exists()


def test_a_huge_integer_in_a_payload_file_and_a_batch_line_is_exit_2(cli, db, tmp_path):
    f = tmp_path / "p.json"
    f.write_text("[" + HUGE + "]")
    refused_line(cli("enqueue", "t", "--payload-file", f), "4300 digits")
    lines = '{"type": "t"}\n{"type": "t", "payload": ' + HUGE + "}\n"
    refused_line(cli("enqueue", "--batch", "-", input=lines), "line 2", "4300 digits", "nothing was enqueued")
    assert not db.exists()


def test_complete_with_a_huge_integer_result_is_exit_2_and_changes_nothing(cli, db):
    assert cli("enqueue", "t").exit_code == 0
    job = json.loads(cli("claim").stdout)
    before = snapshot(db)
    refused_line(cli("complete", str(job["id"]), "--result", HUGE), "invalid result", "4300 digits")
    assert snapshot(db) == before


def test_an_integer_just_under_the_limit_is_kept_exactly(cli, db):
    n = "7" * 4300
    r = cli("enqueue", "t", '{"n": ' + n + "}", "--json")
    assert r.exit_code == 0, r.output
    assert '"n":' + n in r.stdout


# -- durations that cannot work --------------------------------------------------------------------

@pytest.mark.parametrize("args, needles", [
    (["claim", "--lease", "10ms"], ["lease '10ms'", "from 1s to"]),
    (["claim", "--lease", "999ms"], ["lease '999ms'", "from 1s to"]),
    (["heartbeat", "1", "--extend", "500ms"], ["'500ms'", "from 1s to"]),
    (["--busy-timeout", "25d", "list"], ["--busy-timeout '25d'", "from 0s to 1d"]),
    (["--busy-timeout", "86401", "list"], ["'86401'", "from 0s to 1d"]),
    (["work", "--poll", "1ms"], ["--poll '1ms'", "from 10ms to 1h"]),
    (["work", "--poll", "2h"], ["--poll '2h'", "from 10ms to 1h"]),
    (["work", "--grace", "2d"], ["--grace '2d'", "from 0s to 1d"]),
])
def test_a_duration_out_of_its_range_on_the_command_line_is_exit_2(cli, db, args, needles):
    assert cli("enqueue", "t").exit_code == 0
    if args[0] == "heartbeat":
        assert cli("claim").exit_code == 0
    before = snapshot(db)
    refused_line(cli(*args), *needles)
    assert snapshot(db) == before


def test_jobctl_busy_timeout_out_of_range_is_exit_2(cli, db):
    assert cli("enqueue", "t").exit_code == 0
    refused_line(cli("list", env={"JOBCTL_BUSY_TIMEOUT": "25d"}), "JOBCTL_BUSY_TIMEOUT '25d'", "from 0s to 1d")


@pytest.mark.parametrize("toml, needles", [
    ('[worker]\nlease = "10ms"\n', ["worker.lease", "'10ms'", "from 1s to"]),
    ('[worker]\npoll = "1ms"\n', ["worker.poll", "from 10ms to 1h"]),
    ('[worker]\ngrace = "30d"\n', ["worker.grace", "from 0s to 1d"]),
    ('busy_timeout = "25d"\n', ["busy_timeout", "'25d'", "from 0s to 1d"]),
])
def test_a_duration_out_of_its_range_in_the_config_is_exit_2(cli, db, tmp_path, toml, needles):
    cfg = tmp_path / "c.toml"
    cfg.write_text(toml)
    refused_line(cli("--config", cfg, "list"), "config file", *needles)
    with pytest.raises(InvalidInput):
        load_settings(str(cfg), env={})


def test_durations_at_the_ends_of_their_ranges_are_accepted(cli, db, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('busy_timeout = "1d"\n[worker]\nlease = "1s"\npoll = "10ms"\ngrace = "0s"\n')
    s = load_settings(str(cfg), env={})
    assert (s.busy_timeout, s.worker.lease, s.worker.poll, s.worker.grace) == (86400, 1, 0.01, 0)
    assert cli("enqueue", "t").exit_code == 0
    r = cli("--busy-timeout", "0", "claim", "--lease", "1s")
    assert r.exit_code == 0, r.output
    job = json.loads(r.stdout)
    assert cli("heartbeat", str(job["id"]), "--extend", "1s").exit_code == 0


def test_the_queue_api_refuses_a_lease_below_one_second(db):
    with Queue.open(db, create=True) as q:
        q.enqueue("t", {})
        with pytest.raises(InvalidInput, match="from 1s"):
            q.claim(lease=0.5)
        job = q.claim(lease=1)
        with pytest.raises(InvalidInput, match="from 1s"):
            q.heartbeat(job.id, token=job.token, extend="0.2s")


# -- payload files and batch lines are read only up to their limit ---------------------------------

def _limited_memory():
    """In the child: an address-space cap far below what reading /dev/zero whole would need."""
    cap = 400 * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def test_payload_file_dev_zero_is_refused_without_reading_it_all(cli, db):
    r = cli("enqueue", "t", "--payload-file", "/dev/zero", preexec_fn=_limited_memory, timeout=30)
    refused_line(r, "too large: /dev/zero", f"more than {16 * 1048576} bytes", "limit of 1048576 bytes", "max_payload_bytes")
    assert not db.exists()


def test_batch_of_dev_zero_is_refused_at_its_first_line(cli, db):
    r = cli("enqueue", "--batch", "/dev/zero", preexec_fn=_limited_memory, timeout=30)
    refused_line(r, "line 1", "longer than", "nothing was enqueued")
    assert not db.exists()


def test_payload_on_stdin_is_read_only_up_to_the_limit(cli, db, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("max_payload_bytes = 100\n")
    refused_line(cli("--config", cfg, "enqueue", "t", "--payload-file", "-", input='"' + "x" * 2000 + '"'),
            "too large: stdin", "more than 1600 bytes", "limit of 100 bytes")
    r = cli("--config", cfg, "enqueue", "t", "--payload-file", "-", input='"' + "x" * 98 + '"')
    assert r.exit_code == 0, r.output


def test_a_batch_line_past_the_limit_and_the_keys_room_is_refused_by_number(cli, db, tmp_path):
    from jobctl.cli.inputs import BATCH_LINE_ROOM

    cfg = tmp_path / "c.toml"
    cfg.write_text("max_payload_bytes = 100\n")
    fits = json.dumps({"type": "t", "payload": "x" * 90, "key": "k" * 200})  # longer than 100 bytes: fine
    too_long = json.dumps({"type": "t", "payload": "y" * (100 + BATCH_LINE_ROOM)})
    r = cli("--config", cfg, "enqueue", "--batch", "-", input=f"{fits}\n\n{too_long}\n{fits}\n")
    refused_line(r, "line 3", f"longer than {100 + BATCH_LINE_ROOM} bytes", "nothing was enqueued")
    assert not db.exists()


def test_batch_lines_keep_their_numbers_and_split_only_at_newlines(cli, db):
    lines = ('{"type": "a"}\r\n\n{"type": "b", "payload": "x\u2028y\u0085z"}\n{"type": "c"}').encode()
    r = cli("enqueue", "--batch", "-", "--json", input=lines, binary=True)
    assert r.exit_code == 0, r.output
    got = [json.loads(x) for x in r.stdout.splitlines()]
    assert [j["type"] for j in got] == ["a", "b", "c"]
    assert got[1]["payload"] == "x\u2028y\u0085z"
    r = cli("enqueue", "--batch", "-", input=b'{"type": "a"}\n\xff\n', binary=True)
    assert r.exit_code == 2 and b"line 2: not UTF-8" in r.stderr, r.output


# -- a payload's depth is its own, alone or on a batch line ----------------------------------------

def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def test_a_payload_256_deep_is_accepted_alone_and_in_a_batch(cli, db):
    assert cli("enqueue", "t", nested(256)).exit_code == 0
    r = cli("enqueue", "--batch", "-", input='{"type": "t", "payload": ' + nested(256) + "}\n")
    assert r.exit_code == 0, r.output
    conn = sqlite3.connect(db)
    assert [r[0] for r in conn.execute("SELECT payload FROM jobs ORDER BY id")] == [nested(256)] * 2
    conn.close()


def test_a_payload_257_deep_is_refused_alone_and_in_a_batch(cli, db):
    refused_line(cli("enqueue", "t", nested(257)), "nested deeper than 256 levels")
    refused_line(cli("enqueue", "--batch", "-", input='{"type": "t", "payload": ' + nested(257) + "}\n"),
            "line 1", "nested deeper than 256 levels")
    assert not db.exists()


def test_prepare_batch_line_counts_the_payload_depth_only():
    s = Settings()
    assert jobspec.prepare_batch_line(s, '{"type": "t", "payload": ' + nested(256) + "}", 1).payload == nested(256)
    with pytest.raises(InvalidInput, match="line 1: .*256 levels"):
        jobspec.prepare_batch_line(s, '{"type": "t", "payload": ' + nested(257) + "}", 1)
    with pytest.raises(InvalidInput, match="line 1"):  # the other keys may not be deep either
        jobspec.prepare_batch_line(s, '{"type": "t", "after": ' + nested(200) + "}", 1)


# -- a batch's later lines: their type and options are resolved once, every rule still holds -------

def nested_objects(levels: int) -> str:
    return '{"a":' * (levels - 1) + "{}" + "}" * (levels - 1)


def batch_lines(lines: list[str]) -> list:
    """prepare_batch, which keeps what the first line of a type made for the lines after it."""
    return jobspec.prepare_batch(Settings(), lines)


@pytest.mark.parametrize("deep", [nested, nested_objects])
def test_a_later_batch_line_is_held_to_the_depth_limit_exactly(deep):
    first = '{"type": "t", "payload": {"n": 1}}'
    ok = batch_lines([first, '{"type": "t", "payload": ' + deep(256) + "}"])
    assert ok[1].payload == deep(256).replace(" ", "")
    with pytest.raises(InvalidInput, match=r"^line 2: invalid JSON: nested deeper than 256 levels; nothing"):
        batch_lines([first, '{"type": "t", "payload": ' + deep(257) + "}"])
    with pytest.raises(InvalidInput, match=r"^line 3: "):  # another key of the line may not be deep either
        batch_lines([first, first, '{"type": "t", "after": ' + nested(257) + "}"])


def test_brackets_in_strings_make_no_depth():
    text = "[" * 300 + "{" * 300
    jobs = batch_lines(['{"type": "t", "payload": {"n": 1}}', json.dumps({"type": "t", "payload": {"s": text}})])
    assert json.loads(jobs[1].payload) == {"s": text}
    assert payloads.parse_json(json.dumps([text])) == [text]


@pytest.mark.parametrize("payload", [
    '{"b": 1, "a": {"d": [1, 2], "c": "x"}}', '{"a":{"c":"x","d":[1,2]},"b":1}', ' { "a" : { "d" : [ 1 , 2 ] ,'
    ' "c" : "x" } , "b" : 1 } '])
def test_a_batch_line_hash_is_the_canonical_form_of_its_payload(payload):
    """The same payload in any key order or spacing has one hash (idempotency keys, --unique), on
    the first line of a type as on the later ones; its stored form keeps the line's key order."""
    lines = ['{"type": "t", "payload": ' + payload + "}"] * 2
    canonical = '{"a":{"c":"x","d":[1,2]},"b":1}'
    for job in batch_lines(lines) + [jobspec.prepare(Settings(), "t", payload_text=payload)]:
        assert job.payload_hash == hashlib.sha256(canonical.encode()).hexdigest()
        assert job.payload == json.dumps(json.loads(payload), separators=(",", ":"))


@pytest.mark.parametrize("payload", ['{"i": 1}', '[{"b": {"a": "é"}}]', '"x"', "null", "{}", "[]", "7"])
def test_a_payload_without_a_comma_is_hashed_as_its_canonical_form(payload):
    value = json.loads(payload)
    expected = hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":"),
                                         ensure_ascii=False).encode()).hexdigest()
    assert payloads.canonical_hash(value) == expected
    assert payloads.canonical_hash(value, payloads.compact(value)) == expected
    assert batch_lines(['{"type": "t"}', '{"type": "t", "payload": ' + payload + "}"])[1].payload_hash == expected


@pytest.mark.parametrize("line, error", [
    ('{"type": "t", "payload": {"x": 1e400}}', "line 2: invalid payload: Out of range float"),
    ('{"type": "t", "payload": {"x": NaN}}', "line 2: invalid JSON: NaN is not allowed"),
    ('{"type": "t", "payload": "\\ud800"}', "line 2: invalid payload: .*surrogate"),
    ('{"type": "t", "payload": "' + "x" * 2000 + '"}', "line 2: payload too large: 2002 bytes"),
    ('{"type": "t", "key": ""}', "line 2: invalid idempotency key"),
    ('{"type": "t", "key": 5}', "line 2: invalid idempotency key"),
    ('{"type": "t", "after": [0]}', "line 2: invalid job id 0"),
    ('{"type": "t", "after": 3}', 'line 2: "after" must be a list'),
    ('{"type": "t", "key": "", "after": [0], "payload": {"x": 1e400}}', "line 2: invalid payload"),  # prepare's order
    ('{"type": "t", "key": "", "after": [0]}', "line 2: invalid idempotency key"),
    ('{"type": "t", "priority": true}', "line 2: invalid priority"),  # True is not the 1 of line 1
    ('{"type": "t" ', "line 2: invalid JSON: not JSON"),
    (' {"type": "t", "payload": 1} x', "line 2: invalid JSON: not JSON \\(Extra data"),
])
def test_a_later_batch_line_is_checked_as_the_first(line, error):
    settings = Settings(max_payload_bytes=1000)
    # The first line has the same type and options (but key and after, which each line has its own).
    first = ('{"type": "t", "priority": 1}' if "priority" in line else
             '{"type": "t", "key": "ok", "after": [1]}' if "key" in line or "after" in line else '{"type": "t"}')
    with pytest.raises(InvalidInput, match=error):
        jobspec.prepare_batch(settings, [first, line])
    with pytest.raises(InvalidInput, match=error.replace("line 2", "line 1")):  # the same without a template
        jobspec.prepare_batch(settings, [line])


def test_a_later_batch_line_gets_the_options_of_its_own_line():
    jobs = batch_lines(['{"type": "t"}', '{"type": "t", "payload": null}', '{"type": "t", "queue": "q", "key": "k"}',
                        '{"type": "u", "after": [4, 5]}', '{"type": "t", "queue": "q", "after": [6]}', " "])
    assert [(j.type, j.queue, j.payload, j.idempotency_key, j.after, j.source) for j in jobs] == [
        ("t", "default", "{}", None, [], "line 1"), ("t", "default", "null", None, [], "line 2"),
        ("t", "q", "{}", "k", [], "line 3"), ("u", "default", "{}", None, [4, 5], "line 4"),
        ("t", "q", "{}", None, [6], "line 5")]
    assert jobs[0].after is not jobs[1].after


def test_the_same_payload_in_another_key_order_is_the_unique_twin(cli, db):
    lines = '{"type": "t", "payload": {"a": 1, "b": [1, 2]}, "unique": true}\n' \
            '{"type": "t", "payload": {"b": [1,2], "a": 1}, "unique": true}\n' \
            '{"type": "t", "payload": {"a": 1, "b": [2, 1]}, "unique": true}\n'
    r = cli("enqueue", "--batch", "-", "--json", input=lines)
    assert r.exit_code == 0, r.output
    got = [json.loads(x) for x in r.stdout.splitlines()]
    assert [(j["id"], j["created"]) for j in got] == [(1, True), (1, False), (2, True)]


@pytest.mark.parametrize("wrapper", [0, 1])
def test_parse_json_depth_limit_exactly_at_the_shortest_texts(wrapper):
    most = payloads.MAX_DEPTH + wrapper
    for deep in (nested, nested_objects):
        assert payloads.parse_json(deep(most), wrapper_levels=wrapper) is not None
        with pytest.raises(InvalidInput, match="nested deeper than 256 levels"):
            payloads.parse_json(deep(most + 1), wrapper_levels=wrapper)
        with pytest.raises(InvalidInput, match="nested deeper than 256 levels"):  # with room around it
            payloads.parse_json(" " * 600 + deep(most + 1) + "\n", wrapper_levels=wrapper)


@pytest.mark.parametrize("line, error", [
    ('{"type": ["t"], "payload": {}}', "line 2: invalid type name"),
    ('{"type": {"t": 1}}', "line 2: invalid type name"),
    ('{"type": null, "payload": {}}', 'line 2: missing "type"|line 2: invalid type name'),
    ('{"payload": {}, "queue": "q"}', 'line 2: missing "type"'),
    ('{"type": "t", "payload": {}, "x": 1}', "line 2: unknown key"),
    ('["t", {}]', "line 2: each line must be a JSON object"),
])
def test_a_line_like_the_ones_before_it_is_still_checked_whole(line, error):
    with pytest.raises(InvalidInput, match=error):
        batch_lines(['{"type": "t", "payload": {}}', line])


def test_a_payload_file_far_too_large_says_what_was_not_done_by_each_command(cli, db, tmp_path):
    """edit changes nothing and run runs nothing: their refusal says so, not "nothing was enqueued"."""
    cfg = tmp_path / "c.toml"
    cfg.write_text('max_payload_bytes = 100\n[types.t]\ncommand = ["true"]\n')
    big = tmp_path / "big.json"
    big.write_text('"' + "x" * 5000 + '"')
    assert cli("--config", cfg, "enqueue", "t").exit_code == 0
    for args, said in ((["edit", "1"], "nothing was changed"), (["run", "t"], "nothing was run"),
                       (["enqueue", "t"], "nothing was enqueued")):
        r = cli("--config", cfg, *args, "--payload-file", big)
        line = refused_line(r, "too large", said)
        assert "enqueued" not in line or args[0] == "enqueue", line
