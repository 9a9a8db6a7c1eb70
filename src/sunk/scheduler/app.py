"""`sunk scheduler`: wires the informers, the Slurm poller and the workers together."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import ssl
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from sunk import metrics
from sunk.kube import noderoom
from sunk.kube.client import KubeClient, KubeError
from sunk.kube.events import Recorder
from sunk.kube.informer import Informer
from sunk.kube.leader import LeaderElector
from sunk.kube.nodefilter import node_ready
from sunk.metrics import kube_scheduler
from sunk.runtime import shell
from sunk.runtime.manager import Manager
from sunk.runtime.ports import SystemClock
from sunk.runtime.queue import WorkQueue
from sunk.scheduler import controllers
from sunk.scheduler.cluster import ClusterView
from sunk.scheduler.config import Config
from sunk.scheduler.hook_reads import HookReads
from sunk.scheduler.hooks import placeholder_script
from sunk.scheduler.hooks.auth import HookCredentials, Verifier
from sunk.scheduler.hooks.holds import Holds
from sunk.scheduler.hooks.server import HooksServer, PodGoneWaiters
from sunk.scheduler.hooks.tls import HooksTLS, hooks_url
from sunk.scheduler.jobs import JobPoller
from sunk.scheduler.pod_gone import PodGone
from sunk.scheduler.pods import PodStore
from sunk.scheduler.policy import PolicyFile
from sunk.scheduler.translate import PodRef, pod_of_job_name
from sunk.slurm.client import SlurmClient
from sunk.slurm.errors import SlurmError
from sunk.slurm.models import SlurmJob
from sunk.slurm.scontrol import memory_oversubscription_warning
from sunk.slurm.tokens import TokenSource

log = logging.getLogger(__name__)
RESYNC_EVERY_S = 30.0
LEADER_LABEL = "sunk.coreweave.com/leader"
TLS_RELOAD_EVERY_S = 60.0
# Single-job reads for `started` and `terminating` hook calls in flight at once
# (slurmrestd serves requests on a small pool of threads; the rest wait their turn).
READ_FOR_HOOKS_AT_ONCE = 8
# After one of this scheduler's Pods left a Node (room there again), pending jobs are looked
# at again this soon: one look for a burst of Pods leaving.
ROOM_FREED_LOOK_AFTER_S = 0.5


def pod_field_selector(config: Config) -> str:
    """The Pods that are ours: they name this scheduler. Those of ignored namespaces (the
    keys' namespaces) are left out by the API server, so nothing here ever sees them."""
    return ",".join(
        [f"spec.schedulerName={config.scheduler_name}"]
        + [f"metadata.namespace!={ns}" for ns in config.ignore_namespaces]
    )


class Scheduler:
    def __init__(self, config: Config, kube: KubeClient, slurm: SlurmClient) -> None:
        self.config = config
        self.kube = kube
        self.slurm = slurm
        self.queue = WorkQueue()
        # The one clock every module of the scheduler reads the time on.
        self.clock = SystemClock()
        self.gone = PodGoneWaiters()
        secret = config.hooks_secret
        if secret is None:
            log.warning(
                "no hooks secret configured (--hooks-secret-file or SUNK_HOOKS_SECRET): using a random "
                "one, so placeholder jobs submitted before a restart cannot reach the hooks API after it"
            )
            secret = secrets.token_bytes(32)
        self.secret = secret
        self.tls: HooksTLS | None = None
        self.verifier = Verifier(secret, self.clock)
        self.hooks_server = HooksServer(
            self,
            self.verifier,
            self.clock,
            on_call=lambda outcome: metrics.HOOK_CALLS.labels(outcome).inc(),
            holds=Holds(config.slurm_kill_wait_s, self.clock.monotonic),
        )
        self.identity = shell.identity()
        self.manager = Manager(
            LeaderElector(kube, config.leader_election_namespace, config.leader_election_id, self.identity)
            if config.leader_elect
            else None
        )
        selector = pod_field_selector(config)
        namespaces = config.watch_namespaces or ("",)
        self.pod_informers = {
            ns: self.manager.watch(
                Informer(
                    kube,
                    f"/api/v1/namespaces/{ns}/pods" if ns else "/api/v1/pods",
                    field_selector=selector,
                    name=f"pods[{ns or '*'}]",
                )
            )
            for ns in namespaces
        }
        slurmd_path = (
            f"/api/v1/namespaces/{config.slurmd_namespace}/pods"
            if config.slurmd_namespace
            else "/api/v1/pods"
        )
        self.nodes = self.manager.watch(Informer(kube, "/api/v1/nodes", name="nodes"))
        self.slurmd = self.manager.watch(
            Informer(kube, slurmd_path, label_selector=config.slurmd_selector, name="slurmd")
        )
        self.cluster = ClusterView(self.nodes, self.slurmd, config.slurm_node_label)
        self.index = controllers.job_index(slurm, config, self.clock)
        self.poller = JobPoller(
            slurm,
            self.index,
            self._job_changed,
            self.clock,
            interval=config.slurm_poll_interval_s,
            on_listing=lambda ids: self.pod_controller.prune(ids),
        )
        self.hook_reads = HookReads(
            slurm.job_group,
            lambda job: pod_of_job_name(slurm.owner_name(job), config.scheduler_name),
            self._job_seen,
            READ_FOR_HOOKS_AT_ONCE,
            read_states=slurm.job_states if slurm.dialect.reads_job_states else None,
            known_job=self._known_job,
            now=self.clock.now,
        )
        self.pods = PodStore(self.pod_informers)
        self.pod_gone = PodGone(self.pods, self._members, self.gone, config.annotation_prefix, self.clock)
        # Where placeholders reach the hooks API: set once it listens, its CA on renewal.
        self.hooks = HookCredentials("http://hooks-api-not-started", self.secret)
        # Events name the replica that acted (the Lease's holder identity).
        recorder = Recorder(kube, config.scheduler_name, self.identity)
        policy = PolicyFile(str(config.policy_file) if config.policy_file else None)
        built = controllers.build(
            config,
            kube=kube,
            slurm=slurm,
            pods=self.pods,
            cluster=self.cluster,
            index=self.index,
            recorder=recorder,
            script=placeholder_script(),
            hooks=lambda: self.hooks,
            policy=policy,
            clock=self.clock,
        )
        self.pod_controller = built.pods
        self.gangs = built.gangs
        self.node_queue = built.node_queue
        self.slurm_nodes = built.slurm_nodes
        self.node_poller = built.node_poller
        if config.policy_file is None:
            log.warning(
                "no --policy given: nothing is granted, so every Pod is refused; give --policy a file "
                "that grants each namespace its Slurm identity and account (docs/security.md)"
            )
        elif policy.policy.permissive:
            log.warning(
                "the trust policy grants root or anything at all (%s), acknowledged in %s; give each "
                "namespace only what it needs (docs/security.md)",
                ", ".join(policy.policy.unbounded()),
                config.policy_file,
            )
        for informer in self.pod_informers.values():
            informer.add_handler(self._pod_event)
        # Per Node and slurmd Pod, what placement reads of it; a change may let pending jobs
        # use nodes they left out (the Pod controller then widens them).
        self._placement_inputs: dict[tuple[str, str], tuple[object, ...]] = {}
        self._room_look: asyncio.TimerHandle | None = None
        self.nodes.add_handler(partial(self._placement_input_event, "Node", node_inputs))
        self.slurmd.add_handler(partial(self._placement_input_event, "slurmd Pod", slurmd_inputs))

    def _pod_event(self, kind: str, pod: dict[str, object]) -> None:
        self.queue.add(_key(pod))
        if kind == "DELETED":
            meta = pod.get("metadata") or {}
            assert isinstance(meta, dict)
            self.gone.deleted(str(meta.get("uid")))
        if frees_room(kind, pod) and self._room_look is None:
            self._room_look = asyncio.get_running_loop().call_later(
                ROOM_FREED_LOOK_AFTER_S, self._look_again_for_room
            )

    def _look_again_for_room(self) -> None:
        """Pods left Nodes: a Pod whose job runs but waits for the kubelet's room on its
        Node may be bound now, and pending jobs that leave nodes out may use them."""
        self._room_look = None
        for ref, job in self.index.items():
            if (job.pending and job.excluded_nodes) or (job.running and self._unbound(ref)):
                self._job_changed(ref)

    def _unbound(self, ref: PodRef) -> bool:
        pod = self.pods.get(f"{ref.namespace}/{ref.name}")
        return pod is not None and not (pod.get("spec") or {}).get("nodeName")

    def _placement_input_event(
        self,
        what: str,
        inputs: Callable[[dict[str, Any]], tuple[object, ...]],
        kind: str,
        obj: dict[str, Any],
    ) -> None:
        """A Node cordoned or uncordoned, tainted, Ready or not, or a slurmd Pod bound,
        moved or going: every Pod whose job is pending is looked at again (the routine
        status updates of Nodes change nothing placement reads, and cost nothing)."""
        key = (what, _key(obj))
        seen = None if kind == "DELETED" else inputs(obj)
        if self._placement_inputs.get(key) == seen:
            return
        if seen is None:
            self._placement_inputs.pop(key, None)
        else:
            self._placement_inputs[key] = seen
        for ref, job in self.index.items():
            if job.pending:
                self._job_changed(ref)

    # -- what the hooks API asks of the scheduler ---------------------------------------
    async def pod_of_job(self, job_id: int) -> PodRef | None:
        found = self.index.get(job_id)
        if found is not None:
            return found[0]
        job = await self.slurm.job(job_id)  # submitted a moment ago, not yet polled
        return pod_of_job_name(self.slurm.owner_name(job), self.config.scheduler_name) if job else None

    def acting_now(self) -> bool:
        return self.manager.is_acting

    def _job_seen(self, owner: PodRef, job: SlurmJob) -> None:
        self.index.observe(owner, job)
        self.queue.add(f"{owner.namespace}/{owner.name}")

    async def job_started(self, ref: PodRef, job_id: int) -> None:
        """Read just this job now (a gang's job whole: every member's Pod may be bound now)."""
        await self.hook_reads.deliver(ref, job_id, lambda: self._index_shows(job_id, lambda j: j.started))

    def _known_job(self, job_id: int) -> SlurmJob | None:
        found = self.index.get(job_id)
        return found[1] if found is not None else None

    def _index_shows(self, job_id: int, what: Callable[[SlurmJob], bool]) -> bool:
        job = self._known_job(job_id)
        return job is not None and what(job)

    async def job_terminating(self, ref: PodRef, job_id: int) -> None:
        """Read this job's state now (with those of others ending at once, where Slurm can):
        once Slurm shows it ending, the Pod's worker deletes the Pod. The call is also
        recorded, so that the worker asks Slurm itself when this read is skipped (another
        read of the job under way) or fails."""
        self.pod_controller.report_ending(ref, job_id)
        try:
            await self.hook_reads.deliver_ending(
                ref, job_id, lambda: self._index_shows(job_id, lambda j: j.ending)
            )
        except SlurmError as err:
            log.info("cannot read job %s, said to be ending (%s); the Pod's worker asks again", job_id, err)
        self.queue.add(f"{ref.namespace}/{ref.name}")

    async def wait_pod_gone(self, ref: PodRef, job_id: int, within: float) -> bool:
        return await self.pod_gone.wait(ref, job_id, within)

    def why_waiting(self, ref: PodRef, job_id: int) -> str:
        return self.pod_gone.why_waiting(ref, job_id)

    def _members(self, ref: PodRef, job_id: int) -> list[tuple[PodRef, int]]:
        """The Pods whose job `job_id` is: its own, and for a gang's job (whose script runs
        for the whole group) every other member's."""
        return [(ref, job_id)] + [
            (other, job.job_id) for other, job in self.gangs.components(job_id) if job.job_id != job_id
        ]

    def _job_changed(self, ref: PodRef) -> None:
        if self.pods.watches(ref.namespace):
            self.queue.add(f"{ref.namespace}/{ref.name}")

    async def _resync(self) -> None:
        """Look at everything now and then: a safety net for any missed event."""
        while True:
            await asyncio.sleep(RESYNC_EVERY_S)
            self._enqueue_everything()

    def _enqueue_everything(self) -> None:
        for key in self.pods.all_keys():
            self.queue.add(key)
        for ref in self.index.all_refs():
            self._job_changed(ref)

    async def _serve_hooks(self) -> None:
        """Start the hooks API first: its address goes into every job submitted."""
        self.tls = HooksTLS(self.config) if self.config.hooks_tls_cert else None
        if "hooks" in self.config.components:
            context = self.tls.context if self.tls else None
            port = await self.hooks_server.start(*self.config.hooks_bind, context)
        else:
            port = self.config.hooks_bind[1]
        url = hooks_url(self.config, port)
        self.hooks = HookCredentials(url, self.secret, self.tls.ca_pem if self.tls else "")
        log.info("hooks API for placeholder jobs at %s%s", url, "" if self.tls else " (plain HTTP)")

    async def _reload_tls(self) -> None:
        """A renewed certificate (cert-manager rewrites the mounted Secret) is served to new
        connections, and its CA handed to new jobs, without a restart."""
        assert self.tls is not None
        while True:
            await asyncio.sleep(TLS_RELOAD_EVERY_S)
            try:
                if self.tls.reload():
                    self.hooks = replace(self.hooks, ca_pem=self.tls.ca_pem)
                    log.info("hooks API: reloaded its TLS certificate")
            except (OSError, ssl.SSLError) as err:
                log.error("hooks API: cannot reload its TLS certificate (%s); serving the old one", err)

    def not_ready(self) -> str | None:
        """Why /readyz fails: start-up is not done (REST version, caches, first job
        listing). A later Slurm outage does not count: the hooks API must stay reachable
        through it, or ending placeholders would drain their nodes."""
        caches = self.manager.not_ready()
        if caches:
            return caches
        if self.manager.is_leading and not self.index.synced.is_set():
            return "no Slurm job listing yet"
        if self.manager.is_leading and not self.node_poller.listed.is_set():
            return "no Slurm node listing yet"
        return None

    async def _gauges(self) -> None:
        while True:
            metrics.QUEUE_DEPTH.set(len(self.queue))
            pending = Counter(job.reason for _, job in self.index.items() if job.pending)
            metrics.PENDING_IN_SLURM.clear()
            for reason, count in pending.items():
                metrics.PENDING_IN_SLURM.labels(reason).set(count)
            kube_scheduler.pending_pods(
                active=len(self.queue), backoff=self.queue.waiting(), unschedulable=sum(pending.values())
            )
            await asyncio.sleep(2)

    async def _check_slurm_config(self) -> None:
        try:
            select = await self.slurm.select_type()
        except SlurmError as err:
            log.info("cannot read Slurm's select type (%s); skipping the memory check (R7.3)", err)
            return
        if select is None:
            log.info("Slurm does not tell its SelectTypeParameters here; skipping the memory check (R7.3)")
            return
        warning = memory_oversubscription_warning(select)
        if warning:
            log.warning("%s", warning)

    async def run(self) -> None:
        await self._serve_hooks()
        if self.tls is not None:
            self.manager.run_always("tls", self._reload_tls)
        self.manager.run_always("gauges", self._gauges)
        # Only the replica that acts polls Slurm: followers cost slurmctld nothing.
        self.manager.run_while_leading("slurm-jobs", self.poller.run)
        self.manager.run_while_leading("slurm-nodes", self.node_poller.run)
        self.manager.run_while_leading("resync", self._resync)
        self.manager.control(
            self.pod_controller, self.queue, workers=self.config.workers, on_error=_failed_pass
        )
        self.manager.control(self.slurm_nodes, self.node_queue)
        try:
            await self.manager.run(self)
        finally:
            await self.hooks_server.stop()

    # -- what the manager asks of the scheduler (sunk.runtime.manager.Component) -------------
    def term_starting(self) -> None:
        self.index.synced.clear()  # a term starts from fresh job and node listings
        self.node_poller.listed.clear()

    async def term_ready(self) -> None:
        log.info("scheduling as %s", self.config.scheduler_name)
        await self._check_slurm_config()
        await self.index.synced.wait()
        await self.node_poller.listed.wait()
        self.index.note_ids_of_pods((pod for _, pod in self.pods.items()), self.config.annotation_prefix)
        log.info("first Slurm job listing: %d placeholder jobs", len(self.index))

    def acting(self) -> None:
        # Nonces seen before this term are not remembered here: refuse what was signed
        # before it (placeholders sign each retry afresh).
        self.verifier.not_before = self.clock.now()
        self._enqueue_everything()

    async def leadership(self, leading: bool) -> None:
        await self.leader_label(leading)

    async def leader_label(self, leading: bool) -> None:
        """Mark our own Pod so the hooks Service sends placeholder jobs to the leader only."""
        name, namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
        if not (name and namespace):
            return
        value = "true" if leading else None
        try:
            await self.kube.request(
                "PATCH",
                f"/api/v1/namespaces/{namespace}/pods/{name}",
                body={"metadata": {"labels": {LEADER_LABEL: value}}},
                content_type="application/merge-patch+json",
            )
        except KubeError as err:
            log.warning("could not label this Pod as %s: %s", "leader" if leading else "follower", err)


def _failed_pass(_key: str, _err: BaseException) -> None:
    kube_scheduler.attempt("error")


def node_inputs(node: dict[str, Any]) -> tuple[object, ...]:
    """What placement reads of a Node: cordon, taints, readiness, labels, allocatable."""
    meta, spec = node.get("metadata") or {}, node.get("spec") or {}
    taints = tuple((t.get("key"), t.get("value"), t.get("effect")) for t in spec.get("taints") or ())
    labels = tuple(sorted((meta.get("labels") or {}).items()))
    allocatable = tuple(sorted(((node.get("status") or {}).get("allocatable") or {}).items()))
    return (bool(spec.get("unschedulable")), taints, node_ready(node), labels, allocatable)


def slurmd_inputs(pod: dict[str, Any]) -> tuple[object, ...]:
    """What placement reads of a slurmd Pod: its Node, whether it is going, and what it
    holds there in the kubelet's count."""
    counted = noderoom.counts(pod)
    return (
        (pod.get("spec") or {}).get("nodeName"),
        bool((pod.get("metadata") or {}).get("deletionTimestamp")),
        counted,
        noderoom.requests_of(pod) if counted else None,
    )


def frees_room(kind: str, pod: dict[str, Any]) -> bool:
    """Whether this event of one of the scheduler's Pods may leave room on its Node: a Pod
    bound there is gone or has finished (a terminating one still counts)."""
    if not (pod.get("spec") or {}).get("nodeName"):
        return False
    return kind == "DELETED" or not noderoom.counts(pod)


def _key(pod: dict[str, object]) -> str:
    meta = pod.get("metadata") or {}
    assert isinstance(meta, dict)
    return f"{meta.get('namespace')}/{meta.get('name')}"


async def run(config: Config) -> None:
    tokens = TokenSource(config.slurm_token, config.slurm_token_file)
    await shell.serve(config, tokens, lambda kube, slurm: Scheduler(config, kube, slurm))
