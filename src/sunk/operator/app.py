"""`sunk operator`: the NodeSet controller on the runtime's manager.

Sources: informers for NodeSets (the release's namespace), Nodes and Pods (every
namespace: a Node's free room counts everyone's Pods), and a Slurm poller, which alone
writes the `SlurmView` and runs only on the replica that acts. Every change that could
alter a NodeSet's plan enqueues it; the one controller does the rest.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar

from sunk.kube.client import KubeClient
from sunk.kube.events import Recorder
from sunk.kube.informer import Informer, object_key
from sunk.kube.leader import LeaderElector
from sunk.ldap.reader import read as read_directory
from sunk.operator import topology
from sunk.operator.accounts.sync import AccountSync
from sunk.operator.config import OperatorConfig
from sunk.operator.directory.people_sync import PeopleSync
from sunk.operator.metrics.census import count_jobs
from sunk.operator.metrics.slurm_metrics import SlurmMetrics, install
from sunk.operator.nodeset import members as m
from sunk.operator.nodeset.controller import NodeSetController, OperatorKube, OperatorSlurm, utc_now
from sunk.operator.nodeset.demand import waiting_by_partition
from sunk.operator.nodeset.features import pending_by_feature
from sunk.operator.nodeset.nodeset_metrics import NodeSetMetrics
from sunk.operator.nodeset.removal import jobs_by_node, waits_on_jobs
from sunk.operator.nodeset.selection import member_nodeset
from sunk.operator.nodeset.spec import API_VERSION, PLURAL
from sunk.operator.nodeset.view import SlurmView
from sunk.operator.token_keeper import TokenKeeper
from sunk.operator.topology import TopologyWriter
from sunk.runtime import shell
from sunk.runtime.manager import Manager
from sunk.runtime.ports import Cache
from sunk.runtime.queue import WorkQueue
from sunk.slurm.accounts import SlurmAccounts, unsupported
from sunk.slurm.client import SlurmClient
from sunk.slurm.diag import SlurmDiag
from sunk.slurm.errors import SlurmError
from sunk.slurm.models import SlurmJob, SlurmNode
from sunk.slurm.tokens import MintedTokens

Json = dict[str, Any]
T = TypeVar("T")
log = logging.getLogger(__name__)


class PolledSlurm(Protocol):
    """What the poller asks Slurm (the SlurmClient; a fake in tests)."""

    async def nodes(self) -> list[SlurmNode]: ...

    async def partitions(self) -> dict[str, int | None]: ...

    async def jobs(self) -> list[SlurmJob]: ...

    async def diag(self) -> SlurmDiag: ...


class SlurmPoller:
    """Lists Slurm's nodes, partitions and jobs every `interval` seconds, and every
    `DRAINING_S` while a member a NodeSet drains still runs a job (its end is what a
    roll-out, a scale-in or a deletion waits for); the only writer of the view. A failed
    listing makes the view unknown (so nothing is removed on stale facts), and so does one
    the controller finds too old (NodeSetController.view_now). Each listing also reads
    slurmctld's statistics (/diag) and hands all of it to `metrics`; a /diag that fails
    costs only the scheduler's metrics, never the view."""

    DRAINING_S = 1.0

    def __init__(
        self, slurm: PolledSlurm, interval: float, changed: Any, metrics: SlurmMetrics | None = None
    ) -> None:
        self.slurm = slurm
        self.interval = interval
        self.changed = changed
        self.metrics = metrics
        self.view = SlurmView()
        self.listed = asyncio.Event()
        self.lock = asyncio.Lock()  # one listing at a time: a newer one is never overwritten

    def reset(self) -> None:
        self.view = SlurmView()
        self.listed.clear()
        if self.metrics is not None:
            self.metrics.forget()

    async def poll_once(self) -> None:
        """One listing, begun after any listing under way ends (the controller asks for one
        before it drains: NodeSetController.refresh)."""
        async with self.lock:
            await self._list()

    async def _list(self) -> None:
        started = time.monotonic()
        answered: dict[str, bool] = {}

        async def ask(name: str, call: Callable[[], Awaitable[T]]) -> T:
            answered[name] = False
            result = await call()
            answered[name] = True
            return result

        diag: SlurmDiag | None = None
        try:
            nodes = await ask("nodes", self.slurm.nodes)
            partitions = await ask("partitions", self.slurm.partitions)
            jobs = await ask("jobs", self.slurm.jobs)
        except SlurmError as err:
            fresh = SlurmView(problem=f"cannot list Slurm's nodes and jobs: {err}")
        else:
            # Stamped with when the listing began: a job that started during it is newer.
            fresh = SlurmView(
                {n.name: n for n in nodes},
                frozenset(partitions),
                jobs_by_node(jobs),
                waiting_by_partition(jobs),
                pending_by_feature(jobs),
                partitions,
                listed_at=started,
                census=count_jobs(jobs),
            )
            if self.metrics is not None:
                try:
                    diag = await ask("diag", self.slurm.diag)
                except SlurmError as err:
                    log.debug("slurmctld's statistics could not be read: %s", err)
        changed = fresh != self.view
        if fresh.known != self.view.known:
            log.info("Slurm %s", "answers" if fresh.known else f"does not answer: {fresh.problem}")
        self.view = fresh  # even when unchanged: its listed_at is newer
        if self.metrics is not None:
            self.metrics.listed(fresh, diag, answered, time.monotonic() - started)
        if changed:
            self.changed()
        self.listed.set()

    def pause(self) -> float:
        """Seconds until the next listing."""
        view = self.view
        if view.nodes is not None and view.jobs is not None and waits_on_jobs(view.nodes, view.jobs):
            return min(self.interval, self.DRAINING_S)
        return self.interval

    async def run(self) -> None:
        while True:
            await self.poll_once()
            await asyncio.sleep(self.pause())


def stale_s(config: OperatorConfig) -> float:
    """How old a listing of Slurm may be before it counts as unknown: six polls, a minute
    at least (the controller's view and the scheduler's metrics alike)."""
    return max(60.0, 6 * config.poll_s)


def member_settings(config: OperatorConfig) -> m.Settings:
    """What every member shares, from the operator's flags; the people ConfigMap only with
    a directory to fill it (`from_args` names one always)."""
    return m.Settings(
        config.release,
        config.conf_server,
        config.auth_secret,
        config.topology_labels,
        config.people_configmap if config.directory is not None else "",
        confinement=config.confinement,
        private_tmp=config.private_tmp,
        hosts_domain=config.hosts_domain,
        allow_host_access=config.allow_host_access,
        allowed_images=config.allowed_images,
        shared_volumes=config.shared_volumes,
        services_configmap=config.services_configmap,
        services_digest=config.services_digest,
        health_checks_configmap=config.health_checks_configmap,
        health_check_scripts_configmap=config.health_check_scripts_configmap,
        node_conditions=config.node_conditions,
        health_replace_after_s=config.health_replace_after_s,
        health_replace_max_unavailable=config.health_replace_max_unavailable,
    )


def build_controller(
    config: OperatorConfig,
    *,
    kube: OperatorKube,
    slurm: OperatorSlurm,
    view: Callable[[], SlurmView],
    nodesets: Cache,
    nodes: Cache,
    pods: Cache,
    recorder: Recorder,
    refresh: Callable[[], Awaitable[None]],
    directory_problem: Callable[[], str | None],
    clock: Callable[[], str] = utc_now,
) -> NodeSetController:
    """The NodeSet controller, built one way: `Operator` builds it on the real clients and
    informers, the tests' `OperatorWorld` (tests/fakes) on fakes, from the same
    `OperatorConfig`."""
    return NodeSetController(
        kube,
        slurm,
        view,
        nodesets=nodesets,
        nodes=nodes,
        pods=pods,
        settings=member_settings(config),
        default_image=config.slurmd_image,
        recorder=recorder,
        clock=clock,
        stale_s=stale_s(config),
        refresh=refresh,
        directory_problem=directory_problem,
    )


class Operator:
    def __init__(self, config: OperatorConfig, kube: KubeClient, slurm: SlurmClient) -> None:
        self.config = config
        self.kube = kube
        self.queue = WorkQueue()
        identity = shell.identity()
        self.recorder = Recorder(kube, "sunk-operator", identity)
        elector = LeaderElector(kube, config.namespace, config.lease_name, identity)
        self.manager = Manager(elector if config.leader_elect else None)
        ns = config.namespace
        self.nodesets = self.manager.watch(
            Informer(kube, f"/apis/{API_VERSION}/namespaces/{ns}/{PLURAL}", name="nodesets")
        )
        self.nodes = self.manager.watch(Informer(kube, "/api/v1/nodes", name="nodes"))
        # Every Pod, ended ones too: a member the kubelet rejected must be seen to be replaced.
        self.pods = self.manager.watch(Informer(kube, "/api/v1/pods", name="pods"))
        self.slurm = slurm
        self.slurm_metrics = SlurmMetrics(
            native=not config.slurm_native_metrics,
            membership=self._membership,
            stale_s=stale_s(config),
        )
        install(self.slurm_metrics)
        self.poller = SlurmPoller(slurm, config.poll_s, self._enqueue_all, self.slurm_metrics)
        self.people: PeopleSync | None = None
        if config.directory is not None:
            directory = config.directory
            self.people = PeopleSync(
                kube,
                self.recorder,
                lambda: read_directory(directory),
                config.namespace,
                config.people_configmap,
                config.directory_interval_s,
                homes_root=next(
                    (v.path for v in config.shared_volumes if v.path == "/home" and not v.read_only), None
                ),
            )
            self.people.on_change = self._enqueue_all  # the NodeSets' DirectoryRead condition
        people = self.people
        self.controller = build_controller(
            config,
            kube=kube,
            slurm=slurm,
            view=lambda: self.poller.view,
            nodesets=self.nodesets,
            nodes=self.nodes,
            pods=self.pods,
            recorder=self.recorder,
            refresh=self.poller.poll_once,
            directory_problem=lambda: people.problem if people is not None else None,
        )
        install(NodeSetMetrics(self.controller.observed, lambda: self.nodesets.store.keys()), "nodesets")
        self.nodesets.add_handler(lambda _kind, obj: self.queue.add(object_key(obj)))
        self.nodes.add_handler(lambda _kind, _obj: self._enqueue_all())
        self.pods.add_handler(self._pod_event)

    def _pod_event(self, _kind: str, pod: Json) -> None:
        meta = pod.get("metadata") or {}
        owner = member_nodeset(pod)
        if owner is not None and meta.get("namespace") == self.config.namespace:
            self.queue.add(f"{self.config.namespace}/{owner}")
        elif (pod.get("spec") or {}).get("nodeName"):
            self._enqueue_all()  # a Node's free room changed

    def _enqueue_all(self) -> None:
        for key in list(self.nodesets.store):
            self.queue.add(key)

    def not_ready(self) -> str | None:
        return self.manager.not_ready()

    async def run(self) -> None:
        self.manager.run_while_leading("slurm-nodes", self.poller.run)
        if self.config.scheduler_token_secret:
            keeper = TokenKeeper(
                self.kube,
                self.config.namespace,
                self.config.scheduler_token_secret,
                self.config.slurm_jwt_key_file,
            )
            self.manager.run_while_leading("scheduler-token", keeper.run)
        if self.config.topology:
            writer = TopologyWriter(
                self.kube,
                self.config.namespace,
                self.config.slurm_configmap,
                self.config.topology,
                self.config.topology_labels,
            )
            self.manager.run_while_leading(
                "topology", lambda: topology.run_forever(writer, self._members, self.config.poll_s)
            )
        if self.people is not None:
            self.manager.run_while_leading("people", self.people.run)
        if self.config.account_mappings:
            self._keep_accounts()
        self.manager.control(self.controller, self.queue)
        await self.manager.run(self)

    def _keep_accounts(self) -> None:
        why = unsupported(self.slurm.version)
        if why is not None:
            log.warning("accounts are not kept from the directory: %s", why)
            return
        accounts = AccountSync(
            self.kube,
            SlurmAccounts(self.slurm, self.config.slurm_cluster),
            self.recorder,
            self.config.account_mappings,
            namespace=self.config.namespace,
            configmap=self.config.people_configmap,
            release=self.config.release,
            interval_s=self.config.accounts_interval_s,
        )
        self.manager.run_while_leading("accounts", accounts.run)

    def _membership(self) -> Mapping[str, str]:
        """Slurm node name → its NodeSet, from the members the NodeSets' statuses list (a
        scrape reads these few objects, not every Pod of the cluster)."""
        return {
            str(entry.get("slurmNode")): obj["metadata"]["name"]
            for obj in self.nodesets.store.values()
            for entry in (obj.get("status") or {}).get("members") or ()
        }

    def _members(self) -> list[topology.Member]:
        nodes = {obj["metadata"]["name"]: obj for obj in self.nodes.store.values()}
        return topology.members_of(
            self.pods.store.values(), nodes, self.config.namespace, self.config.release
        )

    # -- sunk.runtime.manager.Component ------------------------------------------------------
    def term_starting(self) -> None:
        self.poller.reset()

    async def term_ready(self) -> None:
        await self.poller.listed.wait()

    def acting(self) -> None:
        log.info("managing %d NodeSets in %s", len(self.nodesets.store), self.config.namespace)
        self._enqueue_all()

    async def leadership(self, leading: bool) -> None:
        if not leading:
            self.slurm_metrics.forget()  # a follower lists nothing: it serves none of it


async def run(config: OperatorConfig) -> None:
    tokens = MintedTokens(config.slurm_jwt_key_file, config.slurm_user)
    await shell.serve(config, tokens, lambda kube, slurm: Operator(config, kube, slurm))
