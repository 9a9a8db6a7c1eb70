"""NetworkPolicy enforcement for real Nodes: `sunk-netpol` and the host rules that feed it.

The real Nodes share the host's network namespace and one bridge, so, like kube-proxy, one
enforcer serves them all as a host process. It is built from Go modules (dev/netpol) and
judges each new connection with kube-network-policies' own evaluation. This kernel lacks
nftables' `queue` statement, so the host's rules are iptables ones (iptables-nft), with the
`NFQUEUE` target:

    -N SUNK-NETPOL
    -A SUNK-NETPOL -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN
    -A SUNK-NETPOL -m conntrack --ctstate NEW -j NFQUEUE --queue-num 100
    -I FORWARD 1 -i sunkbr<k> -j SUNK-NETPOL

Forwarded traffic from the bridge is Pod-to-Pod (bridged, seen by iptables through
br_netfilter) and Pod-to-Service (routed back onto the bridge after kube-proxy's DNAT, so
the real Pod is judged). What the host itself sends (kubelet probes, CoreDNS's answers,
the file system clients) passes through OUTPUT and is never queued, as NetworkPolicy
semantics allow for a Pod's own Node. No `--queue-bypass`: when the enforcer is not reading,
new connections between Pods are dropped, which shows at once instead of passing unchecked.
The rules go in only once the enforcer has said it is reading the queue, and come out before
it stops.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from sunk_dev import hostnet, pki, procs
from sunk_dev.errors import DevClusterError
from sunk_dev.kubeapi import AdminKube
from sunk_dev.kubecluster import create_once, write_kubeconfig
from sunk_dev.layout import Layout, cache_dir

PROCESS = "sunk-netpol"
TOOL = "sunk-netpol"
CHAIN = "SUNK-NETPOL"
QUEUE = 100
USER = "system:sunk-netpol"
RBAC_RULES = [
    {"apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": ["list", "watch"]},
    {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["list", "watch"]},
]


def rules(bridge: str, queue: int = QUEUE) -> list[list[str]]:
    """The iptables arguments that make every new connection leaving `bridge` wait for a verdict."""
    return [
        ["-N", CHAIN],
        ["-A", CHAIN, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN"],
        ["-A", CHAIN, "-m", "conntrack", "--ctstate", "NEW", "-j", "NFQUEUE", "--queue-num", str(queue)],
        ["-I", "FORWARD", "1", "-i", bridge, "-j", CHAIN],
    ]


def iptables(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(["iptables", "-w", *argv], capture_output=True, text=True)
    except FileNotFoundError:  # real Nodes install it (hostnet.REQUIRED_COMMANDS)
        done = subprocess.CompletedProcess(["iptables", *argv], 127, "", "iptables is not installed")
    if check and done.returncode:
        raise DevClusterError(f"`iptables {' '.join(argv)}` failed: {done.stderr.strip()}")
    return done


def install_rules(bridge: str) -> None:
    """Put the rules in place (replacing any a crashed run left)."""
    remove_rules(bridge)
    for argv in rules(bridge):
        iptables(*argv)


def remove_rules(bridge: str) -> None:
    """Take the jump out of FORWARD first, so nothing is queued while the chain goes."""
    for _ in range(16):  # every copy of the jump a crashed run may have left
        if iptables("-D", "FORWARD", "-i", bridge, "-j", CHAIN, check=False).returncode:
            break
    iptables("-F", CHAIN, check=False)
    iptables("-X", CHAIN, check=False)


def rules_in_place(bridge: str, *, shared: bool = True) -> list[str]:
    """Our rules as `iptables -S` prints them: the jump from `bridge`, and (with `shared`)
    the chain itself, which is machine-wide like kube-proxy's tables."""
    listed = []
    if shared and not iptables("-S", CHAIN, check=False).returncode:
        listed += [line for line in iptables("-S", CHAIN).stdout.splitlines() if line.strip()]
    forward = iptables("-S", "FORWARD", check=False).stdout
    listed += [line for line in forward.splitlines() if f"-i {bridge} -j {CHAIN}" in line]
    return listed


def start(layout: Layout, timeout: float = 60) -> procs.Tracked:
    """Give the enforcer its credentials, start it, wait until it reads the queue, then
    divert the bridge's new connections to it."""
    out = layout.kube
    pki.issue_client(out, out, PROCESS, USER)
    kubeconfig = out / f"{PROCESS}.kubeconfig"
    write_kubeconfig(layout, kubeconfig, out / PROCESS)
    admin = AdminKube(layout)
    try:
        apply_rbac(admin)
    finally:
        admin.close()
    ready = layout.kube / f"{PROCESS}.ready"
    ready.unlink(missing_ok=True)
    enforcer = procs.spawn(PROCESS, argv(kubeconfig, ready), layout.pids, layout.logs)
    procs.wait_until(
        ready.exists,
        timeout=timeout,
        interval=0.1,
        what=f"{PROCESS} to read NFQUEUE {QUEUE}",
        watch=[enforcer],
        log_dir=layout.logs,
    )
    install_rules(hostnet.network_of(layout).bridge)
    return enforcer


def argv(kubeconfig: Path, ready: Path) -> list[str]:
    return [
        str(cache_dir() / "bin" / TOOL),
        f"--kubeconfig={kubeconfig}",
        f"--queue-num={QUEUE}",
        f"--ready-file={ready}",
        "--v=1",  # each dropped connection is logged
    ]


def apply_rbac(admin: AdminKube) -> None:
    """A ClusterRole that may list and watch what policies are judged by, bound to USER."""
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    name = "sunk-dev:netpol"
    role: dict[str, Any] = {"metadata": {"name": name}, "rules": RBAC_RULES}
    binding: dict[str, Any] = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "User", "name": USER, "apiGroup": "rbac.authorization.k8s.io"}],
    }
    for path, body in ((f"{rbac}/clusterroles", role), (f"{rbac}/clusterrolebindings", binding)):
        if admin.find(f"{path}/{name}") is None:
            create_once(admin, path, body)


def stop(layout: Layout) -> bool:
    """Remove the rules, then stop the enforcer; True when it was running."""
    remove_rules(hostnet.network_of(layout).bridge)
    tracked = procs.load(layout.pids, PROCESS)
    if tracked is None:
        return False
    procs.stop(tracked, layout.pids)
    (layout.kube / f"{PROCESS}.ready").unlink(missing_ok=True)
    return True


def leftovers(layout: Layout, *, shared: bool = True) -> list[str]:
    """Our iptables rules, if `down` left any (the chain only when `shared`: it is ours
    unless another dev cluster holds the host)."""
    bridge = hostnet.network_of(layout).bridge
    return [f"iptables rule {line}" for line in rules_in_place(bridge, shared=shared)]


def state(layout: Layout) -> str:
    """One phrase for `sunk dev status`."""
    tracked = procs.load(layout.pids, PROCESS)
    diverted = any(f"-j {CHAIN}" in line for line in rules_in_place(hostnet.network_of(layout).bridge))
    if tracked is None or not tracked.alive():
        if diverted:
            return "enforcer NOT RUNNING: new connections between Pods are dropped"
        return "NOT ENFORCED (no enforcer, no rules)"
    if not diverted:
        return "NOT ENFORCED (the enforcer runs but the FORWARD rule is missing)"
    return f"enforced ({PROCESS} reads NFQUEUE {QUEUE})"
