"""Volumes every slurmd Pod mounts, as the login Pods do: where Slurm jobs, people and the
Pods sunk places share files (data, checkpoints, homes).

The chart names each as a ReadWriteMany claim and a path (`sharedVolumes`), and hands them
to the operator as `--shared-volumes=CLAIM:PATH[:ro],...`. The operator adds them to every
member it makes, after the NodeSet's template, so that a template cannot mount something
else at the same path; a change to the list rolls the members like a template change.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]
_CLAIM = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_PATH = re.compile(r"^/[A-Za-z0-9._/-]*$")


@dataclass(frozen=True)
class SharedVolume:
    claim: str
    path: str
    read_only: bool = False

    @property
    def volume_name(self) -> str:
        """The Pod's name for it: short and stable, whatever the claim is called."""
        return "shared-" + hashlib.sha256(f"{self.claim}:{self.path}".encode()).hexdigest()[:10]


def parse(text: str) -> tuple[SharedVolume, ...]:
    """`CLAIM:PATH[:ro]`, comma-separated; a malformed item is a start-up error naming it."""
    volumes: list[SharedVolume] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        fields = item.split(":")
        if len(fields) not in (2, 3) or (len(fields) == 3 and fields[2] not in ("ro", "rw")):
            raise ValueError(f"--shared-volumes: {item!r} is not CLAIM:PATH[:ro]")
        claim, path = fields[0], fields[1]
        if not _CLAIM.match(claim):
            raise ValueError(f"--shared-volumes: {claim!r} is not a claim name")
        if not _PATH.match(path) or "/../" in f"{path}/" or path == "/":
            raise ValueError(f"--shared-volumes: {path!r} is not an absolute directory to mount at")
        if any(v.path == path for v in volumes):
            raise ValueError(f"--shared-volumes: two volumes are mounted at {path}")
        volumes.append(SharedVolume(claim, path, len(fields) == 3 and fields[2] == "ro"))
    return tuple(volumes)


def mount(spec: Json, container: Json, volumes: tuple[SharedVolume, ...]) -> None:
    """Add each shared volume to the Pod `spec` and its slurmd `container`, replacing any
    volume or mount of the template at the same name or path."""
    if not volumes:
        return
    names = {v.volume_name for v in volumes}
    paths = {v.path for v in volumes}
    spec["volumes"] = [v for v in spec.get("volumes") or [] if v.get("name") not in names]
    mounts = [
        m
        for m in container.get("volumeMounts") or []
        if m.get("name") not in names and m.get("mountPath") not in paths
    ]
    for volume in volumes:
        spec["volumes"].append(
            {
                "name": volume.volume_name,
                "persistentVolumeClaim": {"claimName": volume.claim, "readOnly": volume.read_only},
            }
        )
        mounts.append({"name": volume.volume_name, "mountPath": volume.path, "readOnly": volume.read_only})
    container["volumeMounts"] = mounts
