"""The worker's log: one line per event on stderr, human-readable or one JSON object."""

from __future__ import annotations

import json
import os
import sys
import time

from jobctl.models import Job
from jobctl.untrusted import mask_text, may_hold_secret, safe


class Log:
    """One line per event on stderr: human-readable, or one JSON object (`--log-format json`).
    Payloads are never logged."""

    def __init__(self, worker_id: str, fmt: str = "human", stream=None, secret_keys=None):
        self.worker_id = worker_id
        self.secret_keys = secret_keys  # values of secret-looking key=value pairs in messages are masked
        self.json = fmt == "json"
        self.stream = stream or sys.stderr
        self._second = -1
        self._prefix = ""
        self._held: list[str] | None = None
        self._shown: dict[str, str] = {}  # type and queue names as a line shows them (safe()), by name

    def _timestamp(self, now: float) -> str:
        """'2026-11-29T21:03:04.123Z' (the text of to_rfc3339), the seconds formatted once a second."""
        ms = int(now * 1000)
        second = ms // 1000
        if second != self._second:
            self._second = second
            self._prefix = time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(second))
        return f"{self._prefix}{ms % 1000:03d}Z"

    def __call__(self, event: str, message: str = "", job: Job | None = None, **fields) -> None:
        ts = self._timestamp(time.time())
        if self.json:
            record: dict[str, object] = {"ts": ts, "worker": self.worker_id, "event": event}
            if job is not None:
                record.update(job=job.id, type=job.type, queue=job.queue, attempt=job.attempts,
                              max_attempts=job.max_attempts)
            record.update({k: (self._mask(v) if k == "error" else v) for k, v in fields.items() if v is not None})
            if message:
                record["message"] = self._mask(message)
            # ASCII only: escape sequences, C1 and bidi controls in names, errors or paths arrive as \uXXXX
            line = json.dumps(record, ensure_ascii=True, separators=(",", ":"))
        else:
            line = f"{ts} {self.worker_id} {event}"
            if job is not None:
                line += (f" job {job.id} {self._name(job.type)} ({self._name(job.queue)}, "
                         f"run {job.attempts}/{job.max_attempts})")
            if message:
                line += ": " + safe(self._mask(message))
        self.write(line + "\n")

    def _name(self, name: str) -> str:
        """safe(name), worked out once per name (a worker logs the same few types and queues)."""
        shown = self._shown.get(name)
        if shown is None:
            shown = safe(name)
            if len(self._shown) < 256:
                self._shown[name] = shown
        return shown

    def _mask(self, text):
        if not isinstance(text, str) or not may_hold_secret(text):
            return text  # (mask_text changes only key=value pairs, --key value options and URLs)
        return mask_text(text, self.secret_keys or ())  # a URL's password is masked whatever the keys

    def hold(self) -> None:
        """Keep the lines of one round of the work loop, to write them in one go (release)."""
        self._held = []

    def release(self) -> None:
        held, self._held = self._held, None
        if not held:
            return
        if self._direct():
            self.write("".join(held))  # one system call for the round
        else:
            for line in held:  # a stream given by the caller still gets one write per line
                self.write(line)

    def _direct(self) -> bool:
        return self.stream is sys.__stderr__ and self.stream is sys.stderr

    def write(self, text: str) -> None:
        if self._held is not None:
            self._held.append(text)
            return
        stream = self.stream
        try:
            if self._direct():
                data = text.encode("utf-8", "backslashreplace")
                while data:  # straight to the file descriptor: one write, no buffer to flush
                    data = data[os.write(2, data):]
            else:
                stream.write(text)
                stream.flush()
        except (OSError, ValueError, AttributeError):
            pass  # a closed stderr must not stop the worker
