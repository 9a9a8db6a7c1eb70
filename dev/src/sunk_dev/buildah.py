"""buildah run off the host: every command in a private mount namespace, in a storage of
our own, with none of the host's files written.

Every buildah command runs inside `unshare --mount --propagation private`: the overlay
driver mounts layers (and bind-mounts its own storage directory onto itself), and those
mounts vanish with the command instead of piling up in the host's mount table. Builds use
buildah's default OCI isolation (runc); chroot isolation bind-mounts host device nodes.

buildah also writes to host paths that no flag moves: it creates /etc/cni/net.d (and, for a
container on its default network, a CNI bridge, nftables chains and /var/lib/cni), and it
keeps a blob-info cache in /var/lib/containers/cache whatever `--root` says. So, in the
private namespace, /var/lib is overlaid by a directory of the storage (what buildah writes
there lands in the cache; the host's /var/lib is untouched and nothing is created on the
host to mount over), a containers.conf of our own (CONTAINERS_CONF) makes the host network
the default and moves the CNI configuration directory into the storage, every command that
can start a container gets `--network host` and a runc state directory in the storage, and
TMPDIR points into the storage too.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sunk_dev import procs, slurmroot
from sunk_dev.errors import DevClusterError

# The Debian image made from debootstrap: the parent of the images that name no other.
DEBIAN = "debian"
# Names and paths of the base tree that a container runtime provides itself, or that would
# leak this host into the image.
_ROOTFS_EXCLUDES = ("./dev/*", "./proc/*", "./sys/*", "./run/*", "./tmp/*")
_HOST_FILES = ("etc/resolv.conf", "etc/hostname", "etc/hosts")
# Like Debian's "slim" images: no manuals, documentation (but the copyright files) or locales.
_SLIM_DPKG = """\
# sunk: keep the image small, as Debian's slim images do.
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
"""
_STEP = re.compile(r"^STEP (\d+)(?:/(\d+))?: (.*)$", re.MULTILINE)


def failed_step(log_text: str) -> str | None:
    """The last `STEP n/m: INSTRUCTION` buildah announced: the one that failed, in a failed build."""
    steps = _STEP.findall(log_text)
    if not steps:
        return None
    number, total, instruction = steps[-1]
    instruction = " ".join(instruction.split())
    if len(instruction) > 100:
        instruction = instruction[:97] + "..."
    where = f"{number}/{total}" if total else number
    return f"STEP {where} ({instruction})"


@dataclass(frozen=True)
class Image:
    """An image in the storage (`ref`) and its docker-archive tarball."""

    name: str
    ref: str
    archive: Path


class Builder:
    """buildah with this cache's storage, each command in its own private mount namespace."""

    def __init__(self, log: Path, store: Path) -> None:
        self.log = log
        self.store = store  # where the storage, the tarballs and the build directories live
        self.storage = store / "storage"
        prepare_host_dirs(self.storage)

    def run(self, args: Sequence[str], what: str) -> subprocess.CompletedProcess[bytes]:
        argv = buildah_argv(self.storage, args)
        with open(self.log, "ab") as out:
            out.write(f"\n$ {shlex.join(argv)}\n".encode())
            out.flush()
            return subprocess.run(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=buildah_env(self.storage),
            )

    def check(self, args: Sequence[str], what: str) -> None:
        done = self.run(args, what)
        if done.returncode:
            raise DevClusterError(f"{what} failed (exit {done.returncode}): see {self.log}")

    def has(self, ref: str) -> bool:
        return self.run(["inspect", "--type", "image", ref], f"looking up {ref}").returncode == 0

    def ensure_loaded(self, image: Image) -> None:
        """Put `image` back into the storage from its tarball if the storage lost it."""
        if not self.has(image.ref):
            self.check(["pull", "--quiet", f"docker-archive:{image.archive}"], f"loading {image.archive}")

    def forget(self, prefixes: Sequence[str], current: set[str]) -> None:
        """Remove from the storage the images whose names start with one of `prefixes` but
        are not in `current`: each rebuild would otherwise keep its predecessor's layers."""
        listed = subprocess.run(
            buildah_argv(self.storage, ["images", "--noheading", "--format", "{{.Name}}:{{.Tag}}"]),
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            env=buildah_env(self.storage),
        )
        stale = [
            ref
            for ref in listed.stdout.split()
            if ref not in current and any(ref.startswith(prefix) for prefix in prefixes)
        ]
        if stale:
            # Best effort: a leftover image costs disk space, never correctness.
            self.run(["rmi", *stale], "removing superseded images")

    def build(
        self, name: str, context: Path, image: Image, args: Mapping[str, str], secrets: Sequence[str] = ()
    ) -> None:
        start = self.log.stat().st_size if self.log.exists() else 0
        argv = [
            "bud",
            "--pull=never",
            "--tag",
            image.ref,
            *(f"--build-arg={k}={v}" for k, v in args.items()),
            *secrets,
            str(context),
        ]
        begun = time.monotonic()
        done = self.run(argv, f"building {name}")
        if done.returncode:
            with open(self.log, "rb") as handle:
                handle.seek(start)
                step = failed_step(handle.read().decode(errors="replace"))
            at = f" at {step}" if step else ""
            raise DevClusterError(
                f"building the {name} image failed{at} (Dockerfile {context / 'Dockerfile'}): see {self.log}"
            )
        self.export(image)
        print(f"  {name}: built in {time.monotonic() - begun:.0f} s", file=sys.stderr, flush=True)

    def export(self, image: Image) -> None:
        """Write `image` to its docker-archive tarball, atomically (the tarball marks it built)."""
        partial = image.archive.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        try:
            self.check(
                ["push", "--quiet", image.ref, f"docker-archive:{partial}:{image.ref}"],
                f"exporting {image.ref}",
            )
            partial.rename(image.archive)
        finally:
            partial.unlink(missing_ok=True)

    def debian_base(self, suite: str, image: Image) -> None:
        """Debian `suite` as an image: a minbase debootstrap tree, tarred and ADDed to scratch."""
        begun = time.monotonic()
        for stale in self.store.glob(f".build-{DEBIAN}-{suite}-*"):
            remove_work(stale)  # an interrupted earlier build
        work = self.store / f".build-{DEBIAN}-{suite}-{os.getpid()}"
        tree = work / "rootfs"
        work.mkdir(parents=True)
        try:
            slurmroot.debootstrap(suite, tree, self.log)
            _slim(tree, suite)
            tarball = work / "rootfs.tar"
            excludes = [f"--exclude={pattern}" for pattern in _ROOTFS_EXCLUDES]
            slurmroot._run_logged(
                ["tar", "--numeric-owner", "--xattrs", "-C", str(tree), *excludes, "-cf", str(tarball), "."],
                self.log,
                f"packing the Debian {suite} tree",
            )
            (work / "Dockerfile").write_text(
                f"# Debian {suite} minbase from debootstrap, made by sunk_dev.images\n"
                'FROM scratch\nADD rootfs.tar /\nCMD ["bash"]\n'
            )
            (work / ".dockerignore").write_text("rootfs\n")
            done = self.run(
                ["bud", "--pull=never", "--tag", image.ref, str(work)],
                f"making the Debian {suite} image",
            )
            if done.returncode:
                raise DevClusterError(f"making the Debian {suite} base image failed: see {self.log}")
            self.export(image)
        finally:
            remove_work(work)
        print(f"  {DEBIAN} {suite}: made in {time.monotonic() - begun:.0f} s", file=sys.stderr, flush=True)


def _slim(tree: Path, suite: str) -> None:
    """Make a fresh debootstrap tree fit to be an image: no host files, caches or docs."""
    for name in _HOST_FILES:
        (tree / name).unlink(missing_ok=True)
    for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (tree / cache).glob("*"):
            if entry.is_file() and not entry.is_symlink() and entry.name != "lock":
                entry.unlink()
    for sub in ("usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/lintian"):
        target = tree / sub
        if target.is_dir() and not target.is_symlink():
            subprocess.run(["rm", "-rf", "--one-file-system", "--", str(target)], check=True)
            target.mkdir()
    docs = tree / "usr/share/doc"
    if docs.is_dir():
        subprocess.run(
            [
                "find",
                str(docs),
                "-mindepth",
                "1",
                "-not",
                "-name",
                "copyright",
                "-not",
                "-type",
                "d",
                "-delete",
            ],
            check=True,
        )
    (tree / "etc/dpkg/dpkg.cfg.d/sunk-slim").write_text(_SLIM_DPKG)
    policy = tree / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\n# sunk: package scripts never start services in an image\nexit 101\n")
    policy.chmod(0o755)
    if suite == "sid":
        # sid's Release files can look expired against a machine's clock (as for the roots).
        (tree / "etc/apt/apt.conf.d/99sunk-no-valid-until").write_text(
            'Acquire::Check-Valid-Until "false";\nAcquire::Check-Date "false";\n'
        )


def remove_work(work: Path) -> None:
    """Remove a build directory, refusing (as slurmroot does) when something is mounted in it."""
    slurmroot.remove_root(work)


# -- keeping buildah off the host -------------------------------------------------------------
# Run in the private mount namespace before buildah: /var/lib becomes an overlay whose upper
# layer is in the storage ($1, with $2 its work directory), then buildah is exec'd ("$@").
_VAR_LIB_OVERLAY = (
    'mount -t overlay sunk-var-lib -o "lowerdir=/var/lib,upperdir=$1,workdir=$2" /var/lib'
    ' && shift 2 && exec "$@"'
)
# buildah subcommands that can start a container -> whether it takes --runtime-flag. Each
# always gets the host's network (never CNI: no bridge, no nftables chains, no /var/lib/cni)
# and runc rather than chroot isolation; with --runtime-flag, runc also keeps its state in
# the storage instead of /run/runc.
_RUNS_CONTAINERS: dict[str, bool] = {
    "bud": True,
    "build": True,
    "build-using-dockerfile": True,
    "run": True,
    "from": False,
}


def host_dirs(storage: Path) -> dict[str, Path]:
    """Where, inside the storage, buildah's would-be host files go."""
    return {
        "containers.conf": storage / "containers.conf",
        "cni": storage / "cni",  # CNI configuration directory (only cni.lock ends up there)
        "var-lib": storage / "var-lib",  # overlay upper layer of /var/lib: the blob-info cache
        "var-lib.work": storage / "var-lib.work",
        "runc": storage / "runc",
        "tmp": storage / "tmp",
    }


def containers_conf(storage: Path) -> str:
    """The containers.conf buildah reads instead of the system's (CONTAINERS_CONF replaces
    /usr/share/containers and /etc/containers' files): a container that is not told otherwise
    shares the host's network, and the CNI configuration lives in the storage."""
    cni = json.dumps(str(host_dirs(storage)["cni"]))  # a JSON string is a TOML basic string
    return (
        "# Written by sunk_dev.images for its own buildah commands; rewritten on every build.\n"
        "[containers]\n"
        'netns = "host"\n'
        "\n"
        "[network]\n"
        'network_backend = "cni"\n'
        f"network_config_dir = {cni}\n"
    )


def buildah_prefix(storage: Path) -> list[str]:
    """The command line up to buildah's subcommand: a private mount namespace with /var/lib
    overlaid from the storage, and buildah told to use the storage."""
    dirs = host_dirs(storage)
    return [
        *procs.in_private_mounts(_VAR_LIB_OVERLAY, str(dirs["var-lib"]), str(dirs["var-lib.work"])),
        "buildah",
        "--root",
        str(storage / "root"),
        "--runroot",
        str(storage / "run"),
        # overlay: this host's kernel mounts overlayfs on its ext4, so layers are shared and a
        # build does not copy the parent's whole tree as vfs would (several times faster and
        # much smaller on disk). vfs would be the fallback on a filesystem overlay refuses.
        "--storage-driver",
        "overlay",
    ]


def buildah_argv(storage: Path, args: Sequence[str]) -> list[str]:
    """The whole command line of `buildah ARGS`; a subcommand that can start a container
    gets the flags it must always have right after its name."""
    if not args:
        return buildah_prefix(storage)
    sub = args[0]
    flags: list[str] = []
    if sub in _RUNS_CONTAINERS:
        flags = ["--isolation", "oci", "--network", "host"]
        if _RUNS_CONTAINERS[sub]:
            flags += ["--runtime-flag", f"root={host_dirs(storage)['runc']}"]
    return [*buildah_prefix(storage), sub, *flags, *args[1:]]


def buildah_env(storage: Path) -> dict[str, str]:
    """The environment of every buildah command: none of the caller's buildah, storage or
    containers settings, our containers.conf, and temporary files in the storage."""
    dirs = host_dirs(storage)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BUILDAH_", "STORAGE_", "CONTAINERS_"))}
    return dict(
        env,
        PATH=slurmroot.ROOT_PATH,
        CONTAINERS_CONF=str(dirs["containers.conf"]),
        TMPDIR=str(dirs["tmp"]),
    )


def prepare_host_dirs(storage: Path) -> None:
    """Create the storage's stand-ins for host paths, and write the containers.conf."""
    resolved = storage.resolve()
    if resolved.is_relative_to(Path("/var/lib").resolve()):
        raise DevClusterError(
            f"the image storage {resolved} is under /var/lib, which every buildah command here "
            "overlays: set SUNK_CACHE to a directory elsewhere"
        )
    if any(c in str(resolved) for c in ",:\\"):
        raise DevClusterError(
            f"the image storage {resolved} has a comma, colon or backslash in its path, which "
            "overlayfs options cannot carry: set SUNK_CACHE to a plainer directory"
        )
    dirs = host_dirs(storage)
    for name, path in dirs.items():
        if name != "containers.conf":
            path.mkdir(parents=True, exist_ok=True)
    dirs["containers.conf"].write_text(containers_conf(storage))
