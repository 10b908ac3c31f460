"""JSON payloads: strict parsing, the compact stored form, and the canonical form for comparisons."""

from __future__ import annotations

import json

try:  # CPython's own SHA-256: the same digest as hashlib.sha256 without loading OpenSSL (~3 ms a process)
    from _sha256 import sha256  # Python 3.11
except ImportError:
    try:
        from _sha2 import sha256  # Python 3.12+
    except ImportError:
        from hashlib import sha256

from jobctl.errors import InvalidInput

MAX_DEPTH = 256
DEFAULT_MAX_BYTES = 1024 * 1024


def _reject_constant(name: str):
    raise InvalidInput(f"invalid JSON: {name} is not allowed (JSON has no NaN or Infinity)")


def _depth_ok(value, limit: int = MAX_DEPTH) -> bool:
    """Iterative, so a hostile document cannot exhaust the Python stack."""
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            if d > limit:
                return False
            children = v.values() if isinstance(v, dict) else v
            stack.extend((c, d + 1) for c in children if isinstance(c, (dict, list)))
    return True


def _max_digits() -> int:
    import sys

    return sys.get_int_max_str_digits() or 4300


# Built once: json.loads/json.dumps with any keyword argument build a new decoder/encoder on every
# call, which was a fifth of the per-line cost of `enqueue --batch` (bench/run.py, batch workload).
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
# What decode() calls, without its two whitespace matches and its layers:
_SCAN = _DECODER.scan_once  # type: ignore[attr-defined]
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _c_encoder(sort_keys: bool, allow_nan: bool):
    """The C encoder that JSONEncoder.encode builds on every call (with a Python closure and two
    layers around it), built once: 4 times faster on a small payload. Without the check for
    cycles: it is used only on values whose depth was checked (a cycle has no finite depth) or
    that JSON text was parsed into. None where the C accelerator is missing."""
    from json import encoder

    make = getattr(encoder, "c_make_encoder", None)  # (not in the typeshed stubs)
    if make is None:
        return None
    return make(None, _COMPACT.default, encoder.encode_basestring, None, ":", ",", sort_keys,
                                  False, allow_nan)


_COMPACT_C = _c_encoder(False, False)
_CANONICAL_C = _c_encoder(True, True)


def parse_json(text: str | bytes, *, what: str = "payload", wrapper_levels: int = 0) -> object:
    """Parse untrusted JSON text, refusing NaN/Infinity, numbers too long to convert and deep nesting.

    wrapper_levels: containers around the value that counts (a batch line's object around its
    payload), allowed on top of MAX_DEPTH; the caller checks the inner value's own depth."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInput(f"invalid {what}: not UTF-8 text") from None
    if not text or text.isspace():
        raise InvalidInput(f"invalid {what}: empty; give a JSON value such as {{}}")
    try:
        # Text with no space around it, parsed to its end (nearly every payload and batch line):
        # the scanner alone. Anything else, or any error, goes the whole way below, which names it.
        value, end = _SCAN(text, 0)
        if end != len(text):
            raise ValueError
    except (ValueError, StopIteration, RecursionError, InvalidInput):
        value = _parse_slowly(text, what)
    # A value is no deeper than the brackets that open its containers (those inside strings only
    # add to the count), nor than half its text (each container opens and closes): where either is
    # too few to pass the limit, no walk is needed (nearly every text).
    most = MAX_DEPTH + wrapper_levels
    if len(text) > 2 * most + 1 and text.count("{") + text.count("[") > most and not _depth_ok(value, most):
        raise InvalidInput(f"invalid {what}: nested deeper than {MAX_DEPTH} levels")
    return value


def _parse_slowly(text: str, what: str) -> object:
    try:
        if text.startswith("\ufeff"):  # as json.loads does
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        return _DECODER.decode(text)
    except RecursionError:
        raise InvalidInput(f"invalid {what}: nested deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as e:
        raise InvalidInput(f"invalid {what}: not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except ValueError:  # an integer past Python's int/str conversion limit (4300 digits by default)
        raise InvalidInput(
            f"invalid {what}: a number has more than {_max_digits()} digits; send it as a string"
        ) from None


def compact(value: object, *, what: str = "payload", max_bytes: int | None = None, depth_checked: bool = False) -> str:
    """The stored form: compact JSON, key order kept. Validates surrogates, numbers and size
    (and depth, unless the caller says parse_json already checked it)."""
    if not depth_checked and not _depth_ok(value):
        raise InvalidInput(f"invalid {what}: nested deeper than {MAX_DEPTH} levels")
    return _compact(value, what, max_bytes)


def stored_forms(value: object, max_bytes: int) -> tuple[str, str]:
    """compact(value, max_bytes=max_bytes, depth_checked=True) and canonical_hash(value, that text)
    in one call, for a value that parse_json made (a batch line's payload): the same checks."""
    text = _compact(value, "payload", max_bytes)
    return text, sha256((text if "," not in text else _canonical(value)).encode("utf-8")).hexdigest()


def _compact(value: object, what: str, max_bytes: int | None) -> str:
    try:
        text = "".join(_COMPACT_C(value, 0)) if _COMPACT_C is not None else _COMPACT.encode(value)
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
    except ValueError as e:  # NaN/Infinity given as Python floats
        raise InvalidInput(f"invalid {what}: {e}") from None
    except UnicodeEncodeError:
        raise InvalidInput(f"invalid {what}: contains a lone surrogate (invalid unicode)") from None
    except RecursionError:
        raise InvalidInput(f"invalid {what}: nested deeper than {MAX_DEPTH} levels") from None
    if max_bytes is not None and size > max_bytes:
        raise InvalidInput(
            f"{what} too large: {size} bytes in compact form, the limit is {max_bytes} "
            "(max_payload_bytes in the config)"
        )
    return text


# Why a payload or result holding NUL is refused on PostgreSQL (an engine whose STORES_NUL is False).
NUL_REFUSED = ("it holds a NUL character (\\u0000), which a PostgreSQL database cannot store; remove it, or "
               "encode the data that holds it (base64, say)")


def holds_nul(text: str) -> bool:
    """Whether stored (compact) JSON text holds a NUL character, which PostgreSQL cannot store in a
    payload or result: JSON writes it \\u0000; an escaped backslash followed by u0000 is not one."""
    if "\\u0000" not in text:  # (nearly every text: one substring search)
        return "\x00" in text
    import re

    return re.search(r"(?<!\\)(?:\\\\)*\\u0000", text) is not None


def canonical_hash(value: object, compact_text: str | None = None) -> str:
    """Payloads are "the same" when their canonical forms (keys sorted, compact) are equal.
    compact_text: compact(value), when the caller has it: without a comma no object in it has two
    keys to sort, so it is the canonical form already (most small payloads) and is not made again."""
    canon = compact_text if compact_text is not None and "," not in compact_text else _canonical(value)
    return sha256(canon.encode("utf-8")).hexdigest()


def _canonical(value: object) -> str:
    return "".join(_CANONICAL_C(value, 0)) if _CANONICAL_C is not None else _CANONICAL.encode(value)


def stored_damage(text, stored_hash, *, check_hash: bool = True) -> str | None:
    """Why a stored payload cannot be trusted (None when it can): not JSON as jobctl stores it, or,
    with check_hash, its canonical form no longer matches the hash computed at enqueue."""
    if isinstance(text, str) and stored_hash is not None:
        try:
            if sha256(text.encode("utf-8")).hexdigest() == stored_hash:
                # The text is byte for byte the canonical form hashed at enqueue (the stored form of
                # most payloads: one key, or keys already in order), so it is JSON and it matches:
                # no need to parse it and encode it again (a fifth of a claim's own work).
                return None
        except UnicodeEncodeError:
            pass  # not UTF-8 text: said below
    if not isinstance(text, str):
        return f"payload damaged: it is stored as {type(text).__name__}, not JSON text"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # read back with surrogateescape: the bytes are not UTF-8
            return "payload damaged: its bytes are not UTF-8 text"
    try:
        value = _DECODER.decode(text)
    except (ValueError, RecursionError, InvalidInput) as e:
        why = e.msg if isinstance(e, json.JSONDecodeError) else type(e).__name__
        return f"payload damaged: not valid JSON ({why})"
    if check_hash and stored_hash is not None and canonical_hash(value) != stored_hash:
        return "payload damaged: it no longer matches the hash stored when it was enqueued"
    return None



def same_value(a: object, b: object) -> bool:
    """Whether two JSON values are equal by value, as PostgreSQL's jsonb compares them: objects
    whatever their keys' order, numbers by value (1 and 1.0), and true or false never a number."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(v, b[k]) for k, v in a.items())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b
