"""`sunk scheduler`: wires the informers, the Slurm poller and the workers together."""

from __future__ import annotations

import asyncio
import logging
import socket
from contextlib import suppress

from sunk.config import Config
from sunk.hooks import placeholder_script
from sunk.kube.client import KubeClient
from sunk.kube.events import Recorder
from sunk.kube.informer import Informer
from sunk.scheduler.cluster import ClusterView
from sunk.scheduler.jobs import JobIndex, JobPoller
from sunk.scheduler.queue import WorkQueue
from sunk.scheduler.reconciler import PodStore, Reconciler
from sunk.slurm.client import SlurmClient, TokenSource
from sunk.slurm.errors import SlurmError
from sunk.translate import PodRef, Settings

log = logging.getLogger(__name__)
RESYNC_EVERY_S = 30.0
SLURM_NODES_EVERY_S = 5.0


class Scheduler:
    def __init__(self, config: Config, kube: KubeClient, slurm: SlurmClient) -> None:
        self.config = config
        self.kube = kube
        self.slurm = slurm
        self.queue = WorkQueue()
        selector = f"spec.schedulerName={config.scheduler_name}"
        namespaces = config.watch_namespaces or ("",)
        self.pod_informers = {
            ns: Informer(
                kube,
                f"/api/v1/namespaces/{ns}/pods" if ns else "/api/v1/pods",
                field_selector=selector,
                name=f"pods[{ns or '*'}]",
            )
            for ns in namespaces
        }
        slurmd_path = (
            f"/api/v1/namespaces/{config.slurmd_namespace}/pods"
            if config.slurmd_namespace
            else "/api/v1/pods"
        )
        self.nodes = Informer(kube, "/api/v1/nodes", name="nodes")
        self.slurmd = Informer(kube, slurmd_path, label_selector=config.slurmd_selector, name="slurmd")
        self.cluster = ClusterView(self.nodes, self.slurmd, config.slurm_node_label)
        self.index = JobIndex(config.scheduler_name)
        self.poller = JobPoller(slurm, self.index, self._job_changed, interval=config.slurm_poll_interval_s)
        self.pods = PodStore(self.pod_informers)
        self.reconciler = Reconciler(
            kube=kube,
            slurm=slurm,
            pods=self.pods,
            cluster=self.cluster,
            index=self.index,
            poller=self.poller,
            recorder=Recorder(kube, config.scheduler_name, socket.gethostname()),
            settings=Settings(config.annotation_prefix, int(config.slurm_kill_wait_s), config.scheduler_name),
            script=placeholder_script(),
            slurm_user=config.slurm_user,
        )
        for informer in self.pod_informers.values():
            informer.add_handler(lambda _kind, pod: self.queue.add(_key(pod)))

    def _job_changed(self, ref: PodRef) -> None:
        if self.pods.watches(ref.namespace):
            self.queue.add(f"{ref.namespace}/{ref.name}")

    @property
    def informers(self) -> list[Informer]:
        return [*self.pod_informers.values(), self.nodes, self.slurmd]

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers) and self.index.synced.is_set()

    async def _poll_slurm_nodes(self) -> None:
        while True:
            try:
                self.cluster.slurm_nodes = {n.name for n in await self.slurm.nodes()}
            except SlurmError as err:
                log.warning("cannot list Slurm nodes: %s", err)
            await asyncio.sleep(SLURM_NODES_EVERY_S)

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

    async def _worker(self) -> None:
        while True:
            key = await self.queue.get()
            try:
                outcome = await self.reconciler.reconcile(str(key))
            except asyncio.CancelledError:
                raise
            except Exception as err:
                delay = self.queue.retry(key)
                log.warning(
                    "reconcile %s failed (%s: %s); retrying in %.2fs",
                    key,
                    type(err).__name__,
                    err,
                    delay,
                )
            else:
                self.queue.forget(key)
                if outcome.requeue_after is not None:
                    self.queue.add_after(key, outcome.requeue_after)
            finally:
                self.queue.done(key)

    async def run(self) -> None:
        tasks = [asyncio.create_task(i.run(), name=i.name) for i in self.informers]
        tasks.append(asyncio.create_task(self.poller.run(), name="slurm-jobs"))
        tasks.append(asyncio.create_task(self._poll_slurm_nodes(), name="slurm-nodes"))
        try:
            log.info("waiting for the Kubernetes caches and the first Slurm job listing")
            await asyncio.gather(*(i.synced.wait() for i in self.informers), self.index.synced.wait())
            log.info(
                "caches synced: %d Pods, %d Nodes, %d slurmd Pods, %d placeholder jobs; scheduling as %s",
                len(self.pods.all_keys()),
                len(self.nodes.store),
                len(self.slurmd.store),
                len(self.index),
                self.config.scheduler_name,
            )
            self._enqueue_everything()
            tasks += [
                asyncio.create_task(self._worker(), name=f"worker-{i}") for i in range(self.config.workers)
            ]
            tasks.append(asyncio.create_task(self._resync(), name="resync"))
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()
        finally:
            for task in tasks:
                task.cancel()
            with suppress(asyncio.CancelledError):
                await asyncio.gather(*tasks, return_exceptions=True)


def _key(pod: dict[str, object]) -> str:
    meta = pod.get("metadata") or {}
    assert isinstance(meta, dict)
    return f"{meta.get('namespace')}/{meta.get('name')}"


async def run(config: Config) -> None:
    kube = await KubeClient.connect(config.kubeconfig)
    tokens = TokenSource(config.slurm_token, config.slurm_token_file)
    slurm = SlurmClient(config.slurm_api_base, tokens, user=config.slurm_user)
    try:
        await Scheduler(config, kube, slurm).run()
    finally:
        await slurm.aclose()
        await kube.close()
