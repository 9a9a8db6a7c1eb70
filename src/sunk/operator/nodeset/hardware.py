"""What a member's Slurm node is called and what it has, worked out before its Pod exists.

The name comes from the Node's internal address, as SUNK does it: the last two octets,
three digits each (10.174.12.2 -> `<nodeset>-012-002`). It stays with the machine when the
Pod is re-created, and neighbouring machines give compact Slurm host ranges.

The shape (CPUs, RealMemory, GRES, features) is handed to `slurmd -Z --conf`, so the node
registers right the first time: no GRES that is null until a second registration, no
memory Slurm would over-promise.
"""

from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sunk.kube.quantity import QuantityError, parse_quantity
from sunk.kube.resources import MIB
from sunk.operator.nodeset.spec import NodeSet

Json = dict[str, Any]
PARTITION_FEATURE = "part_{}"  # the chart's slurm.conf: NodeSet=part_<p> Feature=part_<p>
_GRES_TYPE_CHARS = re.compile(r"[^a-z0-9_.\-]+")


def internal_ip(node: Json) -> str | None:
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP" and address.get("address"):
            return str(address["address"])
    return None


def slurm_node_name(nodeset: str, node: Json) -> str | None:
    """`<nodeset>-ddd-ddd` from the Node's IPv4 InternalIP; None when it has none."""
    address = internal_ip(node)
    if address is None:
        return None
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return None
    if ip.version != 4:
        return None
    third, fourth = ip.packed[2], ip.packed[3]
    return f"{nodeset}-{third:03d}-{fourth:03d}"


@dataclass(frozen=True)
class Shape:
    cpus: int
    memory_mib: int
    gres: str  # "" or e.g. "gpu:h100:8"
    features: tuple[str, ...]

    def conf(self) -> str:
        """The `slurmd --conf` line."""
        words = [f"CPUs={self.cpus}", f"RealMemory={self.memory_mib}"]
        if self.gres:
            words.append(f"Gres={self.gres}")
        if self.features:
            words.append(f"Features={','.join(self.features)}")
        return " ".join(words)


def gres_in_conf(conf: str) -> list[tuple[str, int]]:
    """[("gpu:h100", 8)] from a `--conf` line's Gres=gpu:h100:8 (several comma-separated)."""
    gres = next((w[len("Gres=") :] for w in conf.split() if w.startswith("Gres=")), "")
    found = []
    for item in filter(None, gres.split(",")):
        name, _, count = item.rpartition(":")
        if name and count.isdigit():
            found.append((name, int(count)))
    return found


class ShapeError(ValueError):
    """The Node cannot give Slurm anything (e.g. memory below the reserve)."""


def shape(nodeset: NodeSet, node: Json) -> Shape:
    """CPUs and memory from the slurmd container's limits (else its requests, else what the
    Node can allocate), memory less the NodeSet's reserve; GPUs from the container's limit
    of the GPU resource, else the Node's allocatable count, typed by the product label."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    limits = nodeset.resources.get("limits") or {}
    requests = nodeset.resources.get("requests") or {}
    name = (node.get("metadata") or {}).get("name", "?")

    cpu = _amount(limits.get("cpu", requests.get("cpu", allocatable.get("cpu", 0))))
    cpus = math.floor(cpu)
    if cpus < 1:
        raise ShapeError(
            f"Node {name} has no whole CPU to give Slurm (allocatable cpu {allocatable.get('cpu')})"
        )
    memory = _amount(limits.get("memory", requests.get("memory", allocatable.get("memory", 0))))
    memory_mib = math.floor(memory / MIB) - nodeset.memory_reserve_mib
    if memory_mib < 1:
        raise ShapeError(
            f"Node {name}: {math.floor(memory / MIB)} MiB of memory leaves nothing after the "
            f"{nodeset.memory_reserve_mib} MiB reserve (spec.memoryReserve)"
        )
    gpus = math.floor(_amount(limits.get(nodeset.gpu_resource, allocatable.get(nodeset.gpu_resource, 0))))
    gres = ""
    if gpus > 0:
        product = ((node.get("metadata") or {}).get("labels") or {}).get(nodeset.gpu_product_label, "")
        kind = gres_type(product)
        gres = f"gpu:{kind}:{gpus}" if kind else f"gpu:{gpus}"
    features = tuple(
        dict.fromkeys([*(PARTITION_FEATURE.format(p) for p in nodeset.partitions), *nodeset.features])
    )
    return Shape(cpus, memory_mib, gres, features)


def gres_type(product: str) -> str:
    """A GPU product label as a GRES type: lower case, runs of other characters as '_'
    ("NVIDIA-H100-80GB-HBM3" -> "nvidia-h100-80gb-hbm3")."""
    return _GRES_TYPE_CHARS.sub("_", product.strip().lower()).strip("_")


def _amount(value: object) -> Decimal:
    try:
        return parse_quantity(value)
    except QuantityError:
        return Decimal(0)
