"""The stats screen on real terminals (a pty of 80x24 and of 200x50): one line per row, nothing
folded or cut that matters, never taller than the terminal; and `recover --dry-run` at 80 columns."""

import json
import re
import time

import pytest

from conftest import JOBCTL, Clock, run_on_pty
from jobctl import stats_view
from jobctl.queue import Queue

QUEUES = ["billing-invoices-eu", "email", "media.transcode:high", "reports", "default"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
REDRAW = re.compile(r"\r(?:\x1b\[2K\x1b\[1A)*\x1b\[2K")  # rich's Live: back to the frame's first line


def busy_database(db, n_ready=12_000, t0=None):
    """Five queues (two long names), 12,000 ready jobs, 40 runs over the last hour (some buried),
    three stuck jobs and a paused queue. The clock is real (minus the history), for the CLI."""
    t0 = time.time() - 3000 if t0 is None else t0
    clock = Clock(t0)
    q = Queue.open(db, create=True, clock=clock)
    lines = [json.dumps({"type": ["send-invoice", "resize-image", "nightly-report"][i % 3],
                         "queue": QUEUES[i % len(QUEUES)], "payload": {"n": i}}) for i in range(n_ready)]
    q.insert(q.prepare_batch(lines))
    for k in range(40):
        clock.t = t0 + k * 60
        job = q.claim(worker=f"web{k % 3}.example.com:{1000 + k}", lease="10m")
        clock.t += 3 + k % 5
        if k % 3 == 0:
            q.fail(job.id, token=job.token, bury=True,
                   error="exit 1: connection refused by smtp.example.com:25 while sending [invoice] 4242")
        else:
            q.complete(job.id, token=job.token)
    clock.t = time.time() - 1200
    for k in range(3):
        q.claim(worker=f"batch{k}.example.com:77{k}", lease="1m")
    q.pause("reports")
    q.close()


def watch_on_pty(db, columns, rows, frames=2, timeout=60):
    """`stats --watch` on a pseudo-terminal of columns x rows; returns (exit code, the frames drawn,
    each as its lines without colour codes)."""
    code, drawn, _ = run_on_pty([*JOBCTL, "--db", str(db), "stats", "--watch", "--interval", "300ms"],
                                columns=columns, rows=rows, until=b"refreshed", times=frames + 1, timeout=timeout)
    parts = REDRAW.split(drawn)
    # The frames drawn whole (the last one may have been cut by Ctrl-C).
    found = [ANSI.sub("", p).rstrip("\r\n").split("\r\n") for p in parts[1:-1]]
    return code, found, drawn


def check_frame(frame, columns, rows):
    assert len(frame) <= rows, "\n".join(frame)
    from rich.cells import cell_len

    for line in frame:
        assert cell_len(line) <= columns, line
    assert frame[0].startswith("refreshed ") and "Ctrl-C to quit" in frame[0]


@pytest.mark.slow
@pytest.mark.shared  # outcomes only (what the frames show, the exit code): runs beside other tests
def test_watch_fits_an_80x24_terminal_and_shows_what_matters(db):
    busy_database(db)
    code, frames, drawn = watch_on_pty(db, 80, 24)
    assert code == 0, drawn[-3000:]
    assert frames, drawn[-3000:]
    frame = frames[-1]
    check_frame(frame, 80, 24)
    text = "\n".join(frame)
    # every queue name whole, on one line, with its exact counts
    for name in QUEUES:
        assert any(line.startswith(name + " ") or line.startswith(name + "  ") for line in frame), (name, text)
    assert "reports (paused)" in text
    assert re.search(r"^\(all\)\s+11,957\s", text, re.M), text  # 12,000 - 40 run - 3 stuck
    assert "…" not in "".join(line for line in frame[1:8])  # no count cut to "12…"
    assert re.search(r"^stuck 3 · buried 14 · held [0-9,]+ · workers 0 alive · oldest ready ", text, re.M), text
    for header in ("STUCK", "BURIED", "AGING"):
        assert re.search(rf"^\s*{header}\s", text, re.M), (header, text)
    assert "runs/min (1m, 15m, 60m): completed" in text and "run time (40 runs, last hour)" in text


@pytest.mark.slow
@pytest.mark.shared  # outcomes only (what the frames show, the exit code): runs beside other tests
def test_watch_at_200x50_shows_every_section_in_full(db):
    busy_database(db)
    code, frames, drawn = watch_on_pty(db, 200, 50)
    assert code == 0 and frames, drawn[-3000:]
    frame = frames[-1]
    check_frame(frame, 200, 50)
    text = "\n".join(frame)
    assert re.search(r"^QUEUE\s+READY\s+OLDEST\s+RUN\s+BURIED\s+HELD\s+SCHED\s+BLOCKED\s+STOPPING\s+DONE\s+CANCELLED$",
                     text, re.M), text
    # one row per queue, type and error, with how many: all 14 buried jobs, in fewer rows
    counts = re.findall(r"^\s*(\d+)\s.*connection refused by smtp\.example\.com:25 while sending \[invoice\] 4242$",
                        text, re.M)
    assert sum(map(int, counts)) == 14 and len(counts) < 14, text
    assert re.search(r"^AGING\s", text, re.M) and len(re.findall(r"^\s+\d+\s+\S+\s+\S+\s+10\s+\d", text, re.M)) == 10
    assert "LAST HOUR" in text and "run time (40 runs, last hour)" in text
    assert "" in frame  # room for blank lines between the blocks


def test_screen_lines_never_exceed_the_terminal(db):
    busy_database(db, n_ready=300, t0=1_900_000_000.0 - 3000)
    with Queue.open(db, clock=lambda: 1_900_000_000.0) as q:
        for n in range(30):
            q.enqueue("t", {}, queue=f"tenant-{n}-with-a-rather-long-queue-name")
        figures = q.stats()[0]
        now = q.now()
    from rich.cells import cell_len

    for width, height in ((80, 24), (200, 50), (40, 10), (20, 5), (80, 3), (1, 1)):
        title = stats_view.watch_title(now, 2, "/tmp/x.db")
        lines = stats_view.screen_lines(figures, now, width=width, height=height, title=title)
        assert len(lines) <= height, (width, height)
        assert all(cell_len(line.plain) <= width for line in lines), (width, height)
        assert lines[0].plain.startswith("refreshed"[:width - 1])
    lines = [line.plain for line in stats_view.screen_lines(figures, now, width=80, height=24)]
    assert any(line.startswith("… ") and "more queues" in line for line in lines)
    # the queues that need a look get the room: every queue with buried jobs is listed
    for name in QUEUES:
        assert any(line.startswith(name) for line in lines), name
    assert any(line.startswith("runs/min") for line in lines)
    # without a height (stats on a terminal), everything
    every = [line.plain for line in stats_view.screen_lines(figures, now, width=80)]
    assert sum(1 for line in every if "tenant-" in line) == 30


def test_stats_on_a_narrow_terminal_keeps_names_and_counts_whole(db):
    busy_database(db)
    code, drawn, _ = run_on_pty([*JOBCTL, "--db", db, "stats"], columns=80)
    assert code == 0
    lines = ANSI.sub("", drawn).replace("\r\n", "\n").splitlines()
    from rich.cells import cell_len

    assert all(cell_len(line) <= 80 for line in lines), drawn
    for name in QUEUES:
        assert any(line.startswith(name) for line in lines), name
    assert any(re.match(r"^\(all\)\s+11,957\s", line) for line in lines), drawn


def test_at_80_columns_ready_and_held_stay_exact_and_held_is_never_left_out(db):
    """ready - held is what waits for a worker: at 80 columns both are exact (never 1.0M and 1.0M
    for 1,000,125 ready of which 3 wait), and HELD stays beside READY even when long names need the
    room (the name is cut first), per queue and per type."""
    queue, type_ = "reporting-nightly-eu-west-1-batch", "nightly-report-for-every-tenant-v2"
    with Queue.open(db, create=True) as q:
        for _ in range(4):
            q.enqueue(type_, {}, queue=queue)
        q.enqueue("send", {}, queue="billing")
        q.claim(types=["send"], worker="w1", lease="1m")
        q.fail(1 + 4, token=None, error="boom")  # a failed run: the per-type columns fill up
        q.pause(queue)
        figures, now = q.stats()
    for entry in (figures["queues"][queue], figures["totals"], figures["types"][type_]):
        entry["ready"], entry["held"] = 1_000_125, 1_000_122
    for by in ("queue", "type"):
        lines = [line.plain for line in stats_view.screen_lines(figures, now, width=80, by=by)]
        header = lines[0].split()
        assert header[:3] in (["QUEUE", "READY", "OLDEST"], ["TYPE", "READY", "HELD"]) and "HELD" in header, lines
        name = queue if by == "queue" else type_
        row = next(line for line in lines if line.startswith(name[:8]))
        assert "1,000,125" in row.split() and "1,000,122" in row.split(), lines
        assert all(len(line) <= 80 for line in lines), lines


def test_at_80_columns_a_job_being_cancelled_stays_in_sight(db):
    """RUN does not count a running job whose cancellation was requested: at 80 columns STOPPING
    stays while some job is stopping (minor counts leave instead), so a queue whose only job is
    being cancelled never reads as one where nothing runs."""
    busy_database(db)
    with Queue.open(db) as q:
        job = q.claim(worker="w9", lease="10m")
        q.cancel(job.id)
        figures, now = q.stats()
    assert figures["queues"][job.queue]["running"] == 0, figures["queues"][job.queue]
    for width in (80, 200):
        lines = [line.plain for line in stats_view.screen_lines(figures, now, width=width)]
        header = lines[0].split()
        assert "STOPPING" in header and "HELD" in header, (width, lines)
        at = header.index("STOPPING")
        row = next(line for line in lines if line.startswith(job.queue + " "))
        assert row.split()[at] == "1" and row.split()[header.index("RUN")] == "0", (width, lines)
        assert all(len(line) <= width for line in lines), lines
        for name in QUEUES:  # and every queue name stays whole
            assert any(line.startswith(name + " ") for line in lines), (name, lines)


def test_at_80_columns_the_summary_line_cuts_a_queue_name_not_the_lost_workers(db):
    """The one line of what needs a person: a long queue name (the oldest ready job's, whole in the
    table above) is what gets cut at the edge, never the held count or the lost workers."""
    queue = "reporting-nightly-eu-west-1-batch-of-the-month"
    with Queue.open(db, create=True) as q:
        q.enqueue("t", {}, queue=queue)
        q.enqueue("t", {}, queue="idle")
        q.pause("idle")
        figures, now = q.stats()
    figures["workers"] = {"alive": 2, "lost": 1}
    lines = [line.plain for line in stats_view.screen_lines(figures, now, width=80)]
    summary = next(line for line in lines if line.startswith("stuck 0 · buried 0 · "))
    assert len(summary) <= 80 and "held 1" in summary and "workers 2 alive, 1 lost" in summary, lines
    assert "oldest ready" in summary, lines


def test_recover_dry_run_fits_80_columns(db):
    with Queue.open(db, create=True, clock=lambda: time.time() - 600) as q:
        for n, queue in enumerate(QUEUES):
            q.enqueue("resize-image-thumbnails", {}, queue=queue)
            q.claim(worker=f"worker-{n}.eu-west-1.compute.internal:12345", lease="1m")
    code, drawn, _ = run_on_pty([*JOBCTL, "--db", db, "recover", "--dry-run"], columns=80)
    assert code == 0
    lines = [line for line in ANSI.sub("", drawn).replace("\r\n", "\n").splitlines() if line.strip()]
    assert len(lines) == 1 + len(QUEUES), drawn  # a header and one line per job: nothing folded
    from rich.cells import cell_len

    assert all(cell_len(line) <= 80 for line in lines), drawn
    assert all(line.endswith("would be requeued") for line in lines[1:]), drawn


def test_a_long_pause_note_is_cut_before_the_queue_name():
    from rich.text import Text

    from jobctl.output import Cell

    name = "media-transcoding-high-priority"
    cell = Cell(Text(name), Text(" (paused types: render-4k until 2026-12-01T12:49:31.197Z)"))
    shown = cell.render(52).plain
    assert shown.startswith(name + " (paused") and shown.endswith("…") and len(shown) == 52
    assert cell.render(20).plain.endswith("…") and len(cell.render(20).plain) == 20  # too narrow: both cut


def test_each_section_alone_is_what_the_screen_shows(db):
    """The pieces an interactive view will reuse: each section from the figures and a width alone
    gives the lines the stats screen shows for it, none wider than the width."""
    from rich.cells import cell_len

    busy_database(db, n_ready=300)
    with Queue.open(db) as q:
        figures, now = q.stats()
    for width in (80, 200):
        screen = [line.plain for line in stats_view.screen_lines(figures, now, width=width)]
        sections = [stats_view.stuck(figures), stats_view.buried(figures, now), stats_view.aging(figures)]
        assert all(s.rows for s in sections)
        for lines in [stats_view.queues(figures, width), stats_view.throughput(figures, width),
                      *(stats_view.section_view(s, width) for s in sections)]:
            plain = [line.plain for line in lines]
            assert all(cell_len(p) <= width for p in plain)
            start = screen.index(plain[0])
            assert screen[start:start + len(plain)] == plain
