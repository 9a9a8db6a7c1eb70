"""Job throughput with Slurm's confinement on and off (issue #36), measured on real Nodes.

    python -m bench.confinement [--jobs 100]

Needs the dev cluster with real Nodes (`sunk dev up --real-nodes 3`). Installs the Slurm
chart three times in a row in namespace `bench-conf`: with the chart's defaults (cgroups
per job and step, task affinity, usage sampled from cgroups, and a private /tmp and
/dev/shm per job), with the cgroups but no private /tmp (`privateTmp: false`), and without
confinement (proctrack/linuxproc, task/none, no sampling), each time with a NodeSet over
the real Nodes. For each it submits `--jobs` one-CPU jobs that do nothing (`sbatch --wrap
true`) from the login Pod in one go and times first submission to empty queue, so the
figure is Slurm's cost per job (launch, cgroup and namespace set-up and tear-down), not
kubectl's. It prints jobs per second for each and their ratios to the unconfined run, so
the cost of the cgroups and of the private /tmp can be told apart. A benchmark, not a
test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import time

from tests.e2e.slurm_in_pods import delete_namespace

from sunk_dev import DevCluster
from sunk_dev.kubeapi import AdminKube
from sunk_dev.platform import Platform, nodeset

NAMESPACE = "bench-conf"
# Submits every job, then waits for the queue to empty; prints the seconds that took.
RUN = r"""n={jobs}
start=$(date +%s.%N)
for i in $(seq "$n"); do sbatch --parsable -c1 --mem=32 -o /dev/null --wrap true >/dev/null || exit 1; done
deadline=$(( $(date +%s) + 600 ))
while [ -n "$(squeue -h -o %i)" ]; do
  [ "$(date +%s)" -lt "$deadline" ] || {{ echo "queue not empty after 600 s" >&2; exit 1; }}
  sleep 0.2
done
echo "elapsed $(awk "BEGIN {{ print $(date +%s.%N) - $start }}")"
"""


def wait_idle(platform: Platform, nodes: int, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        said = platform.login("sinfo -h -t idle -o %D")
        if said.returncode == 0 and said.stdout.strip() == str(nodes):
            return
        time.sleep(1)
    raise SystemExit(f"the NodeSet's {nodes} members were not idle within {timeout:.0f} s")


# Each setting measured: its name, and the chart's slurm.confinement values for it.
SETTINGS = (
    ("defaults (cgroups + private /tmp)", {"enabled": True, "privateTmp": True}),
    ("cgroups, no private /tmp", {"enabled": True, "privateTmp": False}),
    ("no confinement", {"enabled": False}),
)


def measure(cluster: DevCluster, kube: AdminKube, confinement: dict[str, bool], jobs: int) -> float:
    """Jobs per second with these confinement values (one install, removed afterwards)."""
    platform = Platform(cluster, namespace=NAMESPACE, release="slurm")
    platform.install({"slurm": {"confinement": confinement}}, scheduler=False)
    try:
        platform.apply_nodeset(kube, nodeset("compute", ["main"]))
        wait_idle(platform, platform.real_nodes)
        said = platform.login(RUN.format(jobs=jobs), timeout=900)
        if said.returncode != 0:
            raise SystemExit(f"the jobs did not run: {said.stderr or said.stdout}")
        elapsed = float(said.stdout.split()[-1])
        return jobs / elapsed
    finally:
        platform.uninstall()
        delete_namespace(kube, NAMESPACE, timeout=180)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=100)
    args = parser.parse_args()
    cluster = DevCluster()
    cluster.require_running()
    kube = AdminKube(cluster.layout)
    rates = {}
    for name, confinement in SETTINGS:
        rates[name] = measure(cluster, kube, confinement, args.jobs)
        print(f"{name}: {args.jobs} jobs, {rates[name]:.2f} jobs/s")
    baseline = rates[SETTINGS[-1][0]]
    for name, _ in SETTINGS[:-1]:
        print(f"ratio {name} / no confinement: {rates[name] / baseline:.2f}x")


if __name__ == "__main__":
    main()
