"""A real kubelet Node on this machine: its own containerd, kubelet, directories and cgroups.

Several Nodes run side by side on one host. Each gets a private mount namespace (made when
its containerd starts; the kubelet joins it) in which per-Node directories are mounted over
the host paths a kubelet, libcni and containerd's shims always write to, whatever they are
told: /var/lib/kubelet, /var/log/pods, /var/log/containers, /var/lib/cni, /run/containerd.
The Node's client of the cluster's file server mounts the volumes there too (`fileserver`).
The host's mount table never sees them, and they vanish with the Node's processes. Each
Node also has its own cgroup root in every hierarchy, its own ports, and an address on the
shared bridge (`hostnet`).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from sunk_dev import fileserver, hostnet, pki, procs, slurmroot
from sunk_dev.errors import DevClusterError
from sunk_dev.kubecluster import write_kubeconfig
from sunk_dev.layout import Layout, cache_dir

REAL_NODE_LABEL = "sunk.dev/real-node"
# Host path -> the Node's own directory mounted over it (see the module docstring).
PRIVATE_DIRS = {
    "/var/lib/kubelet": "kubelet",
    "/var/log/pods": "pod-logs",
    "/var/log/containers": "container-logs",
    "/var/lib/cni": "cni-cache",
    "/run/containerd": "containerd-run",
}
# What a stopped Node's containers left that `sunk dev down` deletes (see remove_files).
BULKY_DIRS = ("containerd", "kubelet", "containerd-run", "cni-cache")


@dataclass(frozen=True)
class RealNode:
    layout: Layout
    number: int

    @property
    def name(self) -> str:
        return f"real-{self.number}"

    @property
    def dir(self) -> Path:
        return self.layout.nodes / self.name

    @property
    def ip(self) -> str:
        return hostnet.network_of(self.layout).node_ip(self.number)

    @property
    def socket(self) -> Path:
        return self.dir / "containerd.sock"

    @property
    def cgroup_root(self) -> str:
        return f"sunk-{hostnet.network_of(self.layout).index}-{self.name}"

    @property
    def containerd_proc(self) -> str:
        return f"containerd-{self.name}"

    @property
    def kubelet_proc(self) -> str:
        return f"kubelet-{self.name}"

    @property
    def file_client(self) -> str:
        return fileserver.client_name(self.name)

    @property
    def kubelet_port(self) -> int:
        return self.layout.ports.kubelet(self.number)

    # -- configuration ---------------------------------------------------------------------
    def write_config(self, sandbox_image: str) -> None:
        """Certificates, kubeconfig, CNI, containerd and kubelet configuration of this Node;
        `sandbox_image` is the pause image containerd starts first in every Pod."""
        kube, node = self.layout.kube, self.dir
        for sub in ("pki", "cni/net.d", "cni/ipam", "containerd/root", "containerd/state", "runc", "plugins"):
            (node / sub).mkdir(parents=True, exist_ok=True)
        for sub in PRIVATE_DIRS.values():
            (node / sub).mkdir(exist_ok=True)
        pki.issue_client(kube, node / "pki", "client", f"system:node:{self.name}", "system:nodes")
        pki.issue_serving(kube, node / "pki", "serving", self.name, [self.ip], [self.name])
        write_kubeconfig(self.layout, node / "kubeconfig", node / "pki" / "client")
        (node / "resolv.conf").write_text("# Pods with dnsPolicy Default get no outside resolver here\n")
        (node / "cni" / "net.d" / "10-sunk-bridge.conflist").write_text(json.dumps(self._cni(), indent=1))
        (node / "containerd.toml").write_text(self._containerd(sandbox_image))
        self._write_registry_hosts()
        (node / "kubelet.yaml").write_text(yaml.safe_dump(self._kubelet()))

    def _cni(self) -> dict[str, object]:
        net = hostnet.network_of(self.layout)
        first, last = net.pod_range(self.number)
        return {
            "cniVersion": "1.0.0",
            "name": "sunk-dev",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": net.bridge,
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": str(self.dir / "cni" / "ipam"),
                        "ranges": [
                            [
                                {
                                    "subnet": net.cidr,
                                    "rangeStart": first,
                                    "rangeEnd": last,
                                    "gateway": net.gateway,
                                }
                            ]
                        ],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                }
            ],
        }

    def _write_registry_hosts(self) -> None:
        """The dev registry, for containerd's image pulls: plain HTTP at the bridge's gateway
        (containerd's hosts.toml, one directory per registry host:port)."""
        where = f"{hostnet.network_of(self.layout).gateway}:{self.layout.ports.registry}"
        hosts = self.dir / "registry-hosts" / where
        hosts.mkdir(parents=True, exist_ok=True)
        (hosts / "hosts.toml").write_text(
            f'server = "http://{where}"\n\n[host."http://{where}"]\n  capabilities = ["pull", "resolve"]\n'
        )

    def _containerd(self, sandbox_image: str) -> str:
        node = self.dir
        # restrict_oom_score_adj: root here may not lower an oom_score_adj (no CAP_SYS_RESOURCE);
        # without it every sandbox fails with runc's misleading "can't get final child's PID".
        return f"""version = 2
root = "{node / "containerd" / "root"}"
state = "{node / "containerd" / "state"}"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "{self.socket}"

[ttrpc]
  address = "{self.socket}.ttrpc"

[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  disable_hugetlb_controller = true
  tolerate_missing_hugetlb_controller = true
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{node / "runc"}"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{node / "registry-hosts"}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{hostnet.CNI_DIR}"
    conf_dir = "{node / "cni" / "net.d"}"
    max_conf_num = 1
"""

    def _kubelet(self) -> dict[str, object]:
        node, kube = self.dir, self.layout.kube
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": self.ip,
            "port": self.kubelet_port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.kubelet_port + 1,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(kube / "ca.crt")},
            },
            # Only holders of a certificate from the dev CA get past authentication.
            "authorization": {"mode": "AlwaysAllow"},
            "tlsCertFile": str(node / "pki" / "serving.crt"),
            "tlsPrivateKeyFile": str(node / "pki" / "serving.key"),
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{self.cgroup_root}",
            "cgroupsPerQOS": True,
            "failSwapOn": False,
            "failCgroupV1": False,
            "oomScoreAdj": 0,
            "makeIPTablesUtilChains": False,
            "clusterDNS": [hostnet.DNS_SERVICE_IP],
            "clusterDomain": hostnet.CLUSTER_DOMAIN,
            "resolvConf": str(node / "resolv.conf"),
            "volumePluginDir": str(node / "plugins"),
            # Images are imported by hand; never let garbage collection take them away.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "serializeImagePulls": False,
            "maxPods": 40,
            "nodeStatusReportFrequency": "20s",
        }

    # -- processes -------------------------------------------------------------------------
    def start(self) -> None:
        """Start containerd in a fresh private mount namespace, mount the shared volumes there,
        then start the kubelet inside it."""
        hostnet.make_cgroup_root(self.cgroup_root)
        log = self.layout.logs / f"{self.containerd_proc}.log"
        offset = log.stat().st_size if log.exists() else 0
        mounts = " && ".join(
            f"mount --bind {shlex.quote(str(self.dir / sub))} {shlex.quote(point)}"
            for point, sub in PRIVATE_DIRS.items()
        )
        containerd = procs.spawn(
            self.containerd_proc,
            procs.in_private_mounts(
                f'{mounts} && exec containerd --config "$1"', str(self.dir / "containerd.toml")
            ),
            self.layout.pids,
            self.layout.logs,
        )
        procs.wait_until(
            lambda: _cri_ready(log, offset),
            timeout=30,
            what=f"containerd of {self.name} to serve the CRI",
            watch=[containerd],
            log_dir=self.layout.logs,
        )
        fileserver.start_client(self.layout, self.name, mount_ns_of=containerd.pid)
        procs.spawn(
            self.kubelet_proc,
            [
                "nsenter",
                f"--mount=/proc/{containerd.pid}/ns/mnt",
                "--",
                str(cache_dir() / "bin" / "kubelet"),
                f"--config={self.dir / 'kubelet.yaml'}",
                f"--kubeconfig={self.dir / 'kubeconfig'}",
                f"--hostname-override={self.name}",
                f"--node-ip={self.ip}",
                f"--node-labels={REAL_NODE_LABEL}=true",
                "--v=1",
            ],
            self.layout.pids,
            self.layout.logs,
        )

    def processes(self) -> dict[str, bool]:
        """containerd, the file client and kubelet of this Node: alive or not."""
        found = {}
        for name in (self.containerd_proc, self.file_client, self.kubelet_proc):
            tracked = procs.load(self.layout.pids, name)
            found[name] = tracked is not None and tracked.alive()
        return found

    def stop(self) -> None:
        """Stop the Node as a machine would: every container, its shims, kubelet, containerd;
        then remove its cgroups. Safe to call on a Node that is already down."""
        pids = self.layout.pids
        procs.kill_all(hostnet.cgroup_pids(self.cgroup_root))
        for name in (self.kubelet_proc, self.containerd_proc, self.file_client):
            tracked = procs.load(pids, name)
            if tracked is not None:
                procs.stop(tracked, pids, timeout=10)
        shims = procs.leftovers_by_argv(f"-address {self.socket}")
        for pid in shims:
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            busy = hostnet.cgroup_pids(self.cgroup_root) + [p for p in shims if procs.is_running(p)]
            if not busy:
                break
            procs.kill_all(busy)
            time.sleep(0.1)
        stuck = hostnet.remove_cgroup_root(self.cgroup_root)
        if stuck:
            raise DevClusterError(f"cgroups of {self.name} would not go: {', '.join(stuck[:3])}")

    def remove_files(self) -> None:
        """Delete what the Node's containers left (containerd's images and snapshots, the
        kubelet's Pod directories: gigabytes), once it is stopped; its configuration and
        its containers' logs stay with the cluster's other logs. Nothing is removed while
        anything is mounted below it, in any process's mount namespace."""
        for sub in BULKY_DIRS:
            path = self.dir / sub
            if not path.exists():
                continue
            mounted = slurmroot.mounts_under(path)
            if mounted:
                raise DevClusterError(
                    f"not removing {path}: {', '.join(mounted[:3])} is still mounted there "
                    f"(a process of {self.name} that outlived it?)"
                )
            subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], check=True)


def _cri_ready(log: Path, offset: int) -> bool:
    """containerd's socket answers before its CRI plugin does, and a kubelet that asks too
    early exits ("server is not initialized yet"). The plugin marks itself ready right
    after it logs that its streaming server starts."""
    with open(log, "rb") as handle:
        handle.seek(offset)
        return b"Start streaming server" in handle.read()


def nodes_of(layout: Layout, count: int) -> list[RealNode]:
    return [RealNode(layout, number) for number in range(1, count + 1)]
