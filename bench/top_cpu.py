"""`jobctl top` on a large file: idle CPU (target < 5% of one core on 1,000,000 jobs) and the time
from a keypress to its redraw (target < 50 ms).

    python bench/top_cpu.py [--path /tmp/jobctl-stats-bench.db] [--seconds 20] [--jobs 1000000] [--keys 40]

Builds the file with bench_stats.build if it is missing; runs the installed view (`python -m jobctl
top`) in a real pseudo-terminal of 120x40; lets it settle, then measures the CPU its process used
while nobody writes; then presses j and k in turn and times each key to the first bytes of its
redraw on the terminal; quits with q. Both figures are of the whole process, as a person meets it.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import resource
import select
import statistics
import struct
import sys
import termios
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _drain(fd: int, seconds: float) -> int:
    """Read what the view draws for `seconds`; the bytes read."""
    got, end = 0, time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        if select.select([fd], [], [], left)[0]:
            try:
                got += len(os.read(fd, 1 << 16))
            except OSError:
                break
    return got


def _cpu_of(pid: int) -> float:
    """CPU seconds (user + system) of a running process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(path: Path, seconds: float, keys: int, interval: str = "1s") -> dict:
    pid, fd = pty.fork()
    if pid == 0:
        os.environ.pop("COLUMNS", None)
        os.environ.pop("LINES", None)
        os.environ["TERM"] = "xterm-256color"
        os.execv(sys.executable, [sys.executable, "-m", "jobctl", "--db", str(path), "top", "--interval", interval])
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    started = time.monotonic()
    _drain(fd, 8)  # start-up and the first looks
    settle = time.monotonic() - started
    cpu0, t0 = _cpu_of(pid), time.monotonic()
    drawn = _drain(fd, seconds)
    idle_cpu, idle_s = _cpu_of(pid) - cpu0, time.monotonic() - t0
    latencies = []
    for i in range(keys):
        _drain(fd, 0.15)  # let the last redraw end
        os.write(fd, b"j" if i % 2 == 0 else b"k")
        sent = time.monotonic()
        if select.select([fd], [], [], 2)[0]:
            os.read(fd, 1 << 16)
            latencies.append((time.monotonic() - sent) * 1000)
    os.write(fd, b"q")
    _drain(fd, 2)
    _, status = os.waitpid(pid, 0)
    total = resource.getrusage(resource.RUSAGE_CHILDREN)
    lat = sorted(latencies)
    return {"exit": os.waitstatus_to_exitcode(status), "settle_s": round(settle, 1),
            "idle_cpu_s": round(idle_cpu, 3), "idle_s": round(idle_s, 1),
            "idle_core_share": round(idle_cpu / idle_s, 4), "idle_bytes_drawn": drawn,
            "keys": len(lat), "key_ms_median": round(statistics.median(lat), 1) if lat else None,
            "key_ms_p95": round(lat[max(int(len(lat) * 0.95) - 1, 0)], 1) if lat else None,
            "key_ms_max": round(lat[-1], 1) if lat else None,
            "process_cpu_s": round(total.ru_utime + total.ru_stime, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--path", type=Path, default=Path("/tmp/jobctl-stats-bench.db"))
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=40)
    args = ap.parse_args()
    if not args.path.exists():
        from bench_stats import build

        build(args.path, args.jobs)
    r = measure(args.path, args.seconds, args.keys)
    print(f"top --interval 1s, idle: {r['idle_cpu_s']}s of CPU over {r['idle_s']}s = "
          f"{100 * r['idle_core_share']:.1f}% of a core (target < 5%)")
    print(f"keypress to redraw: median {r['key_ms_median']} ms, p95 {r['key_ms_p95']} ms, max {r['key_ms_max']} ms "
          f"over {r['keys']} keys (target < 50 ms); exit {r['exit']}")


if __name__ == "__main__":
    main()
