"""What the NodeSet controller knows of Slurm in one pass: a frozen listing of its nodes,
partitions and jobs, and a member's state as sinfo would count it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sunk.operator.metrics.census import JobCensus
from sunk.operator.nodeset.removal import busy
from sunk.slurm.models import SlurmJob, SlurmNode


@dataclass(frozen=True)
class SlurmView:
    """Slurm's nodes, partitions and running jobs as the last listing saw them; None while
    unknown. `jobs`: node name → the jobs holding it."""

    nodes: Mapping[str, SlurmNode] | None = None
    partitions: frozenset[str] | None = None
    jobs: Mapping[str, tuple[SlurmJob, ...]] | None = None
    waiting: Mapping[str, tuple[SlurmJob, ...]] = field(default_factory=dict)  # partition → queued jobs
    asking: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # feature → pending job IDs
    max_time_min: Mapping[str, int | None] = field(default_factory=dict)  # partition → MaxTime (None: none)
    problem: str = "Slurm's nodes have not been listed yet"
    listed_at: float = field(default=0.0, compare=False)  # time.monotonic() of the listing
    # Nodes this operator drained or resumed after the listing began: their drain there may be
    # out of date, so none of them is deleted on it (NodeSetController.view_now).
    rewritten: frozenset[str] = frozenset()
    # The listing's jobs in counts, for the metrics (never for a decision: not compared).
    census: JobCensus | None = field(default=None, compare=False)

    @property
    def known(self) -> bool:
        return self.nodes is not None and self.partitions is not None and self.jobs is not None

    def jobs_on(self, name: str) -> tuple[SlurmJob, ...]:
        return (self.jobs or {}).get(name, ())


def slurm_state(record: SlurmNode | None) -> str:
    """The member's state as sinfo would count it."""
    if record is None:
        return "unregistered"
    words = {record.state.upper(), *(f.upper() for f in record.flags)}
    if "DOWN" in words or "NOT_RESPONDING" in words:
        return "down"
    if record.drained:
        return "draining" if busy(record) else "drained"
    return record.state.lower() if record.state.lower() in ("idle", "allocated", "mixed") else "unknown"
