"""Pure conversions between what people type and what the queue stores.

Durations ("90", "500ms", "1h30m") become seconds (float), priority labels become integers,
times become milliseconds since the epoch (UTC), and stored milliseconds become RFC 3339.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from jobctl.errors import InvalidInput

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)"  # compiled (and cached by re) on first use, not at start-up
MAX_DURATION = 10 * 365 * 86400  # ten years: anything longer is a typo, not a plan

PRIORITY_LABELS = {"low": 0, "normal": 10, "medium": 10, "high": 20, "critical": 30, "urgent": 30}
PRIORITY_MIN, PRIORITY_MAX = -1000, 1000


def parse_duration(text: str | int | float, *, what: str = "duration") -> float:
    """'90' -> 90.0, '500ms' -> 0.5, '1h30m' -> 5400.0. Raises InvalidInput with the forms allowed."""
    if isinstance(text, bool):
        raise InvalidInput(f"invalid {what} {text!r}")
    if isinstance(text, (int, float)):
        seconds = float(text)
    else:
        s = str(text).strip().lower()
        if re.fullmatch(r"\d+(\.\d+)?", s):
            seconds = float(s)
        else:
            pos, seconds, matched = 0, 0.0, False
            for m in re.finditer(_PART, s):
                if m.start() != pos:
                    break
                seconds += float(m.group(1)) * _UNITS[m.group(2)]
                pos, matched = m.end(), True
            if not matched or pos != len(s):
                raise InvalidInput(
                    f"invalid {what} {str(text)!r}: use seconds (90) or units such as 500ms, 90s, 5m, 2h, 1d, 1h30m"
                )
    if not (0 <= seconds <= MAX_DURATION) or seconds != seconds:
        raise InvalidInput(f"invalid {what} {text!r}: must be between 0 and {MAX_DURATION} seconds (10 years)")
    return seconds


def _in_units(total: int, most: int | None = None) -> str:
    """Whole seconds as "1d2h3m4s", with at most `most` units (None: all, exactly)."""
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if total >= size:
            parts.append(f"{total // size}{unit}")
            total %= size
        if len(parts) == most:
            break
    return "".join(parts) or "0s"


def format_duration(seconds: float | None) -> str:
    """A short human form: 0.5 -> '500ms', 5400 -> '1h30m'."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{int(round(seconds * 1000))}ms"
    return _in_units(int(round(seconds)), most=2)


def exact_duration(seconds: float) -> str:
    """Seconds as an exact duration string that parse_duration reads back ("1h30m", "1500ms")."""
    ms = round(seconds * 1000)
    return f"{ms}ms" if ms % 1000 else _in_units(ms // 1000)


def parse_priority(value: str | int) -> int:
    """A label (low, normal/medium, high, critical/urgent) or an integer from -1000 to 1000."""
    if isinstance(value, bool):
        raise InvalidInput(f"invalid priority {value!r}")
    if isinstance(value, int):
        n = value
    else:
        s = str(value).strip().lower()
        if s in PRIORITY_LABELS:
            return PRIORITY_LABELS[s]
        if not re.fullmatch(r"[+-]?\d+", s):
            raise InvalidInput(
                f"invalid priority {value!r}: use low, normal, high, critical (or medium, urgent), "
                f"or an integer from {PRIORITY_MIN} to {PRIORITY_MAX}"
            )
        n = int(s)
    if not PRIORITY_MIN <= n <= PRIORITY_MAX:
        raise InvalidInput(f"invalid priority {value!r}: must be from {PRIORITY_MIN} to {PRIORITY_MAX}")
    return n


def parse_time(text: str) -> int:
    """ISO 8601 / RFC 3339 to epoch milliseconds; a time without an offset is local time."""
    s = str(text).strip()
    if s.endswith(("Z", "z")):
        s = s[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        raise InvalidInput(
            f"invalid time {text!r}: use ISO 8601, such as 2026-11-29T21:00:00Z or 2026-11-29 22:00"
        ) from None
    try:
        if dt.tzinfo is None:
            dt = dt.astimezone()  # local time
        return int(dt.timestamp() * 1000)
    except (ValueError, OverflowError, OSError):  # year 1 or 9999 pushed past datetime's range by the offset
        if dt.year < 1970:
            return 0  # long past: callers treat a time in the past as now
        raise InvalidInput(f"invalid time {text!r}: out of range (use a year from 1970 to 9998)") from None


def to_rfc3339(ms: int | None) -> str | None:
    """Epoch milliseconds -> '2026-11-29T21:03:04.123Z'."""
    if ms is None:
        return None
    dt = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")


def validate_name(value, what: str = "name") -> str:
    if not isinstance(value, str) or not NAME_RE.fullmatch(value):
        shown = repr(value) if not isinstance(value, str) or len(value) <= 80 else repr(value[:80] + "…")
        raise InvalidInput(
            f"invalid {what} name {shown}: use 1 to 64 characters, letters, digits and _ . : -, "
            "starting with a letter or digit"
        )
    return value


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib|t|tb|tib)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"b": 1, "k": 1024, "kb": 1000, "kib": 1024, "m": 1024**2, "mb": 1000**2, "mib": 1024**2,
               "g": 1024**3, "gb": 1000**3, "gib": 1024**3, "t": 1024**4, "tb": 1000**4, "tib": 1024**4}


def parse_size(value, *, what: str = "size", least: int = 1, most: int = 1024**5) -> int:
    """Bytes from `512MiB`, `64KiB`, `1.5 KiB`, `2G` (binary), `500MB` (decimal) or a number of bytes."""
    m = _SIZE.match(str(value)) if isinstance(value, (int, str)) and not isinstance(value, bool) else None
    if m is None:
        shown = str(value).lower() if isinstance(value, bool) else repr(value)  # (as TOML writes it)
        raise InvalidInput(f"invalid {what} {shown}: use bytes or a size such as 64KiB, 512MiB, 2GiB")
    n = int(float(m.group(1)) * _SIZE_UNITS[(m.group(2) or "b").lower()])
    if not least <= n <= most:
        raise InvalidInput(f"invalid {what} {value!r}: must be from {format_size(least)} to {format_size(most)}")
    return n


def format_size(n: int) -> str:
    """512MiB, 64KiB, 1000B: the largest binary unit that divides it."""
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n}B"
