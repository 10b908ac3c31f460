"""`list --stuck/--older-than/--sort` and the explanations of `show` (issue 4)."""

import json
import re
import time

import pytest

from jobctl.queue import Queue
from jobctl.stats import explain


def ids(r):
    assert r.exit_code == 0, r.output
    return [json.loads(line)["id"] for line in r.stdout.splitlines()]


@pytest.fixture
def known(db):
    """1: old low-priority, 2: old high-priority, 3: new, 4: stuck (lease expired), 5: running fine."""
    clock = lambda: time.time() - 3600  # noqa: E731 - an hour ago
    with Queue.open(db, create=True, clock=clock) as q:
        q.enqueue("a", {}, priority="low")
        q.enqueue("b", {}, priority="high")
    with Queue.open(db, clock=lambda: time.time() - 120) as q:
        q.enqueue("c", {})
        q.enqueue("d", {}, queue="w")
        q.enqueue("e", {}, queue="w")
        q.claim(types=["d"], lease="1m")  # lease ended a minute ago
    with Queue.open(db) as q:
        q.claim(types=["e"], lease="1h")
    return db


def test_list_stuck_older_than_and_sort(cli, known):
    assert ids(cli("list", "--stuck", "--json")) == [4]
    assert ids(cli("list", "--older-than", "30m", "--json")) == [2, 1]
    assert ids(cli("list", "--older-than", "30m", "--sort", "oldest", "--json")) == [1, 2]
    assert ids(cli("list", "--status", "pending", "--sort", "priority", "--json")) == [2, 3, 1]
    assert ids(cli("list", "--sort", "newest", "-n", "2", "--json")) == [5, 4]
    r = cli("list", "--sort", "sideways")
    assert r.exit_code == 2 and "newest, oldest" in r.stderr
    assert cli("list", "--older-than", "soon").exit_code == 2


def test_list_table_shows_untrusted_text_escaped(cli, db):
    assert cli("enqueue", "t", '{"note": "[bold]x[/bold]\\u001b[31m", "api_key": "k-123"}').exit_code == 0
    r = cli("list")
    assert "[bold]x[/bold]\\u001b[31m" in r.stdout and "\x1b" not in r.stdout
    assert "k-123" not in r.stdout and "***" in r.stdout
    assert "k-123" in cli("list", "--reveal").stdout


def why(cli, job_id):
    r = cli("show", job_id)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "│ why" in line)
    text = []
    for line in lines[start:]:
        cell = line.strip("│ ").strip()
        if text and (not line.startswith("│  ") or cell.split(" ")[0] in ("queue", "type")):
            break
        text.append(cell[len("why"):].strip() if not text else cell)
    return " ".join(text)


def test_show_explains_each_situation(cli, db):
    with Queue.open(db, create=True, clock=lambda: time.time() - 600) as q:
        ready = q.enqueue("lonely", {}, queue="nobody").id                    # 1 ready for 10 min
        sched = q.enqueue("later", {}, delay="2h").id                          # 2 scheduled
        dep = q.enqueue("first", {}, queue="deps").id                          # 3 its dependency
        blocked = q.enqueue("second", {}, queue="deps2", after=[dep]).id       # 4 blocked by 3
        paused = q.enqueue("held", {}, queue="frozen").id                      # 5 queue paused
        last = q.enqueue("fragile", {}, queue="once", max_attempts=1).id       # 6 no runs left
        q.pause("frozen")
        job = q.claim(queues=["once"])
        q.fail(job.id, token=job.token, error="boom")
    assert why(cli, ready).startswith("ready for 10m but not claimed: is a worker serving queue nobody and type lonely?")
    assert why(cli, sched).startswith("scheduled: not before ")
    assert "blocked by job 3 (pending)" in why(cli, blocked)
    assert "queue frozen is paused: `jobctl resume frozen`" in why(cli, paused)
    assert why(cli, last).startswith("no runs left (1 of 1 used): `jobctl retry 6`")
    assert "why" not in cli("show", dep, "--json").stdout  # JSON stays the SPEC job object


def test_explain_blocked_by_a_buried_job_says_what_to_do(db):
    with Queue.open(db, create=True) as q:
        dep = q.enqueue("first", {}, max_attempts=1).id
        after = q.enqueue("second", {}, after=[dep]).id
        job = q.claim(types=["first"])
        q.fail(job.id, token=job.token)
        text = explain(q.get(after), q.now(), dependencies=q.engine.dependencies(after))
    assert text.startswith(f"blocked by job {dep} (buried); job {dep} will not complete by itself")


def test_explain_running_jobs_only_when_something_is_wrong(db):
    with Queue.open(db, create=True) as q:
        q.enqueue("a", {})
        job = q.claim(lease="1m")
        assert explain(job, q.now()) is None
        assert "lease expired 1m ago" in explain(job, q.now() + 120_000)


def test_explain_says_what_recover_will_do_with_an_expired_lease(db):
    # recover requeues a job with runs left, buries one with none, finishes a cancellation:
    # `show` promises what it will do, not a requeue in every case.
    with Queue.open(db, create=True) as q:
        q.enqueue("a", {})
        q.enqueue("a", {}, max_attempts=1)
        q.enqueue("a", {})
        left, last, asked = (q.claim(lease="1m") for _ in range(3))
        q.cancel(asked.id)
        later = q.now() + 120_000
        assert "will requeue it" in explain(left, later)
        assert "will bury it" in explain(last, later) and "requeue" not in explain(last, later)
        asked = q.get(asked.id)
        assert asked.status == "cancel_requested"
        assert "will mark it cancelled" in explain(asked, later) and "requeue" not in explain(asked, later)


# -- the list table on a screen and in a pipe ---------------------------------------------


def list_fixture(db):
    with Queue.open(db, create=True) as q:
        q.enqueue("report", {"long": "y" * 150})
        q.enqueue("report", {}, delay="1h")
        q.enqueue("email", {"to": "a@b.c"}, queue="notifications")
        q.claim(types=["email"])


def on_terminal(db, columns, *args, until: bytes = b""):
    """jobctl on a pseudo-terminal `columns` wide: the lines it drew, colours and cursor moves
    removed; it must exit 0 (with `until`, after SIGINT once that was drawn)."""
    import re

    from conftest import JOBCTL, run_on_pty

    code, drawn, _ = run_on_pty([*JOBCTL, "--db", db, *args], columns=columns, until=until, timeout=30)
    assert code == 0, drawn
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", drawn).replace("\r", "").splitlines()


@pytest.mark.parametrize("columns", [120, 80, 60, 45])
def test_list_on_a_screen_cuts_only_the_payload_then_drops_whole_columns(db, columns):
    list_fixture(db)
    lines = on_terminal(db, columns, "list")
    assert all(len(line) <= columns for line in lines), lines
    header = lines[0].split()
    assert header[:2] == ["ID", "STATUS"], lines
    body = "\n".join(lines[1:])
    for whole in ("pending (scheduled)", "running", "report", "email"):  # never "pend…"
        assert whole in body, lines
    assert [line.split()[0] for line in lines[1:]] == ["3", "2", "1"], lines
    if columns >= 120:  # a running job: its worker and how long it has run (PRI goes first to make room)
        assert "notifications" in body and "WORKER" in header and "WHEN" in header and "for " in body
    if columns <= 60:
        assert "PRI" not in header and "UPDATED" not in header, lines


def test_list_keeps_long_names_whole_when_columns_are_left_out(db):
    with Queue.open(db, create=True) as q:
        q.enqueue("billing-invoices-eu-west", {"n": "x" * 100}, queue="billing-invoices-europe-west-1")
        q.enqueue("email", {})
    lines = on_terminal(db, 80, "list")
    assert lines[0].split()[:3] == ["ID", "STATUS", "TYPE"] and "QUEUE" not in lines[0], lines
    assert "billing-invoices-eu-west " in lines[2] and lines[2].rstrip().endswith("…"), lines
    assert all(len(line) <= 80 for line in lines), lines


@pytest.mark.parametrize("columns", [200, 80])
def test_list_on_a_screen_says_why_held_jobs_are_held(db, tmp_path, columns):
    """At 80 columns the reason keeps its third of the screen: minor columns go, as for an error."""
    from test_health import held_fixture

    config = held_fixture(db, tmp_path)
    for argv in (["list"], ["list", "--status", "held"]):  # (fewer rows: other columns fit beside it)
        lines = on_terminal(db, columns, "--config", config, *argv)
        assert all(len(line) <= columns for line in lines), lines
        rows = {line.split()[0]: line for line in lines[1:] if line.strip()}
        assert re.search(r"rate limit 1/1h: next in (1h|\d+m\d+s)$", rows["2"]), lines  # whole: when it opens
    lines = on_terminal(db, columns, "--config", config, "list")
    rows = {line.split()[0]: line for line in lines[1:] if line.strip()}
    assert "pending (held)" in rows["2"] and "rate limit 1/1h" in rows["2"], lines
    assert "group gpu full: 1/1 units" in rows["4"] and "queue billing paused" in rows["5"], lines
    assert "type other paused (" in rows["6"] and "(held)" not in rows["7"], lines
    if columns == 80:
        assert "PRI" not in lines[0] and "UPDATED" not in lines[0], lines
    else:
        assert "rate limit 1/1h: next in " in rows["2"] and "QUEUE" in lines[0], lines


def test_list_in_a_pipe_prints_whole_lines(cli, db):
    list_fixture(db)
    r = cli("list")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "PRI" in lines[0] and "UPDATED" in lines[0]
    assert '"long":"' + "y" * 150 + '"' in r.stdout  # not cut to any screen
    assert "pending (scheduled)" in r.stdout and "notifications" in r.stdout
    assert all(line == line.rstrip() for line in lines), "no padding at the ends of lines"


STATS_HEADER = ["QUEUE", "READY", "HELD", "SCHED", "BLOCKED", "RUN", "STOPPING", "BURIED", "DONE", "CANCELLED", "OLDEST"]


def stats_fixture(db):
    """A long queue and type name, a stuck job and a buried one with a long error."""
    with Queue.open(db, create=True, clock=lambda: time.time() - 60) as past:  # a lease that ran out a minute ago
        past.enqueue("billing-invoices-eu-west", {}, queue="billing-invoices-europe-west-1")
        past.claim(types=["billing-invoices-eu-west"], lease="1s")
    with Queue.open(db) as q:
        q.enqueue("x", {})
        job = q.claim(types=["x"])
        q.fail(job.id, token=job.token, error="exit 3: " + "went wrong " * 20, bury=True)
    time.sleep(0.01)


@pytest.mark.parametrize("columns", [120, 80, 60])
def test_stats_on_a_screen_keeps_queue_names_whole_and_cuts_only_to_fit(db, columns):
    """One line per row at the screen's width: minor count columns leave before a queue name is
    cut; in the lists, long cells are cut with "…" rather than folded."""
    stats_fixture(db)
    lines = on_terminal(db, columns, "stats")
    assert all(len(line) <= columns for line in lines), lines
    assert lines[0].split()[:5] == ["QUEUE", "READY", "OLDEST", "RUN", "BURIED"], lines
    if columns >= 120:
        assert sorted(lines[0].split()) == sorted(STATS_HEADER), lines
    assert lines[1].split()[0] == "billing-invoices-europe-west-1", lines  # whole, on one line
    assert lines[2].split()[0] == "default" and lines[3].split()[0] == "(all)", lines
    assert lines[4].startswith("stuck 1 · buried 1 · "), lines
    stuck = next(i for i, line in enumerate(lines) if line.split()[:2] == ["STUCK", "QUEUE"])
    assert lines[stuck + 1].split()[0] == "1", lines
    buried = next(i for i, line in enumerate(lines) if line.split()[:2] == ["BURIED", "QUEUE"])
    assert lines[buried + 1].split()[:2] == ["1", "default"], lines  # how many, then where
    assert lines[buried + 1].rstrip().endswith("…") and "exit 3: went wrong" in lines[buried + 1], lines


def test_stats_in_a_pipe_prints_whole_lines(cli, db):
    stats_fixture(db)
    r = cli("stats")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == STATS_HEADER
    assert lines[1].split()[0] == "billing-invoices-europe-west-1"
    assert "billing-invoices-eu-west" in r.stdout
    assert all("went wrong" in line for line in lines if "…" in line)  # only a long error is cut
    assert all(line == line.rstrip() for line in lines), "no padding at the ends of lines"


def test_stats_watch_fits_the_screen(db):
    stats_fixture(db)
    lines = on_terminal(db, 80, "stats", "--watch", "--interval", "1s", until=b"refreshed")
    assert lines[0].startswith("refreshed ")
    buried = next(i for i, line in enumerate(lines) if line.split()[:2] == ["BURIED", "QUEUE"])
    assert lines[buried + 1].rstrip().endswith("…") and len(lines[buried + 1]) <= 80, lines


def test_runs_read_used_of_allowed_after_a_retry(cli, db):
    """A retry of a job with no runs left allows one more run and says so: RUNS never reads 2/1."""
    assert cli("enqueue", "t", "--max-attempts", "1").exit_code == 0
    job = json.loads(cli("claim").stdout)
    assert cli("fail", "1", "--token", job["token"], "--error", "boom").exit_code == 0
    assert cli("retry", "1").exit_code == 0
    shown = json.loads(cli("show", "1", "--json").stdout)
    assert (shown["attempts"], shown["max_attempts"]) == (1, 2)
    job = json.loads(cli("claim").stdout)
    assert (job["attempt"], job["max_attempts"]) == (2, 2)
    r = cli("fail", "1", "--token", job["token"], "--error", "boom again", "--json")
    assert json.loads(r.stdout)["status"] == "buried"  # one more failure buries it again, as before
    assert cli("list").stdout.splitlines()[1].split()[5] == "2/2"
    assert cli("retry", "1", "--reset-attempts").exit_code == 0
    shown = json.loads(cli("show", "1", "--json").stdout)
    assert (shown["attempts"], shown["max_attempts"]) == (0, 2)


# -- show: the history at 80 columns and in a pipe, a failed run's last lines once ------------------

LONG_ERROR = "Traceback (most recent call last): requests.exceptions.ConnectionError: " + "retries exceeded " * 12


def failed_job(cli, tmp_path):
    config = tmp_path / "jobctl.toml"
    config.write_text('[types.bad]\ncommand = ["sh", "-c", "echo first detail line >&2; echo \\"$0\\" >&2; exit 3", '
                      f'{json.dumps(LONG_ERROR)}]\nmax_attempts = 2\nbackoff = "0,0"\n'
                      '[types.quiet]\ncommand = ["sh", "-c", "exit 3"]\nmax_attempts = 1\n')
    assert cli("--config", config, "enqueue", "bad").exit_code == 0
    assert cli("--config", config, "work", "--stop-when-empty", "--worker", "a-long-host-name.example:42424").exit_code == 0
    return config


def show_checks(lines: list[str], events: list[dict], columns: int) -> None:
    out = "\n".join(lines)
    assert all(len(line) <= columns for line in lines), lines
    for e in events:  # each timestamp whole, at the start of its line
        assert any(line.startswith(e["at"] + "  ") for line in lines), (e["at"], lines)
    assert out.count("first detail line") == 1, out  # the run's last lines, once
    assert "last lines of run 2 (exit code 3 after " in out and "`jobctl logs 1 --run 2`" in out


def test_show_in_a_pipe_keeps_timestamps_whole_and_last_lines_once(cli, db, tmp_path):
    failed_job(cli, tmp_path)
    events = json.loads(cli("show", "1", "--json").stdout)["events"]
    for columns in ("80", "200"):
        r = cli("show", "1", env={"COLUMNS": columns})
        assert r.exit_code == 0, r.stderr
        lines = r.stdout.splitlines()
        show_checks(lines, events, int(columns))
        assert all(line == line.rstrip() for line in lines), "no padding at the ends of lines"
    narrow = cli("show", "1", env={"COLUMNS": "80"}).stdout
    assert "\n    exit 3: Traceback (most recent call last):" in narrow  # below, indented


def test_show_on_an_80_column_terminal(db, tmp_path, cli):
    config = failed_job(cli, tmp_path)
    events = json.loads(cli("show", "1", "--json").stdout)["events"]
    lines = on_terminal(db, 80, "--config", config, "show", "1")
    show_checks([line.rstrip() for line in lines], events, 80)
    at = next(i for i, line in enumerate(lines) if line.startswith(events[1]["at"]))
    assert lines[at].rstrip() == events[1]["at"] + "  pending → running  a-long-host-name.example:42424", lines
    assert lines[at + 1].rstrip() == "    run 1 of 2", lines  # no room beside a long worker id: below


def test_list_at_80_columns_leaves_the_error_room_to_read(db):
    with Queue.open(db, create=True) as q:
        q.enqueue("send-invoice", {}, queue="billing-eu")
        job = q.claim()
        q.fail(job.id, token=job.token, error="exit 3: connection refused by smtp.example.com:25", bury=True)
    lines = on_terminal(db, 80, "list")
    assert all(len(line) <= 80 for line in lines), lines
    assert "exit 3: connection refused" in lines[1], lines  # not "exit 3: con…"


def stats_config(tmp_path):
    config = tmp_path / "jobctl.toml"
    config.write_text('[types.render]\ncommand = ["true"]\nqueue = "media"\nrate_limit = [10, "60s"]\n'
                      '[types.call-api]\ncommand = ["true"]\nconcurrency_group = "openai"\nconcurrency_limit = 2\n')
    return config


def test_stats_at_80_columns_groups_buried_by_error_beside_a_paused_type(db, tmp_path):
    config = stats_config(tmp_path)
    with Queue.open(db, create=True) as q:
        for _ in range(10):
            q.enqueue("send-invoice", {}, queue="billing-invoices-eu-west")
            job = q.claim()
            q.fail(job.id, token=job.token, error="exit 3: connection refused by smtp.example.com:25", bury=True)
        q.enqueue("render", {}, queue="media")
        q.pause("media", type="render", for_="2h")
    drawn = "\n".join(on_terminal(db, 80, "--config", config, "stats", "--watch", until=b"refreshed"))
    first_frame = ("refreshed " + drawn.split("refreshed ")[1]).splitlines()
    for lines in (on_terminal(db, 80, "--config", config, "stats"), first_frame):
        assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
        text = "\n".join(lines)
        header = next(line for line in lines if line.startswith("QUEUE"))
        assert header.split()[:5] == ["QUEUE", "READY", "OLDEST", "RUN", "BURIED"], lines
        media = next(line for line in lines if line.startswith("media"))
        assert media.split()[:4] == ["media", "(1", "type", "paused)"] and len(media.split()) >= 8, lines
        assert re.search(r"^paused: type render in media until \S+Z \(in (1h59m|2h)", text, re.M), text
        assert text.count("exit 3: connection refu") == 1, text  # one row for the ten
        assert re.search(r"^\s+10\s+billing-invoices-eu-west\s", text, re.M), text


def test_stats_of_one_queue_lists_only_its_limits(cli, db, tmp_path):
    config = stats_config(tmp_path)
    cli("--config", config, "enqueue", "render")
    cli("--config", config, "enqueue", "call-api")
    r = cli("--config", config, "stats", "-q", "media")
    assert "type render" in r.stdout and "openai" not in r.stdout, r.stdout
    limits = json.loads(cli("--config", config, "stats", "-q", "default", "--json").stdout)["limits"]
    assert (list(limits["types"]), list(limits["groups"])) == ([], ["openai"])  # call-api's group
    everything = json.loads(cli("--config", config, "stats", "--json").stdout)["limits"]
    assert (set(everything["types"]), set(everything["groups"])) == ({"render"}, {"openai"})


# -- list says when it stops at the limit; --limit 0 is all ----------------------------------------

def _enqueue_many(cli, n, **kw):
    lines = "".join(json.dumps({"type": "t", **kw}) + "\n" for _ in range(n))
    r = cli("enqueue", "--batch", "-", input=lines)
    assert r.exit_code == 0, r.output


def test_list_says_on_stderr_when_more_jobs_exist(cli):
    _enqueue_many(cli, 57)
    r = cli("list")
    assert r.exit_code == 0 and len(r.stdout.splitlines()) == 51  # header + 50
    assert r.stderr == "showing 50 of 57; --limit 0 for all\n"
    r = cli("list", "--json")
    assert len(r.stdout.splitlines()) == 50 and r.stderr == "showing 50 of 57; --limit 0 for all\n"
    r = cli("list", "--json", "-n", "10", "--status", "pending")
    assert len(r.stdout.splitlines()) == 10 and r.stderr == "showing 10 of 57; --limit 0 for all\n"


def test_list_limit_zero_is_all_and_exact_limits_say_nothing(cli):
    _enqueue_many(cli, 57)
    r = cli("list", "--json", "--limit", "0")
    assert len(r.stdout.splitlines()) == 57 and r.stderr == "", r.output
    r = cli("list", "--json", "--limit", "57")
    assert len(r.stdout.splitlines()) == 57 and r.stderr == "", r.output
    r = cli("list", "--limit", "-1")
    assert r.exit_code == 2 and r.one_error_line()


# -- show: the exit code, the signal and the stderr tail of failed runs; a priority's label --------

def test_show_prints_exit_code_and_stderr_tail_of_a_failed_run(cli, tmp_path):
    config = tmp_path / "jobctl.toml"
    config.write_text(
        '[types.bad]\n'
        'command = ["sh", "-c", "echo reading input >&2; printf \'[red]oops[/red] \\\\033[2J bad input\\\\n\' >&2; exit 65"]\n'
        'bury_exit_codes = [65]\n'
        '[types.slow]\n'
        'command = ["sh", "-c", "echo started >&2; kill -KILL $$"]\n'
        'max_attempts = 1\n'
    )
    cli("--config", config, "enqueue", "bad")
    cli("--config", config, "enqueue", "slow")
    r = cli("--config", config, "work", "--stop-when-empty")
    assert r.exit_code == 0, r.output
    shown = cli("--config", config, "show", "1", env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    out = shown.stdout
    assert "last failure  exit code 65 after " in out
    assert "last lines of run 1 (exit code 65 after " in out
    assert "\nreading input\n" in out
    assert "[red]oops[/red] \\x1b[2J bad input" in out and "\x1b" not in out  # escaped, never interpreted
    assert "(exit code 65 after " in out.split("history")[1]  # in the history too
    killed = cli("--config", config, "show", "2", env={"COLUMNS": "200"}).stdout
    assert "last failure  killed by SIGKILL after " in killed and "\nstarted\n" in killed
    # --json carries the same details, unchanged
    events = json.loads(cli("show", "1", "--json").stdout)["events"]
    assert events[-1]["details"]["exit_code"] == 65 and "reading input" in events[-1]["details"]["stderr_tail"]


def test_show_prints_the_priority_label_with_its_number(cli):
    for p in ("normal", "high", "low", "critical", "7"):
        cli("enqueue", "t", "-p", p)
    shown = [next(line for line in cli("show", i).stdout.splitlines() if "priority" in line) for i in range(1, 6)]
    assert [line.split("priority")[1].strip(" │") for line in shown] == [
        "normal (10)", "high (20)", "low (0)", "critical (30)", "7"]
