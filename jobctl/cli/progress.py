"""Progress bars for long operations (enqueue --batch, purge, retry-buried, backup).

The queue and the engine report progress through a plain `on_progress(done, total)` callback and
know nothing of terminals; this is the one place that draws it, with rich, on stderr. rich is
imported only once stderr is a terminal, so a command in a pipe or under cron never loads it and
never writes a bar.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Callable, Iterator, Optional, TextIO

OnProgress = Callable[[int, int], None]


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):  # closed or replaced streams
        return False


@contextmanager
def progress_bar(description: str, *, unit: str = "", stream: Optional[TextIO] = None) -> Iterator[Optional[OnProgress]]:
    """Yield an on_progress(done, total) callback that draws a bar on stderr, or None when stderr
    is not a terminal (pass it on as is: None tells the queue nobody watches, so it skips the
    counting it would do for a bar).

    The bar appears only for work that takes more than one step: an operation whose first report
    is already its last (a small batch, a small file) draws nothing.
    """
    stream = sys.stderr if stream is None else stream
    if not _is_terminal(stream):
        yield None
        return
    bar = None
    task = None

    def on_progress(done: int, total: int) -> None:
        nonlocal bar, task
        if bar is None:
            if total <= 0 or done >= total:
                return
            bar = _progress(unit, stream)
            task = bar.add_task(description, total=total, completed=done)
            bar.start()
        else:
            bar.update(task, completed=done, total=total)

    try:
        yield on_progress
    finally:
        if bar is not None:
            bar.stop()


def _progress(unit: str, stream):
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

    columns = [TextColumn("{task.description}", markup=False), BarColumn(), TaskProgressColumn()]
    if unit:
        columns += [MofNCompleteColumn(), TextColumn(unit, markup=False)]
    columns.append(TimeRemainingColumn())
    console = Console(file=stream, markup=False, highlight=False, emoji=False)
    return Progress(*columns, console=console)
