"""Job confinement in a member: what its slurmd container needs, and how a refusal is told.

With confinement on (the chart's `slurm.confinement.enabled`), slurmd makes a cgroup per
job and step inside its own container (cgroup v1: below each controller's mount, which the
runtime points at the container's own cgroup; v2: below the container's cgroup namespace
root) and gives each job a private /tmp and /dev/shm in a mount namespace of its own.

What that takes of the container, measured on the dev cluster's kubelets (containerd 1.6,
runc, cgroup v1): the runtime's default capabilities plus CAP_SYS_ADMIN and CAP_SYS_NICE,
and nothing else. CAP_SYS_NICE: task/affinity binds a job's tasks to their CPUs once they
run as the job's user, and binding another user's process needs it (without it every job
of a user other than root failed to start: "task_g_set_affinity: Operation not
permitted"). CAP_SYS_ADMIN is needed three times over: to make the read-only cgroup mounts the runtime
gives every unprivileged container writable again (a remount), to write the v1 devices
controller's allow and deny lists (v2: to load its eBPF device filter), and for
job_container/tmpfs's mount namespaces. A privileged container is not needed: it would
also hand slurmd every device of the host and every other capability.

Before slurmd starts, the member's command checks all of that (PREFLIGHT). A container
that cannot give it stops with a `confinement unavailable: ...` termination message, so
the member never serves jobs unconfined; the operator names its Node in the NodeSet's
`Confined` condition and a ConfinementUnavailable Event.
"""

from __future__ import annotations

from typing import Any

Json = dict[str, Any]
MESSAGE_PREFIX = "confinement unavailable: "
CONFINED = "Confined"
CONFINEMENT_UNAVAILABLE = "ConfinementUnavailable"
CAPABILITIES = ("SYS_ADMIN", "SYS_NICE")

# Run by the member's container before slurmd (`sh -c PREFLIGHT preflight slurmd ...`).
PREFLIGHT = r"""cg=/sys/fs/cgroup
fail() {
  printf 'confinement unavailable: %s\n' "$*" >/dev/termination-log 2>/dev/null
  printf 'sunk: confinement unavailable: %s\n' "$*" >&2
  exit 3
}
writable() { d="$1/sunk-probe.$$"; mkdir "$d" 2>/dev/null && rmdir "$d"; }
need_rw() {
  writable "$1" && return 0
  err=$(mount -o remount,rw,bind "$1" 2>&1) ||
    fail "$1 is read-only and could not be remounted read-write ($err);" \
      "the slurmd container needs CAP_SYS_ADMIN and a security profile that allows mount" \
      "(AppArmor unconfined)"
  writable "$1" || fail "$1 stays read-only after a remount; Slurm cannot make job cgroups there"
}
if [ -f "$cg/cgroup.controllers" ]; then
  for c in cpuset cpu memory; do
    grep -qw "$c" "$cg/cgroup.controllers" ||
      fail "cgroup v2 controller $c is not delegated to the container" \
        "(it has: $(cat "$cg/cgroup.controllers"))"
  done
  need_rw "$cg"
  # cgroup v2 lets a cgroup with processes in it have no controllers for its children:
  # move this container's processes into a leaf, so slurmd can enable them for its jobs.
  mkdir -p "$cg/sunk-init"
  for p in $(cat "$cg/cgroup.procs"); do echo "$p" >"$cg/sunk-init/cgroup.procs" 2>/dev/null || :; done
else
  for c in cpuset memory devices freezer cpuacct; do
    [ -d "$cg/$c" ] || fail "the cgroup v1 controller $c is not mounted at $cg/$c"
    need_rw "$cg/$c"
  done
fi
exec "$@"
"""


def confine(container: Json) -> None:
    """Give the slurmd container what confinement needs, and run PREFLIGHT before slurmd."""
    security = container.setdefault("securityContext", {})
    if not security.get("privileged"):
        capabilities = security.setdefault("capabilities", {})
        added = capabilities.setdefault("add", [])
        for capability in CAPABILITIES:
            if capability not in added and f"CAP_{capability}" not in added:
                added.append(capability)
        # Runtimes' default AppArmor profile forbids mount even with CAP_SYS_ADMIN.
        security.setdefault("appArmorProfile", {"type": "Unconfined"})
    container["args"] = ["sh", "-c", PREFLIGHT, "preflight", *container["args"]]


def refusals(members: list[Json]) -> list[tuple[str, str]]:
    """(member, line) for each member whose container said confinement cannot work on its Node."""
    lines = []
    for pod in members:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            said = _message(status)
            if said is not None:
                node = (pod.get("spec") or {}).get("nodeName", "?")
                name = pod["metadata"]["name"]
                lines.append((name, f"Node {node} (member {name}): {' '.join(said.split())}"))
    return lines


def _message(status: Json) -> str | None:
    for state in (status.get("state") or {}, status.get("lastState") or {}):
        message = str(((state.get("terminated") or {}).get("message")) or "").strip()
        if message.startswith(MESSAGE_PREFIX):
            return message[len(MESSAGE_PREFIX) :]
    return None
