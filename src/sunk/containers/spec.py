"""The OCI runtime spec (config.json) for one task of a container step: a pure function.

The container shares almost everything with the job, on purpose: the host's network (MPI and
NCCL find their peers as they would outside), its PIDs (Slurm signals and accounts for the
task's processes), its cgroup (crun runs with its cgroup manager off, so the job's CPU,
memory and device limits hold inside) and its /dev (the job's cgroup decides which GPUs may
be opened). Only the user and mount namespaces are new: the image becomes the root
filesystem, read-only, with the job's /tmp, /dev/shm, home and the mounts the cluster allows
bound in. The user namespace maps the job's user to itself, so the task runs as that user,
never as root, and files it writes on shared volumes belong to that user.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Json = dict[str, Any]
# From the job's environment these describe the node outside the image; the image's own win.
IMAGE_WINS = frozenset({"PATH", "LD_LIBRARY_PATH", "LANG", "LC_ALL", "PYTHONPATH", "PYTHONHOME"})


@dataclass(frozen=True)
class Mount:
    """A directory of the node bound into the container at `target`."""

    source: str
    target: str
    read_only: bool = False


@dataclass(frozen=True)
class TaskSpec:
    """Everything the spec is made from; `image_env` and `image_cwd` come from the image."""

    rootfs: str
    argv: Sequence[str]
    uid: int
    gid: int
    job_env: Mapping[str, str]
    image_env: Mapping[str, str] = field(default_factory=dict)
    image_cwd: str = "/"
    cwd: str | None = None
    mounts: Sequence[Mount] = ()
    passwd: str | None = None
    group: str | None = None


def environment(job_env: Mapping[str, str], image_env: Mapping[str, str]) -> list[str]:
    """The image's variables, then the job's (Slurm's, the user's) over them, except those
    that describe the node's own filesystem (IMAGE_WINS), which stay the image's when it sets
    them."""
    merged = dict(image_env)
    for key, value in job_env.items():
        if key in IMAGE_WINS and key in image_env:
            continue
        merged[key] = value
    merged.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    return [f"{key}={value}" for key, value in merged.items()]


def _bind(source: str, target: str, *, read_only: bool = False, recursive: bool = True) -> Json:
    options = ["rbind" if recursive else "bind", "nosuid"]
    if read_only:
        options.append("ro")
    return {"destination": target, "type": "bind", "source": source, "options": options}


def _mounts(task: TaskSpec) -> list[Json]:
    mounts = [
        # New proc and sysfs mounts are refused inside an unprivileged container (the
        # runtime's masked paths make them "too revealing"); binding the existing ones is not.
        _bind("/proc", "/proc"),
        _bind("/sys", "/sys", read_only=True),
        _bind("/dev", "/dev"),
        _bind("/tmp", "/tmp"),
    ]
    for name in ("hosts", "resolv.conf", "hostname"):
        if os.path.exists(f"/etc/{name}"):
            mounts.append(_bind(f"/etc/{name}", f"/etc/{name}", read_only=True, recursive=False))
    if task.passwd:
        mounts.append(_bind(task.passwd, "/etc/passwd", read_only=True, recursive=False))
    if task.group:
        mounts.append(_bind(task.group, "/etc/group", read_only=True, recursive=False))
    mounts.extend(_bind(m.source, m.target, read_only=m.read_only) for m in task.mounts)
    return mounts


def runtime_spec(task: TaskSpec) -> Json:
    """config.json for crun, running `task.argv` as the job's user in the image."""
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": task.uid, "gid": task.gid},
            "args": list(task.argv),
            "env": environment(task.job_env, task.image_env),
            "cwd": task.cwd or task.image_cwd or "/",
            "noNewPrivileges": True,
        },
        "root": {"path": task.rootfs, "readonly": True},
        "mounts": _mounts(task),
        "linux": {
            "namespaces": [{"type": "user"}, {"type": "mount"}],
            "uidMappings": [{"containerID": task.uid, "hostID": task.uid, "size": 1}],
            "gidMappings": [{"containerID": task.gid, "hostID": task.gid, "size": 1}],
        },
    }


def passwd_file(image_passwd: str, line: str, name: str, uid: int) -> str:
    """The image's /etc/passwd with the job's user in it (replacing an entry of the same name
    or UID), so that `id`, `whoami` and ssh inside the container know who runs them."""
    kept = [entry for entry in image_passwd.splitlines() if entry and not _same(entry, name, uid)]
    return "\n".join([*kept, line]) + "\n"


def group_file(image_group: str, lines: Sequence[str]) -> str:
    """The image's /etc/group plus the job user's groups, the image's entries of the same
    name or GID replaced."""
    names = {line.split(":", 1)[0] for line in lines}
    gids = {line.split(":")[2] for line in lines if line.count(":") >= 3}
    kept = [
        entry
        for entry in image_group.splitlines()
        if entry and entry.split(":", 1)[0] not in names and _field(entry, 2) not in gids
    ]
    return "\n".join([*kept, *lines]) + "\n"


def _field(entry: str, index: int) -> str:
    parts = entry.split(":")
    return parts[index] if len(parts) > index else ""


def _same(entry: str, name: str, uid: int) -> bool:
    return entry.split(":", 1)[0] == name or _field(entry, 2) == str(uid)
