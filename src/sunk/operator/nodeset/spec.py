"""A NodeSet as the operator reads it: its spec checked field by field.

Everything that can be wrong with a NodeSet by itself is found here, before anything is
created: each problem names the field, so the condition and Event tell the user what to
fix. What depends on the rest of the world (a partition Slurm does not know, a Node that
does not fit) is judged later, by the plan.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any

from sunk.kube.quantity import QuantityError, parse_quantity
from sunk.kube.resources import MIB, Requests, pod_requests
from sunk.operator.nodeset import host_access

Json = dict[str, Any]

GROUP = "sunk.coreweave.com"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "NodeSet"
PLURAL = "nodesets"

DEFAULT_MEMORY_RESERVE = "256Mi"
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
# A Pod's hostname is at most 63 characters and the member names add "-ddd-ddd".
MAX_NAME = 63 - len("-000-000")
_SLURM_WORD = re.compile(r"^[A-Za-z0-9_.\-]+$")
_IMAGE = re.compile(r"^[a-z0-9][a-z0-9._\-/:@]*$", re.IGNORECASE)
_DURATION = re.compile(r"^(\d+)([smhd]?)$")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
ROLLING = "RollingUpdate"
ON_DELETE = "OnDelete"
REPORT = "Report"
CANCEL_JOBS = "CancelJobs"


DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


@dataclass(frozen=True)
class Window:
    """A daily maintenance window in UTC: replacements start only inside it (a member
    already on its way out when it closes finishes). `days`: the weekdays it opens on
    (Monday 0); empty means every day. It may run past midnight."""

    start_min: int  # minutes after 00:00 UTC
    duration_min: int
    days: frozenset[int] = frozenset()

    def open_at(self, when: dt.datetime) -> bool:
        minute = when.hour * 60 + when.minute
        for back in (0, 1):  # opened today, or yesterday and still open
            day = (when.weekday() - back) % 7
            since = minute + back * 1440 - self.start_min
            if (not self.days or day in self.days) and 0 <= since < self.duration_min:
                return True
        return False

    def describe(self) -> str:
        days = ",".join(DAYS[d] for d in sorted(self.days)) or "daily"
        return f"{days} {self.start_min // 60:02d}:{self.start_min % 60:02d} UTC for {self.duration_min} min"


@dataclass(frozen=True)
class UpdateStrategy:
    """How members whose template is out of date are replaced: `RollingUpdate` drains and
    replaces at most `max_unavailable` at a time; `OnDelete` waits for someone to delete them."""

    type: str = ROLLING
    max_unavailable: int | str = 1  # a count, or a percentage of the wanted members ("25%")
    window: Window | None = None  # None: replace at any time

    def budget(self, wanted: int) -> int:
        """Members that may be unavailable at once (at least one, or nothing would move)."""
        if isinstance(self.max_unavailable, str):
            return max(1, wanted * int(self.max_unavailable.rstrip("%")) // 100)
        return max(1, self.max_unavailable)


@dataclass(frozen=True)
class Demand:
    """Demand mode: the operator sizes the NodeSet from Slurm's own queue. It grows by one
    member per job waiting for resources in its partitions, up to `max_replicas`, and
    shrinks by the members idle for longer than `idle_after_s`, down to `min_replicas`,
    while nothing waits. `spec.replicas` is not used (the scale subresource is for an
    outside autoscaler instead)."""

    min_replicas: int
    max_replicas: int
    idle_after_s: int


@dataclass(frozen=True)
class DrainPolicy:
    """How long a member that must go may wait for its jobs. None: for ever (the default;
    jobs are never ended by the platform). After the timeout, `Report` only says so;
    `CancelJobs` cancels the jobs still there, one Event each."""

    timeout_s: int | None = None
    on_timeout: str = REPORT


@dataclass(frozen=True)
class NodeSet:
    """A valid NodeSet's spec, with the values the operator derives from it."""

    name: str
    namespace: str
    uid: str
    generation: int
    created: str  # creationTimestamp: older NodeSets are offered free Nodes first
    replicas: int | None  # None: every Node that qualifies, like a DaemonSet
    partitions: tuple[str, ...]
    features: tuple[str, ...]
    image: str
    node_selector: dict[str, str] = field(default_factory=dict)
    affinity: Json = field(default_factory=dict)
    tolerations: list[Json] = field(default_factory=list)
    resources: Json = field(default_factory=dict)
    memory_reserve_mib: int = 256
    gpu_resource: str = DEFAULT_GPU_RESOURCE
    gpu_product_label: str = DEFAULT_GPU_PRODUCT_LABEL
    template: Json = field(default_factory=dict)
    requests: Requests = field(default_factory=Requests)  # what the slurmd container takes from a Node
    update: UpdateStrategy = field(default_factory=UpdateStrategy)
    demand: Demand | None = None
    demand_wanted: int | None = None  # demand mode: the size last decided (status.demand.replicas)
    drain: DrainPolicy = field(default_factory=DrainPolicy)
    deleting: bool = False  # the NodeSet was deleted: every member goes, job-safely, then it does

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def selection(self) -> Json:
        """The part of a Pod spec that decides which Nodes qualify."""
        return {
            "nodeSelector": self.node_selector,
            "affinity": self.affinity,
            "tolerations": self.tolerations,
        }


@dataclass(frozen=True)
class Invalid:
    """A NodeSet that cannot be acted on, and every reason why (each names its field)."""

    name: str
    namespace: str
    uid: str
    generation: int
    problems: tuple[str, ...]


def parse(
    obj: Json, default_image: str, *, allow_host_access: bool = False, allowed_images: tuple[str, ...] = ()
) -> NodeSet | Invalid:
    """The NodeSet, or every problem with it. A template reaching into its Nodes
    (`sunk.operator.nodeset.host_access`) is one, unless the administrator allowed that; one
    reaching for a credential, or a slurmd image that is neither the default's repository
    nor one of `allowed_images`, always is."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
    problems: list[str] = []

    if len(name) > MAX_NAME:
        problems.append(
            f"metadata.name: {len(name)} characters; at most {MAX_NAME}, so that member names "
            "(<name>-ddd-ddd) fit a Pod's 63-character hostname"
        )
    replicas = spec.get("replicas")
    if replicas is not None and (not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0):
        problems.append(f"spec.replicas: {replicas!r} is not a whole number of 0 or more")
        replicas = None
    partitions = _words(spec, "partitions", problems)
    features = _words(spec, "features", problems)
    image = str(spec.get("image") or default_image)
    if not image:
        problems.append("spec.image: blank, and the operator has no default (--slurmd-image)")
    elif not _IMAGE.match(image):
        problems.append(f"spec.image: {image!r} is not an image reference (e.g. registry/slurmd:24.11)")
    elif (allowed := _allowed_images(default_image, allowed_images)) and not host_access.allowed_image(
        image, allowed
    ):
        problems.append(
            f"spec.image: {image!r} is not an image the administrator allowed for slurmd (the default's "
            "repository or the chart's slurmd.allowedImages); it would run with slurm.key"
        )
    node_selector = _mapping(spec, "nodeSelector", problems)
    affinity = _mapping(spec, "affinity", problems)
    tolerations = spec.get("tolerations") or []
    if not isinstance(tolerations, list) or not all(isinstance(t, dict) for t in tolerations):
        problems.append("spec.tolerations: must be a list of tolerations")
        tolerations = []
    resources = _mapping(spec, "resources", problems)
    requests = _requests(resources, problems)
    reserve = _mib(spec.get("memoryReserve", DEFAULT_MEMORY_RESERVE), "spec.memoryReserve", problems)
    gpu = _mapping(spec, "gpu", problems)
    template = _mapping(spec, "template", problems)
    for index, container in enumerate(((template.get("spec") or {}).get("containers")) or []):
        if not isinstance(container, dict) or not container.get("name"):
            problems.append(f"spec.template.spec.containers[{index}]: a container needs a name")
    if not allow_host_access:
        problems += host_access.problems(template)
    problems += host_access.key_problems(template)

    update = _update_strategy(spec, problems)
    demand = _demand(spec, problems)
    decided = ((obj.get("status") or {}).get("demand") or {}).get("replicas")
    demand_wanted = None
    if demand is not None:
        start = decided if isinstance(decided, int) and not isinstance(decided, bool) else demand.min_replicas
        demand_wanted = min(max(start, demand.min_replicas), demand.max_replicas)
        replicas = demand_wanted
    drain = _drain_policy(spec, problems)

    if problems:
        return Invalid(
            name, namespace, str(meta.get("uid") or ""), int(meta.get("generation") or 0), tuple(problems)
        )
    return NodeSet(
        name=name,
        namespace=namespace,
        uid=str(meta.get("uid") or ""),
        generation=int(meta.get("generation") or 0),
        created=str(meta.get("creationTimestamp") or ""),
        replicas=replicas,
        partitions=partitions,
        features=features,
        image=image,
        node_selector={str(k): str(v) for k, v in node_selector.items()},
        affinity=affinity,
        tolerations=list(tolerations),
        resources=resources,
        memory_reserve_mib=reserve,
        gpu_resource=str(gpu.get("resource") or DEFAULT_GPU_RESOURCE),
        gpu_product_label=str(gpu.get("productLabel") or DEFAULT_GPU_PRODUCT_LABEL),
        template=template,
        requests=requests,
        update=update,
        demand=demand,
        demand_wanted=demand_wanted,
        drain=drain,
        deleting=bool(meta.get("deletionTimestamp")),
    )


def _allowed_images(default_image: str, allowed_images: tuple[str, ...]) -> tuple[str, ...]:
    """The default image's repository (any tag of it: an upgrade) and the administrator's list."""
    return (host_access.repository(default_image),) * bool(default_image) + allowed_images


def _update_strategy(spec: Json, problems: list[str]) -> UpdateStrategy:
    strategy = _mapping(spec, "updateStrategy", problems)
    kind = strategy.get("type") or ROLLING
    if kind not in (ROLLING, ON_DELETE):
        problems.append(f"spec.updateStrategy.type: {kind!r} is neither {ROLLING} nor {ON_DELETE}")
        return UpdateStrategy()
    rolling = strategy.get("rollingUpdate") or {}
    if not isinstance(rolling, dict):
        problems.append("spec.updateStrategy.rollingUpdate: must be an object")
        return UpdateStrategy()
    value = rolling.get("maxUnavailable", 1)
    where = "spec.updateStrategy.rollingUpdate.maxUnavailable"
    window = _window(rolling.get("window"), problems)
    if isinstance(value, bool) or not isinstance(value, int | str):
        problems.append(f"{where}: {value!r} is neither a count nor a percentage")
        return UpdateStrategy()
    if isinstance(value, int):
        if value < 1:
            problems.append(f"{where}: {value} would never replace a member; use 1 or more")
            return UpdateStrategy()
        return UpdateStrategy(kind, value, window)
    if not re.fullmatch(r"\d{1,3}%", value) or not 1 <= int(value[:-1]) <= 100:
        problems.append(f"{where}: {value!r} is not a percentage from 1% to 100%")
        return UpdateStrategy()
    return UpdateStrategy(kind, value, window)


def _window(value: object, problems: list[str]) -> Window | None:
    where = "spec.updateStrategy.rollingUpdate.window"
    if value is None:
        return None
    if not isinstance(value, dict):
        problems.append(f"{where}: must be an object with start, duration and (optionally) days")
        return None
    start = re.fullmatch(r"([01]\d|2[0-3]):([0-5]\d)", str(value.get("start", "")))
    if start is None:
        problems.append(
            f"{where}.start: {value.get('start')!r} is not a time of day in UTC (HH:MM, e.g. 22:00)"
        )
    seconds = duration_s(value.get("duration", ""))
    if seconds is None or not 60 <= seconds <= 7 * 86400:
        problems.append(
            f"{where}.duration: {value.get('duration')!r} is not a duration from 1m to 7d (e.g. 4h)"
        )
    days = value.get("days") or []
    if not isinstance(days, list) or any(d not in DAYS for d in days):
        problems.append(f"{where}.days: {days!r}: use {', '.join(DAYS)}")
        days = []
    if start is None or seconds is None or not 60 <= seconds <= 7 * 86400:
        return None
    return Window(
        int(start.group(1)) * 60 + int(start.group(2)), seconds // 60, frozenset(DAYS.index(d) for d in days)
    )


def _demand(spec: Json, problems: list[str]) -> Demand | None:
    if spec.get("demand") is None:
        return None
    demand = _mapping(spec, "demand", problems)
    bounds = []
    for key, default in (("minReplicas", 1), ("maxReplicas", None)):
        value = demand.get(key, default)
        if value is None or isinstance(value, bool) or not isinstance(value, int) or value < 0:
            problems.append(f"spec.demand.{key}: {value!r} is not a whole number of 0 or more")
            return None
        bounds.append(value)
    low, high = bounds
    if high < low:
        problems.append(f"spec.demand.maxReplicas: {high} is below spec.demand.minReplicas ({low})")
        return None
    idle = demand.get("idleAfter", "10m")
    seconds = duration_s(idle)
    if seconds is None or seconds < 1:
        problems.append(f"spec.demand.idleAfter: {idle!r} is not a duration (e.g. 10m)")
        return None
    return Demand(low, high, seconds)


def _drain_policy(spec: Json, problems: list[str]) -> DrainPolicy:
    drain = _mapping(spec, "drain", problems)
    timeout = drain.get("timeout")
    on_timeout = drain.get("onTimeout") or REPORT
    if on_timeout not in (REPORT, CANCEL_JOBS):
        problems.append(f"spec.drain.onTimeout: {on_timeout!r} is neither {REPORT} nor {CANCEL_JOBS}")
        on_timeout = REPORT
    if timeout is None:
        if "onTimeout" in drain:
            problems.append("spec.drain.onTimeout: set without spec.drain.timeout")
        return DrainPolicy(None, on_timeout)
    seconds = duration_s(timeout)
    if seconds is None or seconds < 1:
        problems.append(
            f"spec.drain.timeout: {timeout!r} is not a duration (a number with s, m, h or d, e.g. 4h)"
        )
        return DrainPolicy(None, on_timeout)
    return DrainPolicy(seconds, on_timeout)


def duration_s(value: object) -> int | None:
    """Seconds in "90", "90s", "30m", "4h" or "2d"; None if it is not one of those."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = _DURATION.match(str(value).strip())
    return int(match.group(1)) * _SECONDS[match.group(2)] if match else None


def _words(spec: Json, key: str, problems: list[str]) -> tuple[str, ...]:
    values = spec.get(key) or []
    if not isinstance(values, list):
        problems.append(f"spec.{key}: must be a list of names")
        return ()
    for index, value in enumerate(values):
        if not isinstance(value, str) or not _SLURM_WORD.match(value):
            problems.append(
                f"spec.{key}[{index}]: {value!r} is not a Slurm name (letters, digits, '_', '.', '-')"
            )
    return tuple(v for v in values if isinstance(v, str))


def _mapping(spec: Json, key: str, problems: list[str]) -> Json:
    value = spec.get(key) or {}
    if not isinstance(value, dict):
        problems.append(f"spec.{key}: must be an object")
        return {}
    return value


def _mib(value: object, where: str, problems: list[str]) -> int:
    try:
        amount = parse_quantity(value)
    except QuantityError as err:
        problems.append(f"{where}: {err}")
        return 0
    if amount < 0:
        problems.append(f"{where}: must not be negative")
        return 0
    return int(amount / MIB)


def _requests(resources: Json, problems: list[str]) -> Requests:
    """What the slurmd container asks of its Node; checks that Slurm is left whole CPUs."""
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    # Kubernetes takes a limit as the request when no request is given.
    merged = {**limits, **requests}
    for where, values in (("limits", limits), ("requests", requests)):
        for key, value in values.items():
            try:
                parse_quantity(value)
            except QuantityError as err:
                problems.append(f"spec.resources.{where}.{key}: {err}")
                return Requests()
    for key in ("cpu", "memory"):
        if key in limits and key in requests and parse_quantity(requests[key]) > parse_quantity(limits[key]):
            problems.append(f"spec.resources.requests.{key}: more than its limit ({limits[key]})")
    cpu = limits.get("cpu", requests.get("cpu"))
    if cpu is not None and parse_quantity(cpu) < 1:
        problems.append(f"spec.resources: a cpu of {cpu} leaves Slurm no whole CPU to hand out")
    total, _ = pod_requests({"containers": [{"name": "slurmd", "resources": {"requests": merged}}]})
    return total


def regarding(obj: Json) -> Json:
    """The NodeSet as an Event's subject."""
    meta = obj.get("metadata") or {}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
    }
