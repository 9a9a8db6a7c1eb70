"""Bring the whole dev cluster up, down, and report on it."""

from __future__ import annotations

import json
import secrets
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sunk_dev import (
    directory,
    hostnet,
    images,
    kubecluster,
    netpol,
    prereqs,
    procs,
    realcluster,
    registry,
    slurmcluster,
    slurmroot,
    slurmrun,
    topology,
)
from sunk_dev.errors import DevClusterError
from sunk_dev.kubeapi import AdminKube
from sunk_dev.layout import HOST, Layout
from sunk_dev.realnode import RealNode, nodes_of

# Stop order: Slurm's job processes first, the API server's clients before the API server
# (Prometheus and its discovery, started on demand by `sunk dev prometheus`, are among them).
STOP_ORDER = (
    "prometheus",
    "prometheus-sd",
    "sunk-scheduler",
    "slurmrestd",
    "slurmd-*",
    "slurmctld",
    "slurmdbd",
    "mariadbd",
    "munged",
    "slapd",
    "registry",
    "registry-push",
    "kwok",
    "kube-scheduler",
    "volume-provisioner",
    "coredns",
    "kube-proxy",
    "kube-controller-manager",
    "kube-apiserver",
    "etcd",
)


PROCTRACK_PLUGINS = ("linuxproc", "pgid")


def go_tools(spec: ClusterSpec) -> tuple[str, ...]:
    """What `up` builds from Go modules: with real Nodes, also what runs them, and helm,
    which installs the Slurm chart there (docs/platform.md)."""
    if not spec.real_nodes:
        return prereqs.CLUSTER_TOOLS
    return prereqs.CLUSTER_TOOLS + realcluster.TOOLS + prereqs.PLATFORM_TOOLS


@dataclass(frozen=True)
class ClusterSpec:
    nodes: int = 4
    accounting: bool = False
    kill_wait: int = 30
    preempt_mode: str = "CANCEL"
    cpus_per_node: int = topology.CPUS_PER_NODE
    slurm: str = slurmroot.DEFAULT_VERSION  # 24.11, 26.05 (Debian roots) or 22.05 (host)
    gpus_per_node: int = topology.GPUS_PER_NODE
    real_nodes: int = 0  # real kubelet Nodes next to the kwok ones (containers really run)
    directory: bool = False  # an LDAP directory (slapd) with a few people in it (always with real Nodes)
    # How slurmstepd finds a job's processes. linuxproc walks all of /proc, which here holds
    # every node's jobs: with a thousand jobs ending at once that walk, repeated by each
    # job, is what saturates the machine. pgid signals the job's process group instead, as
    # cheap as a real node's cgroup (the benchmark's --proctrack pgid).
    proctrack: str = "linuxproc"

    @property
    def runs_directory(self) -> bool:
        return self.directory or self.real_nodes > 0

    def __post_init__(self) -> None:
        slurmroot.check_version(self.slurm)
        if not 1 <= self.nodes <= 1000:
            raise DevClusterError(f"--nodes must be between 1 and 1000, not {self.nodes}")
        if not 1 <= self.gpus_per_node <= 16:
            raise DevClusterError(f"--gpus-per-node must be between 1 and 16, not {self.gpus_per_node}")
        if not 5 < self.kill_wait <= 600:
            raise DevClusterError(f"--kill-wait must be between 6 and 600 s, not {self.kill_wait}")
        if not 0 <= self.real_nodes <= hostnet.MAX_REAL_NODES:
            raise DevClusterError(
                f"--real-nodes must be between 0 and {hostnet.MAX_REAL_NODES}, not {self.real_nodes}"
            )
        if self.proctrack not in PROCTRACK_PLUGINS:
            raise DevClusterError(
                f"proctrack must be one of {', '.join(PROCTRACK_PLUGINS)}, not {self.proctrack}"
            )
        if self.real_nodes and self.slurm == slurmroot.HOST_VERSION:
            raise DevClusterError(
                "real Nodes run the Slurm images, which are built for 24.11 and 26.05: "
                "use --slurm 24.11 or --slurm 26.05 with --real-nodes"
            )


@dataclass
class Status:
    running: bool
    spec: ClusterSpec | None
    processes: dict[str, bool] = field(default_factory=dict)
    ready_nodes: int = 0
    real_nodes: dict[str, str] = field(default_factory=dict)  # name -> Ready/NotReady/missing
    network_policies: str = ""  # with real Nodes: whether NetworkPolicies are enforced
    idle_slurm_nodes: int = 0
    rest_ok: bool = False
    slurm_version: str = ""
    slurm_release: str = ""
    rest_versions: tuple[str, ...] = ()


class DevCluster:
    def __init__(self, layout: Layout | None = None) -> None:
        self.layout = layout or Layout.default()

    # -- state ---------------------------------------------------------------------------
    def spec(self) -> ClusterSpec | None:
        try:
            data = json.loads(self.layout.state_file.read_text())
            if isinstance(data, dict) and "slurm" not in data:
                # Written before the Slurm version was recorded: that was always the host's.
                data["slurm"] = slurmroot.HOST_VERSION
            return ClusterSpec(**data)
        except (OSError, ValueError, TypeError, DevClusterError):
            return None

    def alive(self) -> list[procs.Tracked]:
        return [p for p in procs.tracked(self.layout.pids) if p.alive()]

    def is_running(self) -> bool:
        return bool(self.alive())

    # -- up ------------------------------------------------------------------------------
    def up(self, spec: ClusterSpec) -> float:
        """Start everything; on any failure stop what was started. Returns seconds taken."""
        started = time.monotonic()
        layout = self.layout
        if self.is_running():
            current = self.spec()
            if current is not None and current.slurm != spec.slurm:
                raise DevClusterError(
                    f"a dev cluster with Slurm {current.slurm} is already running under {layout.root}: "
                    f"stop it with `sunk dev down`, then run `sunk dev up --slurm {spec.slurm}`"
                )
            raise DevClusterError(
                f"a dev cluster is already running under {layout.root}: use it as it is "
                "(`sunk dev status`) or stop it first with `sunk dev down`"
            )
        self._kill_strays()
        self._wipe()
        setup_log = layout.logs / "setup.log"
        prereqs.check_ports_free(layout, spec.nodes, spec.accounting, spec.runs_directory)
        if spec.runs_directory:
            prereqs.ensure_directory_packages(setup_log)
        if spec.real_nodes:
            realcluster.check_machine()
            prereqs.ensure_real_node_packages(setup_log)
        root: Path | None = None
        if spec.slurm == slurmroot.HOST_VERSION:
            prereqs.ensure_debian_packages(spec.accounting, setup_log)
            prereqs.ensure_job_user(topology.JOB_USER, topology.JOB_UID)
        else:
            root, _ = slurmroot.ensure_root(spec.slurm)  # the job user lives inside the root
        tools = prereqs.ensure_go_tools(setup_log, go_tools(spec))
        built = images.ensure_images(spec.slurm, setup_log) if spec.real_nodes else {}
        nodes = topology.plan(spec.nodes, spec.cpus_per_node, spec.gpus_per_node)
        layout.state_file.write_text(json.dumps(asdict(spec)))
        try:
            if spec.real_nodes:
                realcluster.prepare_host(layout, spec.real_nodes)
            if spec.runs_directory:
                # On real Nodes, Pods reach it at the host's address on their bridge.
                bridge = (hostnet.network_of(layout).gateway,) if spec.real_nodes else ()
                directory.start(layout, (HOST, *bridge))
            if spec.real_nodes:
                registry.start(layout, hostnet.network_of(layout).gateway)
            kubecluster.start(layout, tools, node_lifecycle=spec.real_nodes > 0)
            slurmcluster.start(
                slurmcluster.SlurmSpec(
                    nodes,
                    spec.kill_wait,
                    spec.accounting,
                    spec.preempt_mode,
                    spec.slurm,
                    root,
                    spec.proctrack,
                ),
                layout,
            )
            kubecluster.populate(layout, nodes)
            if spec.real_nodes:
                realcluster.start(
                    layout,
                    spec.real_nodes,
                    built["pause"].tag,
                    lambda node: images.import_into(node.socket, built.values(), setup_log),
                )
                images.write_manifest(layout.images_file, built)
            layout.hooks_secret.write_text(secrets.token_hex(32))
            layout.hooks_secret.chmod(0o600)
            layout.env_file.write_text(self.env_text())
        except BaseException:
            self.down()
            raise
        return time.monotonic() - started

    def _wipe(self) -> None:
        """A fresh cluster every time: old state would resurrect jobs and objects."""
        if self.layout.root.exists():
            mounted = slurmroot.mounts_under(self.layout.root)
            if mounted:
                raise DevClusterError(
                    f"not wiping {self.layout.root}: {mounted[0]} is still mounted there (by a "
                    "Node's process that outlived `sunk dev down`?); stop that process first"
                )
            shutil.rmtree(self.layout.root)
        for sub in (self.layout.pids, self.layout.logs):
            sub.mkdir(parents=True, exist_ok=True)

    # -- down ----------------------------------------------------------------------------
    def down(self) -> list[str]:
        """Stop every recorded process in a safe order; returns the names stopped."""
        pid_dir = self.layout.pids
        running = {p.name: p for p in procs.tracked(pid_dir)}
        if "slurmctld" in running and running["slurmctld"].alive():
            try:
                slurmcluster.cancel_all_jobs(self.layout)
            except Exception:
                pass
        stopped = []
        real = realcluster.configured_nodes(self.layout)
        if real or hostnet.owned_by(self.layout):
            # Containers first: they are Slurm's daemons and jobs on real Nodes.
            stopped += realcluster.stop(self.layout, real)
            running = {p.name: p for p in procs.tracked(pid_dir)}
        for pattern in STOP_ORDER:
            group = [p for name, p in running.items() if Path(name).match(pattern)]
            if group:
                procs.stop_many(group, pid_dir, timeout=20)
                stopped += [p.name for p in group]
        stopped += [f"stray job process {pid}" for pid in self._kill_strays()]
        return stopped

    def _kill_strays(self) -> list[int]:
        """Job processes (slurmstepd and job scripts) can outlive slurmd when it stops before
        Slurm's KillWait ends; left alone they would act on the next cluster. In a Debian
        root, anything still living there with this cluster's directory mounted goes too."""
        strays = set(procs.leftovers(f"SLURM_CONF={self.layout.slurm_conf}"))
        strays |= set(slurmroot.cluster_pids(self.layout.root))
        procs.kill_all(sorted(strays))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(procs.is_running(pid) for pid in strays):
            time.sleep(0.05)
        return sorted(strays)

    # -- status and env ------------------------------------------------------------------
    def status(self) -> Status:
        tracked = procs.tracked(self.layout.pids)
        status = Status(running=any(p.alive() for p in tracked), spec=self.spec())
        status.processes = {p.name: p.alive() for p in tracked}
        if not status.running:
            return status
        try:
            admin = AdminKube(self.layout)
            try:
                status.ready_nodes = len(admin.ready_nodes())
                status.real_nodes = realcluster.node_states(admin, self.layout)
            finally:
                admin.close()
        except Exception:
            pass
        if status.spec is not None and status.spec.real_nodes:
            try:
                status.network_policies = netpol.state(self.layout)
            except OSError:  # no iptables to ask
                status.network_policies = "unknown (iptables cannot be run)"
        rt = slurmrun.runtime(self.layout)
        status.slurm_version, status.slurm_release = rt.version, rt.release
        status.rest_versions = rt.rest_versions
        try:
            out = slurmrun.run_cli(self.layout, "sinfo", "-h", "-N", "-t", "idle", "-o", "%N")
            status.idle_slurm_nodes = len(set(out.split()))
            status.rest_ok = slurmcluster.rest_ping(self.layout)
        except Exception:
            pass
        return status

    # -- real Nodes --------------------------------------------------------------------------
    def real_node(self, name: str) -> RealNode:
        spec = self.require_running()
        for node in nodes_of(self.layout, spec.real_nodes):
            if node.name == name:
                return node
        names = ", ".join(n.name for n in nodes_of(self.layout, spec.real_nodes)) or "none"
        raise DevClusterError(f"{name} is not a real Node of this dev cluster (its real Nodes: {names})")

    def stop_node(self, name: str) -> None:
        """Stop a real Node as if its machine went down: containers, kubelet, containerd."""
        self.real_node(name).stop()

    def start_node(self, name: str) -> None:
        """Start a stopped real Node again; its images and Pod directories are still there."""
        node = self.real_node(name)
        if any(node.processes().values()):
            raise DevClusterError(f"{name} is running: stop it first (`sunk dev node stop {name}`)")
        node.start()

    def env(self) -> dict[str, str]:
        layout = self.layout
        return {
            "KUBECONFIG": str(layout.kubeconfig),
            "SLURM_CONF": str(layout.slurm_conf),
            "SUNK_SLURM_API_BASE": layout.rest_url,
            "SUNK_SLURM_AUTH_TOKEN_FILE": str(layout.slurm_token),
            "SUNK_SLURM_USER": "root",
            "SUNK_SLURM_KILL_WAIT": f"{(self.spec() or ClusterSpec()).kill_wait}s",
            "SUNK_HOOKS_SECRET_FILE": str(layout.hooks_secret),
            # Everything listens on 127.0.0.1 here: the hooks API may speak plain HTTP.
            "SUNK_HOOKS_INSECURE_HTTP": "true",
        }

    def env_text(self) -> str:
        return "".join(f"export {key}={value}\n" for key, value in self.env().items())

    def require_running(self) -> ClusterSpec:
        spec = self.spec()
        if not self.is_running() or spec is None:
            raise DevClusterError("no dev cluster is running: start one with `sunk dev up`")
        return spec
