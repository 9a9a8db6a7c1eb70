"""--placement=pack (R9.2): which idle nodes a new job leaves out so that they stay whole
for whole-node Pods, and how long a packed job waits before it gets them back."""

from __future__ import annotations

from dataclasses import dataclass

from sunk.scheduler.translate import PlaceholderJob
from sunk.slurm.models import SlurmNode

# --placement=pack: a job that left idle nodes out and still waits this long after its
# submission gets them back (the node listing it was packed by may have been stale).
PACK_PATIENCE_S = 5.0


@dataclass(frozen=True)
class Packing:
    """Where --placement=pack steers a job: `towards` are the partly used nodes with room
    for it (Slurm's pick among them), `left_out` the idle nodes it may not use."""

    left_out: tuple[str, ...] = ()
    towards: tuple[str, ...] = ()


def pack(job: PlaceholderJob, nodes: list[SlurmNode]) -> Packing:
    """When some partly used node the job may use has room for it (CPUs, memory, each GRES,
    as the last node listing saw them), the idle nodes are left out of the job, so they stay
    whole for whole-node Pods; with no such node nothing is. Slurm makes the final choice
    among the rest, by its own rules and plans (e.g. a node its backfill keeps for a
    waiting job). Narrower steering, best fit to one node, was measured and waited longer
    (docs/benchmarks.md). A job that names its nodes, a reservation, node features or a
    whole node is left to Slurm alone (sunk cannot judge those fits)."""
    options = job.options
    if options.required_nodes or options.reservation or options.constraints or options.exclusive:
        return Packing()
    partitions = set((options.partition or "").split(",")) - {""}
    ruled_out = set(job.excluded_nodes)
    usable = [
        node
        for node in nodes
        if node.name not in ruled_out
        and not node.draining
        and (not partitions or partitions & set(node.partitions))
    ]
    towards = tuple(sorted(node.name for node in usable if node.in_use and _has_room(node, job)))
    if not towards:
        return Packing()
    return Packing(tuple(sorted(node.name for node in usable if not node.in_use)), towards)


def _has_room(node: SlurmNode, job: PlaceholderJob) -> bool:
    if node.cpus - node.alloc_cpus < job.cpus:
        return False
    if node.memory_mib and node.memory_mib - node.alloc_memory_mib < job.memory_mib:
        return False
    return all(node.free_gres(name) >= count for name, count in job.gres)
