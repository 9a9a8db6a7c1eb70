"""The scheduler's controllers and their collaborators, built one way: `app.Scheduler`
builds them on the real clients and informers, the tests' `World` (tests/fakes) on fakes, with
the same settings (`Config`). The Pod controller and the PodGroup steps are each handed the
submitter and the binder; neither is handed the other's controller."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sunk.kube.events import Recorder
from sunk.runtime.ports import Clock
from sunk.runtime.queue import WorkQueue
from sunk.scheduler.cluster import ClusterView
from sunk.scheduler.config import Config
from sunk.scheduler.hooks.auth import HookCredentials
from sunk.scheduler.jobs import JobIndex
from sunk.scheduler.pod.controller import PodController
from sunk.scheduler.pod.executor import PodExecutor
from sunk.scheduler.pod.gangs import Gangs
from sunk.scheduler.pod.group_readopting import GroupReadoption
from sunk.scheduler.pod.memory import Memory
from sunk.scheduler.pod.placement import Placement
from sunk.scheduler.pod.readopting import Readopter
from sunk.scheduler.pod.submitting import SubmitReader
from sunk.scheduler.pods import PodStore
from sunk.scheduler.policy import PolicyFile
from sunk.scheduler.ports import KubePort, SlurmPort
from sunk.scheduler.slurmnodes import SlurmNodeController, SlurmNodePoller
from sunk.scheduler.translate import Settings, pod_of_job_name


def settings(config: Config) -> Settings:
    return Settings(
        config.annotation_prefix, int(config.slurm_kill_wait_s), config.scheduler_name, config.devices
    )


def job_index(slurm: SlurmPort, config: Config, clock: Clock) -> JobIndex:
    """The index of this scheduler's jobs: a job is one of ours when the name its owner tag
    vouches for names a Pod of this scheduler."""
    return JobIndex(
        lambda job: pod_of_job_name(slurm.owner_name(job), config.scheduler_name),
        clock,
        config.job_id_range,
    )


@dataclass
class Controllers:
    pods: PodController
    gangs: Gangs
    slurm_nodes: SlurmNodeController
    node_queue: WorkQueue
    node_poller: SlurmNodePoller


def build(
    config: Config,
    *,
    kube: KubePort,
    slurm: SlurmPort,
    pods: PodStore,
    cluster: ClusterView,
    index: JobIndex,
    recorder: Recorder,
    script: str,
    hooks: Callable[[], HookCredentials],
    policy: PolicyFile,
    clock: Clock,
) -> Controllers:
    shared = settings(config)
    memory = Memory(clock)
    places = Placement(slurm=slurm, cluster=cluster, pods=pods, settings=shared, clock=clock)
    executor = PodExecutor(
        kube=kube,
        slurm=slurm,
        recorder=recorder,
        index=index,
        memory=memory,
        places=places,
        cluster=cluster,
        settings=shared,
        script=script,
        hooks=hooks,
        clock=clock,
        placement=config.placement,
    )
    reader = SubmitReader(
        slurm=slurm,
        cluster=cluster,
        index=index,
        places=places,
        memory=memory,
        settings=shared,
        policy=policy,
        placement=config.placement,
        refuse_static_cpu=config.static_cpu_pods == "refuse",
    )
    gangs = Gangs(
        kube=kube,
        slurm=slurm,
        executor=executor,
        pods=pods,
        index=index,
        memory=memory,
        reader=reader,
        places=places,
        clock=clock,
    )
    readopter = Readopter(
        slurm=slurm,
        executor=executor,
        index=index,
        settings=shared,
        policy=policy,
        cluster=cluster,
        clock=clock,
    )
    pod_controller = PodController(
        slurm=slurm,
        executor=executor,
        pods=pods,
        cluster=cluster,
        index=index,
        settings=shared,
        memory=memory,
        reader=reader,
        places=places,
        gangs=gangs,
        readopter=readopter,
        group_readoption=GroupReadoption(readopter, pods, clock),
        clock=clock,
        placement=config.placement,
    )
    slurm_nodes = SlurmNodeController(
        slurm=slurm,
        kube=kube,
        cluster=cluster,
        pods=pods,
        index=index,
        recorder=recorder,
        scheduler=config.scheduler_name,
        prefix=config.annotation_prefix,
        drain_cordoned=config.drain_cordoned_nodes,
        watched=frozenset(config.watch_namespaces or ("",)),
    )
    node_queue = WorkQueue()
    node_poller = SlurmNodePoller(slurm, cluster, node_queue, on_gone=slurm_nodes.forget)
    return Controllers(pod_controller, gangs, slurm_nodes, node_queue, node_poller)
