"""A private PostgreSQL cluster for tests that stop, restart or crash the server.

The shared test server (JOBCTL_TEST_POSTGRES_URL) serves other tests at the same time, so a test
that takes a server down gets one of its own: initdb into a fresh folder, a free TCP port on
127.0.0.1, trust authentication, a Unix socket in that folder (never /var/run/postgresql), and
pg_ctl to start, stop and restart it. The binaries are found with `pg_config --bindir`, else in
/usr/lib/postgresql/*/bin (Debian, Ubuntu) or /usr/pgsql-*/bin (RPM).

initdb and postgres refuse to run as root: as root, every command runs as the `postgres` user
through runuser; as anyone else, as that user. `PrivateCluster.unavailable()` says why a
cluster cannot be made here, in one line, before anything is started."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

RUN_AS = "postgres"  # the OS user a cluster runs as when the tests run as root


def _bindir() -> Path | None:
    """A folder holding initdb, pg_ctl and postgres, or None."""
    candidates = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=10)
            if out.returncode == 0 and out.stdout.strip():
                candidates.append(out.stdout.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    def version(path: str) -> tuple[int, ...]:  # the newest first (a plain sort puts 9.6 after 15)
        name = Path(path).parent.name.removeprefix("pgsql-")
        return tuple(int(x) for x in name.split(".") if x.isdigit())

    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin") + glob.glob("/usr/pgsql-*/bin"), key=version,
                         reverse=True)
    for c in candidates:
        if all(os.access(os.path.join(c, b), os.X_OK) for b in ("initdb", "pg_ctl", "postgres")):
            return Path(c)
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ClusterError(Exception):
    """A pg_ctl or initdb command failed (the message carries its output and the server's log)."""


class PrivateCluster:
    def __init__(self, bindir: Path, run_as: list[str], user: pwd.struct_passwd | None):
        self.bindir = bindir
        self.run_as = run_as  # the prefix that runs a command as the cluster's user ([] when we are that user)
        self.user = user  # whom to chown the folder to (None: ourselves)
        self.dir = Path(tempfile.mkdtemp(prefix="jobctl-pg-", dir="/tmp"))  # short: the socket path is limited
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.port = 0
        if user is not None:
            os.chown(self.dir, user.pw_uid, user.pw_gid)

    # -- can it be done here ---------------------------------------------------------------------

    @classmethod
    def unavailable(cls) -> str | None:
        """Why no private cluster can be started here (one line), or None."""
        if os.name != "posix":
            return "a private PostgreSQL cluster needs a POSIX system"
        if _bindir() is None:
            return ("no PostgreSQL server binaries (initdb, pg_ctl, postgres) found by pg_config --bindir or in "
                    "/usr/lib/postgresql/*/bin; install the server package (postgresql-15)")
        if os.geteuid() == 0:
            try:
                pwd.getpwnam(RUN_AS)
            except KeyError:
                return f"running as root, and there is no {RUN_AS!r} user to run initdb as (initdb refuses root)"
            if not shutil.which("runuser"):
                return f"running as root, and there is no runuser to run initdb as {RUN_AS!r} (initdb refuses root)"
        return None

    @classmethod
    def create(cls) -> "PrivateCluster":
        """initdb and start a new cluster (call unavailable() first)."""
        bindir = _bindir()
        assert bindir is not None
        run_as: list[str] = []
        user = None
        if os.geteuid() == 0:
            user = pwd.getpwnam(RUN_AS)
            run_as = [shutil.which("runuser") or "runuser", "-u", RUN_AS, "--"]
        cluster = cls(bindir, run_as, user)
        try:
            cluster._run("initdb", "-D", str(cluster.data), "-A", "trust", "-U", "postgres", "-E", "UTF8",
                         "--no-sync", "--no-instructions")
            for attempt in range(5):  # a free port may be taken by someone else before the server binds it
                cluster.port = _free_port()
                try:
                    cluster.start()
                    break
                except ClusterError:
                    if attempt == 4 or "could not bind" not in cluster.log_tail():
                        raise
        except BaseException:
            cluster.destroy()
            raise
        return cluster

    # -- running its commands --------------------------------------------------------------------

    def _run(self, binary: str, *args: str, timeout: float = 60) -> str:
        argv = [*self.run_as, str(self.bindir / binary), *args]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}  # no PGDATA, PGPORT... of ours
        env["LC_ALL"] = env["LANG"] = "C"
        try:
            p = subprocess.run(argv, cwd=self.dir, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                               text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise ClusterError(f"{binary} {' '.join(args)}: no answer in {timeout:g}s\n{self.log_tail()}") from e
        if p.returncode != 0:
            raise ClusterError(f"{binary} {' '.join(args)}: exit {p.returncode}\n{p.stdout}{p.stderr}\n"
                               f"{self.log_tail()}")
        return p.stdout

    def _options(self) -> str:
        return f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1"

    def start(self) -> None:
        self._run("pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data), "-l", str(self.log), "-o", self._options())

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: `fast` (sessions are ended, a clean shutdown) or `immediate` (every
        server process killed at once, as in a crash: crash recovery at the next start)."""
        self._run("pg_ctl", "stop", "-w", "-t", "60", "-D", str(self.data), "-m", mode)

    def restart(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "restart", "-w", "-t", "60", "-D", str(self.data), "-m", mode, "-l", str(self.log),
                  "-o", self._options())

    def running(self) -> bool:
        argv = [*self.run_as, str(self.bindir / "pg_ctl"), "status", "-D", str(self.data)]
        return subprocess.run(argv, cwd=self.dir, capture_output=True, timeout=30).returncode == 0

    def ensure_running(self) -> None:
        if not self.running():
            self.start()

    def log_tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    @property
    def url(self) -> str:
        """The cluster's database `postgres` over TCP (the form users give jobctl)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def wait_until_up(self, timeout: float = 30) -> None:
        import psycopg2

        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg2.connect(self.url, connect_timeout=3).close()
                return
            except psycopg2.Error:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def destroy(self) -> None:
        """Stop the server (if it runs) and delete the folder, whatever state it is in."""
        if self.data.exists() and (self.data / "postmaster.pid").exists():
            try:
                self.stop("immediate")
            except ClusterError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)
