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
controller's allow and deny lists (v2: to load its eBPF device filter), and for the
namespaces of each job's private /tmp: job_container/tmpfs's mount namespace on Slurm 24.11,
namespace/linux's on 25.11 and later, which also makes the job a PID namespace and mounts
its own /proc there (the chart's slurm.confinement.pidNamespace). A privileged container is
not needed: it would also hand slurmd every device of the host and every other capability.

Before slurmd starts, the member's command checks all of that (PREFLIGHT). A container
that cannot give it stops with a `confinement unavailable: ...` termination message, so
the member never serves jobs unconfined; the operator names its Node in the NodeSet's
`Confined` condition and a ConfinementUnavailable Event.

A private /tmp per job (either plugin) has one more need, set by the kernel rather than
the container. slurmstepd keeps each job's mount namespace by bind-mounting it, and
Linux refuses to bind a mount namespace whose number is not above the binding process's
own (its guard against namespace loops). Since Linux 6.18 those numbers come from per-CPU
batches, so a namespace made later on another CPU may have a smaller one, and the bind then
fails for jobs that happen to start on that CPU (EINVAL; "Something is wrong with the boot
of the nodes"). ORDERED_NAMESPACE runs slurmd in a mount namespace that can bind one made
on any of its CPUs, moving to a new one made on the CPU that refused when it cannot.
"""

from __future__ import annotations

from typing import Any

Json = dict[str, Any]
MESSAGE_PREFIX = "confinement unavailable: "
CONFINED = "Confined"
CONFINEMENT_UNAVAILABLE = "ConfinementUnavailable"
CAPABILITIES = ("SYS_ADMIN", "SYS_NICE")

# Both scripts stop the container with this termination message, which the operator reads.
FAIL = r"""fail() {
  printf 'confinement unavailable: %s\n' "$*" 2>/dev/null >/dev/termination-log
  printf 'sunk: confinement unavailable: %s\n' "$*" >&2
  exit 3
}
"""

# Sets the OOM scores slurmd and slurmstepd start with (Slurm reads SLURMD_OOM_ADJ and
# SLURMSTEPD_OOM_ADJ), unless the container's environment already sets them. slurmstepd asks
# for -999, so that the OOM killer of its job's memory cgroup takes the job's tasks first,
# and resets every task it starts to 0. The kernel lets a process lower its score only down
# to the floor a writer holding CAP_SYS_RESOURCE gave it; the runtime writes the kubelet's
# score for the Pod's QoS class (979 for a Burstable member on a large Node) with that
# capability, and the member has not got it. So -999 was refused, slurmstepd kept slurmd's
# 979 while its tasks went to 0, and a job past its memory had its slurmstepd killed instead
# of its task, then sat RUNNING until its time limit (issue #49). Starting both daemons at the
# lowest score the container may set never leaves them above their tasks: below them where
# the floor is under 0 (a Guaranteed member: -997), level with them otherwise, where the
# kernel then takes the process using the most memory, which is the job's.
OOM_FLOOR = r"""oom_allowed() { (echo "$1" >/proc/self/oom_score_adj) 2>/dev/null; }
oom_floor() {
  lo=-999
  if oom_allowed "$lo"; then echo "$lo"; return; fi
  hi=$(cat /proc/self/oom_score_adj)
  while [ $((hi - lo)) -gt 1 ]; do
    mid=$(((lo + hi) / 2))
    if oom_allowed "$mid"; then hi=$mid; else lo=$mid; fi
  done
  echo "$hi"
}
if [ -w /proc/self/oom_score_adj ]; then
  floor=$(oom_floor)
  : "${SLURMD_OOM_ADJ:=$floor}" "${SLURMSTEPD_OOM_ADJ:=$floor}"
  export SLURMD_OOM_ADJ SLURMSTEPD_OOM_ADJ
  [ "$SLURMSTEPD_OOM_ADJ" -lt 0 ] ||
    echo "sunk: slurmstepd starts at OOM score $SLURMSTEPD_OOM_ADJ, level with its jobs' tasks" \
      "(lowest this container may set); a Guaranteed member keeps it strictly below them" >&2
fi
"""

# Run by the member's container before slurmd (`sh -c PREFLIGHT preflight slurmd ...`).
PREFLIGHT = (
    FAIL
    + OOM_FLOOR
    + r"""cg=/sys/fs/cgroup
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
)


# Run after PREFLIGHT where jobs get a private /tmp: `sh -c BOOT ordered ORDERED_NAMESPACE
# command...`, so that it can start itself again in a namespace made on another CPU.
BOOT = 's=$1; shift; eval "$s"'
ORDERED_NAMESPACE = (
    FAIL
    + r"""allowed() { sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status; }  # e.g. 0-3,8
cpus() {  # the same CPUs, one per line
  allowed | tr ',' '\n' | while IFS=- read -r a b; do seq "$a" "${b:-$a}"; done
}
# Print the first CPU on which a new mount namespace cannot be pinned from this one, as
# slurmstepd pins each job's; print nothing if every CPU's can. Fails if it cannot probe.
refusing_cpu() {
  d=$(mktemp -d) || return 1
  if ! mount -t tmpfs -o size=4k,mode=0700 sunk-ns-probe "$d" 2>/dev/null; then
    rmdir "$d"
    return 1
  fi
  mount --make-private "$d" && : >"$d/ns" || { umount "$d"; rmdir "$d"; return 1; }
  here=$(readlink /proc/self/ns/mnt)
  for c in $(cpus); do
    taskset -c "$c" unshare --mount sleep 60 &
    p=$!
    n=0
    while ns=$(readlink "/proc/$p/ns/mnt" 2>/dev/null) && [ "$ns" = "$here" ] && [ "$n" -lt 500 ]; do
      sleep 0.01
      n=$((n + 1))
    done
    pinned=no
    [ -n "$ns" ] && [ "$ns" != "$here" ] || pinned=failed
    [ "$pinned" = failed ] || ! mount --bind "/proc/$p/ns/mnt" "$d/ns" 2>/dev/null || {
      umount "$d/ns"
      pinned=yes
    }
    kill "$p" 2>/dev/null
    wait "$p" 2>/dev/null
    [ "$pinned" = yes ] && continue
    [ "$pinned" = no ] && echo "$c"
    break
  done
  umount "$d"
  rmdir "$d"
  [ "$pinned" != failed ]
}
refused=$(refusing_cpu) ||
  fail "slurmd cannot make and pin mount namespaces for private /tmp (mount and unshare" \
    "need CAP_SYS_ADMIN and a security profile that allows them)"
if [ -z "$refused" ]; then
  unset SUNK_NS_MOVES
  exec "$@"
fi
moves=${SUNK_NS_MOVES:-0}
[ "$moves" -lt "$(cpus | wc -l)" ] ||
  fail "the kernel refuses to pin new mount namespaces made on CPU $refused from every" \
    "namespace tried, so jobs cannot have a private /tmp here; set" \
    "slurm.confinement.privateTmp=false"
export SUNK_NS_MOVES=$((moves + 1))
exec taskset -c "$refused" unshare --mount --propagation unchanged \
  taskset -c "$(allowed)" sh -c 's=$1; shift; eval "$s"' ordered "$s" "$@"
"""
)


def confine(container: Json, private_tmp: bool = False) -> None:
    """Give the slurmd container what confinement needs, and run PREFLIGHT before slurmd
    (then ORDERED_NAMESPACE, where jobs get a private /tmp)."""
    security = container.setdefault("securityContext", {})
    if not security.get("privileged"):
        capabilities = security.setdefault("capabilities", {})
        added = capabilities.setdefault("add", [])
        for capability in CAPABILITIES:
            if capability not in added and f"CAP_{capability}" not in added:
                added.append(capability)
        # Runtimes' default AppArmor profile forbids mount even with CAP_SYS_ADMIN.
        security.setdefault("appArmorProfile", {"type": "Unconfined"})
    args = container["args"]
    if private_tmp:
        args = ["sh", "-c", BOOT, "ordered", ORDERED_NAMESPACE, *args]
    container["args"] = ["sh", "-c", PREFLIGHT, "preflight", *args]


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
