"""`jobctl top`: keys pressed with Textual's pilot (in-process) and their effect checked in the
database on both engines; text snapshots at 80x24 and 200x50 on a fixed clock; the filter words;
the database going away; and once in a real terminal (tmux)."""

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import Clock
from jobctl.config import Settings
from jobctl.errors import InvalidInput
from jobctl.queue import Queue
from jobctl.top.filters import parse
from test_stats import T0, build_known

SNAPSHOTS = Path(__file__).parent / "snapshots"


def make_app(db, clock, interval=0.1):
    from jobctl.top.app import TopApp
    from jobctl.top.data import DataSource

    settings = Settings()
    source = DataSource(lambda: Queue.open(db, settings, clock=clock), settings)
    return TopApp(source, interval=interval, patterns=settings.secret_keys)


async def settle(app, pilot, timeout=10.0):
    """Until the data thread has answered everything asked of it (and a first look came back)."""
    deadline = time.monotonic() + timeout
    quiet = 0
    while quiet < 2:  # twice in a row: a message handled meanwhile (a row highlighted) may ask again
        await pilot.pause()
        quiet = quiet + 1 if not app.pending and app.snapshot is not None else 0
        if quiet == 0:
            assert time.monotonic() < deadline, "the data thread did not answer"
            await pilot.pause(0.02)


async def press(app, pilot, *keys):
    await pilot.press(*keys)
    await settle(app, pilot)


@contextlib.asynccontextmanager
async def running(app, size=(80, 24)):
    """(app, pilot): the app running headless at `size`, its first look settled."""
    async with app.run_test(size=size) as pilot:
        await settle(app, pilot)
        yield app, pilot


def screen_text(app) -> str:
    import io

    from rich.console import Console

    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=False, record=True,
                      legacy_windows=False, safe_box=False, color_system=None)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return "\n".join(line.rstrip() for line in console.export_text().splitlines())


def add_workers(db, clock):
    """Two `jobctl work` processes in the registry, written as a worker writes them: web-1:100 alive
    (running job 10) and web-2:200 lost (last seen 100 s before the clock, renewing every 10 s)."""
    with Queue.open(db, Settings(), clock=clock) as q:
        now = clock.t
        for worker, seen in (("web-2:200", now - 100), ("web-1:100", now)):
            clock.t = seen
            q.engine.register_worker(f"i-{worker}", {
                "worker": worker, "host": worker.split(":")[0], "pid": int(worker.split(":")[1]),
                "version": "0.1.0", "queues": ["email"] if worker == "web-1:100" else None, "types": ["t9", "t10"],
                "concurrency": 2, "renew_ms": 10_000, "state": "running", "done": 7, "failed": 1})
        clock.t = now


def add_held(db, clock):
    """Type t1 paused in billing: job 1, ready, is held (not waiting for a worker)."""
    with Queue.open(db, Settings(), clock=clock) as q:
        q.pause("billing", type="t1")


@pytest.fixture
def known(any_db, monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    q, clock = build_known(any_db)
    q.close()
    add_held(any_db, clock)
    yield any_db, clock
    monkeypatch.delenv("TZ")
    time.tzset()


def test_what_each_tab_reads(known):
    """The data layer alone (no Textual): each tab's rows on a known database, and the filter."""
    from jobctl.top.data import DataSource

    db, clock = known
    settings = Settings()
    source = DataSource(lambda: Queue.open(db, settings, clock=clock), settings)
    try:
        snap = source.snapshot()
        assert [j.id for j in snap.tabs["running"]] == [9, 10]
        assert [(g["latest_id"], g["count"], g["error"]) for g in snap.tabs["buried"]] == [
            (8, 1, "bad [red]input[/red]\x1b[2J")]
        assert sorted(j["id"] for j in snap.tabs["aging"]) == [2, 5]  # job 1 is held: not waiting for a worker
        assert [j.id for j in snap.tabs["scheduled"]] == [3] and [j.id for j in snap.tabs["held"]] == [1]
        assert snap.workers == {"alive": 0, "lost": 0} and snap.figures["queues"]["idle"]["paused"]
        assert snap.figures["queues"]["billing"]["held"] == 1

        def tabs(words):
            t = source.snapshot(parse(words)).tabs
            return {k: sorted(r["id"] if k == "aging" else r["latest_id"] if k == "buried" else r.id for r in rows)
                    for k, rows in t.items() if rows}
        # every tab read through the command line's filters, every word
        assert tabs("queue:billing") == {"aging": [2], "held": [1], "scheduled": [3]}
        assert tabs("type:t10 status:running") == {} and tabs("type:t10 status:cancel_requested") == {"running": [10]}
        assert tabs("status:pending") == {"aging": [2, 5], "held": [1], "scheduled": [3]}
        assert tabs("error:BAD") == {"buried": [8]} == tabs("bad")
        assert tabs("since:1m") == {} and tabs("before:1m") == tabs("")  # buried 9m39s before the clock
        assert tabs("payload:n=2") == {"aging": [2]} and tabs("payload:password=hunter2 status:buried") == {"buried": [8]}
        assert tabs("worker:host:99") == {"running": [9]} and tabs("min-attempts:1 queue:email") == {
            "buried": [8], "running": [9, 10]}
        assert tabs("key:nothing-has-it") == {}
        detail = source.detail(9)
        assert detail.job.worker == "host:99" and "lease expired" in detail.why and detail.log_lines == []
    finally:
        source.close()


def test_keys_act_in_the_database(known):
    db, clock = known

    async def go():
        async with running(make_app(db, clock)) as (app, pilot):
            # buried tab: the group of job 8 ("bad input"); r retries it as `jobctl retry 8` would
            await press(app, pilot, "2", "r")
            assert "retry: job 8 is now pending" in app.status_text
            # running tab: job 9 runs; r is refused with the command line's reason, no traceback
            await press(app, pilot, "1", "r")
            assert "job 9" in app.status_text and "running" in app.status_text, app.status_text
            await press(app, pilot, "c", "y")  # (asked first: see below)
            assert app.status_text == "cancel: job 9 is now cancel_requested"
            # l follows the selected job: its details open and are read again with each look
            await press(app, pilot, "l")
            assert app.following == 9 and app.detail is not None and app.detail.job.id == 9
            assert app.detail.job.status == "cancel_requested"
            await press(app, pilot, "escape")
            assert app.following is None
            # p on a job: its type in its queue; again: resumed
            await press(app, pilot, "p")
            assert app.status_text.startswith("paused type t9 in queue email")
            # the queues pane: p pauses the selected queue (billing, the first)
            app.query_one("#queues").focus()
            await press(app, pilot, "p")
            assert app.status_text.startswith("paused queue billing")
        return app

    asyncio.run(go())
    with Queue.open(db, Settings(), clock=clock) as q:
        assert q.get(8).status == "pending"
        assert q.get(9).status == "cancel_requested"
        pauses = {(p[0], p[1]) for p in q.pauses()}
        assert ("email", "t9") in pauses and ("billing", None) in pauses
        assert q.events(8)[-1].to_dict()["to"] == "pending"


def test_bulk_retries_ask_first_the_filter_narrows_them(known):
    """R retries the buried jobs the filter matches, r on a buried group the group, each after
    asking, through `jobctl retry`'s selection; r on a group of one retries its job alone."""
    db, clock = known
    with Queue.open(db, Settings(), clock=clock) as q:  # two buried groups of two jobs each
        for n, (type, error) in enumerate([("t20", "timeout talking to smtp")] * 2 + [("t21", "disk full")] * 2):
            j = q.enqueue(type, {"n": n}, queue="reports").id
            q.fail(j, token=q.claim(types=[type]).token, error=error, bury=True)

    async def go():
        async with running(make_app(db, clock)) as (app, pilot):
            await press(app, pilot, "slash")
            await pilot.press(*"error:timeout", "enter")
            await settle(app, pilot)
            assert app.filter.selection.errors == ["timeout"]
            await press(app, pilot, "R")
            assert "Retry 2 buried jobs matching error:timeout?" in screen_text(app)
            await press(app, pilot, "n")  # no: nothing changes
            assert app.status_text == "nothing retried"
            await press(app, pilot, "R", "y")
            assert app.status_text == "retried 2 jobs (buried, matching error:timeout)", app.status_text
            await press(app, pilot, "slash")  # a bad filter is refused and the old one stays
            await pilot.press("ctrl+u", *"x:1", "enter")
            await settle(app, pilot)
            assert app.status_text.startswith("filter not applied: unknown filter word 'x'")
            assert app.filter.selection.errors == ["timeout"]
            await press(app, pilot, "slash")
            await pilot.press("ctrl+u", "enter")  # no filter
            await settle(app, pilot)
            await press(app, pilot, "2")  # buried: the disk-full group (2 jobs) first, then job 8's
            assert [(g["type"], g["count"]) for g in app.rows["buried"]] == [("t21", 2), ("t8", 1)]
            await press(app, pilot, "r")
            assert "Retry 2 buried jobs of reports/t21 whose error contains 'disk full'?" in screen_text(app)
            await press(app, pilot, "y")
            assert app.status_text.startswith("retried 2 jobs"), app.status_text
            await press(app, pilot, "r")  # job 8's group of one: that job, without asking
            assert app.status_text == "retry: job 8 is now pending"

    asyncio.run(go())
    with Queue.open(db, Settings(), clock=clock) as q:
        assert {j.type: j.status for j in q.list_jobs(statuses=["pending"], queue="reports")} == {
            "t20": "pending", "t21": "pending"}
        assert q.get(8).status == "pending"


def test_bury_and_edit_keys(known, tmp_path, monkeypatch):
    """b asks why (optional) and buries as `jobctl bury ID --reason R`; e edits the payload in
    $EDITOR as `jobctl edit ID --payload` (an unchanged or invalid edit says so and changes
    nothing; a running job is refused before any editor opens)."""
    db, clock = known
    editor = tmp_path / "editor"
    ran = tmp_path / "editor-ran"
    editor.write_text(f"#!/bin/sh\ntouch {ran}\ncat \"$1\" >> {tmp_path / 'seen'}\n"
                      f"[ -f {tmp_path / 'new'} ] && cp {tmp_path / 'new'} \"$1\"\nexit 0\n")
    editor.chmod(0o755)
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv("EDITOR", str(editor))

    async def go():
        async with running(make_app(db, clock)) as (app, pilot):
            await press(app, pilot, "3")  # aging: job 2 first (job 1 is held)
            await press(app, pilot, "b")
            assert "Bury job 2 (t2 in billing, pending)?" in screen_text(app)
            await press(app, pilot, "escape")
            assert app.status_text == "nothing buried"
            await press(app, pilot, "b")
            await pilot.press(*"tenant moving", "enter")
            await settle(app, pilot)
            assert app.status_text == "bury: job 2 is now buried"
            await press(app, pilot, "4", "e")  # held: job 1; unchanged
            assert app.status_text == "edit: the payload of job 1 is unchanged; nothing changed"
            assert '"n": 1' in (tmp_path / "seen").read_text()  # the payload, as JSON, in the editor
            (tmp_path / "new").write_text('{"n": 1,')
            await press(app, pilot, "e")
            assert app.status_text.startswith("edit refused, nothing changed: invalid payload"), app.status_text
            (tmp_path / "new").write_text('{"n": 42, "note": "fixed"}\n')
            await press(app, pilot, "e")
            assert app.status_text == "edit: job 1 edited (its history says what changed)"
            monkeypatch.setenv("EDITOR", str(tmp_path / "no-such-editor"))
            await press(app, pilot, "e")
            assert app.status_text.startswith("edit: cannot run the editor"), app.status_text
            monkeypatch.setenv("EDITOR", str(editor))
            ran.unlink()
            await press(app, pilot, "1", "e")  # running: refused, no editor
            assert app.status_text.startswith("edit: ") and "running" in app.status_text, app.status_text
            assert not ran.exists()

    asyncio.run(go())
    with Queue.open(db, Settings(), clock=clock) as q:
        assert q.get(2).status == "buried" and "tenant moving" in q.events(2)[-1].to_dict()["message"]
        assert json.loads(q.get(1).payload) == {"n": 42, "note": "fixed"} and q.get(1).status == "pending"


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
def test_snapshot(tmp_path, monkeypatch, size):
    """The whole screen as text, on a fixed clock; UPDATE_SNAPSHOTS=1 writes the files anew."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    db = Path("q/jobs.db")  # relative to the test's own folder (conftest): the same text on every run
    q, clock = build_known(db)
    q.close()
    add_workers(db, clock)
    add_held(db, clock)

    async def go():
        async with running(make_app(db, clock), size=size) as (app, pilot):
            shots = {"": screen_text(app)}
            # the running job's details; the pane's scroll bar is drawn a frame after its content
            # or not (a race in the drawing, not in jobctl): the snapshot leaves it out
            app.query_one("#detail").styles.scrollbar_size_vertical = 0
            await press(app, pilot, "enter")
            shots["detail"] = screen_text(app)
            await press(app, pilot, "escape", "w")
            shots["workers"] = screen_text(app)
        return shots

    shots = asyncio.run(go())
    monkeypatch.delenv("TZ")
    time.tzset()
    for name, shot in shots.items():
        path = SNAPSHOTS / f"top_{size[0]}x{size[1]}{'_' + name if name else ''}.txt"
        if os.environ.get("UPDATE_SNAPSHOTS"):
            path.parent.mkdir(exist_ok=True)
            path.write_text(shot + "\n")
        assert shot + "\n" == path.read_text(), f"{path.name} differs; UPDATE_SNAPSHOTS=1 writes it anew:\n{shot}"


def test_below_80x24_it_asks_for_room(tmp_path):
    db = tmp_path / "q" / "jobs.db"
    Queue.open(db, create=True).close()

    async def go():
        async with running(make_app(db, Clock(T0)), size=(70, 20)) as (app, pilot):
            await press(app, pilot, "2", "r")  # nothing acts on what cannot be seen
            said = screen_text(app), app.status_text
            await pilot.resize_terminal(80, 24)  # made larger: the view, without the old complaint
            await settle(app, pilot)
            return said, app.status_text

    (shown, status), after = asyncio.run(go())
    assert "jobctl top needs at least 80×24; this terminal is 70×20." in shown
    assert status == "needs at least 80×24 to act; q quits"
    assert after == "? help · q quit"


def test_the_database_going_away_is_said_and_retried(tmp_path, monkeypatch):
    """A file that is not there (yet): the status line says so, the view keeps trying and draws once
    it is back; never a traceback."""
    from jobctl.top import app as top_app

    monkeypatch.setattr(top_app, "RETRY_AFTER", 0.2)
    db = tmp_path / "q" / "jobs.db"

    async def go():
        app = make_app(db, Clock(T0))
        async with app.run_test(size=(80, 24)) as pilot:
            deadline = time.monotonic() + 10
            while "database unavailable" not in app.status_text:
                assert time.monotonic() < deadline
                await pilot.pause(0.05)
            assert "does not exist" in app.status_text or "no database" in app.status_text, app.status_text
            Queue.open(db, create=True).close()
            while app.snapshot is None:
                assert time.monotonic() < deadline
                await pilot.pause(0.05)
            await settle(app, pilot)
            assert app.status_text == "database available again"

    asyncio.run(go())


def test_workers_pane_drains_the_selected_worker(known):
    """w: the workers as `jobctl workers` lists them, alive and lost in the header; d asks, then
    drains the selected worker as `jobctl workers drain` does (the order is in the registry); a
    script's worker id is refused with the command line's reason."""
    db, clock = known
    add_workers(db, clock)

    async def go():
        async with running(make_app(db, clock)) as (app, pilot):
            assert "workers 1 alive, 1 lost" in screen_text(app)
            await press(app, pilot, "w")
            shown = screen_text(app)
            assert "WORKER" in shown and "web-1:100" in shown and "lost" in shown and "host:99" in shown
            assert "BILLING" not in shown.upper().split("WORKER")[1]  # the queues pane is out of the way
            await press(app, pilot, "r")  # job keys do not act on a worker
            assert app.status_text.startswith("retry: acts on jobs") and "goes back" in app.status_text
            rows = [e["worker"] for e in app.worker_rows.values()]
            assert rows == ["host:100", "host:99", "web-1:100", "web-2:200"]  # as `jobctl workers` orders them
            await press(app, pilot, "d")  # host:100: a script's id, refused without asking
            assert "not a `jobctl work` process" in app.status_text, app.status_text
            await press(app, pilot, "j", "j", "d")
            assert "Drain worker web-1:100 (web-1, pid 100)?" in screen_text(app)
            await press(app, pilot, "n")
            assert app.status_text == "nothing drained"
            await press(app, pilot, "d", "y")
            assert app.status_text.startswith("draining web-1:100 (web-1, pid 100)"), app.status_text
            assert "draining" in screen_text(app)  # read again after the order
            await press(app, pilot, "escape")
            assert "QUEUE" in screen_text(app) and app.focused.id == "table-running"

    asyncio.run(go())
    with Queue.open(db, Settings(), clock=clock) as q:
        assert q.engine.worker_request("i-web-1:100") == (True, "drain")
        assert q.engine.worker_request("i-web-2:200") == (True, None)


def test_every_key_is_bound_to_its_action():
    from jobctl.top.actions import ACTIONS
    from jobctl.top.app import KEYS

    bound = {action: key for key, action, _, _ in KEYS}
    assert bound["workers"] == "w" and bound["retry_all"] == "R" and ACTIONS["drain"] is not None
    for name, key in (("retry", "r"), ("cancel", "c"), ("pause", "p"), ("bury", "b"), ("edit", "e")):
        assert ACTIONS[name] is not None and bound[f"act('{name}')"] == key


def test_top_needs_a_terminal(db):
    from conftest import run_inproc

    assert run_inproc("init", db=db).exit_code == 0
    r = run_inproc("top", db=db)
    assert r.exit_code == 2 and "needs a terminal" in r.one_error_line()
    r = run_inproc("top", "--interval", "10ms", db=db)
    assert r.exit_code == 2 and "too short" in r.one_error_line()


def test_a_lost_server_connection_is_said_and_the_view_goes_on(pg_url):
    """PostgreSQL: the server ends the view's connections (a restart, a failover); the view says
    so or reconnects at once, and the next key still acts; never a traceback."""
    from conftest import pg_named, pg_sql as sql

    app_name = f"jobctl-top-test-{os.getpid()}"  # only this process's connections (tests run side by side)
    url = pg_named(pg_url, app_name)
    q, clock = build_known(url)
    q.close()

    async def go():
        async with running(make_app(url, clock)) as (app, pilot):
            base = url.split("?")[0]
            assert sql(base, "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                             "WHERE application_name = %s) t", (app_name,))[0][0] >= 1
            await press(app, pilot, "2", "r")
            deadline = time.monotonic() + 10
            while "retry: job 8" not in app.status_text:  # (after "database unavailable", if it said so)
                assert time.monotonic() < deadline, app.status_text
                if "database unavailable" in app.status_text:
                    await pilot.pause(0.3)
                    await press(app, pilot, "r")
                else:
                    await pilot.pause(0.05)

    asyncio.run(go())
    with Queue.open(url, Settings(), clock=clock) as q:
        assert q.get(8).status == "pending"


def test_filter_words_make_the_command_lines_selection():
    """The / words give the very selection the command line's options give (one parser, one matcher)."""
    from jobctl.cli.filters import selection

    f = parse("type:send-email error:timeout since:1h queue:a queue:b payload:user.id=42 worker:w1 key:k1 "
              "before:2027-01-15T08:00:00Z min-attempts:2 status:buried")
    assert f.selection == selection(type=["send-email"], error=["timeout"], since="1h", queue=["a", "b"],
                                    payload=["user.id=42"], worker=["w1"], key=["k1"], before="2027-01-15T08:00:00Z",
                                    min_attempts="2", status=["buried"])
    assert f.only("queues") is None and f.only("types") == "send-email"
    assert parse("timeout").selection == selection(error=["timeout"])  # a bare word is an error text
    assert not parse("  ")
    assert f.within(["running"]) is None and f.within(["buried"]).statuses == ["buried"]
    assert parse("status:pending").within(["held", "running"]).statuses == ["held"]
    for bad, says in [("colour:red", "unknown filter word"), ("status:lost", "invalid status"),
                      ("since:soon", "invalid since: 'soon'"), ("type:", "give a value"), ("queue:bad/name", "queue"),
                      ("payload:x", "use PATH=VALUE"), ("min-attempts:x", "give a number"), ("since:1h since:2h", "once")]:
        with pytest.raises(InvalidInput, match=says):
            parse(bad)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_in_a_real_terminal(tmp_path):
    """Once through the installed command in a real pseudo-terminal (tmux): it draws, r acts, q quits."""
    db = tmp_path / "q" / "jobs.db"
    with Queue.open(db, create=True) as q:
        j = q.enqueue("mail", {}, queue="email", max_attempts=1).id
        q.fail(j, token=q.claim().token, error="smtp refused")
    name = "top"
    # A tmux server of the test's own (-L), started here with this environment and no user config:
    # a shared server would run the command in its own environment.
    tmux = ["tmux", "-L", f"jobctl-top-test-{os.getpid()}", "-f", os.devnull]
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "TMUX")}
    done = tmp_path / "exit"
    cmd = f"{sys.executable} -m jobctl --db {db} top; echo $? > {done}"
    subprocess.run([*tmux, "new-session", "-d", "-s", name, "-x", "80", "-y", "24", cmd], check=True, env=env)
    try:
        def screen() -> str:
            return subprocess.run([*tmux, "capture-pane", "-p", "-t", name], capture_output=True, text=True).stdout

        def until(text: str) -> str:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                shown = screen()
                if text in shown:
                    return shown
                time.sleep(0.1)
            raise AssertionError(f"{text!r} not drawn:\n{screen()}")

        shown = until("OLDEST READY")
        assert "jobctl top" in shown and "email" in shown
        subprocess.run([*tmux, "send-keys", "-t", name, "2"], check=True)
        until("smtp refused")
        subprocess.run([*tmux, "send-keys", "-t", name, "r"], check=True)
        until(f"retry: job {j} is now pending")
        subprocess.run([*tmux, "send-keys", "-t", name, "q"], check=True)
        deadline = time.monotonic() + 10
        while not done.exists():
            assert time.monotonic() < deadline, screen()
            time.sleep(0.1)
        assert done.read_text().strip() == "0"
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
    with Queue.open(db) as q:
        assert q.get(j).status == "pending"


def test_a_running_jobs_progress_is_masked_as_list_masks_it(db):
    """A progress message is job data: its secrets are masked in the running tab, as `jobctl list`
    and `show` mask them."""
    from jobctl.top.widgets import tab_row

    with Queue.open(db, create=True) as q:
        q.enqueue("t", {})
        job = q.claim(worker="w-1")
        q.progress(job.id, token=job.token, message="login password=hunter2 ok", percent=5)
        job = q.get(job.id)
    _, cells = tab_row("running", job, job.claimed_at, False, Settings().secret_keys)
    shown = cells[-1].plain
    assert "hunter2" not in shown and "5% login password=***" in shown, shown


def test_at_80_columns_the_keys_act_on_the_job_shown(known):
    """80x24: the details cover the jobs; the keys act on the job the details show (not on a row
    hidden behind them), the arrows scroll the details, and c and b name the job before acting."""
    db, clock = known

    async def go():
        async with running(make_app(db, clock)) as (app, pilot):
            await press(app, pilot, "3", "enter")  # aging: jobs 2 and 5; job 2's details
            assert app.detail.job.id == 2 and app.focused.id == "detail"
            await press(app, pilot, "j", "b")  # j scrolls the details; b is about job 2
            assert "Bury job 2 (t2 in billing, pending)?" in screen_text(app), screen_text(app)
            await press(app, pilot, "escape")
            assert app.status_text == "nothing buried" and app.detail.job.id == 2
            await press(app, pilot, "c")
            assert "Cancel job 2 (t2 in billing, pending)?" in screen_text(app), screen_text(app)
            await press(app, pilot, "y")
            assert app.status_text == "cancel: job 2 is now cancelled"
            await press(app, pilot, "escape")
            assert app.focused.id == "table-aging"

    asyncio.run(go())
    with Queue.open(db, Settings(), clock=clock) as q:
        assert q.get(2).status == "cancelled" and q.get(5).status == "pending"


def test_cancel_asks_first_and_bury_refuses_a_running_job_without_asking(known):
    db, clock = known

    async def go():
        async with running(make_app(db, clock)) as (app, pilot):
            await press(app, pilot, "b")  # running job 9: refused at once, no question
            assert len(app.screen_stack) == 1
            assert app.status_text == "job 9 is running; cannot bury it (it is running; `jobctl cancel 9` stops it)"
            await press(app, pilot, "c")
            assert "Cancel job 9 (t9 in email, running on host:99)?" in screen_text(app), screen_text(app)
            await press(app, pilot, "n")
            assert app.status_text == "nothing cancelled"
            with Queue.open(db, Settings(), clock=clock) as q:
                assert q.get(9).status == "running"
            await press(app, pilot, "c", "Y")  # (Y as y, as the command line's [y/N] takes it)
            assert app.status_text == "cancel: job 9 is now cancel_requested"

    asyncio.run(go())


def test_nothing_is_cut_at_80_columns(known):
    """An outcome longer than a line is shown whole; the footer keeps `? help q quit` over the
    details and the workers; the filter in force is shown whole in the header."""
    db, clock = known

    async def go():
        async with running(make_app(db, clock)) as (app, pilot):
            await press(app, pilot, "e")  # running job 9: refused with a reason longer than a line
            assert len(app.status_text) > 80
            assert app.status_text in " ".join(screen_text(app).split()), screen_text(app)
            await press(app, pilot, "enter")
            assert screen_text(app).splitlines()[-1].rstrip().endswith("? help q quit"), screen_text(app)
            await press(app, pilot, "escape", "w")
            assert screen_text(app).splitlines()[-1].rstrip().endswith("? help q quit"), screen_text(app)
            await press(app, pilot, "escape", "slash")
            await pilot.press(*"type:t10 status:cancel_requested", "enter")
            await settle(app, pilot)
            await press(app, pilot, "c")  # (the status line says something else now)
            assert "filter: type:t10 status:cancel_requested" in screen_text(app).splitlines()[2], screen_text(app)

    asyncio.run(go())


def test_ctrl_c_quits(known):
    db, clock = known

    async def go():
        async with running(make_app(db, clock)) as (app, pilot):
            await pilot.press("ctrl+c")
            await pilot.pause()
        return app.return_code

    assert asyncio.run(go()) == 0


def test_a_database_removed_under_the_view_is_said(tmp_path, monkeypatch):
    """The file is removed (or moved away) while the view runs: the view says so instead of
    showing the removed file's last state as live, and reads the file made at that path after."""
    from jobctl.top import app as top_app

    monkeypatch.setattr(top_app, "RETRY_AFTER", 0.2)
    monkeypatch.setattr(top_app, "IDLE_LOOK", 0.2)
    db = tmp_path / "q" / "jobs.db"
    with Queue.open(db, create=True) as q:
        q.enqueue("mail", {})

    async def go():
        async with running(make_app(db, Clock(T0))) as (app, pilot):
            assert app.snapshot.figures["totals"]["ready"] == 1
            for name in os.listdir(db.parent):
                os.remove(db.parent / name)
            deadline = time.monotonic() + 10
            while "database unavailable" not in app.status_text:
                assert time.monotonic() < deadline, app.status_text
                await pilot.pause(0.05)
            assert "was removed" in app.status_text, app.status_text
            Queue.open(db, create=True).close()
            while app.status_text != "database available again":
                assert time.monotonic() < deadline, app.status_text
                await pilot.pause(0.05)
            await settle(app, pilot)
            assert app.snapshot.figures["totals"]["ready"] == 0

    asyncio.run(go())


def test_a_long_queue_name_leaves_the_paused_column_on_screen(known):
    """Queue names may be 64 characters: at 80 columns a long one is shortened (…) so that every
    column, PAUSED the last, stays on screen; p still acts on the whole name."""
    db, clock = known
    name = "notifications-" + "x" * 40 + "-eu-west-1"
    with Queue.open(db, Settings(), clock=clock) as q:
        q.enqueue("t1", {}, queue=name)
        q.pause(name)

    async def go():
        async with running(make_app(db, clock)) as (app, pilot):
            lines = screen_text(app).splitlines()
            assert lines[3].split() == ["QUEUE", "READY", "HELD", "SCHED", "RUNNING", "BURIED", "OLDEST", "READY",
                                        "PAUSED"], lines[3]
            row = next((line for line in lines if line.startswith(" notificat")), "\n".join(lines))
            assert row.rstrip().endswith("paused") and "…" in row, row
            app.query_one("#queues").focus()
            await press(app, pilot, "j", "j", "j", "j", "p")  # billing, default, email, idle, the long one
            assert app.status_text == f"resumed queue {name}", app.status_text

    asyncio.run(go())


def test_long_names_leave_each_tabs_last_columns_on_screen(known):
    """At 80 columns a queue, type or worker name of up to 64 characters is shortened (…) in the
    jobs tabs, so that the columns after it (how long, the error) stay on screen."""
    db, clock = known
    long_type = "send-" + "y" * 50
    with Queue.open(db, Settings(), clock=clock) as q:
        q.enqueue(long_type, {}, queue="z" * 60)

    async def go():
        async with running(make_app(db, clock)) as (app, pilot):
            await press(app, pilot, "3")  # aging: the new job waits 0s, longest-waiting last
            lines = screen_text(app).splitlines()
            row = next((line for line in lines if "send-yyy" in line), "\n".join(lines))
            assert row.split()[-2:] == ["10", "0ms"] and "…" in row, row

    asyncio.run(go())


@contextlib.contextmanager
def in_tmux(tmp_path, name: str, top: str):
    """A private tmux server with one 80x24 session that runs `top` (a shell command line, in
    which {db} names a new, empty queue) and then writes its exit code to tmp_path/exit; yields
    the tmux command to ask it things and that file. The server is killed at the end."""
    db = tmp_path / "q" / "jobs.db"
    Queue.open(db, create=True).close()
    tmux = ["tmux", "-L", f"jobctl-top-{name}-{os.getpid()}", "-f", os.devnull]
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "TMUX")}
    done = tmp_path / "exit"
    cmd = f"{top.format(db=db)}; echo $? > {done}; sleep 60"
    subprocess.run([*tmux, "new-session", "-d", "-s", "s", "-x", "80", "-y", "24", cmd], check=True, env=env)
    try:
        yield tmux, done
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_a_terminating_signal_gives_the_terminal_back(tmp_path):
    """SIGTERM (`kill`, `timeout`) or SIGHUP ends the view as q does: the terminal is given back
    (the main screen, no mouse reporting) and the exit is 0, as a worker stopped by a signal."""
    import signal

    pid = tmp_path / "pid"
    with in_tmux(tmp_path, "sig", f"sh -c 'echo $$ > {pid}; exec {sys.executable} -m jobctl --db {{db}} top'") as (
            tmux, done):
        def flags() -> str:
            return subprocess.run([*tmux, "display", "-p", "-t", "s", "#{alternate_on} #{mouse_any_flag}"],
                                  capture_output=True, text=True).stdout.strip()
        deadline = time.monotonic() + 20
        while "OLDEST READY" not in subprocess.run([*tmux, "capture-pane", "-p", "-t", "s"], capture_output=True,
                                                   text=True).stdout:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert flags() == "1 1"  # (the view's own screen, with the mouse)
        os.kill(int(pid.read_text()), signal.SIGTERM)
        while not done.exists():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert done.read_text().strip() == "0" and flags() == "0 0"


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_stderr_redirected_is_refused_not_drawn_into(tmp_path):
    """The view draws on stderr (Textual does): `jobctl top 2>>log` on a terminal is refused with
    exit 2 and its line in the log, instead of a blank screen and the view written into the log."""
    log = tmp_path / "log"
    with in_tmux(tmp_path, "err", f"{sys.executable} -m jobctl --db {{db}} top 2>>{log}") as (_, done):
        deadline = time.monotonic() + 15
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert done.exists() and done.read_text().strip() == "2"
        assert "needs a terminal" in log.read_text() and len(log.read_text().splitlines()) == 1


def test_a_resize_with_the_details_open_moves_the_focus_where_the_arrows_belong(known):
    """Wide, the details sit beside the jobs and the arrows move in the jobs; made narrow, the
    details cover the jobs and the arrows scroll them; made wide again, back to the jobs."""
    db, clock = known

    async def go():
        async with running(make_app(db, clock), size=(200, 50)) as (app, pilot):
            await press(app, pilot, "enter")
            assert app.focused.id == "table-running"
            await pilot.resize_terminal(80, 24)
            await settle(app, pilot)
            assert app.focused.id == "detail"
            await pilot.resize_terminal(200, 50)
            await settle(app, pilot)
            assert app.focused.id == "table-running"

    asyncio.run(go())


def test_a_secret_typed_in_the_filter_is_masked_where_the_view_shows_it(known):
    """`/payload:password=hunter2` finds job 8; the header, the status line and the questions show
    the filter with the secret masked (a screen shared in an incident call), as job data is; the
    filter's own input keeps what was typed, to be edited."""
    db, clock = known

    async def go():
        async with running(make_app(db, clock)) as (app, pilot):
            await press(app, pilot, "slash")
            await pilot.press(*"payload:password=hunter2", "enter")
            await settle(app, pilot)
            assert app.filter.selection.payload and [g["latest_id"] for g in app.rows["buried"]] == [8]
            shown = screen_text(app)
            assert "hunter2" not in shown and "filter: payload:password=***" in shown, shown
            await press(app, pilot, "R")
            shown = screen_text(app)
            assert "hunter2" not in shown and "matching payload:password=***?" in shown, shown
            await press(app, pilot, "y")
            assert "hunter2" not in app.status_text and "payload:password=***" in app.status_text, app.status_text
            await press(app, pilot, "slash")
            assert app.screen.query_one("#filter-input").value == "payload:password=hunter2"
            await press(app, pilot, "escape")

    asyncio.run(go())


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
def test_the_held_tab_says_why_each_job_is_held(known, size):
    """The held tab's WHY: the words of `jobctl list --held` (Queue.held_reasons), read in the same
    look as the list, whole at 80 and at 200 columns."""
    db, clock = known
    with Queue.open(db, Settings(), clock=clock) as q:
        listed = q.held_reasons([q.get(1)], q.now())
    assert listed == {1: "type t1 paused"}

    async def go():
        async with running(make_app(db, clock), size=size) as (app, pilot):
            assert app.snapshot.held_why == listed
            await press(app, pilot, "4")
            lines = screen_text(app).splitlines()
            assert any("WHY" in line.split() for line in lines), "\n".join(lines)
            row = next((line for line in lines if line.split()[:1] == ["1"]), "\n".join(lines))
            assert row.split()[:6] == ["1", "type", "t1", "paused", "billing", "t1"], row  # (ID, WHY whole, ...)
            assert row.split()[6:8] == (["10", "10m"] if size[0] == 200 else ["10m"]), row

    asyncio.run(go())


def test_bury_refuses_a_buried_job_without_asking(known):
    """b on a job that is buried already: refused at once with the reason (no question, no
    "now buried"); the job's history gains nothing."""
    db, clock = known
    with Queue.open(db, Settings(), clock=clock) as q:
        before = len(q.events(8))

    async def go():
        async with running(make_app(db, clock)) as (app, pilot):
            await press(app, pilot, "2", "b")  # buried: the group of job 8
            assert len(app.screen_stack) == 1, screen_text(app)
            assert app.status_text == "job 8 is buried; cannot bury it (it is buried already; r retries it)"

    asyncio.run(go())
    with Queue.open(db, Settings(), clock=clock) as q:
        assert q.get(8).status == "buried" and len(q.events(8)) == before


def test_the_questions_say_scheduled_for_a_scheduled_job(known):
    """c and b on a scheduled job (pending, to run later) name its state as the tabs do."""
    db, clock = known

    async def go():
        async with running(make_app(db, clock)) as (app, pilot):
            await press(app, pilot, "5", "c")  # scheduled: job 3
            assert "Cancel job 3 (t3 in billing, scheduled)?" in screen_text(app), screen_text(app)
            await press(app, pilot, "n", "b")
            assert "Bury job 3 (t3 in billing, scheduled)?" in screen_text(app), screen_text(app)
            await press(app, pilot, "escape")

    asyncio.run(go())


def test_the_queues_pane_counts_a_job_being_cancelled_as_running_as_its_tab_does():
    # (its handler still runs until the worker stops it: a queue showing RUNNING 0 then hides it)
    from jobctl.top.widgets import queue_cells

    q = {"ready": 2, "scheduled": 0, "running": 0, "cancel_requested": 1, "buried": 1, "oldest_ready_age": None}
    cells = queue_cells("default", q, [("name", "QUEUE"), ("running", "RUNNING"), ("buried", "BURIED")])
    assert [c.plain for c in cells] == ["default", "1", "1"]
