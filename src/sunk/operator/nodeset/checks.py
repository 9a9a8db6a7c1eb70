"""Checks of a NodeSet against Slurm and its Nodes that the plan reports without acting on
them: a drain timeout that could end jobs within their time limit, members' Nodes missing
the topology labels, and Slurm records whose GPUs differ from what the Node gives."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sunk.operator.nodeset import members as m
from sunk.operator.nodeset.hardware import gres_in_conf
from sunk.operator.nodeset.spec import CANCEL_JOBS, NodeSet
from sunk.operator.nodeset.status import UNKNOWN_TOPOLOGY_LABEL
from sunk.operator.nodeset.view import SlurmView
from sunk.runtime.actions import Event

Json = dict[str, Any]
GRES_MISMATCH = "GresMismatch"


def drain_timeout_too_short(nodeset: NodeSet, slurm: SlurmView) -> str | None:
    """With onTimeout CancelJobs, a timeout shorter than a partition's MaxTime could end
    jobs that are still within their time limit: refused, so the platform never kills a
    job Slurm would have let run."""
    policy = nodeset.drain
    if policy.timeout_s is None or policy.on_timeout != CANCEL_JOBS:
        return None
    for partition in nodeset.partitions:
        if partition not in slurm.max_time_min:
            continue
        limit = slurm.max_time_min[partition]
        if limit is None or limit * 60 > policy.timeout_s:
            shown = "UNLIMITED" if limit is None else f"{limit} min"
            return (
                f"spec.drain.timeout: {policy.timeout_s} s is shorter than partition {partition}'s MaxTime "
                f"({shown}), so onTimeout CancelJobs could end jobs still within their time limit; "
                "raise the timeout above MaxTime, or use onTimeout: Report"
            )
    return None


def unlabelled_nodes(
    name: str, members: list[Json], nodes: Mapping[str, Json], settings: m.Settings
) -> list[tuple[str, Event]]:
    """Every member's Node must carry the labels topology.conf is written from; the
    operator's topology writer keeps the last file until they do. One line for the status
    and one Event per missing label."""
    found = []
    for pod in members:
        node_name = (pod.get("spec") or {}).get("nodeName", "")
        node = nodes.get(node_name)
        if node is None:
            continue
        labels = (node.get("metadata") or {}).get("labels") or {}
        for label in settings.topology_labels:
            if not labels.get(label):
                line = f"Node {node_name} has no label {label}, which slurm.topology.labels names"
                found.append(
                    (
                        line,
                        Event(
                            UNKNOWN_TOPOLOGY_LABEL,
                            line + "; topology.conf stays as it was until the Node is labelled",
                            warning=True,
                            once_as=f"{name}.topology.{node_name}.{label}",
                        ),
                    )
                )
    return found


def gres_mismatches(members: list[Json], slurm: SlurmView) -> list[tuple[str, Event]]:
    """Slurm's record of a member must show the GPUs its `--conf` gave it: a record that
    differs (a slurmd that detected other devices, a record left by an older Pod) would let
    Slurm hand out GPUs the Node does not have, or hide ones it has. One line for the
    status and one Event per member that differs."""
    found = []
    records = slurm.nodes or {}
    for pod in members:
        record = records.get(m.slurm_name_of(pod))
        conf = (pod["metadata"].get("annotations") or {}).get(m.SLURMD_CONF, "")
        if record is None or pod["metadata"].get("deletionTimestamp"):
            continue
        wanted = sorted((name, count) for name, count in gres_in_conf(conf) if name.split(":")[0] == "gpu")
        listed = sorted((name, count) for name, count in record.gres if name.split(":")[0] == "gpu")
        if wanted != listed:
            said = ", ".join(f"{n}:{c}" for n, c in listed) or "none"
            meant = ", ".join(f"{n}:{c}" for n, c in wanted) or "none"
            line = f"Slurm node {record.name} lists GPUs {said} but its Node gives {meant}"
            event = Event(GRES_MISMATCH, line, warning=True, once_as=f"{record.name}.gres.{said}.{meant}")
            found.append((line, event))
    return found
