"""How a Slurm command runs for a dev cluster: on the host (Slurm 22.05 from Debian 12's
packages) or chrooted into a cached Debian root (24.11, 26.05), as the cluster's run
directory records, with the environment Slurm's commands need."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from sunk_dev import slurmroot
from sunk_dev.errors import DevClusterError
from sunk_dev.layout import Layout


@dataclass(frozen=True)
class SlurmRuntime:
    """How to run this cluster's Slurm: on the host (root None) or chrooted into a root."""

    version: str = slurmroot.HOST_VERSION
    release: str = ""
    root: Path | None = None
    rest_versions: tuple[str, ...] = ()
    cluster_dir: Path | None = None  # bind-mounted at the same path inside the root

    def argv(self, cmd: Sequence[str], user: str | None = None) -> list[str]:
        """`cmd` wrapped so it runs with this Slurm, as `user` ("name:group") if given. The
        process started keeps the PID of `cmd` itself in both cases."""
        if self.root is None:
            return ["chroot", f"--userspec={user}", "/", *cmd] if user else list(cmd)
        return slurmroot.launcher(self.root, cmd, user=user, bind=self.cluster_dir)

    def to_json(self) -> str:
        data = asdict(self)
        data["root"] = str(self.root) if self.root else None
        data["cluster_dir"] = str(self.cluster_dir) if self.cluster_dir else None
        data["rest_versions"] = list(self.rest_versions)
        return json.dumps(data, indent=2) + "\n"


def runtime(layout: Layout) -> SlurmRuntime:
    """The runtime of the cluster under `layout`; the host's Slurm when none was recorded."""
    try:
        data = json.loads(layout.slurm_runtime.read_text())
        return SlurmRuntime(
            version=str(data["version"]),
            release=str(data.get("release") or ""),
            root=Path(data["root"]) if data.get("root") else None,
            rest_versions=tuple(str(v) for v in data.get("rest_versions") or ()),
            cluster_dir=Path(data["cluster_dir"]) if data.get("cluster_dir") else layout.root,
        )
    except (OSError, ValueError, KeyError, TypeError):
        return SlurmRuntime(cluster_dir=layout.root)


def write_runtime(layout: Layout, rt: SlurmRuntime) -> None:
    tmp = layout.slurm_runtime.with_suffix(".tmp")
    tmp.write_text(rt.to_json())
    tmp.chmod(0o644)
    tmp.replace(layout.slurm_runtime)


def cli_env(layout: Layout, rt: SlurmRuntime | None = None) -> dict[str, str]:
    """Environment for Slurm's CLI tools: SLURM_JWT must be absent or they switch to JWT."""
    rt = rt or runtime(layout)
    env = {k: v for k, v in os.environ.items() if k != "SLURM_JWT"}
    env["SLURM_CONF"] = str(layout.slurm_conf)
    if rt.root is not None:
        env["PATH"] = slurmroot.ROOT_PATH  # the caller's PATH may name host-only directories
    return env


def run_cli(layout: Layout, *argv: str, timeout: float = 30) -> str:
    """Run a Slurm (or MariaDB) command of the cluster's Slurm and return its output."""
    rt = runtime(layout)
    result = subprocess.run(
        rt.argv(argv), env=cli_env(layout, rt), capture_output=True, text=True, timeout=timeout
    )
    if result.returncode != 0:
        raise DevClusterError(f"`{' '.join(argv)}` failed: {(result.stderr or result.stdout).strip()[:300]}")
    return result.stdout


def short_hostname() -> str:
    """slurmctld insists on the short host name in SlurmctldHost."""
    return socket.gethostname().split(".")[0]
