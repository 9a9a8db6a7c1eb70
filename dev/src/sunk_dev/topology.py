"""The shape of the dev cluster: which Slurm node lives on which Kubernetes Node.

Slurm node names and Node names deliberately differ (`sn-001` vs `node-004`) and the
mapping is reversed, so nothing can place a Pod by guessing one name from the other: the
only link is the slurmd Pod bound to the Node, as in a production SUNK deployment.
"""

from __future__ import annotations

from dataclasses import dataclass

CPUS_PER_NODE = 8
MEMORY_MIB_PER_NODE = 16000
GPUS_PER_NODE = 4
# What each stand-in slurmd Pod requests, as a real NodeSet member should: a little, beside
# what Slurm hands out. Slurm's node gets the Node's CPUs and memory less these (the Node's
# allocatable is Slurm's share plus them), so a Pod Slurm gives a whole node still fits in
# the kubelet's count, as the scheduler checks before it binds (sunk.kube.noderoom).
SLURMD_CPU_REQUEST_M = 100
SLURMD_MEMORY_REQUEST_MIB = 128
# And memory beyond both, as a NodeSet keeps its memoryReserve (256Mi by default) out of
# RealMemory: the kubelet admits a little more than Slurm hands out.
MEMORY_RESERVE_MIB = 256
# A kubelet's --max-pods (110 by default), raised on Nodes with more CPUs than that: every
# CPU Slurm hands out can hold a Pod, besides the slurmd Pod.
MIN_PODS_PER_NODE = 110
GPU_CLASSES = ("A100_PCIE_80GB", "H100_NVLINK_80GB")
ZONES = ("zone-a", "zone-b")

# Not `slurm`: that is where docs/platform.md installs the Slurm chart, and its Pods must
# not mix with these stand-ins (`kubectl -n slurm get pods`).
SLURMD_NAMESPACE = "sunk-dev-slurmd"
SLURM_NODE_LABEL = "sunk.coreweave.com/slurm-node"
KWOK_NODE_LABEL = "sunk.dev/kwok"
# A dedicated Slurm user for Pods, as in the "dedicated user + exclusive=user" GPU strategy.
JOB_USER = "sunk-k8s"
JOB_UID = 1001


@dataclass(frozen=True)
class NodePlan:
    index: int
    node: str
    slurm_node: str
    gpu_class: str
    zone: str
    cpus: int = CPUS_PER_NODE
    gpus: int = GPUS_PER_NODE

    @property
    def allocatable(self) -> dict[str, str]:
        """The Node's allocatable: what Slurm hands out, plus the slurmd Pod's requests (and
        a NodeSet's memory reserve)."""
        return {
            "cpu": f"{self.cpus * 1000 + SLURMD_CPU_REQUEST_M}m",
            "memory": f"{MEMORY_MIB_PER_NODE + SLURMD_MEMORY_REQUEST_MIB + MEMORY_RESERVE_MIB}Mi",
            "nvidia.com/gpu": str(self.gpus),
            "pods": str(max(MIN_PODS_PER_NODE, self.cpus + 1)),
        }

    @property
    def slurm_features(self) -> list[str]:
        """Slurm features mirror the Node's labels so constraints and affinity agree."""
        return [self.gpu_class.split("_")[0].lower(), self.zone.replace("-", "_")]


def plan(count: int, cpus: int = CPUS_PER_NODE, gpus: int = GPUS_PER_NODE) -> list[NodePlan]:
    width = max(3, len(str(count)))
    nodes = []
    for i in range(1, count + 1):
        host = count + 1 - i  # reversed on purpose, see the module docstring
        nodes.append(
            NodePlan(
                index=i,
                node=f"node-{host:0{width}d}",
                slurm_node=f"sn-{i:0{width}d}",
                gpu_class=GPU_CLASSES[host % 2],
                zone=ZONES[host % 2],
                cpus=cpus,
                gpus=gpus,
            )
        )
    return nodes
