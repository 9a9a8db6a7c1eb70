"""What the scheduler needs to know about Slurm jobs and nodes, independent of API version."""

from __future__ import annotations

from dataclasses import dataclass

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

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def pending(self) -> bool:
        return self.state == "PENDING"

    @property
    def running(self) -> bool:
        return self.state == "RUNNING"


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str  # e.g. "idle", "mixed", "allocated", "down"
    flags: tuple[str, ...]  # e.g. ("DRAIN",)
    reason: str

    @property
    def draining(self) -> bool:
        words = {self.state.upper(), *(f.upper() for f in self.flags)}
        return bool(words & {"DRAIN", "DRAINING", "DRAINED", "DOWN", "FAIL", "FAILING", "MAINT"})
