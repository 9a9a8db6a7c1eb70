"""A Slurm node record whose member Pod is gone but that Slurm still counts busy: the one
case where the NodeSet controller marks a node DOWN (a fault run left such a record
wedging its NodeSet for ever). Kept apart from `plan` so the planner stays one reading."""

from __future__ import annotations

from sunk.operator.nodeset.actions import Action, MarkDown
from sunk.operator.nodeset.view import SlurmView
from sunk.runtime.actions import Event
from sunk.slurm.models import SlurmNode

ORPHAN_DOWN = "SlurmNodeWithoutPodDown"


def down_without_pod(nodeset: str, name: str, record: SlurmNode, slurm: SlurmView) -> list[Action]:
    """A record whose member Pod is gone (the kubelet ended its slurmd) that Slurm still
    lists busy with no job running there: an allocation or a completing job whose end no
    slurmd is left to report. Slurm keeps such a node busy until SlurmdTimeout, or for
    ever, and the Node gets no new member meanwhile (the operator fault run's wedge).
    Marked DOWN, Slurm lets go of that work and the record can go. A job Slurm still lists
    running is left to Slurm's own verdict: the operator never ends a running job here."""
    jobs = slurm.jobs_on(name)
    if record.state.lower() == "down" or any(not job.ending for job in jobs):
        return []
    ending = ", ".join(f"{j.job_id} ({j.state})" for j in jobs) or "none listed"
    reason = (
        f"sunk: NodeSet {nodeset}: the Pod of {name} is gone, its slurmd with it; "
        f"its work cannot end otherwise (jobs: {ending})"
    )
    return [
        MarkDown(name, reason),
        Event(ORPHAN_DOWN, f"marked Slurm node {name} DOWN: {reason[len('sunk: ') :]}", warning=True),
    ]
