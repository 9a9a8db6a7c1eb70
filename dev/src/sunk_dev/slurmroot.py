"""Debian roots that carry a newer Slurm than the host's, and the launcher that runs in them.

Debian 12 ships Slurm 22.05, whose REST API (v0.0.38 at most) no current Slurm serves. Newer
releases come from newer Debian suites; their binaries need a newer glibc than the host's,
so they run chrooted into a `debootstrap` tree kept under `cache_dir()/roots`, one per suite
and Slurm package version (`trixie-24.11.5-1`, `sid-26.05.5-1`, ...).

Safety rules, learned the hard way: the host's /dev is never bind-mounted into a root (the
root gets its own handful of device nodes), every mount happens inside a private mount
namespace that dies with the process, and a root is only ever removed with
`rm --one-file-system` after checking that nothing is mounted under it and no process lives
in it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from sunk_dev import topology
from sunk_dev.errors import DevClusterError
from sunk_dev.layout import cache_dir
from sunk_dev.prereqs import ACCOUNTING_PACKAGES, SLURM_PACKAGES

HOST_VERSION = "22.05"
DEFAULT_VERSION = "24.11"
# Slurm release line -> the Debian suite that ships it (22.05 is the host's own packages).
SUITES = {"24.11": "trixie", "26.05": "sid"}
SUPPORTED = ("24.11", "26.05", HOST_VERSION)
MIRROR = "http://deb.debian.org/debian"
# The host's Slurm package list, and accounting always: one root serves both kinds of cluster.
PACKAGES = (*SLURM_PACKAGES, *ACCOUNTING_PACKAGES, "ca-certificates")
# The only device nodes a root gets: (major, minor) of each, made with mknod in the root.
DEVICES = {
    "null": (1, 3),
    "zero": (1, 5),
    "full": (1, 7),
    "random": (1, 8),
    "urandom": (1, 9),
    "tty": (5, 0),
}
MARKER = ".sunk-root.json"
# Bumped whenever the way a root is built changes, so older roots are no longer picked up.
RECIPE = 3
# libmariadb3 11.8.9 (sid, and trixie since its late-2026 point release) rejects every result
# set slurmdbd reads ("Number of columns in result (=1) set exceeds maximum allowed number
# of columns (=0)"), so slurmdbd would not start. Each root keeps its own package (the
# mariadb CLI depends on it) and gets bookworm's client library (10.11) beside it, which
# slurmdbd is started with (sunk_dev.slurmcluster).
CLIENT_LIBRARY_FROM = "bookworm"
CLIENT_LIBRARY_DIR = "/opt/sunk/libmariadb"
ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def check_version(version: str) -> None:
    if version not in SUPPORTED:
        raise DevClusterError(
            f"Slurm {version} is not supported by the dev cluster: choose one of "
            f"{', '.join(SUPPORTED)} (24.11 from Debian trixie is the default, 26.05 comes from "
            "Debian sid, 22.05 is this host's own Debian 12 packages)"
        )


def roots_dir() -> Path:
    return cache_dir() / "roots"


# -- the launcher -------------------------------------------------------------------------
def launcher(
    root: Path, cmd: Sequence[str], *, user: str | None = None, bind: Path | None = None
) -> list[str]:
    """argv that runs `cmd` chrooted into `root`, with a fresh /proc and `bind` mounted at
    the same path inside, all in a private mount namespace only this process (and its
    children) can see.

    unshare does not fork and sh and chroot exec, so the PID of the returned argv is the PID
    of `cmd` itself: signals and PID files work as for a host process.
    """
    q = shlex.quote
    steps = [f"mount -t proc proc {q(str(root / 'proc'))}"]
    if bind is not None:
        inside = root / str(bind).lstrip("/")
        steps += [f"mkdir -p {q(str(inside))}", f"mount --bind {q(str(bind))} {q(str(inside))}"]
    userspec = f"--userspec={q(user)} " if user else ""
    steps.append(f'exec chroot {userspec}{q(str(root))} "$@"')
    script = " && ".join(steps)
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sunk-root", *cmd]


# -- finding and building roots ---------------------------------------------------------
def read_marker(root: Path) -> dict[str, object] | None:
    try:
        data = json.loads((root / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def find_root(suite: str) -> tuple[Path, str] | None:
    """The newest complete root for `suite` and its Slurm package version, if any."""
    found: list[tuple[float, Path, str]] = []
    base = roots_dir()
    if not base.is_dir():
        return None
    for entry in base.glob(f"{suite}-*"):
        data = read_marker(entry)
        if data and data.get("suite") == suite and data.get("slurm") and data.get("recipe") == RECIPE:
            found.append(((entry / MARKER).stat().st_mtime, entry, str(data["slurm"])))
    if not found:
        return None
    _, path, release = max(found)
    return path, release


def ensure_root(version: str) -> tuple[Path, str]:
    """The root for Slurm `version`, built once (a few minutes) and reused without network."""
    suite = SUITES[version]
    existing = find_root(suite)
    if existing:
        return existing
    base = roots_dir()
    base.mkdir(parents=True, exist_ok=True)
    with _locked(base / f".{suite}.lock"):
        existing = find_root(suite)  # somebody else may have built it while we waited
        if existing:
            return existing
        return _build(suite, version)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _ensure_debootstrap(log: Path) -> None:
    if shutil.which("debootstrap") and shutil.which("unshare"):
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise DevClusterError(
            "building the Slurm root needs debootstrap and unshare: install them "
            "(`apt-get install debootstrap util-linux`) or run this command as root on Debian"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    with open(log, "ab") as out:
        install = ["apt-get", "install", "-y", "-q", "debootstrap"]
        done = subprocess.run(install, env=env, stdout=out, stderr=subprocess.STDOUT)
        if done.returncode:
            subprocess.run(["apt-get", "update", "-q"], env=env, stdout=out, stderr=subprocess.STDOUT)
            done = subprocess.run(install, env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode or not shutil.which("debootstrap"):
        raise DevClusterError(f"installing debootstrap failed: see {log}")


def _build(suite: str, version: str) -> tuple[Path, str]:
    base = roots_dir()
    log = base / f"{suite}-build.log"
    for stale in base.glob(f".build-{suite}-*"):
        remove_root(stale)  # an interrupted earlier build
    if os.geteuid() != 0:
        raise DevClusterError("building the Slurm root (debootstrap, chroot, mknod) needs root")
    started = time.monotonic()
    print(
        f"building a Debian {suite} root for Slurm {version} under {base} "
        f"(once per Slurm package version; a few minutes; log {log})",
        file=sys.stderr,
        flush=True,
    )
    log.write_bytes(b"")
    work = base / f".build-{suite}-{os.getpid()}"
    try:
        debootstrap(suite, work, log)
        _configure(work, suite)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive", PATH=ROOT_PATH, LC_ALL="C")
        _run_logged(
            launcher(work, ["apt-get", "update", "-q"]), log, f"apt-get update in the {suite} root", env
        )
        _run_logged(
            launcher(work, ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]),
            log,
            f"installing Slurm in the {suite} root",
            env,
        )
        _add_client_library(work, log, env)
        _run_logged(launcher(work, ["apt-get", "clean"]), log, "apt-get clean", env)
        _add_job_user(work, log, env)
        release = subprocess.run(
            launcher(work, ["dpkg-query", "-W", "-f=${Version}", "slurmctld"]),
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if not release:
            raise DevClusterError(f"slurmctld is not installed in the {suite} root: see {log}")
        final = base / f"{suite}-{release.replace(':', '_').replace('~', '_')}-r{RECIPE}"
        if final.exists():
            remove_root(final)  # incomplete (no marker), or find_root would have returned it
        work.chmod(0o755)
        work.rename(final)
        marker = {
            "suite": suite,
            "slurm": release,
            "recipe": RECIPE,
            "built": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        (final / MARKER).write_text(json.dumps(marker) + "\n")
    except BaseException:
        remove_root(work)
        raise
    print(
        f"built the {suite} root (Slurm {release}) in {time.monotonic() - started:.0f} s",
        file=sys.stderr,
        flush=True,
    )
    return final, release


def debootstrap(suite: str, target: Path, log: Path) -> None:
    """A minbase Debian `suite` in `target`, made in a private mount namespace (debootstrap
    mounts /proc and more in the tree while it works; those mounts die with it)."""
    _ensure_debootstrap(log)
    argv = ["debootstrap", "--variant=minbase", suite, str(target), MIRROR]
    _run_logged(
        ["unshare", "--mount", "--propagation", "private", "--", *argv],
        log,
        f"debootstrap of Debian {suite}",
    )


def _run_logged(argv: Sequence[str], log: Path, what: str, env: dict[str, str] | None = None) -> None:
    with open(log, "ab") as out:
        out.write(f"\n$ {shlex.join(argv)}\n".encode())
        out.flush()
        done = subprocess.run(
            list(argv), env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    if done.returncode:
        raise DevClusterError(f"{what} failed (exit {done.returncode}): see {log}")


def _configure(root: Path, suite: str) -> None:
    """Make the fresh tree usable: its own device nodes, hosts, and no service start-ups."""
    dev = root / "dev"
    if dev.is_mount():
        raise DevClusterError(f"{dev} is a mount point on the host; refusing to touch it")
    dev.mkdir(exist_ok=True)
    for name, (major, minor) in DEVICES.items():
        node = dev / name
        if node.is_symlink() or node.exists():
            if node.is_dir() and not node.is_symlink():
                raise DevClusterError(f"unexpected directory {node} in the new root")
            node.unlink()
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(major, minor))
        node.chmod(0o666)
    for sub in ("pts", "shm"):
        (dev / sub).mkdir(exist_ok=True)
    host = socket.gethostname().split(".")[0]
    (root / "etc" / "hosts").write_text(
        f"127.0.0.1 localhost {host}\n::1 localhost ip6-localhost ip6-loopback\n"
    )
    policy = root / "usr" / "sbin" / "policy-rc.d"
    policy.write_text("#!/bin/sh\n# sunk dev: never start services from package scripts\nexit 101\n")
    policy.chmod(0o755)
    if suite == "sid":
        # sid's Release files can look expired against this machine's clock.
        conf = root / "etc" / "apt" / "apt.conf.d" / "99sunk-no-valid-until"
        conf.write_text('Acquire::Check-Valid-Until "false";\nAcquire::Check-Date "false";\n')
    resolv = root / "etc" / "resolv.conf"
    if not resolv.exists() and Path("/etc/resolv.conf").exists():
        resolv.unlink(missing_ok=True)
        shutil.copyfile("/etc/resolv.conf", resolv)


def _add_client_library(root: Path, log: Path, env: dict[str, str]) -> None:
    """Put CLIENT_LIBRARY_FROM's libmariadb.so.3 into CLIENT_LIBRARY_DIR of the root."""
    donor = CLIENT_LIBRARY_FROM
    sources = root / "etc" / "apt" / "sources.list.d" / f"sunk-{donor}.list"
    sources.write_text(f"deb {MIRROR} {donor} main\n")
    (root / CLIENT_LIBRARY_DIR.lstrip("/")).mkdir(parents=True, exist_ok=True)
    fetch = (
        f"cd {CLIENT_LIBRARY_DIR} && apt-get download -q libmariadb3/{donor} && "
        "dpkg-deb -x libmariadb3_*.deb unpacked && "
        "find unpacked -name libmariadb.so.3 -exec cp -L {} . ';' && "
        "rm -rf unpacked libmariadb3_*.deb && test -s libmariadb.so.3"
    )
    try:
        _run_logged(launcher(root, ["apt-get", "update", "-q"]), log, f"apt-get update with {donor}", env)
        _run_logged(launcher(root, ["sh", "-c", fetch]), log, f"fetching {donor}'s libmariadb3", env)
    finally:
        sources.unlink(missing_ok=True)
    _run_logged(launcher(root, ["apt-get", "update", "-q"]), log, f"apt-get update without {donor}", env)


def _add_job_user(root: Path, log: Path, env: dict[str, str]) -> None:
    user, uid = topology.JOB_USER, str(topology.JOB_UID)
    _run_logged(launcher(root, ["groupadd", "--gid", uid, user]), log, "groupadd in the root", env)
    _run_logged(
        launcher(
            root,
            ["useradd", "--uid", uid, "--gid", uid, "--no-create-home", "--shell", "/usr/sbin/nologin", user],
        ),
        log,
        "useradd in the root",
        env,
    )


# -- safety ---------------------------------------------------------------------------------
def _inside(path: str, root: Path) -> bool:
    base = str(root).rstrip("/")
    return path == base or path.startswith(base + "/")


def _unescape_mount(field: str) -> str:
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below `root` in this mount namespace and in every process's one."""
    found: set[str] = set()
    sources = [Path("/proc/mounts"), *Path("/proc").glob("[0-9]*/mounts")]
    for source in sources:
        try:
            text = source.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            parts = line.split()
            if len(parts) > 1 and _inside(_unescape_mount(parts[1]), root):
                found.add(parts[1])
    return sorted(found)


def process_root(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/root")
    except OSError:
        return None


def pids_in(root: Path) -> list[int]:
    """Processes whose root directory is `root` or below it."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            proc_root = process_root(int(entry.name))
            if proc_root is not None and _inside(proc_root, root):
                found.append(int(entry.name))
    return found


def cluster_pids(cluster_dir: Path) -> list[int]:
    """Processes living in any root that have `cluster_dir` bind-mounted: everything a dev
    cluster under `cluster_dir` started in a root (and only that cluster's, never another's)."""
    base = roots_dir()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        proc_root = process_root(int(entry.name))
        if proc_root is None or not _inside(proc_root, base):
            continue
        try:
            mountinfo = (entry / "mountinfo").read_text()
        except OSError:
            continue
        # Field 5 is the mount point as the process sees it (relative to its root).
        points = {
            _unescape_mount(line.split()[4]) for line in mountinfo.splitlines() if len(line.split()) > 4
        }
        if str(cluster_dir) in points:
            found.append(int(entry.name))
    return found


def remove_root(path: Path) -> None:
    """Delete a root, but only when nothing is mounted in it and nobody runs in it."""
    if not path.exists():
        return
    mounted = mounts_under(path)
    if mounted:
        raise DevClusterError(
            f"not removing {path}: {', '.join(mounted[:3])} still mounted there; unmount it first"
        )
    users = pids_in(path)
    if users:
        raise DevClusterError(
            f"not removing {path}: processes {', '.join(map(str, users[:5]))} still run inside it"
        )
    subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], check=True)
