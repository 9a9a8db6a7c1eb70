"""Checks and installs what the dev cluster needs, failing with one actionable sentence."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from sunk_dev import hostnet
from sunk_dev.errors import DevClusterError
from sunk_dev.layout import HOST, Layout, cache_dir

SLURM_PACKAGES = (
    "munge",
    "slurmctld",
    "slurmd",
    "slurmrestd",
    "slurm-client",
    "slurm-wlm-jwt-plugin",
    "curl",  # the placeholder job script calls the hooks API with curl (signed by sha256sum)
)
ACCOUNTING_PACKAGES = ("slurmdbd", "mariadb-server", "mariadb-client")
SLURM_COMMANDS = (
    "munged",
    "mungekey",
    "slurmctld",
    "slurmd",
    "slurmrestd",
    "scontrol",
    "sbatch",
    "curl",
    "sha256sum",
)
ACCOUNTING_COMMANDS = ("slurmdbd", "mariadbd", "mariadb-install-db", "sacctmgr")
CLUSTER_TOOLS = ("etcd", "kube-apiserver", "kube-controller-manager", "kwok")
PLATFORM_TOOLS = ("helm",)  # installs the Slurm chart on real Nodes
# Real kubelet Nodes: the container runtime and Pod network (hostnet), and the image builder.
# The dev directory: OpenLDAP's server and tools, and ssh-keygen for its people's keys.
DIRECTORY_PACKAGES = ("slapd", "ldap-utils", "openssh-client")
DIRECTORY_COMMANDS = ("slapd", "slapadd", "slappasswd", "ssh-keygen")
# Only `sunk dev dashboard-pictures` needs it (a headless browser), installed when it runs.
BROWSER_PACKAGES = ("chromium",)
REAL_NODE_PACKAGES = (
    "containerd",
    "runc",
    "containernetworking-plugins",
    "nftables",
    "iptables",
    "buildah",
    "docker-registry",
    "glusterfs-server",
    "glusterfs-client",
)


def repo_root() -> Path | None:
    """The checkout this package was installed from in editable mode, if any."""
    root = Path(__file__).resolve().parents[3]
    return root if (root / "hack" / "build-tools.sh").exists() else None


def check_ports_free(layout: Layout, nodes: int, accounting: bool, directory: bool = False) -> None:
    wanted = layout.ports.fixed(accounting, directory)
    wanted |= {f"slurmd {i}": layout.ports.slurmd(i) for i in range(1, nodes + 1)}
    for owner, port in wanted.items():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((HOST, port))
            except OSError:
                raise DevClusterError(
                    f"port {port} on {HOST}, needed by {owner}, is already in use: stop the "
                    f"program holding it (`ss -ltnp 'sport = :{port}'` shows which) and try again"
                ) from None


def _missing_slurm(accounting: bool) -> list[str]:
    commands = SLURM_COMMANDS + (ACCOUNTING_COMMANDS if accounting else ())
    missing = [cmd for cmd in commands if shutil.which(cmd) is None]
    if not glob.glob("/usr/lib/*/slurm-wlm/auth_jwt.so"):
        missing.append("auth_jwt.so")
    return missing


def ensure_debian_packages(accounting: bool, log: Path) -> None:
    """Install Slurm (and MariaDB) from Debian's packages when something is missing."""
    if not _missing_slurm(accounting):
        _undo_emulator_alternatives()
        return
    packages = SLURM_PACKAGES + (ACCOUNTING_PACKAGES if accounting else ())
    if shutil.which("apt-get") is None:
        raise DevClusterError(
            "Slurm is not installed and apt-get is not available: install "
            f"{' '.join(packages)} with your package manager (Debian 12 is what we test on)"
        )
    if os.geteuid() != 0:
        raise DevClusterError(
            f"Slurm is not installed and installing it needs root: run `sudo apt-get install "
            f"{' '.join(packages)}` once, or run this command as root"
        )
    apt_install(packages, log, "Slurm's Debian packages")
    _undo_emulator_alternatives()
    still = _missing_slurm(accounting)
    if still:
        raise DevClusterError(f"after installing Slurm these are still missing: {', '.join(still)}")


def apt_install(packages: tuple[str, ...], log: Path, what: str) -> None:
    """`apt-get update` and `install` of `packages`, logged; one sentence if either fails."""
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        for argv in (
            ["apt-get", "update", "-q"],
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
        ):
            if subprocess.run(argv, env=env, stdout=out, stderr=subprocess.STDOUT).returncode:
                raise DevClusterError(
                    f"`{' '.join(argv[:2])}` failed while installing {what}: see {log} and check "
                    "that the Debian mirror is reachable"
                )


def ensure_browser(log: Path, also: tuple[str, ...] = ()) -> Path:
    """Debian's Chromium (and the packages `also` names), installed on demand: only the
    dashboard pictures use a browser, so neither `up` nor the tests install one. Returns
    chromium's path."""
    found = shutil.which("chromium")
    if found and not also:
        return Path(found)
    packages = (() if found else BROWSER_PACKAGES) + also
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise DevClusterError(
            f"the dashboard pictures need {', '.join(packages)}: install them (`apt-get install "
            f"--no-install-recommends {' '.join(packages)}`) as root, or run this command as root on Debian"
        )
    apt_install(packages, log, "a headless browser for the dashboard pictures")
    found = shutil.which("chromium")
    if not found:
        raise DevClusterError(f"after installing {' '.join(packages)} there is still no chromium: see {log}")
    return Path(found)


def ensure_directory_packages(log: Path) -> None:
    """slapd and its tools from Debian, for the dev cluster's directory, installed once.

    Debian's slapd would configure a directory of its own and start it as a service: told
    not to configure one, and with service starts refused while apt runs, it installs only
    the programs (the dev cluster runs its own slapd, with its own files)."""
    if all(shutil.which(cmd) for cmd in DIRECTORY_COMMANDS):
        return
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise DevClusterError(
            f"the dev directory needs {', '.join(DIRECTORY_PACKAGES)}: install them (`apt-get install "
            f"{' '.join(DIRECTORY_PACKAGES)}`) as root, or run `sunk dev up` as root on Debian"
        )
    subprocess.run(
        ["debconf-set-selections"], input=b"slapd slapd/no_configuration boolean true\n", check=True
    )
    with _no_service_starts():
        apt_install(DIRECTORY_PACKAGES, log, "the dev directory (slapd)")


@contextlib.contextmanager
def _no_service_starts() -> Iterator[None]:
    """A policy-rc.d that refuses every service start while packages install; one that was
    already there is left as it was."""
    policy = Path("/usr/sbin/policy-rc.d")
    added = not policy.exists()
    if added:
        policy.write_text("#!/bin/sh\n# sunk dev: no service starts while packages install\nexit 101\n")
        policy.chmod(0o755)
    try:
        yield
    finally:
        if added:
            policy.unlink(missing_ok=True)


def ensure_real_node_packages(log: Path) -> None:
    """containerd, runc, the CNI plugins, nftables and buildah from Debian, installed once.

    Installing containerd would start Debian's own containerd service; a policy-rc.d that
    refuses service starts is in place while apt runs (and removed again if we added it)."""
    missing = hostnet.missing_packages() + [
        cmd for cmd in ("buildah", "docker-registry") if not shutil.which(cmd)
    ]
    if not missing:
        return
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise DevClusterError(
            f"real Nodes need {', '.join(missing)}: install them (`apt-get install "
            f"{' '.join(REAL_NODE_PACKAGES)}`) as root, or run `sunk dev up` as root on Debian"
        )
    with _no_service_starts():
        apt_install(REAL_NODE_PACKAGES, log, "what real Nodes need")
    still = hostnet.missing_packages()
    if still:
        raise DevClusterError(f"after installing them these are still missing: {', '.join(still)}")


def _undo_emulator_alternatives() -> None:
    """slurm-wlm-emulator, if present, points slurmctld/slurmd at a broken build; undo that."""
    for daemon in ("slurmctld", "slurmd"):
        real = Path(f"/usr/sbin/{daemon}-wlm")
        current = Path(f"/usr/sbin/{daemon}")
        if real.exists() and current.resolve() != real:
            subprocess.run(["update-alternatives", "--set", daemon, str(real)], capture_output=True)


def ensure_job_user(name: str, uid: int) -> None:
    """A non-root user for Pods with a user-id annotation (the dedicated-user GPU strategy)."""
    try:
        pwd.getpwuid(uid)
        return
    except KeyError:
        pass
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        raise DevClusterError(
            f"the dev cluster needs a user with uid {uid} for its job-identity tests: create one "
            f"(`useradd --uid {uid} --user-group {name}`) or run as root"
        )
    subprocess.run(
        [
            "useradd",
            "--uid",
            str(uid),
            "--user-group",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ],
        check=True,
        capture_output=True,
    )


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def ensure_go_tools(
    log: Path, tools: tuple[str, ...] = CLUSTER_TOOLS, say: Callable[[str], None] = _say
) -> dict[str, Path]:
    """Build the upstream tools from their pinned Go modules unless already cached. A cold
    build takes minutes per tool: each one is named as it starts, with the time since the
    first began (`say`); the compiler's own output goes to `log`."""
    bin_dir = cache_dir() / "bin"
    root = repo_root()
    if shutil.which("go") and root is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with open(log, "ab") as out:
            build = subprocess.Popen(
                [str(root / "hack" / "build-tools.sh"), *tools],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            assert build.stdout is not None
            for raw in build.stdout:
                out.write(raw)
                out.flush()
                line = raw.decode(errors="replace").rstrip()
                if line.startswith(("building ", "built ")):
                    say(_progress(line, tools, time.monotonic() - started, log))
            done = build.wait()
        if done:
            raise DevClusterError(f"building the Kubernetes tools from their Go modules failed: see {log}")
    paths = {tool: bin_dir / tool for tool in tools}
    missing = [tool for tool, path in paths.items() if not os.access(path, os.X_OK)]
    if missing:
        if shutil.which("go") is None:
            raise DevClusterError(
                f"{', '.join(missing)} must be built from Go modules but Go is not installed: "
                "install Go 1.24 or newer and run this again"
            )
        raise DevClusterError(
            f"{', '.join(missing)} are missing from {bin_dir}: run `hack/build-tools.sh` "
            "from a checkout of the sunk repository"
        )
    return paths


def _progress(line: str, tools: tuple[str, ...], elapsed_s: float, log: Path) -> str:
    """build-tools.sh's line, with the time so far and which of `tools` it is: "[ 2:31]
    building kube-apiserver (2 of 4) from k8s.io/... (log ...)"."""
    minutes, seconds = divmod(int(elapsed_s), 60)
    word, _, rest = line.partition(" ")
    tool, _, tail = rest.partition(" ")
    which = f" ({tools.index(tool) + 1} of {len(tools)})" if tool in tools else ""
    where = f" (log {log})" if word == "building" else ""
    return f"[{minutes:2d}:{seconds:02d}] {word} {tool}{which} {tail}{where}".rstrip()
