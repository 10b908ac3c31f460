"""Validated jobs of a batch, held outside the heap until their one transaction.

`enqueue --batch` checks every line before it opens the database (so bad input never creates or
locks it), and inserts them all in one transaction. In between, the jobs wait here: compact
(marshal) chunks in memory up to a few MiB, then in a private temporary file, so memory stays
flat however many lines come, and the write lock is held only while the jobs are inserted, not
while a slow or endless producer writes its lines.
"""

from __future__ import annotations

import marshal
from itertools import starmap
from operator import attrgetter
from typing import BinaryIO, Iterator

from jobctl.engines.base import NewJob
from jobctl.errors import InvalidInput

CHUNK = 1000  # jobs a marshal chunk
MEMORY = 8 * 1024 * 1024  # bytes of chunks kept in memory before they go to a temporary file
_FIELDS = NewJob.__slots__  # the order of NewJob's __init__ parameters (tests/test_batch_stream.py checks)
_row = attrgetter(*_FIELDS)  # a job's fields as one tuple, in C


class JobSpool:
    """Add jobs, then iterate them in order, as often as needed (a PostgreSQL retry reads them again)."""

    def __init__(self, memory: int = MEMORY):
        self._memory_limit = memory
        self._blobs: list[bytes] = []  # chunks in memory, until they outgrow _memory_limit
        self._in_memory = 0
        self._file: BinaryIO | None = None
        self._rows: list[tuple] = []
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def add(self, job: NewJob) -> None:
        self._rows.append(_row(job))
        self._n += 1
        if len(self._rows) >= CHUNK:
            self._flush()

    def _flush(self) -> None:
        if not self._rows:
            return
        blob = marshal.dumps(self._rows)
        self._rows = []
        if self._file is None and self._in_memory + len(blob) <= self._memory_limit:
            self._blobs.append(blob)
            self._in_memory += len(blob)
            return
        try:
            if self._file is None:
                import tempfile

                self._file = tempfile.TemporaryFile(prefix="jobctl-batch-")  # 0600, unlinked at once
                for kept in self._blobs:
                    self._write(kept)
                self._blobs, self._in_memory = [], 0
            self._write(blob)
        except OSError as e:
            raise self._error(e) from None

    def _write(self, blob: bytes) -> None:
        assert self._file is not None
        self._file.write(len(blob).to_bytes(8, "little"))
        self._file.write(blob)

    @staticmethod
    def _error(e: OSError) -> InvalidInput:
        import tempfile

        return InvalidInput(f"cannot keep the batch in a temporary file in {tempfile.gettempdir()}: {e.strerror}; "
                            "set TMPDIR to a folder with room; nothing was enqueued")

    def __iter__(self) -> Iterator[NewJob]:
        self._flush()
        for blob in self._blobs_in_order():
            yield from starmap(NewJob, marshal.loads(blob))

    def _blobs_in_order(self) -> Iterator[bytes]:
        if self._file is None:
            yield from self._blobs
            return
        try:
            self._file.seek(0)
            while True:
                head = self._file.read(8)
                if not head:
                    return
                yield self._file.read(int.from_bytes(head, "little"))
        except OSError as e:
            raise self._error(e) from None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._blobs = []

    def __enter__(self) -> "JobSpool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
