"""Where the dev cluster keeps its files and which loopback ports it uses.

Everything lives under one run directory outside the checkout. It defaults to
/tmp/sunk-dev rather than ~/.cache because slurmrestd drops to `nobody`, which must be
able to read slurm.conf, and root's home is not traversable by other users.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

HOST = "127.0.0.1"


def cache_dir() -> Path:
    """Where the Go-built tools are cached (shared by every checkout on the machine)."""
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
    slurmd_base: int = 27000

    def slurmd(self, index: int) -> int:
        return self.slurmd_base + index

    def fixed(self, accounting: bool) -> dict[str, int]:
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
        return ports


@dataclass(frozen=True)
class Layout:
    root: Path
    ports: Ports = Ports()

    @classmethod
    def default(cls) -> Layout:
        return cls(Path(os.environ.get("SUNK_DEV_DIR", "/tmp/sunk-dev")))

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
        return f"https://{HOST}:{self.ports.apiserver}"
