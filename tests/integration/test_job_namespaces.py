"""Issue #36: slurmd starts where Slurm can pin every job's mount namespace (private /tmp),
on this machine's own kernel.

Since Linux 6.18 mount namespaces are numbered from per-CPU batches, and the kernel refuses
to bind-mount a mount namespace numbered below the binding process's own. slurmstepd pins
each job's namespace that way, so in a container whose namespace was made on the "wrong"
CPU, jobs that start on another CPU fail to boot. These tests make such a namespace on the
host (unshare, root only: nothing outside it is touched) and check that the member's start
script (sunk.operator.nodeset.confinement.ORDERED_NAMESPACE) moves to one that can pin them all.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sunk.operator.nodeset import confinement

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or len(os.sched_getaffinity(0)) < 2,
    reason="needs root (unshare, mount) and at least two CPUs",
)

# Exits 0 if this process can pin (as slurmstepd does, with mount(2)) a new mount namespace
# made on each of its CPUs, else 1; prints the CPUs it could not and the affinity it runs with.
PROBE = r"""
import ctypes, json, os, subprocess, sys, tempfile, time
libc = ctypes.CDLL(None, use_errno=True)
where = tempfile.mkdtemp()
assert libc.mount(b"sunk-test", where.encode(), b"tmpfs", 0, None) == 0
assert libc.mount(None, where.encode(), None, 1 << 18, None) == 0  # MS_PRIVATE
open(f"{where}/ns", "w").close()
refused = []
for cpu in sorted(os.sched_getaffinity(0)):
    child = subprocess.Popen(["taskset", "-c", str(cpu), "unshare", "--mount", "sleep", "60"])
    here, deadline = os.readlink("/proc/self/ns/mnt"), time.monotonic() + 5
    while os.readlink(f"/proc/{child.pid}/ns/mnt") == here and time.monotonic() < deadline:
        time.sleep(0.01)
    if libc.mount(f"/proc/{child.pid}/ns/mnt".encode(), f"{where}/ns".encode(), None, 4096, None):
        refused.append(cpu)
    else:
        libc.umount2(f"{where}/ns".encode(), 0)
    child.kill()
    child.wait()
libc.umount2(where.encode(), 0)
os.rmdir(where)
print(json.dumps({"refused": refused, "cpus": sorted(os.sched_getaffinity(0)),
                  "moves": os.environ.get("SUNK_NS_MOVES")}))
sys.exit(1 if refused else 0)
"""


def in_namespace_made_on(cpu: int, *command: str) -> subprocess.CompletedProcess[str]:
    """Run command in a new mount namespace made on cpu, then free to use every CPU."""
    every = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
    return subprocess.run(
        ["taskset", "-c", str(cpu), "unshare", "--mount", "taskset", "-c", every, *command],
        capture_output=True,
        text=True,
        timeout=60,
    )


def probe(cpu: int, *before: str) -> subprocess.CompletedProcess[str]:
    return in_namespace_made_on(cpu, *before, sys.executable, "-c", PROBE)


def test_issue36_slurmd_runs_where_a_job_namespace_made_on_any_cpu_can_be_pinned() -> None:
    """Catches slurmd left in a namespace that cannot pin jobs started on some CPU (each
    such job then fails to boot and Slurm drains the node), and a move that leaves slurmd
    pinned to one CPU."""
    wrong = [cpu for cpu in sorted(os.sched_getaffinity(0)) if probe(cpu).returncode != 0]
    if not wrong:
        pytest.skip("this kernel numbers mount namespaces in the order they are made: nothing to move")
    script = ["sh", "-c", confinement.BOOT, "ordered", confinement.ORDERED_NAMESPACE]
    for cpu in wrong:
        moved = probe(cpu, *script)
        assert moved.returncode == 0, moved.stdout + moved.stderr
        assert f'"cpus": {sorted(os.sched_getaffinity(0))}' in moved.stdout
        assert '"moves": null' in moved.stdout  # its bookkeeping does not reach slurmd


def test_issue36_a_namespace_that_can_pin_them_all_is_kept() -> None:
    """Catches a start script that moves slurmd even where nothing is wrong (every move
    nests one more namespace) or that does not run slurmd's command at all."""
    right = next(cpu for cpu in sorted(os.sched_getaffinity(0)) if probe(cpu).returncode == 0)
    kept = in_namespace_made_on(
        right,
        *("sh", "-c", 'readlink /proc/self/ns/mnt; exec "$@"', "before"),
        *("sh", "-c", confinement.BOOT, "ordered", confinement.ORDERED_NAMESPACE),
        *("readlink", "/proc/self/ns/mnt"),
    )
    assert kept.returncode == 0, kept.stderr
    [before, after] = kept.stdout.split()
    assert before == after  # slurmd's command runs in the namespace it was started in


def test_issue36_without_mount_rights_the_start_stops_with_its_reason(tmp_path: Path) -> None:
    """Catches slurmd started anyway where jobs cannot get a private /tmp (every job would
    fail to boot), or stopped without a reason the operator can show."""
    said = tmp_path / "said"
    script = confinement.ORDERED_NAMESPACE.replace("/dev/termination-log", str(said))
    done = subprocess.run(
        [
            *("setpriv", "--bounding-set=-sys_admin", "--inh-caps=-sys_admin"),  # a container without it
            *("sh", "-c", confinement.BOOT, "ordered", script, "echo", "slurmd started"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3 and "slurmd started" not in done.stdout
    assert said.read_text().startswith(
        "confinement unavailable: slurmd cannot make and pin mount namespaces for private /tmp"
    )
