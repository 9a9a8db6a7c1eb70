"""Pod manifest → placeholder job, with every validation problem reported at once (R2, R3).

Pure: no I/O. What Slurm is asked for is the job's `request`; the REST body for a given
Slurm version is rendered from it by sunk.slurm.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from sunk.kube.resources import pod_requests
from sunk.scheduler.translate import podaffinity
from sunk.scheduler.translate.annotations import DEFAULT_PREFIX, JobOptions, parse_annotations
from sunk.slurm.request import JobRequest

JOB_NAME_PREFIX = "sunk:"
# Slurm must get the job's resources back before KillWait ends; the Pod gets this much
# less than KillWait to go away, so its grace period must stay below it (R2.2).
KILL_WAIT_MARGIN_S = 5


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def of(cls, pod: dict[str, Any]) -> PodRef:
        meta = pod.get("metadata") or {}
        return cls(meta.get("namespace", "default"), meta.get("name", ""), meta.get("uid", ""))


def job_name(pod: PodRef, scheduler: str) -> str:
    """The job's name carries the Pod's identity, UID included (job IDs alone restart), and
    the scheduler's name, so schedulers sharing one Slurm never touch each other's jobs."""
    return f"{JOB_NAME_PREFIX}{scheduler}:{pod.namespace}/{pod.name}:{pod.uid}"


def pod_of_job_name(name: str, scheduler: str) -> PodRef | None:
    """The Pod a job stands for, if `scheduler` submitted it."""
    prefix = f"{JOB_NAME_PREFIX}{scheduler}:"
    if not name.startswith(prefix):
        return None
    rest = name[len(prefix) :]
    path, sep, uid = rest.rpartition(":")
    namespace, slash, pod_name = path.partition("/")
    if not (sep and slash and namespace and pod_name and uid):
        return None
    return PodRef(namespace, pod_name, uid)


# Extended resource → the GRES Slurm knows it as ("" = allowed, but Slurm tracks no GRES
# for it: the RDMA device of the source documents' full-node example).
DEFAULT_DEVICES: tuple[tuple[str, str], ...] = (("nvidia.com/gpu", "gpu"), ("rdma/ib", ""))


@dataclass(frozen=True)
class Settings:
    annotation_prefix: str = DEFAULT_PREFIX
    kill_wait_s: int = 30
    scheduler_name: str = "sunk"
    devices: tuple[tuple[str, str], ...] = DEFAULT_DEVICES


@dataclass(frozen=True)
class PlaceholderJob:
    """The job a Pod gets. Its name, the nodes it leaves out and the request Slurm is asked
    for are worked out once, when it is made: every step after reads them as data."""

    pod: PodRef
    scheduler: str
    cpus: int
    memory_mib: int
    options: JobOptions
    gres: tuple[tuple[str, int], ...] = ()  # e.g. (("gpu", 2),): from the device table
    avoid_nodes: tuple[str, ...] = ()  # added by the scheduler: Nodes the Pod cannot use
    # Added by --placement=pack: idle nodes left out while a partly used one has room.
    packed_away: tuple[str, ...] = ()
    name: str = field(init=False, compare=False, repr=False)
    excluded_nodes: tuple[str, ...] = field(init=False, compare=False, repr=False)
    request: JobRequest = field(init=False, compare=False, repr=False)  # the job as Slurm is asked for it

    def __post_init__(self) -> None:
        options = self.options
        name = job_name(self.pod, self.scheduler)
        merged = dict.fromkeys(options.excluded_nodes + self.avoid_nodes + self.packed_away)
        excluded = tuple(n for n in merged if n not in options.required_nodes)
        request = JobRequest(
            name=name,
            cpus=self.cpus,
            memory_mib=self.memory_mib,
            user_id=options.user_id,
            group_id=options.group_id,
            gres=self.gres,
            excluded_nodes=excluded,
            required_nodes=options.required_nodes,
            exclusive=options.exclusive,
            comment=options.comment,
            account=options.account,
            constraints=options.constraints,
            partition=options.partition,
            prefer=options.prefer,
            qos=options.qos,
            reservation=options.reservation,
            priority=options.priority,
            workdir=options.current_working_dir,
            time_limit_min=options.timeout_minutes,
        )
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "excluded_nodes", excluded)
        object.__setattr__(self, "request", request)

    @property
    def gpus(self) -> int:
        return sum(count for name, count in self.gres if name == "gpu" or name.startswith("gpu:"))

    def avoiding(self, nodes: tuple[str, ...]) -> PlaceholderJob:
        return replace(self, avoid_nodes=tuple(sorted(set(self.avoid_nodes) | set(nodes))))


@dataclass
class Translation:
    """A Pod's job, or every reason it cannot have one; and what its inter-Pod rules ask,
    read once here so placement and the submission's checks need not read the Pod again."""

    job: PlaceholderJob | None
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    pod_rules: bool = False  # it has required inter-Pod affinity or spread rules
    not_honoured: tuple[str, ...] = ()  # its inter-Pod rules sunk does not apply, in words


def check_grace_period(spec: dict[str, Any], kill_wait_s: int) -> str | None:
    grace = spec.get("terminationGracePeriodSeconds", 30)
    limit = kill_wait_s - KILL_WAIT_MARGIN_S
    if isinstance(grace, int) and grace < limit:
        return None
    return (
        f"terminationGracePeriodSeconds is {grace} but must be below {limit} "
        f"(the scheduler's --slurm-kill-wait of {kill_wait_s}s minus {KILL_WAIT_MARGIN_S}s) so "
        f"Slurm never reclaims the node while the Pod is still stopping; recreate the Pod "
        f"with terminationGracePeriodSeconds: {limit - 1} or less"
    )


def map_devices(
    devices: tuple[tuple[str, Any], ...], table: tuple[tuple[str, str], ...]
) -> tuple[tuple[tuple[str, int], ...], list[str]]:
    """The GRES for a Pod's extended resources, and a problem for each one the table does
    not know: Kubernetes would hand out a device Slurm does not know is taken (R3.1)."""
    known = dict(table)
    gres: dict[str, int] = {}
    errors = []
    for resource, count in devices:
        if resource not in known:
            listed = ", ".join(sorted(known)) or "none"
            errors.append(
                f"the Pod requests {resource}, which this scheduler does not map to a Slurm GRES, so Slurm "
                f"could not account for it; known devices: {listed} (an operator adds one with "
                "--device-gres, chart value scheduler.devices)"
            )
        elif known[resource]:
            gres[known[resource]] = gres.get(known[resource], 0) + int(count)
    return tuple(sorted(gres.items())), errors


def translate(pod: dict[str, Any], settings: Settings) -> Translation:
    spec = pod.get("spec") or {}
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    requests, errors = pod_requests(spec)
    grace_error = check_grace_period(spec, settings.kill_wait_s)
    if grace_error:
        errors.append(grace_error)
    options, annotation_errors = parse_annotations(annotations, settings.annotation_prefix)
    errors += annotation_errors
    gres, device_errors = map_devices(requests.devices, settings.devices)
    errors += device_errors
    rules, ignored = podaffinity.read(pod)
    if errors:
        return Translation(None, errors, options.notes, rules, ignored)
    job = PlaceholderJob(
        pod=PodRef.of(pod),
        scheduler=settings.scheduler_name,
        cpus=requests.whole_cpus,
        memory_mib=requests.memory_mib,
        options=options,
        gres=gres,
    )
    return Translation(job, [], options.notes, rules, ignored)
