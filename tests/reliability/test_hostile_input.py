"""Hostile input (issue 6, items 12-14 and 16): payloads that try to paint the terminal or fake
markup come back byte-exact in JSON and inert in tables; invalid input and numbers past every
boundary are exit 2 with nothing inserted; secrets stay masked."""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobctl.config import Settings
from jobctl.queue import Queue

from .util import connect_ro, jobctl, rows, run_inproc, schema

# Outcomes only, with no time bound: these run beside the other tests (see tests/conftest.py).
pytestmark = pytest.mark.shared

HOSTILE = [
    "[bold]", "[/bold]", "[link=file:///etc/passwd]click[/link]", "[red on white]", "[/]", ":smile:",
    "\x1b[31m", "\x1b[2J", "\x1b]8;;http://evil.example/\x07here\x1b]8;;\x07", "\x1b]0;title\x07", "\x07", "\r",
    "\x00", "\x7f", "\u202e", "\u2066", "\u200f", "\u200b", "\ufeff", "\u2028", "🙂", "👩‍👩‍👧", "漢字", "مرحبا",
    "\\", '"', "'); DROP TABLE jobs;--", "%s%n", "${HOME}", "$(reboot)",
]
CONTROL = [c for c in "\x1b\x07\x00\x7f\r\u202e\u2066\u200f\u200b\ufeff\u2028"]

hostile_text = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=12),
    st.sampled_from(HOSTILE),
    st.lists(st.one_of(st.sampled_from(HOSTILE), st.text(max_size=3)), max_size=5).map("".join),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | hostile_text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(hostile_text, children, max_size=4),
    max_leaves=16,
)


def compact(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def render(renderable) -> str:
    from jobctl import output

    con = output.console(width=100)
    con.file = io.StringIO()
    con.print(renderable)
    return con.file.getvalue()


# -- 12. payloads: byte-exact in JSON, inert in tables ------------------------------------------

@pytest.mark.slow  # 60 generated cases, each on a new file
@settings(max_examples=60, deadline=None)
@given(payloads=st.lists(json_values, min_size=1, max_size=6))
def test_any_payload_is_stored_byte_exact_and_rendered_inert(payloads):
    from jobctl import output

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "jobs.db"
        with Queue.open(db, Settings(), create=True) as q:
            ids = [q.enqueue("t", payload_text=json.dumps(p)).id for p in payloads]
            stored = {r["id"]: r["payload"] for r in rows(db, "SELECT id, payload FROM jobs")}
            for job_id, p in zip(ids, payloads):
                assert stored[job_id] == compact(p)
                assert q.get(job_id).to_dict()["payload"] == p
            claimed = q.claim(worker="w")
            assert claimed.id == ids[0] and claimed.to_dict(claim=True)["payload"] == payloads[0]
            now = q.now()
            listed = q.list_jobs(limit=100)
            shown = [render(output.jobs_table(listed, now, q.settings.secret_keys))]
            shown += [render(output.job_panel(q.get(i), q.events(i), now, q.settings.secret_keys)) for i in ids]
        for text in shown:
            for ch in CONTROL:
                assert ch not in text, (ch, text)


@pytest.mark.slow
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payloads=st.lists(json_values, min_size=1, max_size=8))
def test_any_payload_through_the_cli_comes_back_byte_exact(payloads):
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "jobs.db"
        batch = "".join(json.dumps({"type": "t", "payload": p}) + "\n" for p in payloads)
        r = jobctl("enqueue", "--batch", "-", db=db, input=batch)
        assert r.exit_code == 0, r.output
        ids = [int(x) for x in r.stdout.split()]
        r = jobctl("list", "--json", "--limit", "100", db=db)
        assert r.exit_code == 0, r.output
        # NDJSON lines end at "\n" only: a payload may hold U+2028 and friends, which splitlines() splits at
        lines = {json.loads(line)["id"]: line for line in r.stdout.split("\n") if line}
        for job_id, p in zip(ids, payloads):
            assert json.loads(lines[job_id])["payload"] == p
            assert f'"payload":{compact(p)},' in lines[job_id]  # the stored form, byte for byte
        r = jobctl("claim", db=db)
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["payload"] == payloads[0] and f'"payload":{compact(payloads[0])},' in r.stdout
        for args in (["list"], ["show", ids[-1]]):
            r = jobctl(*args, db=db)
            assert r.exit_code == 0, r.output
            for ch in CONTROL:
                assert ch not in r.stdout, (args, ch, r.stdout)


NASTY = {"note": "[bold]x[/bold] [link=file:///etc/passwd]click[/link] \x1b[2J\x1b[31mred \u202eevil\x07",
         "api_token": "s3cr3t"}


@pytest.mark.parametrize("color", [False, True], ids=["no-color", "forced-color"])
def test_markup_and_escapes_are_shown_escaped_in_list_and_show(cli, color):
    env = {"FORCE_COLOR": "1", "TERM": "xterm-256color", "NO_COLOR": ""} if color else {}
    if color:
        os.environ.pop("NO_COLOR", None)
    assert cli("enqueue", "t", json.dumps(NASTY)).exit_code == 0
    job = json.loads(cli("claim", "--worker", "[bold]w\x1b[31m").stdout)
    r = cli("fail", job["id"], "--token", job["token"], "--error", "[red]boom\x1b[0m [link=file:///etc/passwd]x")
    assert r.exit_code == 0, r.output
    outputs = [cli("list", env=env), cli("show", job["id"], env=env)]
    for r in outputs:
        assert r.exit_code == 0, r.output
        out = r.stdout
        assert "s3cr3t" not in out
        assert "\x1b]8;" not in out and "\x07" not in out and "\u202e" not in out  # no hyperlink, bell, bidi
        visible = out
        if color:  # the only escapes allowed are rich's own colours (SGR), never the payload's
            import re

            visible = re.sub(r"\x1b\[[0-9;]*m", "", out)
        assert "\x1b" not in visible
        assert "[link=file:///etc/passwd]" in visible
        assert "\\x1b" in visible
    show = re.sub(r"\x1b\[[0-9;]*m", "", outputs[1].stdout) if color else outputs[1].stdout
    assert "[bold]x[/bold]" in show and "[red]boom\\x1b[0m" in show and "\\u202eevil" in show
    assert "[bold]w\\x1b[31m" in show  # the worker id too
    # JSON carries the exact bytes
    r = cli("show", job["id"], "--json")
    assert json.loads(r.stdout)["payload"] == NASTY


# -- 13. invalid input and hostile names ------------------------------------------------------

DEEP = "[" * 200_000 + "]" * 200_000
BIG = json.dumps({"blob": "a" * (10 * 1024 * 1024)})
GOOD = json.dumps({"type": "t", "payload": {"ok": 1}})
INVALID = {
    "invalid-json": (["enqueue", "t", "{"], None),
    "trailing-garbage": (["enqueue", "t", "{} x"], None),
    "two-values": (["enqueue", "t", "{}{}"], None),
    "empty-stdin": (["enqueue", "t", "--payload-file", "-"], b""),
    "blank-stdin": (["enqueue", "t", "--payload-file", "-"], b" \n\t\n"),
    "nan": (["enqueue", "t", "NaN"], None),
    "infinity": (["enqueue", "t", '{"a": [-Infinity]}'], None),
    "huge-float": (["enqueue", "t", '{"a": 1e400}'], None),
    "deep-nesting": (["enqueue", "t", "--payload-file", "-"], DEEP.encode()),
    "deep-257": (["enqueue", "t", "[" * 257 + "]" * 257], None),
    "lone-surrogate": (["enqueue", "t", '"\\ud800"'], None),
    "lone-surrogate-key": (["enqueue", "t", '{"\\udc00": 1}'], None),
    "not-utf8": (["enqueue", "t", "--payload-file", "-"], b'"\xff\xfe"'),
    "10MB": (["enqueue", "t", "--payload-file", "-"], BIG.encode()),
    "sql-type": (["enqueue", "x'); DROP TABLE jobs;--", "{}"], None),
    "path-type": (["enqueue", "../../etc/passwd", "{}"], None),
    "dash-type": (["enqueue", "--", "-rf", "{}"], None),
    "dash-queue": (["enqueue", "t", "{}", "--queue=-rf"], None),
    "sql-queue": (["enqueue", "t", "{}", "-q", "x'); DROP TABLE jobs;--"], None),
    "10kB-type": (["enqueue", "a" * 10_000, "{}"], None),
    "10kB-queue": (["enqueue", "t", "{}", "-q", "q" * 10_000], None),
    "newline-type": (["enqueue", "a\nb", "{}"], None),
    "unicode-type": (["enqueue", "café", "{}"], None),
    "markup-type": (["enqueue", "[bold]t", "{}"], None),
    "empty-type": (["enqueue", "", "{}"], None),
    "long-key": (["enqueue", "t", "{}", "--key", "k" * 256], None),
    "batch-bad-line-4": (["enqueue", "--batch", "-"],
                         (GOOD + "\n" + GOOD + "\n\n" + json.dumps({"type": "../../etc/passwd"}) + "\n").encode()),
    "batch-not-object": (["enqueue", "--batch", "-"], (GOOD + "\n[1,2]\n").encode()),
    "batch-unknown-key": (["enqueue", "--batch", "-"], (GOOD + '\n{"type": "t", "sql": "DROP"}\n').encode()),
    "batch-garbage": (["enqueue", "--batch", "-"], (GOOD + "\n{\"type\": \"t\"} trailing\n").encode()),
    "batch-deep": (["enqueue", "--batch", "-"], (GOOD + "\n" + json.dumps({"type": "t"})[:-1] + ', "payload": '
                                                 + DEEP + "}\n").encode()),
    "batch-not-utf8": (["enqueue", "--batch", "-"], b'{"type": "t", "payload": "\xff"}\n'),
    "list-sql-queue": (["list", "-q", "x'); DROP TABLE jobs;--"], None),
    "list-bad-status": (["list", "--status", "running' OR 1=1 --"], None),
    "claim-sql-type": (["claim", "--type", "t' OR 1=1 --"], None),
    "pause-path": (["pause", "../../etc/passwd"], None),
    "retry-buried-sql": (["retry-buried", "-q", "x'); DROP TABLE jobs;--"], None),
}


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    db = tmp_path_factory.mktemp("template") / "jobs.db"
    r = jobctl("enqueue", "seed", '{"n": 1}', db=db)
    assert r.exit_code == 0, r.output
    return db


@pytest.fixture
def seeded(template, tmp_path):
    """A copy of a one-job database (checkpointed and closed, so the copy is whole)."""
    folder = tmp_path / "seeded"
    folder.mkdir(mode=0o700)
    shutil.copy2(template, folder / "jobs.db")
    return folder / "jobs.db"


def _snapshot(db):
    conn = connect_ro(db)
    try:
        return (schema(db), [tuple(r) for r in conn.execute("SELECT * FROM jobs")],
                conn.execute("SELECT count(*) FROM events").fetchone()[0],
                [tuple(r) for r in conn.execute("SELECT * FROM queues")])
    finally:
        conn.close()


def _check_invalid(r, db, before):
    if isinstance(r.stdout, bytes):
        r.stdout, r.stderr = r.stdout.decode(), r.stderr.decode("utf-8", "replace")
    assert r.exit_code == 2, r.output
    line = r.one_error_line()
    assert len(line) < 600, f"the error line echoes the input: {line[:200]}…"
    assert r.stdout == ""
    assert _snapshot(db) == before


@pytest.mark.parametrize("case", list(INVALID))
def test_invalid_input_is_exit_2_nothing_inserted_schema_unchanged(seeded, case):
    args, stdin = INVALID[case]
    before = _snapshot(seeded)
    _check_invalid(run_inproc(*args, db=seeded, input=stdin), seeded, before)


@pytest.mark.parametrize("case", ["deep-nesting", "10MB", "not-utf8", "sql-type", "batch-bad-line-4", "dash-type"])
def test_invalid_input_through_a_real_process(seeded, case):
    args, stdin = INVALID[case]
    before = _snapshot(seeded)
    _check_invalid(jobctl(*args, db=seeded, input=stdin, binary=True), seeded, before)


def test_invalid_enqueue_does_not_create_a_missing_database(tmp_path):
    """SPEC §7: a command that fails changes nothing — not even by creating the file."""
    db = tmp_path / "typo" / "jobs.db"
    for args in (["enqueue", "bad name", "{}"], ["enqueue", "t", "{"], ["enqueue", "--batch", "-"]):
        r = jobctl(*args, db=db, input="[1]\n")
        assert r.exit_code == 2, r.output
        assert not db.exists() and not db.parent.exists(), args


# -- 14. numbers at and past every boundary ---------------------------------------------------

BIG_INT = str(2**63)
BOUNDARIES = [
    # (args, exit code, words the error must contain)
    (["enqueue", "t", "-p", "-1000"], 0, None),
    (["enqueue", "t", "-p", "1000"], 0, None),
    (["enqueue", "t", "-p", "1001"], 2, "-1000 to 1000"),
    (["enqueue", "t", "-p=-1001"], 2, "-1000 to 1000"),
    (["enqueue", "t", "-p", BIG_INT], 2, "-1000 to 1000"),
    (["enqueue", "t", "-p", "1e3"], 2, "-1000 to 1000"),
    (["enqueue", "t", "--max-attempts", "1"], 0, None),
    (["enqueue", "t", "--max-attempts", "1000"], 0, None),
    (["enqueue", "t", "--max-attempts", "0"], 2, "1000"),
    (["enqueue", "t", "--max-attempts", "1001"], 2, "1000"),
    (["enqueue", "t", "--max-attempts", BIG_INT], 2, "1000"),
    (["enqueue", "t", "--max-attempts=-1"], 2, "1000"),
    (["enqueue", "t", "--delay", "3650d"], 0, None),
    (["enqueue", "t", "--delay", "3651d"], 2, "10 years"),
    (["enqueue", "t", "--delay", BIG_INT], 2, "10 years"),
    (["enqueue", "t", "--delay", "1e9"], 2, "500ms"),
    (["enqueue", "t", "--delay=-5"], 2, "500ms"),
    (["enqueue", "t", "--delay", "inf"], 2, "500ms"),
    (["enqueue", "t", "--timeout", "0"], 2, "more than 0"),
    (["enqueue", "t", "--timeout", BIG_INT], 2, "10 years"),
    (["enqueue", "t", "--at", "9999-12-31T23:59:59Z"], 0, None),
    (["enqueue", "t", "--at", "10000-01-01T00:00:00Z"], 2, "ISO 8601"),
    (["enqueue", "t", "--at", "0001-01-01T00:00:00"], 0, None),  # in the past: now
    (["enqueue", "t", "--at", "2026-13-01"], 2, "ISO 8601"),
    (["enqueue", "t", "--after", "0"], 2, str(2**63 - 1)),
    (["enqueue", "t", "--after", BIG_INT], 2, str(2**63 - 1)),
    (["enqueue", "t", "--after", str(2**63 - 1)], 3, "no job"),
    (["enqueue", "t", "--backoff", "10,-1"], 2, None),
    (["enqueue", "t", "--backoff", "99999999999999999999"], 2, None),
    (["claim", "--lease", "0"], 2, "from 1s"),
    (["claim", "--lease", BIG_INT], 2, "10 years"),
    (["claim", "--wait", BIG_INT], 2, "10 years"),
    (["--busy-timeout", BIG_INT, "list"], 2, "10 years"),
    (["--busy-timeout=-1", "list"], 2, None),
    (["show", "0"], 2, str(2**63 - 1)),
    (["show", "--", "-1"], 2, str(2**63 - 1)),
    (["show", BIG_INT], 2, str(2**63 - 1)),
    (["show", str(2**63 - 1)], 3, "no job"),
    (["complete", str(2**64)], 2, str(2**63 - 1)),
    (["cancel", BIG_INT], 2, str(2**63 - 1)),
    (["fail", "1", "--retry-in", BIG_INT], 2, "10 years"),
    (["heartbeat", "1", "--extend", "0"], 2, "from 1s"),
    (["progress", "1", "--percent", "101"], 2, "0 to 100"),
    (["progress", "1", "--percent=-1"], 2, "0 to 100"),
    (["progress", "1", "--percent", BIG_INT], 2, "0 to 100"),
    (["list", "--limit", "-1"], 2, "1,000,000"),
    (["list", "--limit", "1000001"], 2, "1,000,000"),
    (["list", "--limit", BIG_INT], 2, "1,000,000"),
    (["recover", "--older-than", BIG_INT], 2, "10 years"),
    (["purge", "--completed-older-than", BIG_INT], 2, "10 years"),
]
BATCH_BOUNDARIES = [
    ({"priority": 2**63}, "-1000 to 1000"), ({"priority": -1001}, "-1000 to 1000"), ({"priority": 1.5}, "-1000"),
    ({"priority": True}, "priority"), ({"max_attempts": 0}, "1000"), ({"max_attempts": 1.5}, "1000"),
    ({"max_attempts": True}, "1000"), ({"max_attempts": 2**63}, "1000"), ({"delay": -1}, "10 years"),
    ({"delay": 2**63}, "10 years"), ({"timeout": 0}, "more than 0"), ({"after": [0]}, str(2**63 - 1)),
    ({"after": [2**63]}, str(2**63 - 1)), ({"after": [1.5]}, "integer"), ({"after": ["1; DROP"]}, "integer"),
    ('{"type": "t", "max_attempts": 1e400}', "1000"), ('{"type": "t", "after": [1e400]}', "integer"),
    ('{"type": "t", "priority": 1e400}', "-1000"), ('{"type": "t", "delay": 1e400}', "10 years"),
    ({"backoff": [10, -1]}, "backoff"), ({"unique": "yes"}, "unique"), ({"key": ""}, "1 to 255"),
]


@pytest.mark.parametrize("args,code,words", BOUNDARIES, ids=[" ".join(a)[:40] for a, _, _ in BOUNDARIES])
def test_numbers_at_and_past_the_boundaries(seeded, args, code, words):
    before = _snapshot(seeded)
    r = run_inproc(*args, db=seeded)
    assert r.exit_code == code, r.output
    if code == 0:
        return
    line = r.one_error_line()
    if words:
        assert words in line, line
    assert _snapshot(seeded) == before


@pytest.mark.parametrize("fields,words", BATCH_BOUNDARIES, ids=[(f if isinstance(f, str) else json.dumps(f))[:40] for f, _ in BATCH_BOUNDARIES])
def test_batch_numbers_past_the_boundaries(seeded, fields, words):
    before = _snapshot(seeded)
    line2 = json.dumps({"type": "t", **fields}) if isinstance(fields, dict) else fields
    r = run_inproc("enqueue", "--batch", "-", db=seeded, input=GOOD + "\n" + line2 + "\n")
    assert r.exit_code == 2, r.output
    line = r.one_error_line()
    assert "line 2" in line and words in line, line
    assert _snapshot(seeded) == before


# -- 16. secrets --------------------------------------------------------------------------------

SECRET = {"api_token": "s3cr3t", "user": "ann", "nested": {"password": "hunter2", "Authorization": "Bearer xyz"}}
SECRET_VALUES = ("s3cr3t", "hunter2", "Bearer xyz")


def test_secrets_never_in_tables_or_error_messages(cli):
    r = cli("enqueue", "t", json.dumps(SECRET), "--key", "k1")
    assert r.exit_code == 0, r.output
    job_id = r.stdout.strip()
    r = cli("enqueue", "t", "--batch", "-", input=json.dumps({"type": "t", "payload": SECRET}) + "\n")
    seen = [r]
    for args, stdin in (
        (["enqueue", "t", json.dumps({**SECRET, "x": 1}), "--key", "k1"], None),  # same key, other payload
        (["enqueue", "t", json.dumps(SECRET)[:-1]], None),  # truncated JSON
        (["enqueue", "t", json.dumps(SECRET) + " trailing"], None),
        (["enqueue", "--batch", "-"], json.dumps({"type": "t", "payload": SECRET}) + "\n" +
         json.dumps({"type": "bad name", "payload": SECRET}) + "\n"),
        (["enqueue", "--batch", "-"], json.dumps({"type": "t", "payload": SECRET})[:-1] + "\n"),
        (["enqueue", "--batch", "-"], json.dumps({"type": "t", "payload": SECRET, "api_token": "s3cr3t"}) + "\n"),
        (["enqueue", "t", "--payload-file", "-"], json.dumps({**SECRET, "blob": "a" * (1024 * 1024)})),
        (["enqueue", "t", "--payload-file", "-"], json.dumps(SECRET)[:-1] + ', "deep": ' + DEEP[:1000] + DEEP[-1000:] + "}"),
    ):
        r = cli(*args, input=stdin)
        assert r.exit_code != 0, (args, r.output)
        seen.append(r)
    job = json.loads(cli("claim").stdout)
    cli("fail", job["id"], "--token", job["token"], "--error", "boom")
    for args in (["list"], ["list", "--status", "pending"], ["show", job_id], ["show", str(job["id"])],
                 ["recover"], ["doctor"], ["stats"]):
        r = cli(*args)
        if args == ["stats"] and "No such command" in r.stderr:
            continue  # stats is another issue's command; checked here once it exists
        seen.append(r)
    for r in seen:
        for secret in SECRET_VALUES:
            assert secret not in r.stdout + r.stderr, r.output
    # --reveal and --json show them, exactly as enqueued
    assert "s3cr3t" in cli("show", job_id, "--reveal").stdout
    assert json.loads(cli("show", job_id, "--json").stdout)["payload"] == SECRET
