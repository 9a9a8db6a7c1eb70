"""The NodeSet controller's world in memory: Nodes, Pods and NodeSets in informer caches,
the fakes of its two ports (Slurm's shared with the scheduler's tests), and a kubelet and
slurmd stand-in that move members along."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sunk.kube.events import Recorder
from sunk.ldap.models import DirectorySettings
from sunk.operator.app import SlurmPoller, build_controller, member_settings
from sunk.operator.config import OperatorConfig
from sunk.operator.nodeset import members as m
from sunk.operator.nodeset.controller import NodeSetController
from sunk.operator.nodeset.features import in_conf
from sunk.operator.nodeset.hardware import gres_in_conf
from sunk.operator.nodeset.spec import API_VERSION
from sunk.operator.nodeset.view import SlurmView
from sunk.runtime.controller import Outcome
from tests.fakes.clock import FakeClock
from tests.fakes.ports import FakeKube, MemoryCache
from tests.fakes.slurm import FakeSlurm

Json = dict[str, Any]
NAMESPACE = "slurm"
IMAGE = "registry.example/slurmd:24.11"
# The operator's flags in the tests: a world's controller is built from them by the app's own
# factory (`app.build_controller`), so what the app forgets to pass on no test sees either.
CONFIG = OperatorConfig(
    namespace=NAMESPACE,
    release="slurm",
    slurm_api_base="http://slurm-restapi.slurm.svc.cluster.local:6820",
    slurm_jwt_key_file=Path("/nonexistent/jwt_hs256.key"),  # the fakes check no token
    conf_server="slurm-controller.slurm.svc.cluster.local:6817",
    auth_secret="slurm-auth",
    slurmd_image=IMAGE,
)
SETTINGS = member_settings(CONFIG)  # what every member shares under CONFIG
# A directory for a config with people (`with_people`): the world never reads it.
DIRECTORY = DirectorySettings(
    uri="ldap://directory.example:389",
    bind_dn="cn=sunk,dc=example,dc=org",
    password_file=Path("/nonexistent/directory-password"),
    user_base="ou=people,dc=example,dc=org",
    group_base="ou=groups,dc=example,dc=org",
)
NOW = "2026-11-24T12:00:00Z"
NOW_S = 1795521600  # NOW in epoch seconds


def with_people(config: OperatorConfig, configmap: str) -> OperatorConfig:
    """`config` with a directory whose people are written to `configmap` (members mount it;
    without a directory, the operator mounts none, whatever --people-configmap says)."""
    return dataclasses.replace(config, directory=DIRECTORY, people_configmap=configmap)


def node(
    name: str,
    address: str,
    *,
    labels: dict[str, str] | None = None,
    cpu: str = "4",
    memory: str = "8Gi",
    taints: list[Json] | None = None,
    ready: bool = True,
    cordoned: bool = False,
    extra: dict[str, str] | None = None,
) -> Json:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": taints or [], "unschedulable": cordoned},
        "status": {
            "addresses": [{"type": "InternalIP", "address": address}],
            "allocatable": {"cpu": cpu, "memory": memory, **(extra or {})},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def nodeset(name: str, *, created: str = "2026-01-01T00:00:00Z", generation: int = 1, **spec: Any) -> Json:
    spec.setdefault("partitions", ["batch"])
    spec.setdefault("resources", {"limits": {"cpu": "2", "memory": "2Gi"}})
    return {
        "apiVersion": API_VERSION,
        "kind": "NodeSet",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"ns-uid-{name}",
            "generation": generation,
            "creationTimestamp": created,
        },
        "spec": spec,
    }


@dataclass
class OperatorWorld:
    """Caches, fakes, the app's Slurm poller and a controller the app's factory builds from
    `config` (the operator's flags); `kubelet()` and `slurmd()` play the parts that make a
    created member Run and register."""

    nodes: MemoryCache = field(default_factory=MemoryCache)
    pods: MemoryCache = field(default_factory=MemoryCache)
    nodesets: MemoryCache = field(default_factory=MemoryCache)
    slurm: FakeSlurm = field(default_factory=lambda: FakeSlurm(clock=FakeClock(start=NOW_S)))
    now: str = NOW
    config: OperatorConfig = CONFIG
    refreshes: int = 0
    directory_problem: str | None = None  # what the people sync says of its last read

    def __post_init__(self) -> None:
        # The operator's own poller, the only writer of the view (`poll` runs one listing).
        self.poller = SlurmPoller(self.slurm, interval=self.config.poll_s, changed=lambda: None)
        self.kube = FakeKube(self.pods, self.nodesets, self.nodes, graceful_deletes=False)
        self.controller = self.new_controller()

    def restarted_with(self, config: OperatorConfig) -> OperatorWorld:
        """The same cluster and Slurm, with an operator restarted under other flags."""
        return OperatorWorld(
            nodes=self.nodes, pods=self.pods, nodesets=self.nodesets, slurm=self.slurm, config=config
        )

    def new_controller(self) -> NodeSetController:
        """A fresh controller on the same world (an operator restart), built as the app
        builds its own."""
        return build_controller(
            self.config,
            kube=self.kube,
            slurm=self.slurm,
            view=lambda: self.poller.view,
            nodesets=self.nodesets,
            nodes=self.nodes,
            pods=self.pods,
            recorder=Recorder(self.kube, "sunk-operator", "test"),
            refresh=self.refresh,
            directory_problem=lambda: self.directory_problem,
            clock=lambda: self.now,
        )

    @property
    def settings(self) -> m.Settings:
        """What the controller's members share, as the factory made them from `config`."""
        return self.controller.settings

    def add_node(self, name: str, address: str, **kw: Any) -> None:
        self.nodes.put(node(name, address, **kw))

    def add_nodeset(self, name: str, **kw: Any) -> None:
        self.nodesets.put(nodeset(name, **kw))

    def spec(self, name: str) -> Json:
        """The NodeSet's spec, to change in place (as `kubectl edit` would)."""
        obj = self.nodesets.get(f"{NAMESPACE}/{name}")
        assert obj is not None
        obj["metadata"]["generation"] += 1
        spec: Json = obj["spec"]
        return spec

    def delete_nodeset(self, name: str) -> None:
        """As the API server does: gone at once without finalizers, else marked."""
        obj = self.nodesets.get(f"{NAMESPACE}/{name}")
        assert obj is not None
        if obj["metadata"].get("finalizers"):
            obj["metadata"]["deletionTimestamp"] = self.now
        else:
            self.nodesets.store.pop(f"{NAMESPACE}/{name}")

    def status(self, name: str) -> Json:
        return (self.nodesets.get(f"{NAMESPACE}/{name}") or {}).get("status") or {}

    def condition(self, name: str, kind: str) -> Json:
        return next(c for c in self.status(name)["conditions"] if c["type"] == kind)

    def members(self, nodeset_name: str | None = None) -> dict[str, Json]:
        return {
            pod["metadata"]["name"]: pod
            for pod in self.pods.store.values()
            if nodeset_name is None
            or pod["metadata"]["labels"].get("sunk.coreweave.com/nodeset") == nodeset_name
        }

    @property
    def view(self) -> SlurmView:
        """The poller's view of Slurm, as the controller reads it."""
        return self.poller.view

    @view.setter
    def view(self, view: SlurmView) -> None:
        self.poller.view = view

    async def poll(self) -> None:
        """The Slurm poller's listing."""
        await self.poller.poll_once()

    async def refresh(self) -> None:
        """The poller's listing on the controller's request; `refreshes` counts them."""
        self.refreshes += 1
        await self.poll()

    async def reconcile(self, name: str) -> Outcome:
        await self.poll()
        return await self.controller.reconcile(f"{NAMESPACE}/{name}")

    async def settle(self, *names: str, rounds: int = 4) -> None:
        """Reconcile, run the kubelet and slurmd, and again, until nothing more happens."""
        for _ in range(rounds):
            for name in names:
                await self.reconcile(name)
            self.kubelet()
            self.slurmd()
            self.first_checks()

    def kubelet(self) -> None:
        """Every member Pod runs and is ready."""
        for pod in self.pods.store.values():
            pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}

    def first_checks(self) -> None:
        """Every member registered drained for its first health check run has had a clean
        one: the runner lifts that drain itself (scontrol, not the operator's call). The
        operator's own hand-overs (`sunk-hc: verify: NodeSet ...`) stay for a test to lift."""
        for name in list(self.slurm.raw_nodes):
            record = self.slurm.record(name)
            if record.drained and record.reason == m.FIRST_CHECK_REASON:
                flags = tuple(f for f in record.flags if f != "DRAIN")
                self.slurm.update_node(name, flags=flags, reason="")

    def slurmd(self) -> None:
        """Every running member registers (its record appears, idle, with the GRES of its
        `--conf`; drained when its `--conf` says State=DRAIN, as slurmctld makes it)."""
        for pod in self.pods.store.values():
            name = pod["metadata"]["labels"].get(m.SLURM_NODE_LABEL)
            if name and pod["status"].get("phase") == "Running" and name not in self.slurm.raw_nodes:
                conf = pod["metadata"]["annotations"].get(m.SLURMD_CONF, "")
                self.slurm.add_node(
                    name,
                    address=f"10.64.0.{len(self.slurm.raw_nodes) + 2}",
                    gres=tuple(gres_in_conf(conf)),
                    features=tuple(sorted(in_conf(conf))),
                )
                args = [a for c in pod["spec"].get("containers") or [] for a in c.get("args") or []]
                registered = args[args.index("--conf") + 1] if "--conf" in args[:-1] else ""
                drained = re.search(r'(?:^| )State=DRAIN Reason="([^"]*)"', registered)
                if drained:
                    self.slurm.drain_as_admin(name, drained.group(1))
