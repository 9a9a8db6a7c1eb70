"""What a NodeSet's template may not ask of its Nodes, and what no member may hold.

A member is its NodeSet's template, bound by name to a Node the NodeSet picks, with
slurm.key mounted into its slurmd container. With confinement its namespace needs Pod
Security's `privileged` level (slurmd adds CAP_SYS_ADMIN), so nothing in Kubernetes stops a
template from asking for the host. Two rules, checked here on the template and again by
the chart's admission policy on every member the operator's account creates (issue #52):

- `problems`: the host (lifted by `--allow-host-access=true`, chart value
  `operator.allowHostAccess`). Every container meets Pod Security's baseline on these
  points: not privileged, capabilities only from the runtime's defaults, no `Unconfined`
  seccomp or AppArmor profile (fields or the older annotations), /proc masked; the Pod
  shares no host namespace and mounts no hostPath. Only the slurmd container may add what
  confinement needs (SYS_ADMIN, SYS_NICE), and the operator, not the template, turns its
  AppArmor profile off for confinement. seccomp stays on everywhere: RuntimeDefault.
- `key_problems`: slurm.key (always). A member holds no Secret but slurm.key, in its slurmd
  container alone, and no ServiceAccount token; slurmd's image is one the administrator
  allowed (`allowed_image`) and runs with the image's own entrypoint, so a template cannot
  put a program of its choosing beside the key by image, command or an exec probe.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from sunk.operator.nodeset.confinement import CAPABILITIES

Json = dict[str, Any]
SLURMD = "slurmd"  # the container the operator runs slurmd in (members.CONTAINER)
KEY_VOLUME = "slurm-key"  # the operator's volume of slurm.key (members.py)
# The runtime's default capabilities: Pod Security's baseline list.
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
# ...and what confinement adds, in the slurmd container only.
SLURMD_CAPABILITIES = BASELINE_CAPABILITIES | frozenset(CAPABILITIES)
# Annotations the kubelet (or the API server, copying them into the fields) once read as
# profiles; "unconfined" in any of them turns the profile off.
PROFILE_ANNOTATIONS = (
    "seccomp.security.alpha.kubernetes.io/",
    "container.seccomp.security.alpha.kubernetes.io/",
    "container.apparmor.security.beta.kubernetes.io/",
)
ALLOW_FLAG = "the operator's --allow-host-access=true (chart value operator.allowHostAccess)"
WHERE = "spec.template.spec"


def problems(template: Json) -> list[str]:
    """Each way `template` reaches into its Node, named by its path in the NodeSet."""
    spec = template.get("spec") or {}
    if not isinstance(spec, dict):
        return []
    found = [f"{WHERE}.{key}: true" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    for index, volume in enumerate(spec.get("volumes") or []):
        if isinstance(volume, dict) and "hostPath" in volume:
            found.append(f"{WHERE}.volumes[{index}] ({volume.get('name')}): a hostPath volume")
    found += _profiles(f"{WHERE}.securityContext", spec.get("securityContext"))
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    for key, value in sorted(annotations.items()) if isinstance(annotations, dict) else ():
        if key.startswith(PROFILE_ANNOTATIONS) and str(value).lower() == "unconfined":
            found.append(f"spec.template.metadata.annotations[{key}]: unconfined")
    for where, container, is_slurmd in _containers(spec):
        found += _container(where, container, is_slurmd)
    return [
        f"{found_one} reaches into the Node; only {ALLOW_FLAG} lets a NodeSet ask that" for found_one in found
    ]


def key_problems(template: Json) -> list[str]:
    """Each way `template` would reach slurm.key or another credential, or run a program of
    its own beside the key. Never lifted: the operator mounts the key itself."""
    spec = template.get("spec") or {}
    if not isinstance(spec, dict):
        return []
    found = []
    if spec.get("automountServiceAccountToken"):
        found.append(f"{WHERE}.automountServiceAccountToken: true (a ServiceAccount token)")
    for index, volume in enumerate(spec.get("volumes") or []):
        if not isinstance(volume, dict):
            continue
        where = f"{WHERE}.volumes[{index}] ({volume.get('name')})"
        if "secret" in volume:
            found.append(f"{where}: a Secret volume")
        for source in (volume.get("projected") or {}).get("sources") or []:
            for kind in ("secret", "serviceAccountToken"):
                if isinstance(source, dict) and kind in source:
                    found.append(f"{where}: a projected {kind}")
    for where, container, is_slurmd in _containers(spec):
        for index, env in enumerate(container.get("env") or []):
            if isinstance(env, dict) and "secretKeyRef" in (env.get("valueFrom") or {}):
                found.append(f"{where}.env[{index}] ({env.get('name')}): from a Secret")
        for index, env in enumerate(container.get("envFrom") or []):
            if isinstance(env, dict) and "secretRef" in env:
                found.append(f"{where}.envFrom[{index}]: a Secret")
        if not is_slurmd:
            for index, mount in enumerate(container.get("volumeMounts") or []):
                if isinstance(mount, dict) and mount.get("name") == KEY_VOLUME:
                    found.append(f"{where}.volumeMounts[{index}]: {KEY_VOLUME} (slurmd's alone)")
            continue
        if container.get("command"):
            found.append(f"{where}.command: slurmd runs with its image's own entrypoint")
        for probe in ("livenessProbe", "startupProbe"):
            if "exec" in (container.get(probe) or {}):
                found.append(f"{where}.{probe}.exec: a command in the slurmd container")
    return [
        f"{found_one}: a member holds no credential but slurm.key, which only the operator's "
        "slurmd command may use"
        for found_one in found
    ]


def repository(image: str) -> str:
    """An image reference without its tag or digest: registry:5000/slurmd:24.11 -> registry:5000/slurmd."""
    name = image.split("@", 1)[0]
    head, _, tail = name.rpartition(":")
    return head if head and "/" not in tail else name


def allowed_image(image: str, allowed: Iterable[str]) -> bool:
    """Whether `image` is one of `allowed` (references or repositories: any tag or digest of one)."""
    return any(image == entry or repository(image) == entry for entry in allowed)


def _containers(spec: Json) -> Iterator[tuple[str, Json, bool]]:
    """(path, container, whether it is the slurmd container) for every container of spec."""
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for index, container in enumerate(spec.get(kind) or []):
            if isinstance(container, dict):
                is_slurmd = kind == "containers" and container.get("name") == SLURMD
                yield f"{WHERE}.{kind}[{index}]", container, is_slurmd


def _container(where: str, container: Json, is_slurmd: bool) -> list[str]:
    security = container.get("securityContext") or {}
    if not isinstance(security, dict):
        return []
    found = [f"{where}.securityContext.privileged: true"] if security.get("privileged") else []
    added = (security.get("capabilities") or {}).get("add") or []
    allowed = SLURMD_CAPABILITIES if is_slurmd else BASELINE_CAPABILITIES
    extra = sorted({str(c).removeprefix("CAP_") for c in added} - allowed)
    if extra:
        found.append(f"{where}.securityContext.capabilities.add: {', '.join(extra)}")
    if security.get("procMount", "Default") != "Default":
        found.append(f"{where}.securityContext.procMount: {security['procMount']}")
    return found + _profiles(f"{where}.securityContext", security)


def _profiles(where: str, security: object) -> list[str]:
    if not isinstance(security, dict):
        return []
    return [
        f"{where}.{field}.type: Unconfined"
        for field in ("seccompProfile", "appArmorProfile")
        if (security.get(field) or {}).get("type") == "Unconfined"
    ]
