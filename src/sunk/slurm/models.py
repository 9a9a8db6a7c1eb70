"""What the scheduler needs to know about Slurm jobs and nodes, independent of API version."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

# States in which the job still holds (or may soon hold) resources.
ACTIVE_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "CONFIGURING",
        "COMPLETING",
        "REQUEUED",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESV_DEL_HOLD",
        "STOPPED",
    }
)


# A job's state as one word (what squeue shows) and every word Slurm gave it.
JobState = tuple[str, tuple[str, ...]]

_GRES_ITEM = re.compile(r"^(?P<name>[^:(]+(?::[^:(]+)?):(?P<count>\d+)")


def gres_counts(text: str) -> tuple[tuple[str, int], ...]:
    """Slurm's spelling of GRES held or offered, counted by name: "gpu:h100:6(S:0-1),
    gpu:a100:2(IDX:0-1,3)" → (("gpu:h100", 6), ("gpu:a100", 2))."""
    items = re.split(r",(?![^(]*\))", text)
    found = (_GRES_ITEM.match(item.strip()) for item in items)
    return tuple((m["name"], int(m["count"])) for m in found if m)


def gres_is(key: str, name: str) -> bool:
    """GRES `key` counts as `name`: a typed GPU ("gpu:h100") is also a "gpu"."""
    return key == name or key.startswith(name + ":")


@dataclass(frozen=True)
class SlurmJob:
    job_id: int
    name: str
    state: str
    reason: str
    nodes: tuple[str, ...]
    comment: str
    user_id: int | None
    group_id: int | None
    partition: str
    time_limit_min: int | None
    priority: int | None
    restarts: int = 0
    submit_time: int = 0
    start_time: int = 0
    end_time: int = 0
    preempt_time: int = 0
    # What the placeholder script and the scheduler write into the job: whether the script
    # has started (R4.2) and which Pod the job stands for (R3.4). The dialect that parsed
    # the job fills them in, because where they live depends on the Slurm version.
    started: bool = False
    owner_tag: str = ""
    flags: tuple[str, ...] = ()
    # What Slurm gave the job once it runs: its TRES ("cpu=2,mem=512M,node=1,...") and the
    # GRES on its node ("gpu:1(IDX:0)"), checked against the Pod before binding.
    allocated: str = ""
    gres_detail: tuple[str, ...] = ()
    # A component of a heterogeneous job (a gang, R9.1): the leader's job ID (0: not one)
    # and this component's place in it. Each component is listed as a job of its own.
    het_job_id: int = 0
    het_job_offset: int = 0
    # The nodes the job may not use, as Slurm holds them now (--placement=pack widens them).
    excluded_nodes: tuple[str, ...] = ()
    # The features it asks for (--constraint), as Slurm holds the expression: "gpu&fast".
    features: str = ""

    @property
    def group_leader(self) -> int | None:
        """The job ID that stands for the whole heterogeneous job (cancelling it ends every
        component; cancelling a component ends only that one), or None for a plain job."""
        return self.het_job_id or None

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def pending(self) -> bool:
        return self.state == "PENDING"

    @property
    def running(self) -> bool:
        return self.state == "RUNNING"

    @property
    def ending(self) -> bool:
        """Slurm is ending the job (or has): cancelled, preempted, timed out, failed."""
        return not self.active or self.state in ("COMPLETING", "SIGNALING", "STAGE_OUT")

    @property
    def gave_up_resources(self) -> bool:
        """Requeued (or suspended) by Slurm: its Pod no longer holds what it runs on."""
        return self.state in ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED")

    def why_ending(self, now: float) -> tuple[str, str]:
        """(Event reason, words) for a job Slurm is ending, as far as Slurm tells. While it
        completes, its one word is COMPLETING and how it ended is among its other words."""
        words = {self.state, *self.flags}
        if words & {"REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"} or (self.pending and self.restarts):
            return "Preempted", "was requeued by Slurm (preempted)"
        if self.pending:
            # Pending again with no requeue: slurmctld restarted from state saved before
            # the job started, and no longer holds its resources.
            return (
                "PlaceholderJobEnded",
                "is PENDING again although it had started (slurmctld lost its record of the start, "
                "e.g. in a restart); its resources are no longer held",
            )
        if "SUSPENDED" in words:
            return "Preempted", "was suspended by Slurm (preempted)"
        if self.preempt_time or "PREEMPTED" in words:
            return "Preempted", "was preempted by a higher-priority Slurm job"
        limit = self.time_limit_min
        if "TIMEOUT" in words or (limit and self.start_time and now >= self.start_time + limit * 60 - 1):
            return "TimeLimitReached", f"reached its time limit of {limit} min"
        failed = sorted(words & {"NODE_FAIL", "BOOT_FAIL", "FAILED", "OUT_OF_MEMORY", "DEADLINE"})
        if failed:
            return "PlaceholderJobFailed", f"ended with state {failed[0]}"
        return "CancelledInSlurm", "was cancelled in Slurm"


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str  # e.g. "idle", "mixed", "allocated", "down"
    flags: tuple[str, ...]  # e.g. ("DRAIN",)
    reason: str
    reason_changed_at: int = 0  # epoch seconds; tells two drains with one reason apart
    # What the node has and what Slurm has handed out of it, for --placement=pack (R9.2).
    # GRES by name as Slurm spells them ("gpu", "gpu:h100"), counts without the index part.
    partitions: tuple[str, ...] = ()
    cpus: int = 0
    alloc_cpus: int = 0
    memory_mib: int = 0
    alloc_memory_mib: int = 0
    gres: tuple[tuple[str, int], ...] = ()
    gres_used: tuple[tuple[str, int], ...] = ()
    address: str = ""  # where slurmctld reaches its slurmd (a dynamic node's Pod IP)
    features: tuple[str, ...] = ()  # what it offers to jobs' --constraint
    comment: str = ""  # the node's comment: the health checks' configuration problems (sunk-hc-config:)

    @property
    def drained(self) -> bool:
        """Drained or draining: someone (an admin, Slurm itself, sunk) took it out of use."""
        words = {self.state.upper(), *(f.upper() for f in self.flags)}
        return bool(words & {"DRAIN", "DRAINING", "DRAINED"})

    @property
    def in_use(self) -> bool:
        """Slurm has handed out some of it (to any job, ours or not)."""
        return self.alloc_cpus > 0 or any(count for _, count in self.gres_used)

    def free_gres(self, name: str) -> int:
        """Free units of `name`: "gpu" counts every GPU type, "gpu:h100" only that type."""

        def total(pairs: tuple[tuple[str, int], ...]) -> int:
            return sum(n for key, n in pairs if gres_is(key, name))

        return total(self.gres) - total(self.gres_used)

    def taking(self, cpus: int, memory_mib: int, gres: tuple[tuple[str, int], ...]) -> SlurmNode:
        """This node as it will be once a job of that shape runs on it (an assumption until
        the next listing: --placement=pack counts the jobs it just steered here)."""
        used = dict(self.gres_used)
        for name, count in gres:
            key = next((k for k in used if gres_is(k, name)), name)
            used[key] = used.get(key, 0) + count
        return replace(
            self,
            alloc_cpus=self.alloc_cpus + cpus,
            alloc_memory_mib=self.alloc_memory_mib + memory_mib,
            gres_used=tuple(used.items()),
        )

    @property
    def draining(self) -> bool:
        words = {self.state.upper(), *(f.upper() for f in self.flags)}
        return bool(words & {"DRAIN", "DRAINING", "DRAINED", "DOWN", "FAIL", "FAILING", "MAINT"})
