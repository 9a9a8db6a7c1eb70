"""The resources a Pod asks for, summed the way the kubelet admits it (R2.1, R3.1).

A Pod needs the larger of two amounts: what its long-running containers (app containers
plus restartable init "sidecar" containers) use together, and what the busiest moment of
its init sequence uses (one init container plus the sidecars started before it). Pod
overhead is added on top. Only requests count: they are what Slurm must set aside.

Extended resources (GPUs, MIG slices, RDMA devices: any request named `domain/name`
outside kubernetes.io) are summed the same way, per name; which of them Slurm knows as a
GRES is the scheduler's business (its device table).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sunk.kube.quantity import QuantityError, parse_quantity

MIB = Decimal(2**20)


def is_extended(resource: str) -> bool:
    """A device or other extended resource, as Kubernetes defines them: a qualified name
    outside the kubernetes.io domain (hugepages-*, ephemeral-storage are native)."""
    domain, slash, _ = resource.partition("/")
    return bool(slash) and not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


@dataclass(frozen=True)
class Requests:
    cpu: Decimal = Decimal(0)
    memory: Decimal = Decimal(0)
    devices: tuple[tuple[str, Decimal], ...] = ()  # extended resource → count, sorted by name

    def __add__(self, other: Requests) -> Requests:
        return Requests(
            self.cpu + other.cpu, self.memory + other.memory, _merge(self, other, lambda a, b: a + b)
        )

    def max(self, other: Requests) -> Requests:
        return Requests(max(self.cpu, other.cpu), max(self.memory, other.memory), _merge(self, other, max))

    @property
    def whole_cpus(self) -> int:
        """Slurm allocates whole CPUs: 1500m becomes 2."""
        return math.ceil(self.cpu)

    @property
    def memory_mib(self) -> int:
        return math.ceil(self.memory / MIB)


def _merge(a: Requests, b: Requests, combine: Any) -> tuple[tuple[str, Decimal], ...]:
    left, right = dict(a.devices), dict(b.devices)
    return tuple(
        (name, combine(left.get(name, Decimal(0)), right.get(name, Decimal(0))))
        for name in sorted(left | right)
    )


def _container_requests(container: dict[str, Any], errors: list[str], *, required: bool) -> Requests:
    name = container.get("name", "?")
    resources = container.get("resources") or {}
    # Kubernetes takes the limit as the request of an extended resource that names no request.
    requests = {
        **{k: v for k, v in (resources.get("limits") or {}).items() if is_extended(k)},
        **(resources.get("requests") or {}),
    }
    values: dict[str, Decimal] = {}
    for key in ("cpu", "memory", *sorted(k for k in requests if is_extended(k))):
        if key not in requests:
            continue
        try:
            values[key] = parse_quantity(requests[key])
        except QuantityError as err:
            errors.append(f'container "{name}": {key} request {err}')
    if required:
        for key, example in (("cpu", '"1"'), ("memory", '"1Gi"')):
            if values.get(key, Decimal(0)) <= 0:
                state = "is zero" if key in requests else "is missing"
                errors.append(
                    f'container "{name}": {key} request {state}; Slurm must know what to set '
                    f"aside, so set resources.requests.{key} (for example {example})"
                )
    devices = []
    for key in sorted(k for k in values if is_extended(k)):
        if values[key] != values[key].to_integral_value():
            errors.append(f'container "{name}": {key} request must be a whole number')
        elif values[key] > 0:
            devices.append((key, values[key]))
    return Requests(values.get("cpu", Decimal(0)), values.get("memory", Decimal(0)), tuple(devices))


def pod_requests(spec: dict[str, Any]) -> tuple[Requests, list[str]]:
    """Effective requests of a Pod spec, and every problem found on the way."""
    errors: list[str] = []
    long_running = Requests()
    for container in spec.get("containers") or []:
        long_running += _container_requests(container, errors, required=True)
    busiest_init = Requests()
    sidecars = Requests()
    for container in spec.get("initContainers") or []:
        if container.get("restartPolicy") == "Always":
            # A sidecar runs for the Pod's whole life, so it is held to the same rule.
            sidecar = _container_requests(container, errors, required=True)
            busiest_init = busiest_init.max(sidecars + sidecar)
            sidecars += sidecar
        else:
            init = _container_requests(container, errors, required=False)
            busiest_init = busiest_init.max(sidecars + init)
    total = (long_running + sidecars).max(busiest_init)
    overhead = spec.get("overhead") or {}
    if overhead:
        total += _container_requests(
            {"name": "(pod overhead)", "resources": {"requests": overhead}}, errors, required=False
        )
    return total, errors
