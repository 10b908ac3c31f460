"""`jobctl top`: a full-screen live view of the queue that can act (Textual).

Textual is imported here and below only, and only when `jobctl top` runs: every other command
starts without it (tests/test_startup.py). The parts:

- filters.py  the `/` filter: its words parsed into the command line's own selection
- data.py     what the view shows, read through the queue core as stats/list/show/logs/workers read it
- actions.py  what the keys do: the command line's own Queue calls, refusals as one line
- widgets.py  the panes, drawn from plain values
- app.py      the Textual app and the data thread that owns the connection
"""

from __future__ import annotations


def run(state, interval: float) -> None:
    """Run the view on this terminal until `q` (the command line's State gives the database)."""
    from jobctl.top.app import TopApp
    from jobctl.top.data import DataSource

    settings = state.settings
    configured = {tc.queue for tc in settings.types.values() if tc.queue} | {"default"}
    source = DataSource(state.open_queue, settings, also_known=configured)
    TopApp(source, interval=interval, patterns=settings.secret_keys).run()
