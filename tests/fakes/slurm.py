"""The one in-memory Slurm of the unit tests: slurmctld as slurmrestd shows it, for every
component that speaks to it (the scheduler's `SlurmPort`, the operator's `OperatorSlurm`
and `PolledSlurm`, the config sidecar's `ConfigSlurm`).

Jobs and nodes are kept as the raw records slurmrestd would list and parsed by the real
dialect, so every component sees them through the parsing it meets in production; one
fake for all keeps the components' tests from drifting into two Slurms that disagree."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from sunk.runtime.ports import Clock, SystemClock
from sunk.slurm.dataparser import DataParser
from sunk.slurm.diag import SlurmDiag
from sunk.slurm.dialect import Dialect, Submission
from sunk.slurm.errors import SlurmError, SlurmJobGone, SlurmNoAnswer, SlurmRejected, SlurmUnavailable
from sunk.slurm.models import SlurmJob, SlurmNode
from sunk.slurm.request import JobRequest
from tests.fakes.ports import Failures

Json = dict[str, Any]


@dataclass
class FakeSubmitResult:
    job_id: int
    warning: str | None = None


def node_record(node: SlurmNode) -> Json:
    """The raw record slurmrestd would list for `node` (the inverse of `parse_node`)."""

    def gres_text(pairs: tuple[tuple[str, int], ...]) -> str:
        return ",".join(f"{name}:{count}" for name, count in pairs)

    return {
        "name": node.name,
        "state": [node.state.upper(), *node.flags],
        "reason": node.reason,
        "reason_changed_at": node.reason_changed_at,
        "comment": node.comment,
        "partitions": list(node.partitions),
        "features": list(node.features),
        "cpus": node.cpus,
        "alloc_cpus": node.alloc_cpus,
        "real_memory": node.memory_mib,
        "alloc_memory": node.alloc_memory_mib,
        "gres": gres_text(node.gres),
        "gres_used": gres_text(node.gres_used),
        "address": node.address,
    }


@dataclass
class FakeSlurm:
    """slurmctld with one data_parser dialect; tests move it along with the helpers below
    (`start`, `end`, `run_job`, `drain_as_admin`...) or by editing `raw_jobs`, `raw_nodes`.
    Every write is logged in `calls`; any call can be made to fail (`fail`)."""

    dialect: Dialect = field(default_factory=lambda: DataParser("v0.0.42"))
    raw_jobs: dict[int, Json] = field(default_factory=dict)
    raw_nodes: dict[str, Json] = field(default_factory=dict)
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    failures: Failures = field(default_factory=Failures)
    # What slurmctld stamps submissions, starts, ends and drains with (`now`, epoch seconds):
    # a test world hands it its own clock, so Slurm's stamps and the components' ages agree.
    clock: Clock = field(default_factory=SystemClock)
    next_id: int = 100
    submit_warning: str | None = None
    # Jobs a listing leaves out (a partial answer); a read of the one job still finds them.
    unlisted: set[int] = field(default_factory=set)
    # How many of the next cancels Slurm accepts and then loses (a slurmctld crash).
    lost_cancels: int = 0
    # How many of the next submits Slurm carries out but whose answer is lost (SlurmNoAnswer).
    lost_answers: int = 0
    # Slurm nodes another job holds: a released job pinned to one waits for Resources.
    taken: set[str] = field(default_factory=set)
    # False: slurmctld refuses a submission that asks for its job ID (a token of neither
    # root nor SlurmUser).
    ids_may_be_chosen: bool = True
    partition_names: set[str] = field(default_factory=lambda: {"batch"})
    max_time_min: dict[str, int | None] = field(default_factory=dict)  # MaxTime by partition; absent: none
    statistics: SlurmDiag = field(default_factory=lambda: SlurmDiag(server_thread_count=1))  # /diag
    reconfigures: int = 0  # `scontrol reconfigure`s that landed

    def fail(self, call: str, error: SlurmError | None = None, times: int = 1) -> None:
        """Make the next `times` calls of `call` fail (by default: slurmrestd is down)."""
        self.failures.fail(call, error or SlurmUnavailable("slurmrestd is down"), times)

    def _stamp(self) -> int:
        return int(self.clock.now())

    # -- jobs ---------------------------------------------------------------------------------
    def submission(self, job: JobRequest, script: str, environment: dict[str, str]) -> Submission:
        return self.dialect.submission(job, script, environment)

    def owner_name(self, job: SlurmJob) -> str:
        return self.dialect.owner_name(job)

    async def submit(self, submission: Submission) -> FakeSubmitResult:
        self.failures.check("submit")
        specs = submission.body.get("jobs") or [submission.body["job"]]
        chosen = [spec["job_id"] for spec in specs if "job_id" in spec]
        if chosen and not self.ids_may_be_chosen:
            raise SlurmJobGone("Slurm refused to submit a job: Invalid job id specified", 2017)
        if any(job_id in self.raw_jobs for job_id in chosen):
            raise SlurmRejected("Slurm refused to submit a job: Duplicate job id", 2011, retryable=True)
        leader = chosen[0] if chosen else self.next_id
        for offset, spec in enumerate(specs):
            # An ID asked for is given as it is, and Slurm's counter stays where it was.
            job_id = spec["job_id"] if chosen else self.next_id
            self.next_id += 0 if chosen else 1
            raw: Json = {
                "job_id": job_id,
                "name": spec.get("name", ""),
                "admin_comment": spec.get("admin_comment", ""),
                "comment": spec.get("comment", ""),
                "user_id": int(spec.get("user_id", 0)),
                "group_id": int(spec.get("group_id", 0)),
                "partition": spec.get("partition", "batch"),
                "job_state": ["PENDING"],
                "state_reason": "None",
                "submit_time": {"set": True, "number": self._stamp()},
                "excluded_nodes": ",".join(spec.get("excluded_nodes") or []),
                "required_nodes": ",".join(spec.get("required_nodes") or []),
                "time_limit": spec.get("time_limit", {"set": False}),
                "extra": "",
            }
            if spec.get("hold"):
                raw["state_reason"] = "JobHeldUser"
            if len(specs) > 1:
                raw["het_job_id"] = leader
                raw["het_job_offset"] = offset
            self.raw_jobs[job_id] = raw
        self.calls.append(("submit", leader, submission))
        if self.lost_answers:
            self.lost_answers -= 1
            raise SlurmNoAnswer("read timeout: slurmrestd took the request but sent no answer")
        return FakeSubmitResult(leader, self.submit_warning)

    async def jobs(self) -> list[SlurmJob]:
        self.failures.check("jobs")
        listed = [raw for raw in self.raw_jobs.values() if raw["job_id"] not in self.unlisted]
        return [self.dialect.parse_job(raw) for raw in listed]

    async def job(self, job_id: int) -> SlurmJob | None:
        self.failures.check("job")
        raw = self.raw_jobs.get(job_id)
        return self.dialect.parse_job(raw) if raw else None

    async def job_group(self, job_id: int) -> list[SlurmJob]:
        self.failures.check("job_group")
        return [
            self.dialect.parse_job(raw)
            for raw in self.raw_jobs.values()
            if raw["job_id"] == job_id or raw.get("het_job_id") == job_id
        ]

    async def cancel(self, job_id: int, *, signal: str | None = None) -> None:
        """A signal only reaches the job; a cancel ends it (every component of a
        heterogeneous job's leader), and a node none of its jobs still holds turns idle."""
        self.failures.check("cancel")
        self.calls.append(("cancel", job_id, signal))
        if signal is None and self.lost_cancels:
            self.lost_cancels -= 1
        elif signal is None:
            for raw in list(self.raw_jobs.values()):
                if raw["job_id"] == job_id or raw.get("het_job_id") == job_id:
                    self.end(raw["job_id"])

    async def set_excluded_nodes(self, job_id: int, nodes: list[str]) -> None:
        self.failures.check("set_excluded_nodes")
        self.calls.append(("set_excluded_nodes", job_id, tuple(nodes)))
        self.raw_jobs[job_id]["excluded_nodes"] = ",".join(nodes)

    async def release_job(self, job_id: int) -> None:
        """A held job may start: one pinned to a node with room starts there at once (its
        script has not marked it yet), else it waits for Resources."""
        self.failures.check("release_job")
        self.calls.append(("release_job", job_id))
        raw = self.raw_jobs[job_id]
        if raw["job_state"] != ["PENDING"]:  # a job someone ended meanwhile
            raise SlurmRejected("Slurm refused to release it: Job/step already completing or completed", 2021)
        node = raw.get("required_nodes", "")
        usable = node in self.raw_nodes and "DRAIN" not in self.raw_nodes[node]["state"]
        if node and usable and node not in self.taken:
            self.start(job_id, node, started=False)
            raw["state_reason"] = "None"
        else:
            raw["state_reason"] = "Resources"

    # -- nodes, partitions, the controller ------------------------------------------------------
    async def nodes(self) -> list[SlurmNode]:
        self.failures.check("nodes")
        return [self.dialect.parse_node(raw) for raw in self.raw_nodes.values()]

    async def node(self, name: str) -> SlurmNode | None:
        self.failures.check("node")
        raw = self.raw_nodes.get(name)
        return self.dialect.parse_node(raw) if raw else None

    async def partitions(self) -> dict[str, int | None]:
        self.failures.check("partitions")
        return {name: self.max_time_min.get(name) for name in sorted(self.partition_names)}

    async def diag(self) -> SlurmDiag:
        self.failures.check("diag")
        return self.statistics

    async def reconfigure(self) -> None:
        self.failures.check("reconfigure")
        self.reconfigures += 1

    async def drain(self, node: str, reason: str) -> str | None:
        try:
            self.failures.check("drain")
        except SlurmError as err:
            return f"could not drain {node}: {err}"
        self.calls.append(("drain", node, reason))
        raw = self.raw_nodes.setdefault(node, {"name": node, "state": ["IDLE"]})
        raw["state"] = [*raw["state"], "DRAIN"]
        raw["reason"] = reason
        raw["reason_changed_at"] = self._stamp()
        return None

    async def resume(self, node: str) -> str | None:
        """Lifts a drain and a DOWN alike, as `scontrol update state=resume` does."""
        try:
            self.failures.check("resume")
        except SlurmError as err:
            return f"could not resume {node}: {err}"
        self.calls.append(("resume", node))
        record = self.record(node)
        state = "idle" if record.state == "down" else record.state
        flags = tuple(f for f in record.flags if f not in ("DRAIN", "NOT_RESPONDING"))
        self.update_node(node, state=state, flags=flags, reason="")
        return None

    async def mark_down(self, node: str, reason: str) -> str | None:
        """DOWN under `reason`; a drain flag stays (slurmctld keeps it), a COMPLETING one
        goes (slurmctld ends the work of a node it marks DOWN)."""
        self.calls.append(("mark_down", node, reason))
        flags = tuple(f for f in self.record(node).flags if f != "COMPLETING")
        self.update_node(node, state="down", flags=flags, reason=reason, reason_changed_at=self._stamp())
        return None

    async def delete_node(self, name: str) -> None:
        self.failures.check("delete_node")
        self.calls.append(("delete_node", name))
        self.raw_nodes.pop(name, None)

    # -- what a test does to Slurm's nodes ------------------------------------------------------
    def add_node(
        self,
        name: str,
        *,
        state: str = "IDLE",
        cpus: int = 8,
        alloc_cpus: int = 0,
        memory_mib: int = 16384,
        address: str = "",
        gres: tuple[tuple[str, int], ...] = (),
        features: tuple[str, ...] = (),
    ) -> None:
        """A node registers (a slurmd starts, or slurm.conf names it)."""
        self.raw_nodes[name] = node_record(
            SlurmNode(
                name,
                state.lower(),
                (),
                "",
                partitions=("batch",),
                cpus=cpus,
                alloc_cpus=alloc_cpus,
                memory_mib=memory_mib,
                address=address,
                gres=gres,
                features=features,
            )
        )

    def record(self, name: str) -> SlurmNode:
        """The node as a listing shows it now."""
        return self.dialect.parse_node(self.raw_nodes[name])

    def update_node(self, name: str, **changes: Any) -> None:
        """The node's record changes (SlurmNode's field names), as slurmctld would list it."""
        self.raw_nodes[name] = node_record(dataclasses.replace(self.record(name), **changes))

    def drain_as_admin(self, node: str, reason: str = "bad DIMM") -> None:
        """An administrator drains `node` (no call of the port)."""
        raw = self.raw_nodes[node]
        raw["state"] = [*raw["state"], "DRAIN"]
        raw["reason"] = reason
        raw["reason_changed_at"] = self._stamp()

    def drains(self) -> list[tuple[str, str]]:
        return [(call[1], call[2]) for call in self.calls if call[0] == "drain"]

    # -- what a test does to Slurm's jobs -------------------------------------------------------
    def _new_job(self, **raw: Any) -> int:
        job_id = self.next_id
        self.next_id += 1
        self.raw_jobs[job_id] = {
            "job_id": job_id,
            "name": f"job-{job_id}",
            "user_id": 0,
            "group_id": 0,
            "partition": "batch",
            "time_limit": {"set": True, "number": 60},
            "priority": {"set": True, "number": 1},
            "submit_time": {"set": True, "number": self._stamp()},
            **raw,
        }
        return job_id

    def run_job(self, node: str, *, partition: str = "batch", end_time: int = 0) -> int:
        """Someone's job starts on `node` (which turns allocated, if Slurm lists it); returns
        its ID."""
        job_id = self._new_job(
            job_state=["RUNNING"],
            state_reason="None",
            nodes=node,
            partition=partition,
            start_time={"set": True, "number": self._stamp()},
            end_time={"set": True, "number": end_time},
        )
        if node in self.raw_nodes:
            self.update_node(node, state="allocated", alloc_cpus=1)
        return job_id

    def queue_job(self, partition: str = "batch", reason: str = "Resources", constraint: str = "") -> int:
        """Someone's job waits in `partition` (asking for the features of `constraint`)."""
        return self._new_job(
            job_state=["PENDING"], state_reason=reason, partition=partition, features=constraint
        )

    def start(self, job_id: int, node: str, *, started: bool = True) -> None:
        """Slurm starts the job on `node`; `started`: its script marked it started."""
        raw = self.raw_jobs[job_id]
        raw["job_state"] = ["RUNNING"]
        raw["nodes"] = node
        raw["start_time"] = {"set": True, "number": self._stamp()}
        raw["extra"] = ": started" if started else ""

    def end(self, job_id: int, state: str = "CANCELLED", reason: str = "None") -> None:
        """The job ends; a node none of the jobs still holds turns idle."""
        raw = self.raw_jobs[job_id]
        held = self.dialect.parse_job(raw).nodes
        raw["job_state"] = [state]
        raw["state_reason"] = reason
        raw["end_time"] = {"set": True, "number": self._stamp()}
        for node in held:
            if node in self.raw_nodes and not self._holders(node) and self.record(node).state == "allocated":
                self.update_node(node, state="idle", alloc_cpus=0)

    def _holders(self, node: str) -> list[int]:
        jobs = (self.dialect.parse_job(raw) for raw in self.raw_jobs.values())
        return [job.job_id for job in jobs if node in job.nodes and job.active and not job.pending]

    def end_jobs(self, node: str, state: str = "COMPLETED") -> None:
        """Every job on `node` ends; the node turns idle."""
        for job_id in self._holders(node):
            self.end(job_id, state)
        self.update_node(node, state="idle", alloc_cpus=0)

    def end_group(self, leader: int, state: str = "CANCELLED") -> None:
        """`scancel` of a heterogeneous job's leader: every component ends."""
        for raw in list(self.raw_jobs.values()):
            if raw["job_id"] == leader or raw.get("het_job_id") == leader:
                self.end(raw["job_id"], state)

    def wait(self, job_id: int, reason: str) -> None:
        """The job stays pending, Slurm says why."""
        self.raw_jobs[job_id]["state_reason"] = reason

    def restart_without(self, *job_ids: int, next_id: int | None = None) -> None:
        """slurmctld restarted from state saved before `job_ids` ran: it has no record of
        them, and hands out job IDs again from `next_id` (default: the lowest lost one)."""
        for job_id in job_ids:
            del self.raw_jobs[job_id]
        self.next_id = next_id if next_id is not None else min(job_ids)

    def submitted(self) -> list[int]:
        return [call[1] for call in self.calls if call[0] == "submit"]

    def cancelled(self) -> list[tuple[int, str | None]]:
        return [(call[1], call[2]) for call in self.calls if call[0] == "cancel"]
