"""Reading what a command is given as a file or stdin (`-`): a payload, the lines of --batch.
Shared by enqueue and run, and free of rich like them; limited, so that /dev/zero or an endless
pipe is refused rather than held in memory."""

from __future__ import annotations

import os
import stat
import sys
from typing import Iterator

from jobctl.errors import InvalidInput


def open_source(path: str):
    if path == "-":
        if sys.stdin is None or not hasattr(sys.stdin, "buffer"):  # started with stdin closed (`<&-`)
            raise InvalidInput("standard input is closed: pipe the input in, or give a file instead of -")
        return sys.stdin.buffer
    try:
        return open(path, "rb")
    except OSError as e:
        raise InvalidInput(f"cannot read {path}: {e.strerror}") from None


# The limit counts a payload's compact form, but a file may be indented (`jq .`): it is read up to
# this many times the limit, and only a file larger than that is refused unread.
RAW_PAYLOAD_ROOM = 16


def read_payload_file(path: str, limit: int, not_done: str = "nothing was enqueued") -> bytes:
    """The file's bytes, read only up to RAW_PAYLOAD_ROOM times `limit` (never /dev/zero in
    memory); the limit itself is checked on the compact form, by the caller."""
    most = limit * RAW_PAYLOAD_ROOM
    f = open_source(path)
    try:
        data = f.read(most + 1)
    except OSError as e:
        raise InvalidInput(f"cannot read {path}: {e.strerror}") from None
    finally:
        if f is not sys.stdin.buffer:
            f.close()
    if len(data) > most:
        raise InvalidInput(
            f"payload too large: {'stdin' if path == '-' else path} holds more than {most} bytes, far over "
            f"the limit of {limit} bytes in compact form (max_payload_bytes in the config); {not_done}")
    return data


BATCH_LINE_ROOM = 64 * 1024  # a --batch line's keys besides the payload: type, queue, key, after, ...


def batch_lines(path: str, payload_limit: int, on_progress=None) -> Iterator[tuple[int, str]]:
    """(number, text) of each NDJSON line of --batch, read line by line and never held whole: a line
    longer than the payload limit plus the other keys' room is refused without reading the rest of
    it. on_progress(bytes read, bytes in all) for a regular file (a pipe's size is unknown)."""
    most = payload_limit + BATCH_LINE_ROOM
    f = open_source(path)
    size, done = 0, 0
    try:
        try:
            st = os.fstat(f.fileno())
            if stat.S_ISREG(st.st_mode):
                size = st.st_size - f.tell()
        except (OSError, ValueError, AttributeError):  # (a test's stand-in for stdin has no descriptor)
            size = 0
        n = 0
        while True:
            raw = f.readline(most + 1)
            if not raw:
                if on_progress is not None and size:
                    on_progress(done, done)
                return
            n += 1
            if not raw.endswith(b"\n") and len(raw) > most:
                raise InvalidInput(
                    f"line {n}: longer than {most} bytes (the payload limit, max_payload_bytes in "
                    f"the config, plus {BATCH_LINE_ROOM} for the other keys); nothing was enqueued")
            try:
                text = raw.decode("utf-8").rstrip("\n")
            except UnicodeDecodeError:
                raise InvalidInput(f"line {n}: not UTF-8 text; nothing was enqueued") from None
            yield n, text
            if on_progress is not None and size:
                done += len(raw)
                if n % 1000 == 0:
                    on_progress(done, max(size, done))
    except OSError as e:
        raise InvalidInput(f"cannot read {path}: {e.strerror}") from None
    finally:
        if f is not sys.stdin.buffer:
            f.close()
