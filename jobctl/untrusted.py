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
    """A copy of a JSON value with the values of secret-looking keys replaced by ***, and string
    values masked as free text is (mask_text: a URL's password, `password=...` inside a string)."""
    if reveal:
        return value
    is_secret = _secret_matcher(patterns)

    def walk(v):
        if isinstance(v, dict):
            return {k: (MASK if is_secret(str(k)) else walk(x)) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, str) and may_hold_secret(v):
            return mask_text(v, patterns)
        return v

    return walk(value)


# key=value, key: value, "key": "value" (and 'key' = 'value'); a value is a quoted string, or a
# run of characters up to a separator, with an auth scheme's credential included ("Bearer abc").
_KEY_SEP = re.compile(r"""(?P<key>"[^"\n]{1,64}"|'[^'\n]{1,64}'|[A-Za-z0-9_.\-]{1,64})(?P<sep>\s*[=:]\s*)""")
_VALUE = re.compile(r""""(?:[^"\\\n]|\\.)*"|'[^'\n]*'|(?:(?:bearer|basic|token|digest)\s+)?[^\s,;&"'<>)\]}]+""",
                    re.IGNORECASE)


# A URL's password, whatever the scheme (postgres://user:PW@host, redis://:PW@host): up to the last
# @ before a space or a /, so that a password with an unencoded @ is hidden whole.
_URL_PASSWORD = re.compile(r"(?P<key>[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@?#]*)(?P<sep>:)(?=[^\s/]*@)")
_URL_PASSWORD_END = re.compile(r"[^\s/]*@")
# A command line's secret option and its value, as in `--password hunter2` (`--password=x` is a key=value)
_OPTION = re.compile(r"(?<![\w-])(?P<key>--[A-Za-z0-9][A-Za-z0-9_\-]{0,63})(?P<sep>[ \t]+)(?=[^\s-])")


def may_hold_secret(text: str) -> bool:
    """False when mask_text cannot change `text` (a quick test before the work)."""
    return "=" in text or ":" in text or "--" in text


def mask_text(value, patterns, reveal: bool = False) -> str:
    """Free text (an error, a log, a progress message) with secrets replaced by ***: the values of
    secret-looking `key=value`, `key: value`, `"key": "value"` pairs and `--key value` options, and
    the password of a URL (`scheme://user:***@host`)."""
    s = "" if value is None else str(value)
    if reveal or not s or not may_hold_secret(s):
        return s
    is_secret = _secret_matcher(patterns)
    found = []  # (start of the value, end of the value, quote)
    for m in _URL_PASSWORD.finditer(s) if "://" in s else ():
        v = _URL_PASSWORD_END.match(s, m.end())
        if v is not None:
            found.append((m.end(), v.end() - 1, ""))
    for pattern in (_KEY_SEP, _OPTION) if "--" in s else (_KEY_SEP,):
        for m in pattern.finditer(s):
            if not is_secret(m.group("key").strip("\"'-")):
                continue  # a key that is not secret hides nothing: its value may hold the next pair
            v = _VALUE.match(s, m.end())
            if v is None or v.group(0) == "null":
                continue  # (JSON's null: no secret is there to hide, and *** would say there was)
            quote = v.group(0)[0] if v.group(0)[:1] in ("'", '"') else ""
            found.append((m.end(), v.end(), quote))
    out, done = [], 0
    for start, end, quote in sorted(found):
        if start < done:
            continue  # inside a value already hidden
        out.append(s[done:start] + quote + MASK + quote)
        done = end
    return "".join(out) + s[done:]
