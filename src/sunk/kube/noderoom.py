"""Room for one more Pod on a Node, in the kubelet's own count (R4.3, R7.1).

A kubelet admits a Pod bound to its Node when, for every resource the Pod requests, the
request fits in the Node's `status.allocatable` less what the Pods it already runs request,
and one more Pod fits in the allocatable `pods` count. It counts every Pod that has not
finished (phase neither Succeeded nor Failed): a Pod terminating still holds its share.
Requests are summed as `sunk.kube.resources` sums them (the larger of the long-running
containers, sidecar init containers included, and the busiest init step; plus
`spec.overhead`). Slurm counts something else (a slurmd Pod's limits), so a node Slurm
calls free may be full for the kubelet, which then fails the Pod with `OutOfcpu`.

What is not checked, and why:
- a Node with no `status.allocatable` at all (a Node object made by hand, or a kubelet that
  has not posted its status, which is not Ready either): it is not judged here;
- cpu, memory or pods missing from allocatable (every kubelet reports them): not judged;
- an extended resource (`nvidia.com/gpu`) the Node does not list: the kubelet itself
  drops such a request before it counts (a scheduler extender may manage it), so do we;
- ephemeral-storage and hugepages: `sunk.kube.resources` does not sum them.

The caller decides which Pods are on the Node; the scheduler sees only the slurmd Pods and
its own, so DaemonSets and other schedulers' Pods are missing from its count.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from sunk.kube.quantity import QuantityError, parse_quantity
from sunk.kube.resources import Requests, pod_requests

Json = dict[str, Any]
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
# Where a user reads how to keep a NodeSet's requests beside what Slurm hands out.
DOCS = "docs/platform.md#requests-and-limits-beside-the-pods-sunk-places"


def counts(pod: Json) -> bool:
    """Whether the kubelet counts `pod` on its Node: it has not finished. A Pod being
    deleted still counts until its containers are gone."""
    return (pod.get("status") or {}).get("phase") not in FINISHED_PHASES


def requests_of(pod: Json) -> Requests:
    """What `pod` holds on its Node in the kubelet's count (problems with its quantities,
    which the API server would have refused, count as nothing)."""
    requests, _ = pod_requests(pod.get("spec") or {})
    return requests


@dataclass
class Tally:
    """What the counted Pods on one Node request together, and how many they are."""

    cpu: Decimal = Decimal(0)
    memory: Decimal = Decimal(0)
    devices: dict[str, Decimal] = field(default_factory=dict)
    pods: int = 0

    def add(self, requests: Requests, sign: int = 1) -> None:
        """Count one more Pod requesting `requests` (sign -1: one fewer)."""
        self.cpu += sign * requests.cpu
        self.memory += sign * requests.memory
        for name, count in requests.devices:
            self.devices[name] = self.devices.get(name, Decimal(0)) + sign * count
        self.pods += sign

    def copy(self) -> Tally:
        return Tally(self.cpu, self.memory, dict(self.devices), self.pods)

    def plus(self, other: Tally) -> Tally:
        both = Tally(
            self.cpu + other.cpu, self.memory + other.memory, dict(self.devices), self.pods + other.pods
        )
        for name, count in other.devices.items():
            both.devices[name] = both.devices.get(name, Decimal(0)) + count
        return both


def tally(pods: Iterable[Json]) -> Tally:
    """The kubelet's count of `pods` (those on one Node): finished ones are left out."""
    total = Tally()
    for pod in pods:
        if counts(pod):
            total.add(requests_of(pod))
    return total


def size(node: Json) -> tuple[Decimal, Decimal]:
    """A Node's allocatable cpu and memory, for comparing Nodes (what it does not report
    counts as nothing)."""
    return (_allocatable(node, "cpu") or Decimal(0), _allocatable(node, "memory") or Decimal(0))


def _allocatable(node: Json, resource: str) -> Decimal | None:
    value = ((node.get("status") or {}).get("allocatable") or {}).get(resource)
    if value is None:
        return None
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


def shortfall(node: Json, wanted: Requests, used: Tally) -> str | None:
    """None when a Pod requesting `wanted` fits on `node` beside Pods requesting `used`;
    otherwise why not, as a sentence naming each resource short."""
    if not (node.get("status") or {}).get("allocatable"):
        return None  # nothing reported: not judged (the module's docstring says why)
    short = []
    asked = [("cpu", wanted.cpu, used.cpu), ("memory", wanted.memory, used.memory)]
    asked += [(name, count, used.devices.get(name, Decimal(0))) for name, count in wanted.devices]
    for resource, want, taken in asked:
        allocatable = _allocatable(node, resource)
        if want <= 0 or allocatable is None or want <= allocatable - taken:
            continue
        free = max(Decimal(0), allocatable - taken)
        short.append(
            f"{resource} {show(resource, want)}, {show(resource, free)} is free of "
            f"{show(resource, allocatable)} allocatable ({show(resource, taken)} requested by "
            "the slurmd and placed Pods)"
        )
    places = _allocatable(node, "pods")
    if places is not None and used.pods + 1 > places:
        short.append(f"a Pod's place, and all {places} are taken ({used.pods} slurmd and placed Pods)")
    if not short:
        return None
    name = (node.get("metadata") or {}).get("name", "?")
    return (
        f"Node {name} has no room for the Pod in the kubelet's count: it asks {'; and '.join(short)}; "
        f"if Slurm keeps choosing it, lower the NodeSet's requests ({DOCS})"
    )


_BINARY = (("Ti", Decimal(2**40)), ("Gi", Decimal(2**30)), ("Mi", Decimal(2**20)), ("Ki", Decimal(2**10)))


def show(resource: str, amount: Decimal) -> str:
    """An amount as a manifest would write it: cpu in cores or millicores, memory in the
    largest binary unit that keeps it whole, counts as they are."""
    if resource == "cpu":
        if amount == amount.to_integral_value():
            return str(int(amount))
        return f"{(amount * 1000).normalize():f}m"
    if resource == "memory":
        for suffix, size in _BINARY:
            if amount >= size and amount % size == 0:
                return f"{int(amount / size)}{suffix}"
    return f"{amount.normalize():f}"
