"""memory_limit as a cap on a handler's whole process tree: a memory cgroup per handler, where the
worker may make them (cgroup v1 here: a writable memory hierarchy; v2 under a delegated cgroup).

The real tree cap is tried on this machine's cgroups (skipped, with the reason, where no writable
one exists). The v2 steps cannot run here (the v2 hierarchy has no memory controller): they are
checked against a temporary folder laid out like cgroupfs; the real v2 path is not run by CI."""

import errno
import json
import os
import re
import subprocess
import textwrap
import time

import pytest

from conftest import JOBCTL, run_inproc
from jobctl.worker import cgroup
from jobctl.worker.cgroup import V1, V2, MemoryCgroups
from jobctl.worker.supervisor import PosixLauncher

MiB = 1024 * 1024

# Four children, each touching 150 MiB, all alive at once: 600 MiB for the tree. Exit 1 when one
# of them was killed, as a handler that checks its children does.
TREE = textwrap.dedent("""
    import os, sys, time
    n, mib = int(sys.argv[1]), int(sys.argv[2])
    kids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            b = bytearray(mib * 1024 * 1024)
            for i in range(0, len(b), 4096):
                b[i] = 1
            time.sleep(0.3)
            os._exit(0)
        kids.append(pid)
    lost = [k for k in kids if os.waitpid(k, 0)[1]]
    if lost:
        print(f"{len(lost)} of {n} children died", file=sys.stderr)
    sys.exit(1 if lost else 0)
""")


def real_place():
    version, where = cgroup.describe()
    if version is None:
        pytest.skip(f"no writable memory cgroup here ({where})")
    if version == V2:
        # A worker moves itself into a leaf of its cgroup only where it is alone there: under
        # pytest it is not, so it would fall back to the per-process cap.
        pytest.skip("cgroup v2 here: the tree cap needs a worker alone in a delegated cgroup (a systemd unit)")
    return where


def test_a_handler_whose_children_together_exceed_the_limit_fails_and_its_cgroup_goes(tmp_path):
    base = real_place()
    db = tmp_path / "q" / "jobs.db"
    cfg = tmp_path / "jobctl.toml"
    cfg.write_text(textwrap.dedent(f"""
        [types.tree]
        command = ["python3", "-c", {json.dumps(TREE)}, "4", "150"]
        memory_limit = "200MiB"
        max_attempts = 1
        [types.small]
        command = ["python3", "-c", {json.dumps(TREE)}, "2", "50"]
        memory_limit = "200MiB"
        max_attempts = 1
        [worker]
        poll = "100ms"
    """))
    for t in ("tree", "small"):
        assert run_inproc("--config", cfg, "--db", db, "enqueue", t).exit_code == 0
    w = subprocess.run([*JOBCTL, "--db", str(db), "--config", str(cfg), "work", "--stop-when-empty"],
                       capture_output=True, text=True, timeout=60)
    assert w.returncode == 0, w.stderr
    pid = re.search(r"started: .*\bpid (\d+)", w.stderr).group(1)
    assert f"memory: memory_limit caps each handler's whole process tree (cgroup v1: a cgroup per handler in {base})" \
        in w.stderr, w.stderr
    tree = json.loads(run_inproc("--config", cfg, "--db", db, "show", "1", "--json").stdout)
    assert tree["status"] == "buried", tree
    assert tree["error"].startswith("out of memory: the handler hit its memory limit of 200MiB (exit 1)"), tree["error"]
    small = json.loads(run_inproc("--config", cfg, "--db", db, "show", "2", "--json").stdout)
    assert small["status"] == "completed", small
    assert not [n for n in os.listdir(base) if n.startswith(f"jobctl-{pid}-")]  # each handler's group removed


def test_run_caps_the_tree_too(tmp_path, db):
    real_place()
    cfg = tmp_path / "jobctl.toml"
    cfg.write_text(f'[types.tree]\ncommand = ["python3", "-c", {json.dumps(TREE)}, "4", "150"]\nmemory_limit = "200MiB"\n')
    r = subprocess.run([*JOBCTL, "--db", str(db), "--config", str(cfg), "run", "tree"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1, r.stderr
    assert "jobctl: the handler of tree failed (exit 1): it hit its memory limit of 200MiB (the kernel killed" \
        in r.stderr, r.stderr


def test_what_a_handler_leaves_in_its_cgroup_is_killed_with_it(tmp_path):
    """A process that left the handler's process group (setsid) is still in its cgroup: removing
    the group kills it first."""
    real_place()
    cg, note = MemoryCgroups.setup()
    assert cg is not None, note
    slot = cg.create(64 * MiB)
    launcher = PosixLauncher()
    rd, wr = os.pipe()
    script = "import os, sys, time\nif os.fork() == 0:\n    os.setsid(); print(os.getpid(), flush=True); time.sleep(60)\n"
    proc = launcher.spawn(["python3", "-c", script], rd, wr, 2, dict(os.environ), cgroup_procs=slot.procs_fd)
    os.close(wr)
    assert launcher.reap(proc, timeout=10) == 0
    escaped = int(os.read(rd, 64))
    os.close(rd)
    assert str(escaped) in open(os.path.join(slot.path, "cgroup.procs")).read().split()
    assert cg.remove(slot) and not os.path.exists(slot.path)
    assert not alive(escaped)


def alive(pid: int) -> bool:
    """Running (not a zombie waiting for init to reap it), within a second."""
    deadline = time.monotonic() + 1
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(") ", 1)[1][0] in "ZX":
                    return False
        except FileNotFoundError:
            return False
        time.sleep(0.01)
    return True


# -- cgroup v2, against a folder laid out like cgroupfs ------------------------------------------

def fake_v2(tmp_path, procs: str, controllers="cpu memory pids", delegated=True):
    base = tmp_path / "cg" / "worker.service"
    base.mkdir(parents=True)
    (base / "cgroup.controllers").write_text(controllers + "\n")
    (base / "cgroup.subtree_control").write_text("")
    (base / "cgroup.procs").write_text(procs)
    if delegated:  # as systemd marks a Delegate=yes unit's cgroup (or: its files are the worker's user's)
        try:
            os.setxattr(base, "trusted.delegate" if os.geteuid() == 0 else "user.delegate", b"1")
        except OSError as e:
            if os.geteuid() == 0 or os.stat(base).st_uid != os.geteuid():
                pytest.skip(f"cannot mark {base} as delegated ({e.strerror})")
    return base


def kernel_mkdir(path):
    """What the kernel does on mkdir in a v2 cgroup with +memory: the group's files appear."""
    os.mkdir(path)
    for name in ("cgroup.procs", "memory.max", "memory.swap.max", "memory.oom.group", "memory.events"):
        with open(os.path.join(path, name), "w") as f:
            f.write("max\n" if name.endswith(".max") else "0\n" if name == "memory.oom.group" else "")


def test_v2_the_worker_moves_into_a_leaf_and_each_handler_gets_a_capped_sibling(tmp_path, monkeypatch):
    me = str(os.getpid())
    base = fake_v2(tmp_path, me + "\n")
    cg, note = MemoryCgroups.setup([(V2, str(base))])
    assert cg is not None, note
    assert note == f"memory_limit caps each handler's whole process tree (cgroup v2: a cgroup per handler in {base})"
    assert (base / "worker" / "cgroup.procs").read_text() == me  # moved first: a v2 parent holds no process
    assert (base / "cgroup.subtree_control").read_text() == "+memory"  # then the children get the controller
    monkeypatch.setattr(cg, "_mkdir", kernel_mkdir)
    slot = cg.create(200 * MiB)
    group = base / f"jobctl-{me}-1"
    assert slot.path == str(group)
    assert (group / "memory.max").read_text() == str(200 * MiB)
    assert (group / "memory.swap.max").read_text() == "0"  # no way around it through swap
    assert (group / "memory.oom.group").read_text() == "1"  # an OOM kill takes the whole handler
    # The handler moves itself in between fork and exec: its pid is written before its command runs.
    rd, wr = os.pipe()
    launcher = PosixLauncher()
    proc = launcher.spawn(["true"], rd, wr, wr, dict(os.environ), memory_limit=200 * MiB, cgroup_procs=slot.procs_fd)
    os.close(rd)
    os.close(wr)
    assert launcher.reap(proc, timeout=10) == 0
    assert (group / "cgroup.procs").read_text() == str(proc.pid)
    (group / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 1\noom_kill 3\noom_group_kill 1\n")
    assert cg.oom_kills(slot) == 3
    (group / "cgroup.procs").write_text("")  # the kernel empties it as the processes end
    assert not cg.remove(slot, wait=0.02)  # its files are still there: busy, kept for later
    assert cg.leftover == [str(group)]
    for name in os.listdir(group):
        os.unlink(group / name)  # the kernel's files go with the group
    cg.sweep()
    assert cg.leftover == [] and not group.exists()


@pytest.mark.parametrize("procs, controllers, delegated, why", [
    ("{me}\n4242\n", "cpu memory", True, "other processes share the worker's cgroup"),
    ("{me}\n", "cpu pids", True, "the memory controller is not available"),
    ("{me}\n", "cpu memory", False, "is not marked as delegated"),
])
def test_v2_the_worker_keeps_the_per_process_cap_where_it_cannot_have_its_cgroup(tmp_path, procs, controllers,
                                                                                   delegated, why):
    if not delegated and os.geteuid() != 0:
        pytest.skip("a user other than root owns the files it made: that is the mark of a delegation")
    base = fake_v2(tmp_path, procs.format(me=os.getpid()), controllers, delegated)
    cg, note = MemoryCgroups.setup([(V2, str(base))])
    assert cg is None
    assert note.startswith("memory_limit caps each process of a handler only, not its whole tree (RLIMIT_AS): "
                           "cgroup v2: ") and why in note, note
    assert not (base / "worker").exists() and (base / "cgroup.subtree_control").read_text() == ""  # nothing moved


def test_groups_left_by_a_killed_worker_are_removed_by_the_next(tmp_path):
    base = fake_v2(tmp_path, f"{os.getpid()}\n")
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = gone.pid  # (its worker is gone)
    (base / f"jobctl-{dead}-7").mkdir()
    (base / f"jobctl-{os.getppid()}-1").mkdir()  # a live worker's: kept
    (base / "other").mkdir()  # not jobctl's: kept
    cg, _ = MemoryCgroups.setup([(V2, str(base))])
    assert cg is not None
    assert sorted(os.listdir(base)) == sorted(["cgroup.controllers", "cgroup.procs", "cgroup.subtree_control", "other",
                                               "worker", f"jobctl-{os.getppid()}-1"])


def test_the_worker_finds_its_cgroups_from_proc():
    mountinfo = textwrap.dedent("""\
        31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
        33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
        35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
        41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
        """)
    own = "5:cpuacct,cpu:/\n4:memory:/api/abc\n0::/system.slice/w.service\n"
    assert cgroup.locate(own, mountinfo) == [(V2, "/sys/fs/cgroup/unified/system.slice/w.service"),
                                             (V1, "/sys/fs/cgroup/memory/api/abc")]
    # a container's view: the mount's root is the container's cgroup
    inner = "50 40 0:38 /system.slice/c.scope /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    assert cgroup.locate("0::/system.slice/c.scope/app\n", inner) == [(V2, "/sys/fs/cgroup/app")]
    assert cgroup.locate("0::/elsewhere\n", inner) == []


def test_doctor_says_the_limit_caps_the_whole_tree_where_a_cgroup_can_hold_it(tmp_path, db):
    version, where = cgroup.describe()
    cfg = tmp_path / "c.toml"
    cfg.write_text('[types.hog]\ncommand = ["true"]\nmemory_limit = "200MiB"\n')
    assert run_inproc("--config", cfg, "--db", db, "init").exit_code == 0
    report = json.loads(run_inproc("--config", cfg, "--db", db, "doctor", "--json").stdout)
    check = next(c for c in report["checks"] if c["check"] == "memory limits")
    if version is None:
        assert check["detail"].startswith("memory_limit caps each process only"), check
    else:
        assert check["detail"].startswith(f"memory_limit caps each handler's whole process tree ({version}: "), check
        assert where in check["detail"] and check["detail"].endswith("(hog 200MiB)"), check
        assert (report["memory_limit_scope"], report["memory_cgroup"]) == ("tree", version)


def test_a_handler_that_cannot_move_into_its_cgroup_is_not_started():
    """The move is the handler's first step after fork: when it fails, its command never runs and
    the worker hears why (the worker's problem, not the command's)."""
    from jobctl.worker.supervisor import CgroupMoveError

    rd, wr = os.pipe()
    os.close(rd)  # cgroup.procs stands for a file that refuses the write (EPIPE)
    with pytest.raises(CgroupMoveError) as e:
        PosixLauncher().spawn(["touch", "ran"], 0, 1, 2, dict(os.environ), cgroup_procs=wr)
    os.close(wr)
    assert e.value.errno == errno.EPIPE and not os.path.exists("ran")
