"""A node's cache of images for one user: fetched once, unpacked once, reused, evicted by age.

Layout under `<cache root>/<uid>/` (the root is sticky and world-writable like /tmp; each
user's part is theirs alone, 0700, and refused if anyone else owns it):

    layout/           an OCI image layout (skopeo writes, umoci reads); blobs shared by tags
    images/<digest>/  one unpacked image: rootfs/ and umoci's config.json (env, cwd)
    images/<digest>.lock   held shared while a task runs from that image
    refs.json         the reference each image came from and when it was last resolved
    cache.lock        held while fetching, unpacking or evicting: tasks of a step on one
                      node wait for the first to fetch, then all reuse its copy

Per user, because the runtime runs as the job's user: one person's cache can never be
written by another. The price is one copy per user of an image several people use.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import stat
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .reference import ImageRef

_LOG_MESSAGE = re.compile(r'\bmsg="((?:[^"\\]|\\.)*)"')

Run = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def run_command(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False)


class CacheError(RuntimeError):
    """The image could not be made ready; the message is for the person who ran the step."""


@dataclass(frozen=True)
class Ready:
    """An unpacked image: run from `bundle`/rootfs while holding its lock."""

    digest: str
    bundle: Path
    fetched: bool
    note: str = ""


class ImageCache:
    def __init__(
        self,
        root: Path,
        uid: int,
        max_bytes: int,
        insecure_registries: Sequence[str] = (),
        run: Run = run_command,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.home = root / str(uid)
        self.uid = uid
        self.max_bytes = max_bytes
        self.insecure = frozenset(insecure_registries)
        self.run = run
        self.clock = clock

    # -- the user's part of the cache -----------------------------------------------------

    def prepare(self) -> None:
        """Make (or check) the user's directory: it must be theirs and closed to others."""
        try:
            self.home.mkdir(mode=0o700, exist_ok=True)
            info = self.home.lstat()
        except OSError as exc:
            raise CacheError(f"cannot use the image cache {self.home}: {exc.strerror}") from exc
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != self.uid or info.st_mode & 0o077:
            raise CacheError(
                f"the image cache {self.home} is not a private directory of UID {self.uid}; "
                "ask the cluster's administrator to remove it"
            )
        for sub in ("layout", "images"):
            (self.home / sub).mkdir(mode=0o700, exist_ok=True)

    @contextmanager
    def _locked(self, path: Path, mode: int) -> Iterator[None]:
        with open(path, "a") as handle:
            fcntl.flock(handle, mode)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    @contextmanager
    def using(self, ready: Ready) -> Iterator[Path]:
        """Hold the image against eviction while a task runs from it."""
        with self._locked(self.home / "images" / f"{ready.digest}.lock", fcntl.LOCK_SH):
            yield ready.bundle

    # -- fetching -------------------------------------------------------------------------

    def ensure(self, image: ImageRef) -> Ready:
        """Fetch `image` unless the cache holds what its reference names now, unpack it once.

        A tag is looked up in the registry each time (a moved tag is fetched anew; the layers
        already here are not). When the registry cannot be reached and the cache holds what
        the tag last named, that copy runs, and the note says so."""
        self.prepare()
        with self._locked(self.home / "cache.lock", fcntl.LOCK_EX):
            refs = self._refs()
            tag = _layout_tag(image)
            copy = self._skopeo_copy(image, tag)
            if copy.returncode != 0:
                known = str(refs.get(image.name, {}).get("digest") or "")
                if known and (self.home / "images" / known / "rootfs").is_dir():
                    when = _when(refs[image.name].get("resolved"))
                    why = _last_line(copy.stderr)
                    note = f"could not reach the registry ({why}); using the copy cached at {when}"
                    ready = Ready(known, self.home / "images" / known, fetched=False, note=note)
                    os.utime(ready.bundle)
                    return ready
                raise CacheError(f"cannot fetch {image.name}: {_last_line(copy.stderr) or 'skopeo failed'}")
            digest = self._digest_of(tag)
            bundle = self.home / "images" / digest
            fetched = not (bundle / "rootfs").is_dir()
            if fetched:
                self._unpack(tag, bundle)
            os.utime(bundle)
            refs[image.name] = {"digest": digest, "tag": tag, "resolved": self.clock()}
            self._write_refs(refs)
            if fetched:  # only a new image can have made the cache too big
                self._evict(keep=digest)
            return Ready(digest, bundle, fetched=fetched)

    def _skopeo_copy(self, image: ImageRef, tag: str) -> subprocess.CompletedProcess[str]:
        argv = ["skopeo", "--insecure-policy", "copy", "--quiet"]
        if image.registry in self.insecure:
            argv.append("--src-tls-verify=false")
        argv += [f"docker://{image.name}", f"oci:{self.home / 'layout'}:{tag}"]
        return self.run(argv)

    def _digest_of(self, tag: str) -> str:
        index = json.loads((self.home / "layout" / "index.json").read_text())
        for entry in index.get("manifests", []):
            if entry.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag:
                algorithm, _, hexdigest = str(entry["digest"]).partition(":")
                return f"{algorithm}-{hexdigest}"
        raise CacheError(f"skopeo reported success but the cache has no entry for {tag}")

    def _unpack(self, tag: str, bundle: Path) -> None:
        scratch = bundle.with_name(f"{bundle.name}.unpacking-{os.getpid()}")
        shutil.rmtree(scratch, ignore_errors=True)
        source = f"{self.home / 'layout'}:{tag}"
        result = self.run(["umoci", "unpack", "--rootless", "--image", source, str(scratch)])
        if result.returncode != 0:
            shutil.rmtree(scratch, ignore_errors=True)
            raise CacheError(f"cannot unpack the image: {_last_line(result.stderr) or 'umoci failed'}")
        os.rename(scratch, bundle)

    # -- what the cache remembers ---------------------------------------------------------

    def _refs(self) -> dict[str, dict[str, object]]:
        try:
            data = json.loads((self.home / "refs.json").read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write_refs(self, refs: dict[str, dict[str, object]]) -> None:
        temp = self.home / f"refs.json.{os.getpid()}"
        temp.write_text(json.dumps(refs, indent=1, sort_keys=True))
        os.replace(temp, self.home / "refs.json")

    # -- eviction -------------------------------------------------------------------------

    def _evict(self, keep: str) -> None:
        """Remove the least recently used images until the cache fits; an image a task is
        running from (its lock held) is never removed."""
        images = self.home / "images"
        unpacked = [e for e in images.iterdir() if e.is_dir() and "." not in e.name and e.name != keep]
        candidates = sorted(unpacked, key=lambda entry: entry.stat().st_mtime)
        removed: list[str] = []
        total = _size(self.home)  # walked once: an unpacked image is tens of thousands of files
        while candidates and total > self.max_bytes:
            victim = candidates.pop(0)
            freed = _size(victim)
            if self._remove_if_idle(victim):
                removed.append(victim.name)
                total -= freed
        if removed:
            refs = self._refs()
            for name, entry in list(refs.items()):
                if entry.get("digest") in removed:
                    self.run(["umoci", "rm", "--image", f"{self.home / 'layout'}:{entry.get('tag')}"])
                    del refs[name]
            self._write_refs(refs)
            self.run(["umoci", "gc", "--layout", str(self.home / "layout")])

    def _remove_if_idle(self, bundle: Path) -> bool:
        lock = bundle.with_name(f"{bundle.name}.lock")
        with open(lock, "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    return False
                raise
            shutil.rmtree(bundle, ignore_errors=True)
            fcntl.flock(handle, fcntl.LOCK_UN)
        lock.unlink(missing_ok=True)
        return True


def _layout_tag(image: ImageRef) -> str:
    """A name for the reference inside the OCI layout (only [A-Za-z0-9._-] are allowed)."""
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in image.name)[:128]


def _size(path: Path) -> int:
    total = 0
    for directory, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(directory, name)).st_blocks * 512
            except OSError:
                continue
    return total


def _last_line(text: str) -> str:
    """The last thing a tool said; of skopeo's and umoci's structured log lines
    (`time=... level=fatal msg="..."`) only the message."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return ""
    found = _LOG_MESSAGE.search(lines[-1])
    return found.group(1).replace('\\"', '"') if found else lines[-1]


def _when(stamp: object) -> str:
    if not isinstance(stamp, (int, float)):
        return "an unknown time"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(stamp))
