"""What real kubelet Nodes change on the host, made and undone in one place.

Real Nodes share the host's network namespace: one Linux bridge carries every Pod and every
Node address, an nftables table keeps Pod traffic on that bridge, and the kubelets and the
CNI bridge plugin flip kernel settings they offer no way to leave alone. All of it is
recorded in a machine-wide claim file before it is changed, so `sunk dev down` (or the next
`sunk dev up`, after a crash) puts the host back exactly as it was. One dev cluster per
machine may have real Nodes: kernel settings and the Service range are machine-wide.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sunk_dev.errors import DevClusterError
from sunk_dev.layout import Layout

CLAIM = Path("/run/sunk-dev/real-nodes.json")
PROC_SYS = Path("/proc/sys")
# Settings the kubelet (overcommit, panic) and the CNI bridge plugin (forwarding) change.
SYSCTLS = (
    "vm/overcommit_memory",
    "kernel/panic",
    "kernel/panic_on_oops",
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/route_localnet",
    "net/bridge/bridge-nf-call-iptables",
)
SERVICE_CIDR = "10.96.0.0/16"
DNS_SERVICE_IP = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
MAX_REAL_NODES = 16


@dataclass(frozen=True)
class PodNetwork:
    """Addresses of one dev cluster's real Nodes: 10.(64+k).0.0/16 for dev cluster k.

    The gateway (.0.1) is the host's address on the bridge, where the API server and the
    cluster DNS listen; Node i has 10.(64+k).255.i and hands its Pods 10.(64+k).i.2-254;
    the file server (`fileserver`) is the host 10.(64+k).254.1 on the same bridge.
    Clear of kwok's fake Pod addresses (10.128.0.0/9) and the Service range (10.96.0.0/16).
    """

    index: int

    @property
    def bridge(self) -> str:
        return f"sunkbr{self.index}"

    @property
    def cidr(self) -> str:
        return f"10.{64 + self.index}.0.0/16"

    @property
    def gateway(self) -> str:
        return f"10.{64 + self.index}.0.1"

    def node_ip(self, number: int) -> str:
        return f"10.{64 + self.index}.255.{number}"

    @property
    def file_server_ip(self) -> str:
        return f"10.{64 + self.index}.254.1"

    @property
    def file_server_ns(self) -> str:
        """The file server's network namespace, and its link's name on the bridge."""
        return f"sunkfs{self.index}"

    def pod_range(self, number: int) -> tuple[str, str]:
        return f"10.{64 + self.index}.{number}.2", f"10.{64 + self.index}.{number}.254"

    @property
    def nft_table(self) -> str:
        return f"sunk_dev_{self.index}"

    def contains(self, address: str) -> bool:
        return ipaddress.ip_address(address) in ipaddress.ip_network(self.cidr)


def network_of(layout: Layout) -> PodNetwork:
    """Dev clusters are told apart by their port offset (SUNK_DEV_PORT_OFFSET, in thousands)."""
    return PodNetwork(layout.ports.offset // 1000 % 100)


# -- the claim: who changed the host, and what it was before ---------------------------------
def _read_sysctl(name: str) -> str | None:
    try:
        return (PROC_SYS / name).read_text().strip()
    except OSError:
        return None


def _write_sysctl(name: str, value: str) -> None:
    try:
        (PROC_SYS / name).write_text(value + "\n")
    except OSError:
        pass  # a setting this kernel lacks was never changed either


def read_claim() -> dict[str, object] | None:
    try:
        data = json.loads(CLAIM.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def owned_by(layout: Layout) -> bool:
    """Whether this dev cluster changed the host for real Nodes (and has not given it back)."""
    current = read_claim()
    return current is not None and current.get("owner") == str(layout.root)


def claim(layout: Layout, mount_points: Iterable[str]) -> None:
    """Record the host's settings before anything changes them; refuse a second owner.

    `mount_points` are host directories the Nodes mount over in their own namespaces; the
    missing ones are made here and removed again by `release` (when still empty)."""
    current = read_claim()
    if current is not None and current.get("owner") != str(layout.root):
        raise DevClusterError(
            f"the dev cluster under {current.get('owner')} has real Nodes on this machine; only "
            "one may: stop it first (`SUNK_DEV_DIR=<its directory> sunk dev down`)"
        )
    if current is not None:
        return  # our own claim from an earlier run: its record of the host still holds
    made = [point for point in mount_points if not Path(point).exists()]
    record = {
        "owner": str(layout.root),
        "sysctls": current_sysctls(),
        "made_dirs": made,
    }
    CLAIM.parent.mkdir(parents=True, exist_ok=True)
    CLAIM.write_text(json.dumps(record, indent=1) + "\n")
    for point in made:
        Path(point).mkdir(parents=True)


def release(layout: Layout) -> None:
    """Undo everything `claim` and `prepare` did, once every Node process is gone."""
    current = read_claim()
    if current is None or not owned_by(layout):
        return
    net = network_of(layout)
    _nft(f"delete table inet {net.nft_table}", check=False)
    run_ip("link", "delete", net.bridge, check=False)
    sysctls = current.get("sysctls")
    if isinstance(sysctls, dict):
        for name, value in sysctls.items():
            if isinstance(value, str) and _read_sysctl(name) != value:
                _write_sysctl(name, value)
    made = current.get("made_dirs")
    for point in reversed(made if isinstance(made, list) else []):
        try:
            Path(point).rmdir()  # only when empty, and nothing can be mounted on it by now
        except OSError:
            pass
    CLAIM.unlink(missing_ok=True)
    try:
        CLAIM.parent.rmdir()
    except OSError:
        pass


def current_sysctls() -> dict[str, str | None]:
    """The settings real Nodes change, as they are now."""
    return {name: _read_sysctl(name) for name in SYSCTLS}


def changed_sysctls() -> dict[str, tuple[str, str]]:
    """Settings that differ from the claim's record now: (was, is) by name."""
    current = read_claim() or {}
    recorded = current.get("sysctls")
    if not isinstance(recorded, dict):
        return {}
    changed = {}
    for name, was in recorded.items():
        now = _read_sysctl(name)
        if isinstance(was, str) and now is not None and now != was:
            changed[name] = (was, now)
    return changed


# -- the bridge and the traffic guard --------------------------------------------------------
def prepare(layout: Layout, nodes: int) -> PodNetwork:
    """The shared bridge with the gateway and every Node address, and the guard that keeps
    Pod traffic on it (Pods may reach each other, Services and the host, nothing beyond)."""
    net = network_of(layout)
    prefix = net.cidr.split("/")[1]
    run_ip("link", "delete", net.bridge, check=False)  # a leftover of a crashed run
    run_ip("link", "add", net.bridge, "type", "bridge")
    for address in [net.gateway, *(net.node_ip(i) for i in range(1, nodes + 1))]:
        run_ip("addr", "add", f"{address}/{prefix}", "dev", net.bridge)
    run_ip("link", "set", net.bridge, "up")
    _nft(f"delete table inet {net.nft_table}", check=False)
    _nft(
        f"table inet {net.nft_table} {{\n"
        "  chain forward {\n"
        "    type filter hook forward priority 0; policy accept;\n"
        f"    ip saddr {net.cidr} ip daddr != {net.cidr} counter reject\n"
        f"    ip daddr {net.cidr} ip saddr != {net.cidr} counter reject\n"
        "  }\n"
        "}\n",
        stdin=True,
    )
    return net


def run_ip(*argv: str, check: bool = True) -> None:
    done = subprocess.run(["ip", *argv], capture_output=True, text=True)
    if check and done.returncode:
        raise DevClusterError(f"`ip {' '.join(argv)}` failed: {done.stderr.strip()}")


def _nft(script: str, *, check: bool = True, stdin: bool = False) -> None:
    argv = ["nft", "-f", "-"] if stdin else ["nft", *script.split()]
    done = subprocess.run(argv, input=script if stdin else None, capture_output=True, text=True)
    if check and done.returncode:
        raise DevClusterError(f"nft failed ({done.stderr.strip()}): is nftables installed and usable?")


# -- cgroups ----------------------------------------------------------------------------------
CGROUP_FS = Path("/sys/fs/cgroup")


def hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy (v1 controllers and the unified one)."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[2] in ("cgroup", "cgroup2") and parts[1].startswith(str(CGROUP_FS)):
            found.append(Path(parts[1]))
    return found


def make_cgroup_root(name: str) -> None:
    """The kubelet wants its cgroupRoot in every hierarchy before it starts; cpuset needs
    its CPUs and memory nodes copied from the parent or nothing can join it."""
    for hierarchy in hierarchies():
        path = hierarchy / name
        path.mkdir(exist_ok=True)
        for knob in ("cpuset.cpus", "cpuset.mems"):
            parent = hierarchy / knob
            if parent.exists() and not (path / knob).read_text().strip():
                (path / knob).write_text(parent.read_text())


def cgroup_pids(name: str) -> list[int]:
    """Processes still in any cgroup below `name` (all of them started by that Node)."""
    pids: set[int] = set()
    for hierarchy in hierarchies():
        for procs in (hierarchy / name).rglob("cgroup.procs") if (hierarchy / name).is_dir() else ():
            try:
                pids |= {int(p) for p in procs.read_text().split()}
            except OSError:
                continue
    return sorted(pids)


def remove_cgroup_root(name: str) -> list[str]:
    """Remove the tree depth-first; returns the directories that would not go (still busy)."""
    stuck = []
    for hierarchy in hierarchies():
        top = hierarchy / name
        if not top.is_dir():
            continue
        for path in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            try:
                path.rmdir()
            except OSError:
                stuck.append(str(path))
        try:
            top.rmdir()
        except OSError:
            stuck.append(str(top))
    return stuck


# -- can this machine run real Nodes at all? -------------------------------------------------
REQUIRED_COMMANDS = {
    "containerd": "containerd",
    "runc": "runc",
    "ctr": "containerd",
    "nft": "nftables",
    "iptables": "iptables",  # NFQUEUE for NetworkPolicies (`netpol`): this kernel has no nft queue
    "ip": "iproute2",
    "unshare": "util-linux",
    "nsenter": "util-linux",
    "glusterd": "glusterfs-server",  # the shared volumes' file server (`fileserver`)
    "glusterfs": "glusterfs-client",  # and its FUSE client on every Node
}
CNI_PLUGINS = ("bridge", "host-local", "loopback")
CNI_DIR = Path("/usr/lib/cni")


def missing_packages() -> list[str]:
    """Debian packages a real Node needs and this machine lacks."""
    missing = {package for cmd, package in REQUIRED_COMMANDS.items() if shutil.which(cmd) is None}
    if not all((CNI_DIR / plugin).exists() for plugin in CNI_PLUGINS):
        missing.add("containernetworking-plugins")
    return sorted(missing)


def unusable_reason() -> str | None:
    """Why this machine cannot run real Nodes (root, cgroups), or None when it can."""
    if os.geteuid() != 0:
        return "real Nodes need root (containerd, runc, cgroups, a bridge): run `sunk dev up` as root"
    if not hierarchies():
        return "real Nodes need cgroups, and no cgroup hierarchy is mounted under /sys/fs/cgroup"
    memory = [h for h in hierarchies() if h.name == "memory"]
    if not memory and not (CGROUP_FS / "cgroup.controllers").exists():
        return "real Nodes need the memory cgroup controller, which this kernel does not offer"
    if not Path("/dev/fuse").exists():
        return "real Nodes mount their shared volumes with FUSE, and this machine has no /dev/fuse"
    if not Path("/proc/sys/net/bridge").exists():
        return "real Nodes need bridge netfilter (br_netfilter) for Services: `modprobe br_netfilter`"
    return None
