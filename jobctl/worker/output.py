"""A handler's output while it runs: what the worker keeps of it, in bounded memory.

The handler's stdout and stderr are two pipes that the worker reads as data arrives. Each chunk
goes, in the order it was read, to the run's combined log (the first `head` bytes, then a rolling
window of the last `tail` bytes, counting what fell out between them), and to a small window of its
own stream: the end of stdout (where the result line is) and the end of stderr (the error line).
Nothing here grows past those limits, however much a handler prints.
"""

from __future__ import annotations

from collections import deque

from jobctl.engines.base import RunOutput


class Window:
    """The last `limit` bytes of a stream, and how many bytes it had in all."""

    __slots__ = ("limit", "chunks", "size", "total")

    def __init__(self, limit: int):
        self.limit = limit
        self.chunks: deque[bytes] = deque()
        self.size = 0
        self.total = 0

    def add(self, data: bytes) -> int:
        """Keep data; return how many bytes fell out of the window."""
        self.total += len(data)
        if self.limit <= 0:
            return len(data)
        if len(data) >= self.limit:
            dropped = self.size + len(data) - self.limit
            self.chunks.clear()
            self.chunks.append(data[len(data) - self.limit:])
            self.size = self.limit
            return dropped
        self.chunks.append(data)
        self.size += len(data)
        dropped = 0
        while self.size > self.limit:
            first = self.chunks[0]
            excess = self.size - self.limit
            if len(first) <= excess:
                self.chunks.popleft()
                self.size -= len(first)
                dropped += len(first)
            else:
                self.chunks[0] = first[excess:]
                self.size -= excess
                dropped += excess
        return dropped

    def data(self) -> bytes:
        if len(self.chunks) > 1:
            joined = b"".join(self.chunks)
            self.chunks.clear()
            self.chunks.append(joined)
        return self.chunks[0] if self.chunks else b""


class RunOutputBuffer:
    """One run's output: the combined log (head, tail, dropped) and the ends of stdout and stderr."""

    __slots__ = ("head_limit", "head", "tail", "dropped", "stdout", "stderr", "dirty")

    def __init__(self, head: int, tail: int, stdout_keep: int, stderr_keep: int):
        self.head_limit = head
        self.head = bytearray()
        self.tail = Window(tail)
        self.dropped = 0
        self.stdout = Window(stdout_keep)
        self.stderr = Window(stderr_keep)
        self.dirty = False

    def add(self, data: bytes, stream: int) -> None:
        """A chunk read from stream 1 (stdout) or 2 (stderr)."""
        if not data:
            return
        (self.stdout if stream == 1 else self.stderr).add(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.dropped += self.tail.add(data)
        self.dirty = True

    def snapshot(self) -> RunOutput:
        """What to store now (and no longer dirty)."""
        self.dirty = False
        return RunOutput(bytes(self.head), self.tail.data(), self.dropped)
