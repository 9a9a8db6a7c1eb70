"""What being a person from the directory costs at the login node (issue #35): SSH login to
a shell, and `sbatch` of a one-line job, as alice (her key from the directory, her name from
the people ConfigMap through libnss-extrausers, her Slurm account kept by the operator)
against root with a key in the chart's values, in the same run.

    python -m bench.login_as_person [--tries 50]

Needs the dev cluster with real Nodes (`sunk dev up --real-nodes 3`). Installs the Slurm
chart in namespace `bench-login` with the dev directory and root's login allowed (a key
made for this run), and a NodeSet of one member. Each try logs in over SSH from this machine
and runs `true` in a login shell (the time to a usable shell), then times `sbatch --wrap
true` one after another in a session of each person, in five rounds. The two people
alternate try by try (round by round for sbatch), so that whatever else the machine does
falls on both. Prints p50 and p99 of each and the
ratio alice/root (the issue's target: within 1.2x). A benchmark: it asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.e2e.slurm_in_pods import delete_namespace

from sunk_dev import DevCluster
from sunk_dev.kubeapi import AdminKube
from sunk_dev.people import as_user, directory_values, login_address, prepare_namespace, ssh, wait_associated
from sunk_dev.platform import Platform, merge_values, nodeset

NAMESPACE = "bench-login"
OPTIONS = ["BatchMode=yes", "StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null", "LogLevel=ERROR"]
ROUNDS = 5  # sbatch loops per person, alternating
SBATCH = "sbatch --parsable --chdir=/tmp --output=/dev/null --wrap true"


def root_ssh(address: str, key: Path, command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    options = [arg for option in OPTIONS for arg in ("-o", option)]
    argv = ["ssh", "-i", str(key), *options, f"root@{address}", command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def timed(run: Callable[[], subprocess.CompletedProcess[str]]) -> float:
    began = time.perf_counter()
    done = run()
    took = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"a try failed (exit {done.returncode}): {done.stderr}")
    return took


def sbatch_times(said: str, tries: int) -> list[float]:
    """Seconds per sbatch, as bash's `time` printed them in one session."""
    times = [float(line.split()[-1]) for line in said.splitlines() if line.startswith("took ")]
    if len(times) != tries:
        raise SystemExit(f"expected {tries} sbatch times, got: {said[-500:]}")
    return times


def chunks(total: int, rounds: int) -> list[int]:
    """`total` split into `rounds` nearly equal parts (none empty)."""
    size, extra = divmod(total, rounds)
    return [size + (1 if i < extra else 0) for i in range(rounds) if size + (1 if i < extra else 0)]


def loop(tries: int) -> str:
    """A shell loop that times `tries` submissions; it stops at the first that fails."""
    one = f"{{ time {SBATCH} >/dev/null || exit 1; }} 2>&1"
    return f"TIMEFORMAT='took %R'; for i in $(seq {tries}); do {one}; done"


def report(what: str, alice: list[float], root: list[float]) -> None:
    def p(values: list[float], q: int) -> float:
        return statistics.quantiles(values, n=100, method="inclusive")[q - 1]

    print(f"{what}: tries {len(alice)} each")
    for label, values in (("alice (directory)", alice), ("root (local key)", root)):
        print(f"  {label:18} p50 {p(values, 50) * 1000:7.1f} ms   p99 {p(values, 99) * 1000:7.1f} ms")
    ratios = f"p50 {p(alice, 50) / p(root, 50):.2f}x   p99 {p(alice, 99) / p(root, 99):.2f}x"
    print(f"  ratio alice/root   {ratios}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tries", type=int, default=50)
    args = parser.parse_args()
    cluster = DevCluster()
    cluster.require_running()
    kube = AdminKube(cluster.layout)
    with tempfile.TemporaryDirectory() as keys:
        key = Path(keys) / "root"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        values = merge_values(
            directory_values(cluster),
            {"login": {"allowRootLogin": True, "authorizedKeys": [Path(f"{key}.pub").read_text().strip()]}},
        )
        prepare_namespace(cluster, kube, NAMESPACE)
        plat = Platform(cluster, namespace=NAMESPACE, release="slurm")
        try:
            plat.install(values, scheduler=False)
            plat.apply_nodeset(kube, nodeset("compute", ["main"], replicas=1))
            wait_associated(plat, "alice")
            as_user(cluster, kube, NAMESPACE, "alice", "sinfo")  # her people reached the login Pod
            address = login_address(kube, NAMESPACE)
            assert address is not None
            logins: dict[str, list[float]] = {"alice": [], "root": []}
            for _ in range(args.tries):
                logins["alice"].append(timed(lambda: ssh(cluster, kube, NAMESPACE, "alice", "true")))
                logins["root"].append(timed(lambda: root_ssh(address, key, "true")))
            report("SSH login to a shell", logins["alice"], logins["root"])
            submits: dict[str, list[float]] = {"alice": [], "root": []}
            for chunk in chunks(args.tries, ROUNDS):  # alternating, like the logins
                said = ssh(cluster, kube, NAMESPACE, "alice", loop(chunk), timeout=900)
                submits["alice"] += sbatch_times(said.stdout, chunk)
                said = root_ssh(address, key, loop(chunk), timeout=900)
                submits["root"] += sbatch_times(said.stdout, chunk)
            report("sbatch of a one-line job", submits["alice"], submits["root"])
        finally:
            plat.uninstall()
            delete_namespace(kube, NAMESPACE, timeout=180)


if __name__ == "__main__":
    main()
