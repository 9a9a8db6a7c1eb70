"""NetworkPolicy enforcement on real Nodes (issue #52): the host rules that divert new
connections to `sunk-netpol` go in only once it reads the queue, come out before it stops,
fail closed, and are listed if `down` leaves them; the tools build it. No host command
runs: iptables is a small in-memory stand-in."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sunk_dev import ClusterSpec, hostnet, netpol, pki, procs, realcluster
from sunk_dev.cluster import go_tools
from sunk_dev.errors import DevClusterError
from sunk_dev.layout import Layout, Ports

REPO = Path(__file__).resolve().parents[2]


class FakeIptables:
    """The filter table, as far as `netpol` uses it; `log` records every call in order."""

    def __init__(self) -> None:
        self.chains: dict[str, list[str]] = {"FORWARD": ["-A FORWARD -j DOCKER-USER"]}
        self.log: list[str] = []

    def __call__(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        self.log.append(" ".join(argv))
        code, out = self._run(list(argv))
        if check and code:
            raise DevClusterError(f"`iptables {' '.join(argv)}` failed")
        return subprocess.CompletedProcess(["iptables", *argv], code, out, "")

    def _run(self, argv: list[str]) -> tuple[int, str]:
        op, chain, rest = argv[0], argv[1], argv[2:]
        if op == "-N":
            if chain in self.chains:
                return 1, ""
            self.chains[chain] = []
            return 0, ""
        if chain not in self.chains:
            return 1, ""
        rules = self.chains[chain]
        if op == "-A":
            rules.append(" ".join(["-A", chain, *rest]))
        elif op == "-I":
            rules.insert(int(rest[0]) - 1, " ".join(["-A", chain, *rest[1:]]))
        elif op == "-D":
            line = " ".join(["-A", chain, *rest])
            if line not in rules:
                return 1, ""
            rules.remove(line)
        elif op == "-F":
            rules.clear()
        elif op == "-X":
            if any(f"-j {chain}" in r for rules_ in self.chains.values() for r in rules_):
                return 1, ""
            del self.chains[chain]
        elif op == "-S":
            return 0, "".join(f"{r}\n" for r in [f"-N {chain}", *rules])
        return 0, ""


@pytest.fixture
def ipt(monkeypatch: pytest.MonkeyPatch) -> FakeIptables:
    fake = FakeIptables()
    monkeypatch.setattr(netpol, "iptables", fake)
    return fake


def layout(tmp_path: Path) -> Layout:
    return Layout(tmp_path / "dev", Ports())


def bridge(tmp_path: Path) -> str:
    return hostnet.network_of(layout(tmp_path)).bridge


def test_the_rules_queue_new_connections_from_the_bridge_and_never_bypass_the_queue() -> None:
    """Catches: `--queue-bypass` (a dead enforcer would let everything through) or a jump
    that misses the bridge's forwarded traffic."""
    rules = [" ".join(r) for r in netpol.rules("sunkbr0")]
    assert rules == [
        "-N SUNK-NETPOL",
        "-A SUNK-NETPOL -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN",
        "-A SUNK-NETPOL -m conntrack --ctstate NEW -j NFQUEUE --queue-num 100",
        "-I FORWARD 1 -i sunkbr0 -j SUNK-NETPOL",
    ]
    assert not any("bypass" in r for r in rules)
    argv = netpol.argv(Path("/k"), Path("/r"))
    assert f"--queue-num={netpol.QUEUE}" in argv and argv[0].endswith("/bin/sunk-netpol")


def test_installing_twice_leaves_one_jump_and_removing_leaves_the_host_as_it_was(
    ipt: FakeIptables, tmp_path: Path
) -> None:
    """Catches: a crashed run's jump doubled by the next `up`, or the chain left behind."""
    before = {name: list(rules) for name, rules in ipt.chains.items()}
    netpol.install_rules(bridge(tmp_path))
    netpol.install_rules(bridge(tmp_path))
    assert ipt.chains["FORWARD"][0] == f"-A FORWARD -i {bridge(tmp_path)} -j SUNK-NETPOL"
    assert sum("SUNK-NETPOL" in r for r in ipt.chains["FORWARD"]) == 1
    assert len(netpol.leftovers(layout(tmp_path))) == 4  # the chain, its two rules, the jump
    netpol.remove_rules(bridge(tmp_path))
    assert ipt.chains == before
    assert netpol.leftovers(layout(tmp_path)) == []


def test_leftovers_of_another_clusters_host_name_only_our_bridges_jump(
    ipt: FakeIptables, tmp_path: Path
) -> None:
    netpol.install_rules("sunkbr7")
    assert netpol.leftovers(layout(tmp_path), shared=False) == []
    assert netpol.leftovers(layout(tmp_path)) != []


class Started:
    """Stand-ins for what `netpol.start` touches besides iptables."""

    def __init__(
        self, monkeypatch: pytest.MonkeyPatch, ipt: FakeIptables, tmp_path: Path, ready: bool
    ) -> None:
        self.events: list[str] = []
        self.rbac: list[tuple[str, dict[str, Any]]] = []
        self.ready = ready
        lay = layout(tmp_path)
        lay.kube.mkdir(parents=True)
        monkeypatch.setattr(pki, "issue_client", lambda *a: self.events.append(f"cert {a[3]}"))
        monkeypatch.setattr(netpol, "write_kubeconfig", lambda *a: self.events.append("kubeconfig"))
        outer = self

        class Admin:
            def __init__(self, _layout: Layout) -> None: ...

            def find(self, path: str) -> None:
                return None

            def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
                outer.rbac.append((path, body))
                return body

            def close(self) -> None: ...

        monkeypatch.setattr(netpol, "AdminKube", Admin)

        def spawn(name: str, argv: list[str], *a: Any, **k: Any) -> procs.Tracked:
            self.events.append(f"spawn {name}")
            if self.ready:
                Path(argv[-2].split("=", 1)[1]).write_text("1\n")
            return procs.Tracked(name, 1, 1)

        def wait_until(cond: Any, **k: Any) -> None:
            if not cond():
                raise DevClusterError(f"timed out waiting for {k['what']}")
            self.events.append(f"ready ({len(ipt.log)} iptables calls so far)")

        monkeypatch.setattr(procs, "spawn", spawn)
        monkeypatch.setattr(procs, "wait_until", wait_until)
        self.layout = lay


def test_the_rules_go_in_only_once_the_enforcer_reads_the_queue(
    ipt: FakeIptables, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Catches: rules before the reader (every new Pod connection dropped meanwhile)."""
    started = Started(monkeypatch, ipt, tmp_path, ready=True)
    netpol.start(started.layout)
    assert started.events == [
        "cert system:sunk-netpol",
        "kubeconfig",
        "spawn sunk-netpol",
        "ready (0 iptables calls so far)",
    ]
    assert ipt.chains["FORWARD"][0].endswith("-j SUNK-NETPOL")


def test_an_enforcer_that_never_reads_the_queue_leaves_no_rules(
    ipt: FakeIptables, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = Started(monkeypatch, ipt, tmp_path, ready=False)
    with pytest.raises(DevClusterError, match="sunk-netpol to read NFQUEUE 100"):
        netpol.start(started.layout)
    assert netpol.leftovers(started.layout) == []


def test_the_enforcer_may_only_list_and_watch_what_policies_are_judged_by(
    ipt: FakeIptables, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Catches: a credential that can write, or read Secrets."""
    started = Started(monkeypatch, ipt, tmp_path, ready=True)
    netpol.start(started.layout)
    (role_path, role), (binding_path, binding) = started.rbac
    assert role_path.endswith("/clusterroles") and binding_path.endswith("/clusterrolebindings")
    granted = {(group, res, verb) for r in role["rules"] for group in r["apiGroups"]
               for res in r["resources"] for verb in r["verbs"]}  # fmt: skip
    assert granted == {
        (g, r, v)
        for g, r in (("", "pods"), ("", "namespaces"), ("networking.k8s.io", "networkpolicies"))
        for v in ("list", "watch")
    }
    assert binding["subjects"] == [
        {"kind": "User", "name": netpol.USER, "apiGroup": "rbac.authorization.k8s.io"}
    ]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


def test_down_takes_the_rules_out_before_it_stops_the_enforcer(
    ipt: FakeIptables, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Catches: the enforcer stopped first, so the cluster drops new connections while it
    goes down (and forever, if the rules are then forgotten)."""
    lay = layout(tmp_path)
    lay.pids.mkdir(parents=True)
    (lay.pids / "sunk-netpol.json").write_text('{"pid": 1, "started": 1}')
    netpol.install_rules(bridge(tmp_path))
    seen: list[list[str]] = []
    monkeypatch.setattr(procs, "stop", lambda proc, pids: seen.append(netpol.leftovers(lay)))
    assert netpol.stop(lay) is True
    assert seen == [[]]


def test_status_says_whether_policies_are_enforced(
    ipt: FakeIptables, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lay = layout(tmp_path)
    lay.pids.mkdir(parents=True)
    assert netpol.state(lay).startswith("NOT ENFORCED")
    netpol.install_rules(bridge(tmp_path))
    assert "NOT RUNNING: new connections between Pods are dropped" in netpol.state(lay)
    (lay.pids / "sunk-netpol.json").write_text('{"pid": 1, "started": 1}')
    monkeypatch.setattr(procs.Tracked, "alive", lambda self: True)
    assert netpol.state(lay).startswith("enforced")
    netpol.remove_rules(bridge(tmp_path))
    assert "FORWARD rule is missing" in netpol.state(lay)


def test_real_node_clusters_build_the_enforcer_with_the_other_go_tools() -> None:
    """Catches: `up --real-nodes` asking for a tool build-tools.sh does not know."""
    assert netpol.TOOL in go_tools(ClusterSpec(real_nodes=1)) and netpol.TOOL in realcluster.TOOLS
    script = (REPO / "hack" / "build-tools.sh").read_text()
    assert re.search(r'"sunk-netpol\s+dev/netpol\s+sunk\.local/dev/netpol"', script)
    gomod = (REPO / "dev" / "netpol" / "go.mod").read_text()
    assert "sigs.k8s.io/kube-network-policies v1.1.1" in gomod
    assert "github.com/florianl/go-nfqueue/v2 v2.1.0" in gomod
