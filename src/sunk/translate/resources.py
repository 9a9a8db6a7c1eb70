"""The resources a Pod asks for, summed the way the kubelet admits it (R2.1, R3.1).

A Pod needs the larger of two amounts: what its long-running containers (app containers
plus restartable init "sidecar" containers) use together, and what the busiest moment of
its init sequence uses (one init container plus the sidecars started before it). Pod
overhead is added on top. Only requests count: they are what Slurm must set aside.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sunk.translate.quantity import QuantityError, parse_quantity

GPU_RESOURCE = "nvidia.com/gpu"
MIB = Decimal(2**20)


@dataclass(frozen=True)
class Requests:
    cpu: Decimal = Decimal(0)
    memory: Decimal = Decimal(0)
    gpus: Decimal = Decimal(0)

    def __add__(self, other: Requests) -> Requests:
        return Requests(self.cpu + other.cpu, self.memory + other.memory, self.gpus + other.gpus)

    def max(self, other: Requests) -> Requests:
        return Requests(max(self.cpu, other.cpu), max(self.memory, other.memory), max(self.gpus, other.gpus))

    @property
    def whole_cpus(self) -> int:
        """Slurm allocates whole CPUs: 1500m becomes 2."""
        return math.ceil(self.cpu)

    @property
    def memory_mib(self) -> int:
        return math.ceil(self.memory / MIB)


def _container_requests(container: dict[str, Any], errors: list[str], *, required: bool) -> Requests:
    name = container.get("name", "?")
    requests = (container.get("resources") or {}).get("requests") or {}
    values: dict[str, Decimal] = {}
    for key in ("cpu", "memory", GPU_RESOURCE):
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
    gpus = values.get(GPU_RESOURCE, Decimal(0))
    if gpus != gpus.to_integral_value():
        errors.append(f'container "{name}": {GPU_RESOURCE} request must be a whole number')
    return Requests(values.get("cpu", Decimal(0)), values.get("memory", Decimal(0)), gpus)


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
