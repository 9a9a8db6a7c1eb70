"""Job throughput with Slurm's confinement on and off (issue #36), measured on real Nodes.

    python -m bench.confinement [--jobs 100]

Needs the dev cluster with real Nodes (`sunk dev up --real-nodes 3`). Installs the Slurm
chart five times in a row in namespace `bench-conf`: with the chart's defaults (cgroups
per job and step, task affinity, usage sampled from cgroups, and a private /tmp and
/dev/shm per job, which needs PrologFlags=Contain), with the cgroups but no private /tmp
(`privateTmp: false`), the same with PrologFlags=Contain, Contain alone, and without
confinement (proctrack/linuxproc, task/none, no sampling), each time with a NodeSet over
the real Nodes. For each it submits `--jobs` one-CPU jobs that do nothing (`sbatch --wrap
true`) from the login Pod in one go and times first submission to empty queue, so the
figure is Slurm's cost per job (launch, cgroup and namespace set-up and tear-down), not
kubectl's. It prints jobs per second for each, the median time a job waited to start and
ran (from squeue, whole seconds), and the ratios to the unconfined run, so the cost of the
cgroups, of Contain and of the private /tmp can be told apart. A benchmark, not a
test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import time
from dataclasses import dataclass
from typing import Any

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
squeue -h --states=all -o 'job %i %V %S %e'
"""


def wait_idle(platform: Platform, nodes: int, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        said = platform.login("sinfo -h -t idle -o %D")
        if said.returncode == 0 and said.stdout.strip() == str(nodes):
            return
        time.sleep(1)
    raise SystemExit(f"the NodeSet's {nodes} members were not idle within {timeout:.0f} s")


# Each setting measured: its name, and the chart's `slurm` values for it. The private /tmp
# brings PrologFlags=Contain (Slurm refuses job_container/tmpfs without it); the two rows
# with Contain alone tell its share apart from the cgroups' and the namespace's.
CONTAIN = {"PrologFlags": "Contain"}
SETTINGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("defaults (cgroups + private /tmp)", {"confinement": {"enabled": True, "privateTmp": True}}),
    ("cgroups, no private /tmp", {"confinement": {"enabled": True, "privateTmp": False}}),
    (
        "cgroups + PrologFlags=Contain",
        {"confinement": {"enabled": True, "privateTmp": False}, "extraConf": CONTAIN},
    ),
    ("PrologFlags=Contain alone", {"confinement": {"enabled": False}, "extraConf": CONTAIN}),
    ("no confinement", {"confinement": {"enabled": False}}),
)


@dataclass(frozen=True)
class Run:
    rate: float  # jobs per second, first submission to an empty queue
    waited: float  # median seconds from a job's submission to its start (Slurm's clock, whole seconds)
    ran: float  # median seconds from its start to its end


def parse_run(output: str, jobs: int) -> Run:
    """The rate, and the medians of the `job ID SUBMIT START END` lines squeue printed."""
    elapsed = next(float(line.split()[1]) for line in output.splitlines() if line.startswith("elapsed "))
    waited, ran = [], []
    for line in output.splitlines():
        fields = line.split()
        if len(fields) != 5 or fields[0] != "job":
            continue
        try:
            submit, start, end = (dt.datetime.fromisoformat(f).timestamp() for f in fields[2:])
        except ValueError:
            continue  # a job without a start or end time (N/A)
        waited.append(start - submit)
        ran.append(end - start)
    return Run(
        jobs / elapsed,
        statistics.median(waited) if waited else float("nan"),
        statistics.median(ran) if ran else float("nan"),
    )


def measure(cluster: DevCluster, kube: AdminKube, slurm: dict[str, Any], jobs: int) -> Run:
    """One setting's run (one install, removed afterwards)."""
    platform = Platform(cluster, namespace=NAMESPACE, release="slurm")
    platform.install({"slurm": slurm}, scheduler=False)
    try:
        platform.apply_nodeset(kube, nodeset("compute", ["main"]))
        wait_idle(platform, platform.real_nodes)
        said = platform.login(RUN.format(jobs=jobs), timeout=900)
        if said.returncode != 0:
            raise SystemExit(f"the jobs did not run: {said.stderr or said.stdout}")
        return parse_run(said.stdout, jobs)
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
    runs = {}
    for name, slurm in SETTINGS:
        runs[name] = run = measure(cluster, kube, slurm, args.jobs)
        print(
            f"{name}: {args.jobs} jobs, {run.rate:.2f} jobs/s; median submit → start {run.waited:.0f} s, "
            f"start → end {run.ran:.0f} s",
            flush=True,
        )
    baseline = runs[SETTINGS[-1][0]].rate
    for name, _ in SETTINGS[:-1]:
        print(f"ratio {name} / no confinement: {runs[name].rate / baseline:.2f}x")


if __name__ == "__main__":
    main()
