"""How much a container costs a job step (issue #37), measured on real Nodes.

    python -m bench.containers [--runs 10]

Needs the dev cluster with real Nodes (`sunk dev up --real-nodes 3`), which also runs the
registry and the directory. Pushes the job image (tests/e2e/job-image: the slurmd image
plus one file) to the registry, installs the Slurm chart in namespace `bench-ctr` with a
NodeSet of one member, and, as alice over SSH on the login Pod, times in one shell there:

- `srun true` on the node, `--runs` times (the baseline);
- `srun --container=IMAGE true` with her image cache on the node emptied first (cold:
  fetch from the registry and unpack), `--runs` times;
- the same with the cache warm, `--runs` times.

It prints the median of each and the ratios against the plain step. A benchmark, not a
test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from tests.e2e.slurm_in_pods import delete_namespace

from sunk_dev import DevCluster, registry
from sunk_dev.kubeapi import AdminKube
from sunk_dev.people import as_user, directory_values, prepare_namespace, ssh
from sunk_dev.platform import Platform, nodeset

NAMESPACE = "bench-ctr"
CONTEXT = Path(__file__).resolve().parents[1] / "tests" / "e2e" / "job-image"
# Each line of output: "<label> <seconds>" for one step.
TIMED = r"""t() {{
  label=$1; shift; s=$(date +%s.%N)
  "$@" >/dev/null 2>&1 || echo "failed $label"
  echo "$label $(awk "BEGIN {{ print $(date +%s.%N) - $s }}")"
}}
for i in $(seq {runs}); do t plain srun -N1 --chdir=/tmp true; done
for i in $(seq {runs}); do
  srun -N1 --chdir=/tmp rm -rf /var/cache/sunk/containers/$(id -u)
  t cold srun -N1 --chdir=/tmp --container={image} true
done
for i in $(seq {runs}); do t warm srun -N1 --chdir=/tmp --container={image} true; done
"""


def wait_idle(platform: Platform, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if platform.login("sinfo -h -t idle -o %D").stdout.strip() == "1":
            return
        time.sleep(1)
    raise SystemExit(f"the NodeSet's member was not idle within {timeout:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    cluster = DevCluster()
    cluster.require_running()
    kube = AdminKube(cluster.layout)
    image = registry.build_from_slurmd(cluster.layout, CONTEXT, "job")
    prepare_namespace(cluster, kube, NAMESPACE)
    platform = Platform(cluster, namespace=NAMESPACE, release="slurm")
    values = directory_values(cluster)
    values["slurm"]["containers"] = {"insecureRegistries": [registry.running_address(cluster.layout)]}
    try:
        platform.install(values, scheduler=False)
        platform.apply_nodeset(kube, nodeset("compute", ["main"], replicas=1))
        wait_idle(platform)
        as_user(cluster, kube, NAMESPACE, "alice", "true")  # she has reached the login Pod
        script = TIMED.format(runs=args.runs, image=image)
        said = ssh(cluster, kube, NAMESPACE, "alice", script, timeout=3600).stdout
    finally:
        platform.uninstall()
        delete_namespace(kube, NAMESPACE, timeout=180)
    failed = [line for line in said.splitlines() if line.startswith("failed")]
    if failed:
        raise SystemExit(f"steps failed: {failed}")
    times: dict[str, list[float]] = {}
    for line in said.splitlines():
        label, _, seconds = line.partition(" ")
        times.setdefault(label, []).append(float(seconds))
    median = {label: statistics.median(values) for label, values in times.items()}
    for label in ("plain", "cold", "warm"):
        print(f"{label:>5}: median {median[label]:.2f} s over {len(times[label])} steps")
    print(f"warm container / plain: {median['warm'] / median['plain']:.2f}x")
    print(f"cold container / plain: {median['cold'] / median['plain']:.2f}x")


if __name__ == "__main__":
    main()
