"""Slurm container images built from the repository's Dockerfiles, with no registry and no daemon.

Every image under `images/` is built by buildah (daemonless, packaged by Debian, reads
Dockerfiles as they are) into its own storage under `cache_dir()/images/storage`, then
written out as a docker-archive tarball that `ctr images import` loads into a containerd.

The parent of everything is a Debian image made here from a `debootstrap --variant=minbase`
tree, since nothing can be pulled. Each image is cached by a key: the hash of its build
context (its Dockerfile directory, plus the repository files it copies: sunk's own source
for the `sunk` image), its parent's key, the Debian suite and RECIPE. A tarball named after
that key means the image is built; finding every tarball is the whole warm path (no
buildah call). The Slurm images are made per Slurm version, on the suite that ships it;
`sunk` and `mariadb` are not Slurm's and are made once, on trixie, for every version.

How buildah is kept off the host is sunk_dev.buildah's job.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from sunk_dev import slurmroot
from sunk_dev.buildah import DEBIAN, Builder, Image, remove_work
from sunk_dev.errors import DevClusterError
from sunk_dev.layout import cache_dir
from sunk_dev.prereqs import repo_root

# In build order: every image comes after the one it is built FROM.
IMAGES: tuple[str, ...] = (
    "pause",
    "slurm-base",
    "slurmctld",
    "slurmd",
    "slurmrestd",
    "slurmdbd",
    "login",
    "sunk",
    "mariadb",
)
# image -> (the image it is built FROM, the build-arg its Dockerfile takes that image in)
PARENTS: dict[str, tuple[str, str]] = {
    "pause": (DEBIAN, "BASE"),
    "slurm-base": (DEBIAN, "BASE"),
    "slurmctld": ("slurm-base", "SLURM_BASE"),
    "slurmd": ("slurm-base", "SLURM_BASE"),
    "slurmrestd": ("slurm-base", "SLURM_BASE"),
    "slurmdbd": ("slurm-base", "SLURM_BASE"),
    "login": ("slurm-base", "SLURM_BASE"),
    "sunk": (DEBIAN, "BASE"),
    "mariadb": (DEBIAN, "BASE"),
}
# Images that have nothing of Slurm in them: built on this Debian suite, once for every
# Slurm version (their tag names the suite, not a Slurm version).
UNVERSIONED: dict[str, str] = {"sunk": "trixie", "mariadb": "trixie"}
# Files of the repository (relative to its root) that an image's build context holds next
# to its own directory, at the same relative paths: the `sunk` image installs the package.
EXTRA_CONTEXT: dict[str, tuple[str, ...]] = {
    "sunk": ("pyproject.toml", "README.md", "requirements.lock", "src"),
    "slurmd": ("src/sunk/containers",),
}
# Images whose Dockerfile runs pip: their build gets this machine's CA bundle as the build
# secret `pip-cert` (mounted for those steps only, never stored in the image), so that pip
# reaches PyPI through whatever TLS-inspecting proxy this machine trusts.
PIP_IMAGES = frozenset({"sunk"})
# Never part of a build context: what Python, tools and editors leave in a source tree.
_CONTEXT_JUNK_DIRS = ("__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".venv")
_CONTEXT_JUNK_SUFFIXES = (".pyc", ".pyo", ".egg-info", ".swp")
# Bumped whenever the way images (or the Debian base) are made here changes: every key moves.
RECIPE = 1
REGISTRY = "localhost/sunk"


@dataclass(frozen=True)
class Built:
    """One image ready to import: `ref` names exactly this build, `tag` is the stable name."""

    name: str
    ref: str
    tag: str
    archive: Path


# -- pure parts -------------------------------------------------------------------------------
def images_dir() -> Path:
    root = repo_root()
    if root is None or not (root / "images").is_dir():
        raise DevClusterError("the Slurm images' Dockerfiles are not found: run this from a sunk checkout")
    return root / "images"


def _junk(rel: Path) -> bool:
    return any(part in _CONTEXT_JUNK_DIRS or part.endswith(_CONTEXT_JUNK_SUFFIXES) for part in rel.parts)


def _files_under(directory: Path) -> dict[str, Path]:
    found = {}
    for path in directory.rglob("*"):
        rel = path.relative_to(directory)
        if (path.is_file() or path.is_symlink()) and not _junk(rel):
            found[rel.as_posix()] = path
    return found


def context_files(images: Path, name: str) -> dict[str, Path]:
    """The build context of image `name`: path inside the context -> the file it comes from.

    The image's own directory, plus its EXTRA_CONTEXT taken from the repository (the parent
    of `images`), minus caches and build leftovers. The cache key and the staged context are
    both made from this one listing, so the key covers exactly what the build sees."""
    files = _files_under(images / name)
    root = images.parent
    for extra in EXTRA_CONTEXT.get(name, ()):
        source = root / extra
        if source.is_dir():
            files |= {f"{extra}/{rel}": path for rel, path in _files_under(source).items()}
        elif source.is_file():
            files[extra] = source
        else:
            raise DevClusterError(f"the {name} image needs {source}, which is missing: is this a checkout?")
    return files


def context_digest(files: Mapping[str, Path] | Path) -> str:
    """sha256 of a build context (a listing from `context_files`, or every file under a
    directory): each file's relative path, executable bit and contents."""
    listing = files if isinstance(files, Mapping) else _files_under(files)
    digest = hashlib.sha256()
    for rel in sorted(listing):
        path = listing[rel]
        digest.update(rel.encode() + b"\0")
        if path.is_symlink():
            digest.update(b"link\0" + os.readlink(path).encode() + b"\0")
            continue
        digest.update(b"x\0" if os.access(path, os.X_OK) else b"-\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def pip_cert() -> Path | None:
    """The CA bundle pip on this machine trusts: PIP_CERT, SSL_CERT_FILE or Debian's bundle."""
    for candidate in (os.environ.get("PIP_CERT"), os.environ.get("SSL_CERT_FILE")):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    debian = Path("/etc/ssl/certs/ca-certificates.crt")
    return debian if debian.is_file() else None


def build_secrets(name: str) -> list[str]:
    """buildah flags that hand image `name`'s build the secrets its Dockerfile may mount."""
    cert = pip_cert() if name in PIP_IMAGES else None
    if cert is None or any(c in str(cert) for c in ",="):
        return []
    return ["--secret", f"id=pip-cert,src={cert}"]


def suite_of(name: str, suite: str) -> str:
    """The Debian suite image `name` is built on when the Slurm version's suite is `suite`."""
    return UNVERSIONED.get(name, suite)


def base_key(suite: str) -> str:
    return hashlib.sha256(f"{DEBIAN}\0{suite}\0{RECIPE}".encode()).hexdigest()


def image_keys(images: Path, suite: str) -> dict[str, str]:
    """Key of every image in IMAGES (and DEBIAN: the base of `suite`): its build context's
    digest chained to its parent's key. An UNVERSIONED image gets the same key whatever `suite`."""
    keys = {DEBIAN: base_key(suite)}
    for name in build_order(PARENTS):
        parent, _ = PARENTS[name]
        own = suite_of(name, suite)
        parent_key = base_key(own) if parent == DEBIAN else keys[parent]
        digest = context_digest(context_files(images, name))
        material = f"{name}\0{own}\0{RECIPE}\0{parent_key}\0{digest}"
        keys[name] = hashlib.sha256(material.encode()).hexdigest()
    return keys


def build_order(parents: Mapping[str, tuple[str, str]]) -> list[str]:
    """Images ordered so that each comes after its parent (stable: IMAGES' order otherwise)."""
    order: list[str] = []
    pending = [name for name in IMAGES if name in parents] + sorted(set(parents) - set(IMAGES))
    while pending:
        ready = [n for n in pending if parents[n][0] not in parents or parents[n][0] in order]
        if not ready:
            raise DevClusterError(f"the images {', '.join(pending)} are built FROM each other in a cycle")
        order.append(ready[0])
        pending.remove(ready[0])
    return order


def _short(key: str) -> str:
    return key[:12]


def _label(name: str, version: str) -> str:
    """What an image's tag says it is for: a Slurm version, or the suite of an UNVERSIONED one."""
    return UNVERSIONED.get(name, version)


def _ref(name: str, version: str, key: str) -> str:
    return f"{REGISTRY}/{name}:{_label(name, version)}-{_short(key)}"


def _tag(name: str, version: str) -> str:
    return f"{REGISTRY}/{name}:{_label(name, version)}"


def _base_ref(suite: str, key: str) -> str:
    return f"{REGISTRY}/{DEBIAN}:{suite}-{_short(key)}"


def store_dir() -> Path:
    return cache_dir() / "images"


def _archive(label: str, key: str) -> Path:
    return store_dir() / f"{label}-{_short(key)}.tar"


def archive_of(name: str, version: str, key: str) -> Path:
    """The tarball of image `name` with `key`: `slurmd-24.11-<key>.tar`, `sunk-trixie-<key>.tar`."""
    return _archive(f"{name}-{_label(name, version)}", key)


# -- building -----------------------------------------------------------------------------------
def ensure_images(version: str, log: Path) -> dict[str, Built]:
    """Every image of Slurm `version` (and the UNVERSIONED ones), built when its key has no
    tarball yet (minutes per image, cold), else found on disk at once."""
    suite = slurmroot.SUITES.get(version)
    if suite is None:
        raise DevClusterError(
            f"there are no Slurm images for {version}: choose one of {', '.join(slurmroot.SUITES)}"
        )
    keys = image_keys(images_dir(), suite)
    built = {
        name: Built(
            name,
            _ref(name, version, keys[name]),
            _tag(name, version),
            archive_of(name, version, keys[name]),
        )
        for name in IMAGES
    }
    if all(b.archive.is_file() for b in built.values()):
        return built
    store_dir().mkdir(parents=True, exist_ok=True)
    with slurmroot._locked(store_dir() / ".lock"):
        missing = [name for name in build_order(PARENTS) if not built[name].archive.is_file()]
        if not missing:
            return built  # another process built them while we waited
        builder = Builder(log, store_dir())
        bases = {
            own: Image(DEBIAN, _base_ref(own, base_key(own)), _archive(f"{DEBIAN}-{own}", base_key(own)))
            for own in {suite_of(name, suite) for name in IMAGES}
        }
        refs = {name: Image(name, b.ref, b.archive) for name, b in built.items()}
        started = time.monotonic()
        print(
            f"building Slurm {version} images ({', '.join(missing)}) with buildah; log {log}",
            file=sys.stderr,
            flush=True,
        )
        for stale in store_dir().glob(".context-*"):
            remove_work(stale)  # the staged context of an interrupted build
        for name in missing:
            parent, arg = PARENTS[name]
            if parent == DEBIAN:
                own = suite_of(name, suite)
                if not bases[own].archive.is_file():
                    builder.debian_base(own, bases[own])
                parent_image = bases[own]
            else:
                parent_image = refs[parent]
            builder.ensure_loaded(parent_image)
            with staged_context(images_dir(), name) as context:
                builder.build(name, context, refs[name], {arg: parent_image.ref}, build_secrets(name))
            _prune(f"{name}-{_label(name, version)}", built[name].archive)
        current = {image.ref for image in (*refs.values(), *bases.values())}
        prefixes = [f"{REGISTRY}/{name}:{_label(name, version)}-" for name in IMAGES]
        prefixes += [f"{REGISTRY}/{DEBIAN}:{own}-" for own in {suite_of(name, suite) for name in IMAGES}]
        builder.forget(prefixes, current)
        print(f"built the Slurm {version} images in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return built


@contextlib.contextmanager
def staged_context(images: Path, name: str) -> Iterator[Path]:
    """The directory to build image `name` from: its own directory when that is the whole
    context, else a copy of `context_files` made under the cache and removed afterwards."""
    if name not in EXTRA_CONTEXT:
        yield images / name
        return
    stage = store_dir() / f".context-{name}-{os.getpid()}"
    if stage.exists():
        remove_work(stage)
    try:
        for rel, source in context_files(images, name).items():
            target = stage / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target, follow_symlinks=False)
        yield stage
    finally:
        remove_work(stage)


def _prune(label: str, keep: Path) -> None:
    """Remove the tarballs of earlier builds of the same image (keys that no longer apply)."""
    for old in store_dir().glob(f"{label}-????????????.tar"):
        if old != keep:
            old.unlink(missing_ok=True)


# -- what a cluster's Nodes hold -----------------------------------------------------------------
def write_manifest(path: Path, built: Mapping[str, Built]) -> None:
    """Record the builds imported into a cluster's Nodes (the run directory's images.json).

    Tests and charts deploy what the Nodes hold: calling `ensure_images` again later would
    build anew after a source edit (the sunk image follows src/), and that build would be in
    no Node."""
    records = {name: {"ref": b.ref, "tag": b.tag, "archive": str(b.archive)} for name, b in built.items()}
    path.write_text(json.dumps(records, indent=1) + "\n")


def read_manifest(path: Path) -> dict[str, Built]:
    """The builds a running cluster's Nodes hold, by image name (see `write_manifest`)."""
    try:
        records = json.loads(path.read_text())
    except (OSError, ValueError):
        raise DevClusterError(
            f"{path} is missing or unreadable: is a dev cluster with real Nodes running "
            "(`sunk dev up --real-nodes N`)?"
        ) from None
    return {name: Built(name, r["ref"], r["tag"], Path(r["archive"])) for name, r in records.items()}


# -- containerd ---------------------------------------------------------------------------------
def _ctr(socket: Path) -> list[str]:
    return ["ctr", "--address", str(socket), "--namespace", "k8s.io"]


def present(socket: Path) -> set[str]:
    """Image names the containerd at `socket` holds in the k8s.io namespace."""
    done = subprocess.run(
        [*_ctr(socket), "images", "ls", "--quiet"], capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    if done.returncode:
        raise DevClusterError(
            f"listing the images of the containerd at {socket} failed: {done.stderr.strip()[:200]}"
        )
    return set(done.stdout.split())


def import_into(socket: Path, built: Iterable[Built], log: Path) -> None:
    """Load every image the containerd at `socket` lacks, and point its stable tag at it."""
    have = present(socket)
    for image in built:
        if image.ref not in have:
            slurmroot._run_logged(
                [*_ctr(socket), "images", "import", str(image.archive)],
                log,
                f"importing {image.ref} into the containerd at {socket}",
            )
        if image.tag != image.ref:
            slurmroot._run_logged(
                [*_ctr(socket), "images", "tag", "--force", image.ref, image.tag],
                log,
                f"tagging {image.ref} as {image.tag} in the containerd at {socket}",
            )
