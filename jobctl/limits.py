"""Admission control: which ready jobs a claim may take under the configured limits (pure).

Three kinds of limit, all counted by the claim inside its own transaction, so they hold across
every worker and every `claim` on the database:
- a type's rate: at most N runs of the type may START in any window of W (a retry is a new start);
- a concurrency limit: at most L cost units held (running or cancel_requested) at once by the jobs
  of a concurrency group, or of one type when the job has no group;
- a job's cost units: what one held job counts against that limit (default 1).

A job's group and cost are the claimer's config's for its type (type_groups, type_costs) unless
the job set them itself (enqueue --group / --cost, the batch keys): stored, those win. A job
stores no group (NULL) and cost 0 when it set none, so a job enqueued without the config (cron,
another host) is limited like any other of its type.

The engine reads the figures (starts in the window, units held) and asks this module which
types and keys are shut and how much room each key has left; it then claims the best job that
fits. Nothing here does I/O.
"""

from __future__ import annotations

from jobctl.models import Record


class Limits(Record):
    """The limits a claimer's config declares.

    rates: {type: (max starts, window ms)}; groups: {group: limit} (the smallest that any type of
    the group declares); types: {type: limit} for types with a limit and no group; type_groups:
    {type: group} and type_costs: {type: cost units} of the types that declare them: what a job
    that set neither itself counts against, and with."""

    __slots__ = ("rates", "groups", "types", "type_groups", "type_costs")

    def __init__(self, rates: dict[str, tuple[int, int]] | None = None, groups: dict[str, int] | None = None,
                 types: dict[str, int] | None = None, type_groups: dict[str, str] | None = None,
                 type_costs: dict[str, int] | None = None):
        self.rates = {} if rates is None else rates
        self.groups = {} if groups is None else groups
        self.types = {} if types is None else types
        self.type_groups = {} if type_groups is None else type_groups
        self.type_costs = {} if type_costs is None else type_costs

    def __bool__(self) -> bool:
        return bool(self.rates or self.groups or self.types)

    @property
    def concurrency(self) -> bool:
        """Whether any concurrency limit (of a group or a type) exists: else no slot is counted."""
        return bool(self.groups or self.types)

    def resolve(self, type: str, group: str | None, cost_units: int | None) -> tuple[str | None, int]:
        """A job's group and cost under this config: its own where it set them (a stored group,
        a cost from 1), else its type's (no group, cost 1 when the type names none)."""
        return (group if group is not None else self.type_groups.get(type),
                cost_units if cost_units else self.type_costs.get(type, 1))

    def key(self, type: str, group: str | None) -> tuple[str, str]:
        """Which concurrency limit a job of `type` with this stored group counts against."""
        return key_of(group if group is not None else self.type_groups.get(type), type)


def from_settings(settings) -> Limits:
    """The limits of a config's [types.X] tables (rate_limit, concurrency_group/_limit)."""
    rates: dict[str, tuple[int, int]] = {}
    groups: dict[str, int] = {}
    types: dict[str, int] = {}
    type_groups: dict[str, str] = {}
    type_costs: dict[str, int] = {}
    for name, tc in settings.types.items():
        if tc.concurrency_group is not None:
            type_groups[name] = tc.concurrency_group
        if tc.cost_units is not None and tc.cost_units != 1:
            type_costs[name] = tc.cost_units
        if tc.rate_limit is not None:
            n, seconds = tc.rate_limit
            rates[name] = (n, int(seconds * 1000))
        if tc.concurrency_limit is not None:
            if tc.concurrency_group is not None:
                groups[tc.concurrency_group] = min(tc.concurrency_limit, groups.get(tc.concurrency_group, tc.concurrency_limit))
            else:
                types[name] = tc.concurrency_limit
    return Limits(rates, groups, types, type_groups, type_costs)


def held_units(limits: Limits, held: list) -> dict[tuple[str, str], int]:
    """The units held per concurrency key by these held rows (type, concurrency_group, cost_units),
    each resolved under this config."""
    units: dict[tuple[str, str], int] = {}
    for r in held:
        group, cost = limits.resolve(r["type"], r["concurrency_group"], r["cost_units"])
        key = key_of(group, r["type"])
        units[key] = units.get(key, 0) + cost
    return units


def key_of(group: str | None, type: str) -> tuple[str, str]:
    """Which concurrency limit a job counts against: its group's, else its type's."""
    return ("group", group) if group is not None else ("type", type)


class Admission(Record):
    """What a claim may take now: rate-shut types, and the room left under each concurrency key."""

    __slots__ = ("shut_types", "room", "limits")

    def __init__(self, shut_types: set[str], room: dict[tuple[str, str], int], limits: Limits | None = None):
        self.shut_types = shut_types
        self.room = room
        self.limits = Limits() if limits is None else limits  # what resolves a job's group and cost

    def admits(self, type: str, group: str | None, cost_units: int) -> bool:
        if type in self.shut_types:
            return False
        group, cost_units = self.limits.resolve(type, group, cost_units)
        room = self.room.get(key_of(group, type))
        return room is None or cost_units <= room


def admission(limits: Limits, starts: dict[str, int], held_units: dict[tuple[str, str], int]) -> Admission:
    """starts: {rate-limited type: starts in its current window}; held_units: {key: units held}."""
    shut = {t for t, (n, _window) in limits.rates.items() if starts.get(t, 0) >= n}
    room: dict[tuple[str, str], int] = {}
    for group, limit in limits.groups.items():
        room[("group", group)] = limit - held_units.get(("group", group), 0)
    for type, limit in limits.types.items():
        room[("type", type)] = limit - held_units.get(("type", type), 0)
    return Admission(shut, room, limits)


def window_opens_at(recent_starts: list[int], n: int, window_ms: int) -> int:
    """When a rate-shut type may start again: its N-th most recent start leaves the window.
    recent_starts: start times in the window, newest first."""
    if len(recent_starts) < n:
        return 0
    return recent_starts[n - 1] + window_ms


def describe_hold(type: str, group: str | None, cost_units: int, limits: Limits, admission: Admission,
                  opens_at: dict[str, int], now: int, *, short: bool = False) -> str | None:
    """Why a ready job is held back, in a person's words (`show`); None when it is admitted.
    short: in a few words, for a column of `list` (`rate limit 10/1m: next in 12s`)."""
    from jobctl.durations import format_duration

    reasons = []
    group, cost_units = limits.resolve(type, group, cost_units)
    if type in admission.shut_types:
        n, window = limits.rates[type]
        rate = f"{n}/{format_duration(window / 1000)}"
        wait = format_duration(max(opens_at.get(type, now) - now, 0) / 1000)
        reasons.append(f"rate limit {rate}: next in {wait}" if short else
                       f"type {type} reached its rate limit {rate}; next start possible in {wait}")
    key = key_of(group, type)
    room = admission.room.get(key)
    if room is not None and cost_units > room:
        limit = limits.groups.get(key[1]) if key[0] == "group" else limits.types.get(key[1])
        held = (limit or 0) - room
        what = f"group {key[1]}" if key[0] == "group" else f"type {key[1]}"
        if limit is not None and cost_units > limit:  # no amount of waiting lets it in
            reasons.append(f"needs {cost_units} units, over the limit of {what} ({limit})" if short else
                           f"this job needs {cost_units} units, more than the limit of {what} ({limit}): "
                           "it can never start under this limit (raise it, or cancel the job)")
        elif short:
            reasons.append(f"{what} full: {held}/{limit} units" + (f", needs {cost_units}" if cost_units > 1 else ""))
        else:
            need = f" (this job needs {cost_units})" if cost_units > 1 else ""
            reasons.append(f"{what} is full: {held} of {limit} units running{need}")
    return "; ".join(reasons) or None


def summary(limits: Limits, figures: dict) -> dict:
    """The `limits` object of `stats --json`: per limited type and group, what is running of the
    limit, the starts in the current window of the rate, and the ready jobs a limit holds back."""
    now = figures["now"]
    adm = figures["admission"]
    types: dict[str, dict] = {}
    for t in sorted({*limits.rates, *limits.types}):
        entry: dict = {"rate_limit": None, "starts_in_window": None, "next_start_in": None,
                       "concurrency_limit": limits.types.get(t), "units_running": None,
                       "ready_held": figures["held_ready"].get(("type", t), 0)}
        if t in limits.rates:
            n, window = limits.rates[t]
            entry["rate_limit"] = {"max_starts": n, "window": window / 1000}
            entry["starts_in_window"] = len(figures["starts"][t])
            if t in adm.shut_types:
                entry["next_start_in"] = max(figures["opens_at"][t] - now, 0) / 1000
        if t in limits.types:
            entry["units_running"] = figures["held"].get(("type", t), 0)
        types[t] = entry
    groups = {g: {"concurrency_limit": limit, "units_running": figures["held"].get(("group", g), 0),
                  "ready_held": figures["held_ready"].get(("group", g), 0)}
              for g, limit in sorted(limits.groups.items())}
    return {"types": types, "groups": groups}
