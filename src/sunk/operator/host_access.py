"""What a NodeSet's template may not ask of its Nodes unless an administrator allows it.

A member is its NodeSet's template, bound by name to a Node the NodeSet picks. With
confinement its namespace needs Pod Security's `privileged` level (slurmd adds
CAP_SYS_ADMIN), so nothing in Kubernetes stops a template from asking for the host: a
privileged container, a hostPath volume, the host's network, PID or IPC namespace, or
capabilities beyond the runtime's defaults. Whoever may edit a NodeSet would then hold root
on chosen Nodes (issue #38). The operator refuses such a template unless started with
`--allow-host-access=true` (chart value `operator.allowHostAccess`).
"""

from __future__ import annotations

from typing import Any

from sunk.operator.confinement import CAPABILITIES

Json = dict[str, Any]
# The runtime's default capabilities (Pod Security's baseline list) and what confinement adds.
ALLOWED_CAPABILITIES = frozenset(
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
        *CAPABILITIES,
    }
)
ALLOW_FLAG = "the operator's --allow-host-access=true (chart value operator.allowHostAccess)"


def problems(template: Json) -> list[str]:
    """Each way `template` reaches into its Node, named by its path in the NodeSet."""
    spec = template.get("spec") or {}
    if not isinstance(spec, dict):
        return []
    where = "spec.template.spec"
    found = [f"{where}.{key}: true" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    for index, volume in enumerate(spec.get("volumes") or []):
        if isinstance(volume, dict) and "hostPath" in volume:
            found.append(f"{where}.volumes[{index}] ({volume.get('name')}): a hostPath volume")
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for index, container in enumerate(spec.get(kind) or []):
            if isinstance(container, dict):
                found += _container(f"{where}.{kind}[{index}]", container)
    return [
        f"{found_one} reaches into the Node; only {ALLOW_FLAG} lets a NodeSet ask that" for found_one in found
    ]


def _container(where: str, container: Json) -> list[str]:
    security = container.get("securityContext") or {}
    if not isinstance(security, dict):
        return []
    found = [f"{where}.securityContext.privileged: true"] if security.get("privileged") else []
    added = (security.get("capabilities") or {}).get("add") or []
    extra = sorted({str(c).removeprefix("CAP_") for c in added} - ALLOWED_CAPABILITIES)
    if extra:
        found.append(f"{where}.securityContext.capabilities.add: {', '.join(extra)}")
    return found
