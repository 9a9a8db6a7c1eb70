"""Where the dev cluster keeps its files and which loopback ports it uses.

Everything lives under one run directory outside the checkout. It defaults to
/tmp/sunk-dev rather than ~/.cache because slurmrestd drops to `nobody`, which must be
able to read slurm.conf, and root's home is not traversable by other users.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from pathlib import Path

from sunk_dev.errors import DevClusterError

HOST = "127.0.0.1"


def cache_dir() -> Path:
    """Where the Go-built tools and the Debian roots for newer Slurm are cached (shared by
    every checkout on the machine)."""
    return Path(os.environ.get("SUNK_CACHE", Path.home() / ".cache" / "sunk"))


@dataclass(frozen=True)
class Ports:
    etcd_client: int = 23790
    etcd_peer: int = 23800
    apiserver: int = 26443
    slurmctld: int = 26817
    slurmdbd: int = 26819
    slurmrestd: int = 26820
    mariadb: int = 23306
    ldap: int = 23890  # the dev directory's slapd (`--directory`)
    registry: int = 23500  # the OCI registry (with real Nodes, on the bridge's address)
    prometheus: int = 29090  # the dev Prometheus (`sunk dev prometheus`), started on demand
    slurmd_base: int = 27000
    kubelet_base: int = 28250

    def shifted(self, offset: int) -> Ports:
        """Every port moved by `offset`, so two dev clusters can run side by side."""
        return replace(self, **{f.name: getattr(self, f.name) + offset for f in fields(self)})

    def slurmd(self, index: int) -> int:
        return self.slurmd_base + index

    @property
    def offset(self) -> int:
        """How far these ports were shifted from the defaults (SUNK_DEV_PORT_OFFSET)."""
        return self.apiserver - Ports.apiserver

    def kubelet(self, number: int) -> int:
        """The kubelet API port of real Node `number` (its healthz port is the next one)."""
        return self.kubelet_base + 2 + 2 * number

    @property
    def coredns(self) -> int:
        return self.kubelet_base

    @property
    def kube_proxy(self) -> int:
        """kube-proxy's health port; its metrics port is the next one."""
        return self.kubelet_base + 1

    @property
    def kube_scheduler(self) -> int:
        """kube-scheduler's secure (healthz) port, on 127.0.0.1: between kube-proxy's metrics
        port and the first kubelet's. It moves with the offset, and no offset in thousands
        lands it on the port bench/run.py gives the kube-scheduler it starts (29259)."""
        return self.kubelet_base + 3

    def fixed(self, accounting: bool, directory: bool = False) -> dict[str, int]:
        """Every fixed port the cluster binds, by the component that binds it."""
        ports = {
            "etcd": self.etcd_client,
            "etcd peer": self.etcd_peer,
            "kube-apiserver": self.apiserver,
            "slurmctld": self.slurmctld,
            "slurmrestd": self.slurmrestd,
        }
        if accounting:
            ports |= {"slurmdbd": self.slurmdbd, "mariadb": self.mariadb}
        if directory:
            ports["slapd"] = self.ldap
        return ports


@dataclass(frozen=True)
class Layout:
    root: Path
    ports: Ports = Ports()

    @classmethod
    def default(cls) -> Layout:
        """SUNK_DEV_DIR moves the run directory; SUNK_DEV_PORT_OFFSET shifts every port."""
        raw = os.environ.get("SUNK_DEV_PORT_OFFSET", "").strip() or "0"
        try:
            offset = int(raw)
        except ValueError:
            raise DevClusterError(f"SUNK_DEV_PORT_OFFSET must be an integer, not {raw!r}") from None
        return cls(Path(os.environ.get("SUNK_DEV_DIR", "/tmp/sunk-dev")), Ports().shifted(offset))

    @property
    def slurm_runtime(self) -> Path:
        return self.root / "slurm-runtime.json"

    @property
    def pids(self) -> Path:
        return self.root / "pids"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def kube(self) -> Path:
        return self.root / "kube"

    @property
    def kubeconfig(self) -> Path:
        return self.kube / "admin.kubeconfig"

    @property
    def slurm(self) -> Path:
        return self.root / "slurm"

    @property
    def slurm_conf(self) -> Path:
        return self.slurm / "etc" / "slurm.conf"

    @property
    def slurm_token(self) -> Path:
        return self.slurm / "etc" / "root.token"

    @property
    def munge_socket(self) -> Path:
        return self.slurm / "munge" / "munge.socket"

    @property
    def nodes(self) -> Path:
        """One directory per real kubelet Node."""
        return self.root / "nodes"

    @property
    def images_file(self) -> Path:
        """The images the real Nodes were given: name -> exact reference and stable tag."""
        return self.root / "images.json"

    @property
    def volumes(self) -> Path:
        """The data of PersistentVolumes on real Nodes, one directory per volume (`storage`)."""
        return self.root / "volumes"

    @property
    def api_host(self) -> str:
        """Where the API server listens: 127.0.0.1, or the host's address on the real Nodes'
        bridge when the cluster has real Nodes (their Pods must reach it too)."""
        try:
            return (self.kube / "api-host").read_text().strip() or HOST
        except OSError:
            return HOST

    @property
    def state_file(self) -> Path:
        return self.root / "cluster.json"

    @property
    def hooks_secret(self) -> Path:
        return self.root / "hooks.secret"

    @property
    def env_file(self) -> Path:
        return self.root / "env.sh"

    @property
    def rest_url(self) -> str:
        return f"http://{HOST}:{self.ports.slurmrestd}"

    @property
    def apiserver_url(self) -> str:
        return f"https://{self.api_host}:{self.ports.apiserver}"
