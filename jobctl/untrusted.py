"""Job data is untrusted text: make it inert for terminals and logs, and hide secrets.

Pure functions, no rich: the worker's log lines use them as well as the human views.
"""

from __future__ import annotations

import re
import unicodedata

MASK = "***"


def _escape_char(ch: str) -> str:
    if ch in "\n\t":
        return " "
    cp = ord(ch)
    return f"\\x{cp:02x}" if cp <= 0xFF else f"\\u{cp:04x}"


def safe(value) -> str:
    """Text with control (Cc) and format (Cf: bidi overrides, zero-width) characters escaped."""
    s = "" if value is None else str(value)
    if s.isprintable():
        return s
    return "".join(_escape_char(c) if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp") else c for c in s)


def _secret_matcher(patterns):
    pats = [p.lower() for p in patterns]

    def is_secret(key: str) -> bool:
        k = re.sub(r"[^a-z0-9]", "_", key.lower())
        return any(p in k or p.replace("_", "") in k.replace("_", "") for p in pats)

    return is_secret


def mask(value, patterns, reveal: bool = False):
    """A copy of a JSON value with the values of secret-looking keys replaced by ***."""
    if reveal:
        return value
    is_secret = _secret_matcher(patterns)

    def walk(v):
        if isinstance(v, dict):
            return {k: (MASK if is_secret(str(k)) else walk(x)) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    return walk(value)


# key=value, key: value, "key": "value" (and 'key' = 'value'); a value is a quoted string, or a
# run of characters up to a separator, with an auth scheme's credential included ("Bearer abc").
_KEY_SEP = re.compile(r"""(?P<key>"[^"\n]{1,64}"|'[^'\n]{1,64}'|[A-Za-z0-9_.\-]{1,64})(?P<sep>\s*[=:]\s*)""")
_VALUE = re.compile(r""""(?:[^"\\\n]|\\.)*"|'[^'\n]*'|(?:(?:bearer|basic|token|digest)\s+)?[^\s,;&"'<>)\]}]+""",
                    re.IGNORECASE)


def mask_text(value, patterns, reveal: bool = False) -> str:
    """Free text (an error, a log, a progress message) with the values of secret-looking
    `key=value`, `key: value` and `"key": "value"` pairs replaced by ***."""
    s = "" if value is None else str(value)
    if reveal or not s or ("=" not in s and ":" not in s):
        return s
    is_secret = _secret_matcher(patterns)
    out, done = [], 0
    for m in _KEY_SEP.finditer(s):
        if m.start() < done or not is_secret(m.group("key").strip("\"'")):
            continue  # a key that is not secret hides nothing: its value may hold the next pair
        v = _VALUE.match(s, m.end())
        if v is None:
            continue
        quote = v.group(0)[0] if v.group(0)[:1] in ("'", '"') else ""
        out.append(s[done:m.end()] + quote + MASK + quote)
        done = v.end()
    return "".join(out) + s[done:]
