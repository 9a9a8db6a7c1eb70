"""What a user may write after `--container=`: an image reference, or a directory on the node.

Accepted, so that people coming from Pyxis or Docker can type what they know:
`REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]`, the same with `docker://` in front, Pyxis's
`REGISTRY#REPOSITORY:TAG`, a short Docker Hub name (`debian:trixie` is
`docker.io/library/debian:trixie`), and an absolute path to an unpacked root filesystem
(or a bundle directory holding `rootfs/`) already on the node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_REGISTRY = "docker.io"
# The grammar of github.com/distribution/reference, in the parts a step needs.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_PATH = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_HOST = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*(?::[0-9]+)?$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
EXAMPLE = "registry.example.com/team/train:1.0"


class BadReference(ValueError):
    """The --container value is neither an image reference nor an absolute path."""


@dataclass(frozen=True)
class ImageRef:
    """A parsed image reference; `name` is what skopeo is given after `docker://`."""

    registry: str
    path: str
    tag: str | None
    digest: str | None

    @property
    def name(self) -> str:
        text = f"{self.registry}/{self.path}"
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


@dataclass(frozen=True)
class LocalRoot:
    """An unpacked root filesystem the node already has."""

    path: str


def parse(text: str) -> ImageRef | LocalRoot:
    """The image or directory `text` names; BadReference says what is wrong and what to write."""
    value = text.strip()
    if not value:
        raise BadReference(f"--container is empty: give an image such as {EXAMPLE}")
    if value.startswith("/"):
        if "\x00" in value or "/../" in f"{value}/":
            raise BadReference(f"--container={text!r}: a directory path may not contain '..'")
        return LocalRoot(value.rstrip("/") or "/")
    value = value.removeprefix("docker://")
    if "://" in value:
        scheme = value.split("://", 1)[0]
        raise BadReference(
            f"--container={text!r}: the transport {scheme}:// is not supported; "
            f"give a registry image (docker://{EXAMPLE} or {EXAMPLE}) or an absolute directory"
        )
    if "#" in value:  # Pyxis and enroot write the registry apart with '#'
        host, _, rest = value.partition("#")
        value = f"{host}/{rest}"
    return _parse_reference(text, value)


def _parse_reference(text: str, value: str) -> ImageRef:
    rest, digest = value, None
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        if not _DIGEST.match(digest):
            raise BadReference(f"--container={text!r}: the digest must be sha256: and 64 hex digits")
    tag = None
    last = rest.rsplit("/", 1)[-1]
    if ":" in last:
        rest, tag = rest.rsplit(":", 1)
        if not _TAG.match(tag):
            raise BadReference(f"--container={text!r}: {tag!r} is not a valid tag")
    first, sep, remainder = rest.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, remainder
        if not _HOST.match(registry):
            raise BadReference(f"--container={text!r}: {registry!r} is not a registry host[:port]")
    else:
        registry, path = DEFAULT_REGISTRY, rest
        if "/" not in path:
            path = f"library/{path}"
    if not _PATH.match(path):
        raise BadReference(
            f"--container={text!r}: {path!r} is not a repository name "
            "(lower-case letters, digits and . _ - between slashes)"
        )
    if tag is None and digest is None:
        tag = "latest"
    return ImageRef(registry, path, tag, digest)
