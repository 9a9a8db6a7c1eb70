"""What a container costs a training job (issue #37): time per epoch of the train-and-serve
example's training, in its image against the same script on the same slurmd Pods without one.

    python -m bench.train_in_container [--runs 3] [--epochs 20]

Needs the dev cluster with real Nodes (`sunk dev up --real-nodes 3`). Builds and pushes the
example's image (examples/train-and-serve/image), installs the Slurm chart in namespace
`bench-tns` with the example's values and a NodeSet of three members whose slurmd image IS
the example's image, so PyTorch and train.py are on the nodes themselves too. Then, as alice,
it runs the example's batch script (three nodes, one rank each) `--runs` times in each form,
alternating: `srun --container=IMAGE python3 train.py` and `srun python3 train.py`. The first
container run (cold image caches) is left out. Prints the median of each job's mean epoch
and the ratio (throughput in a container against without). A benchmark: it asserts nothing.
"""

from __future__ import annotations

import argparse
import re
import statistics

import yaml
from tests.e2e.slurm_in_pods import delete_namespace

from sunk_dev import DevCluster, registry, story
from sunk_dev.kubeapi import AdminKube
from sunk_dev.people import as_user, directory_values, prepare_namespace, ssh, wait_associated
from sunk_dev.platform import Platform, merge_values, nodeset

NAMESPACE = "bench-tns"
EXAMPLE = story.EXAMPLE
WORKDIR = "/shared/bench"


def run_job(cluster: DevCluster, kube: AdminKube, image: str, script: str, epochs: int) -> float:
    """One training job (sbatch --wait); its mean epoch in seconds."""
    command = (
        f"mkdir -p {WORKDIR} && cd {WORKDIR} && cat > job.sbatch <<'SCRIPT'\n{script}SCRIPT\n"
        f"IMAGE={image} sbatch --wait --parsable job.sbatch --epochs {epochs} --out {WORKDIR}/ckpt"
    )
    done = ssh(cluster, kube, NAMESPACE, "alice", command, timeout=1800)
    job = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "?"
    output = ssh(cluster, kube, NAMESPACE, "alice", f"cat {WORKDIR}/slurm-{job}.out").stdout
    found = re.findall(r"mean epoch ([\d.]+)s", output)
    if done.returncode or not found:
        raise SystemExit(f"job {job} failed (exit {done.returncode}): {done.stderr}\n{output}")
    return float(found[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args()
    cluster = DevCluster()
    cluster.require_running()
    kube = AdminKube(cluster.layout)
    image = story.build_image(cluster)
    in_container = (EXAMPLE / "train.sbatch").read_text()
    plain = in_container.replace('srun --container="$IMAGE" ', "srun ")
    assert plain != in_container, "train.sbatch no longer runs its step with srun --container"
    prepare_namespace(cluster, kube, NAMESPACE)
    platform = Platform(cluster, namespace=NAMESPACE, release="slurm")
    example = yaml.safe_load((EXAMPLE / "values.yaml").read_text())
    values = merge_values(directory_values(cluster), {**example, "scheduler": {"enabled": False}})
    values["slurm"]["containers"] = {"insecureRegistries": [registry.running_address(cluster.layout)]}
    # The members run the example's image as slurmd, which the operator refuses unless allowed.
    values.setdefault("slurmd", {})["allowedImages"] = [image]
    [members] = story.example("nodeset.yaml")
    times: dict[str, list[float]] = {"container": [], "plain": []}
    try:
        platform.install(values, scheduler=False)
        spec = members["spec"]
        platform.apply_nodeset(
            kube,
            nodeset("compute", spec["partitions"], replicas=3, resources=spec["resources"], image=image),
        )
        as_user(cluster, kube, NAMESPACE, "alice", "sinfo -h -t idle -o %D | grep -qx 3", within=600)
        wait_associated(platform, "alice")
        run_job(cluster, kube, image, in_container, args.epochs)  # cold caches: left out
        for _ in range(args.runs):
            times["container"].append(run_job(cluster, kube, image, in_container, args.epochs))
            times["plain"].append(run_job(cluster, kube, image, plain, args.epochs))
    finally:
        platform.uninstall()
        delete_namespace(kube, NAMESPACE, timeout=180)
    median = {form: statistics.median(epochs) for form, epochs in times.items()}
    for form, epochs in times.items():
        print(f"{form:>9}: mean epoch, median {median[form]:.3f} s over {len(epochs)} jobs {epochs}")
    print(f"throughput in a container / without: {median['plain'] / median['container']:.2f}x")


if __name__ == "__main__":
    main()
