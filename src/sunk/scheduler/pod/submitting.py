"""What a Pod's submission is decided from, read from the caches just before it (R2, R3,
R4.3, R9.2): the job Slurm may already hold for the Pod, whether a submission of its got
no answer, its translation, the namespace's trust policy and the Slurm nodes its own
constraints rule out. The Pod controller and the PodGroup steps read through this;
`decide.submit_plan` decides, and the Pod controller's executor submits and records."""

from __future__ import annotations

from typing import Any

from sunk.scheduler import policy
from sunk.scheduler.cluster import ClusterView
from sunk.scheduler.decide import pod_state, steps
from sunk.scheduler.decide.actions import FindOrSubmit
from sunk.scheduler.decide.submit_plan import NewJobFacts, SubmitInputs, SubmitRules
from sunk.scheduler.jobs import JobIndex
from sunk.scheduler.pod.memory import Memory
from sunk.scheduler.pod.placement import Placement
from sunk.scheduler.ports import SlurmPort
from sunk.scheduler.translate import Settings, translate

Json = dict[str, Any]
# A submission that got no answer is looked for in a listing requested at least this long
# after it, before the Pod is submitted again (slurmrestd may act on it late).
UNANSWERED_GRACE_S = 3.0


class SubmitReader:
    """Reads what `decide.submit_plan` plans a Pod's job from."""

    def __init__(
        self,
        *,
        slurm: SlurmPort,
        cluster: ClusterView,
        index: JobIndex,
        places: Placement,
        memory: Memory,
        settings: Settings,
        policy: policy.PolicyFile,
        placement: str = "slurm",
        refuse_static_cpu: bool = False,
    ) -> None:
        self.cluster = cluster
        self.index = index
        self.places = places
        self.memory = memory
        self.settings = settings
        self.policy = policy
        self.rules = SubmitRules(
            settings.annotation_prefix,
            slurm.dialect.unsupported,
            refuse_static_cpu=refuse_static_cpu,
            pack=placement == "pack",
        )

    def avoid(self, pod: Json) -> tuple[str, ...]:
        return pod_state.avoid_nodes(pod, self.settings.annotation_prefix)

    def adoptable(self, pod: Json) -> int | None:
        """After a restart, a job may exist that the Pod does not name yet: the newest."""
        meta = pod["metadata"]
        mine = [
            job.job_id
            for ref, job in self.index.for_key(meta["namespace"], meta["name"])
            if ref.uid == meta["uid"] and job.active
        ]
        return max(mine, default=None)

    def unanswered(self, uid: str) -> bool:
        """A submission for the Pod got no answer, and no listing since could show its job."""
        return steps.unanswered_wait(
            self.memory.unanswered_since(uid), self.index.listed_at, UNANSWERED_GRACE_S
        )

    def inputs(self, pod: Json) -> SubmitInputs:
        """The translation, policy and ruled-out nodes a submission of `pod` is decided by.
        The ruled-out nodes are those of the Pod's own constraints (see
        `Placement.excluded_for`): never a Node that is only busy now."""
        translation = translate(pod, self.settings)
        return SubmitInputs(
            translation,
            self.policy.current(),
            self.places.excluded_for(pod, translation.pod_rules),
            self.cluster.slurm_nodes,
            self.cluster.largest,
            self.cluster.slurm_node_usage if self.rules.pack else (),
        )

    def new_job(self, pod: Json, action: FindOrSubmit) -> NewJobFacts:
        """Everything a Pod without a job is planned from; the inputs of a submission are
        read only when the Pod neither adopts a job nor waits for a listing."""
        unanswered = self.unanswered(pod["metadata"]["uid"])
        inputs = None if action.adoptable is not None or unanswered else self.inputs(pod)
        return NewJobFacts(pod, action.avoid, action.adoptable, unanswered, inputs)
