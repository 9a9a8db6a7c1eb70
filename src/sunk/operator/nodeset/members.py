"""The slurmd Pod of one member: pinned to its Node, named after its Slurm node.

The operator binds the Pod itself (spec.nodeName), as the DaemonSet controller once did:
it has already checked that the Node qualifies, and a Pod that a scheduler could move
elsewhere would break the name-follows-the-machine rule. The NodeSet's template is merged
in first; the fields the operator depends on are set last, so a template cannot undo them.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from sunk.operator.nodeset import confinement, shared_volumes
from sunk.operator.nodeset.hardware import Shape
from sunk.operator.nodeset.selection import NODESET_LABEL
from sunk.operator.nodeset.spec import API_VERSION, KIND, NodeSet

Json = dict[str, Any]
SLURM_NODE_LABEL = "sunk.coreweave.com/slurm-node"
# "true" while Slurm lists work on the member's node: the chart's PodDisruptionBudget
# selects busy members, so an eviction (`kubectl drain`) waits until their jobs end.
BUSY_LABEL = "sunk.coreweave.com/slurm-busy"
# How long a deleted member may wait for its jobs in its preStop hook (the template's
# terminationGracePeriodSeconds overrides it). An idle member stops at once.
GRACE_S = 3600
# The preStop hook: whoever deletes a member (kubectl delete pod, a Node's shutdown), its
# Slurm node is drained, unless someone already did, and slurmd keeps running until Slurm
# shows no job there. Any answer other than "idle" (slurmctld unreachable too) means wait:
# the grace period is the only bound. A drain that only waits for the health checks' next
# clean run (`sunk-hc: verify: `) counts as none: the runner could lift it as slurmd stops.
PRE_STOP = r"""n="$1"
show() { scontrol show node -o "$n" 2>/dev/null; }
state() { printf '%s\n' "$1" | grep -o 'State=[^ ]*'; }
idle() { case "$1" in *COMPLETING*) return 1 ;; State=IDLE* | State=DOWN*) return 0 ;; esac; return 1; }
drain() { scontrol update nodename="$n" state=drain reason="sunk: Pod $n is being deleted"; }
first="$(show)"
case "$(state "$first")" in
*DRAIN*) case "$first" in *"Reason=sunk-hc: verify: "*) drain ;; esac ;;
*) drain ;;
esac
until s="$(state "$(show)")" && idle "$s"; do sleep 2; done
"""
TEMPLATE_HASH = "sunk.coreweave.com/template-hash"
# Whether slurmd listens on its port (6818, 1AA2 in hex), read from the kernel's socket
# tables inside the Pod rather than by connecting: slurmd logs two errors for every
# connection that sends it nothing, which a TCP probe every second made 170,000 lines a day.
LISTENING_PROBE: Json = {
    "exec": {
        "command": [
            "grep",
            "-qsE",
            "^ *[0-9]+: [0-9A-F]+:1AA2 [0-9A-F]+:0000 0A ",
            "/proc/net/tcp",
            "/proc/net/tcp6",
        ]
    },
    "timeoutSeconds": 5,  # an exec on a busy node can take more than the default second
}
SLURMD_CONF = "sunk.coreweave.com/slurmd-conf"
CONTAINER = "slurmd"
KEY_PATH = "/etc/slurm/slurm.key"
# The directory's people ConfigMap, mounted where libnss-extrausers (in sunk's images)
# reads passwd and group.
PEOPLE_VOLUME = "people"
PEOPLE_PATH = "/var/lib/extrausers"
# slurmd runs under s6 beside the operator's own services (images/slurm-base/sunk-services),
# which are read from the chart's ConfigMap mounted here.
SUPERVISOR = ("sunk-services", "slurmd")
SERVICES_VOLUME = "sunk-services"
SERVICES_PATH = "/etc/sunk/services"
# slurmd's health check runner (the chart's slurm.healthChecks): slurm.conf names
# HEALTH_CHECKS_PATH/run as HealthCheckProgram, which configless slurmd is not sent, so it
# is mounted here, executable; the operator's own scripts beside it. The scripts' ConfigMap
# is optional: a missing one must not keep a member from starting, and the runner reports
# an empty directory as a configuration problem, not a node fault.
HEALTH_CHECKS_VOLUME = "sunk-health-checks"
HEALTH_CHECKS_PATH = "/etc/sunk/health-checks"
HEALTH_SCRIPTS_VOLUME = "sunk-health-check-scripts"
HEALTH_SCRIPTS_PATH = "/etc/sunk/health-checks.d"
# With the checks on, a member registers drained, under the checks' hand-over reason
# (sunk.operator.nodeset.health_checks: `sunk-hc: verify:`), so that it takes no job before one full
# clean run, which resumes it. slurmctld creates a dynamic node in the State its `--conf`
# names, with its Reason (DRAIN and DOWN, Slurm 23.11 on); a slurmd that registers again
# (a restart) finds its node and keeps its state. The reason is quoted: Slurm's parser takes
# a value "in double quotes" whole, so it must hold none.
FIRST_CHECK_REASON = "sunk-hc: verify: a new member; it takes jobs once every health check passes"


@dataclass(frozen=True)
class Settings:
    """What every member shares, from the operator's flags."""

    release: str
    conf_server: str  # host:port of slurmctld, for configless slurmd
    auth_secret: str  # the Secret holding slurm.key (auth/slurm)
    topology_labels: tuple[str, ...] = ()  # Node labels topology.conf is written from (if any)
    people_configmap: str = ""  # the directory's people (sunk.operator.directory.people_sync), if any
    confinement: bool = False  # slurmd confines jobs in cgroups (the chart's slurm.confinement)
    private_tmp: bool = False  # and gives each job its own /tmp (slurm.confinement.privateTmp)
    # <service>.<namespace>.svc.<domain> of the chart's headless hosts Service: each member
    # is named there, and searches it, so Slurm's host names resolve (none: not named).
    hosts_domain: str = ""
    allow_host_access: bool = False  # templates may ask for privileged, hostPath... (host_access)
    # slurmd images NodeSets may name beside the default's repository (host_access.allowed_image)
    allowed_images: tuple[str, ...] = ()
    shared_volumes: tuple[shared_volumes.SharedVolume, ...] = ()  # the chart's sharedVolumes
    services_configmap: str = ""  # the operator's services and start-up scripts, if any
    services_digest: str = ""  # of that ConfigMap's contents (a change rolls the members)
    health_checks_configmap: str = ""  # slurmd's health check runner, if checks are on
    health_check_scripts_configmap: str = ""  # the operator's own check scripts, if any
    # Node condition types that name a fault when "True": a member's Slurm node is drained
    # while its Node has one (sunk.operator.nodeset.node_faults).
    node_conditions: tuple[str, ...] = ()
    # A member a check has drained this long is replaced once idle (0: never), at most
    # `health_replace_max_unavailable` members of a NodeSet away at once (sunk.operator.nodeset.unhealthy).
    health_replace_after_s: int = 0
    health_replace_max_unavailable: int = 1


def selector(settings: Settings, nodeset: str) -> dict[str, str]:
    """The labels that find one NodeSet's members (also its scale subresource's selector)."""
    return {"app.kubernetes.io/instance": settings.release, NODESET_LABEL: nodeset}


def selector_string(settings: Settings, nodeset: str) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(selector(settings, nodeset).items()))


def member_pod(settings: Settings, nodeset: NodeSet, node: str, slurm_name: str, shape: Shape) -> Json:
    template = copy.deepcopy(nodeset.template)
    meta = template.get("metadata") or {}
    spec: Json = copy.deepcopy(template.get("spec") or {})
    labels = {
        **(meta.get("labels") or {}),
        **selector(settings, nodeset.name),
        "app.kubernetes.io/name": "slurmd",
        "app.kubernetes.io/managed-by": "sunk-operator",
        SLURM_NODE_LABEL: slurm_name,
        BUSY_LABEL: "false",  # a new slurmd has no job yet; the operator keeps it current
    }
    conf = shape.conf()
    registered = conf  # what slurmd registers with: its shape, and with the checks on, drained
    if settings.health_checks_configmap:
        registered = f'{conf} State=DRAIN Reason="{FIRST_CHECK_REASON}"'
    slurmd = {
        "name": CONTAINER,
        "image": nodeset.image,
        "args": [
            *SUPERVISOR,
            "slurmd",
            "-D",
            "-Z",
            "-N",
            slurm_name,
            "--conf-server",
            settings.conf_server,
            "--conf",
            registered,
        ],
        "resources": nodeset.resources,
        "ports": [{"name": "slurmd", "containerPort": 6818}],
        # Asked every second until slurmd listens, so that a new member is Ready within a
        # second of it (issue #55), then every 10 s. A slurmd still not listening after ten
        # minutes (no configuration from slurmctld) is restarted: it cannot hold a job yet.
        "startupProbe": {**copy.deepcopy(LISTENING_PROBE), "periodSeconds": 1, "failureThreshold": 600},
        "readinessProbe": {**copy.deepcopy(LISTENING_PROBE), "periodSeconds": 10},
        "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", PRE_STOP, "pre-stop", slurm_name]}}},
    }
    containers = [
        _merge(c, slurmd) if c.get("name") == CONTAINER else c for c in spec.get("containers") or []
    ]
    if not any(c.get("name") == CONTAINER for c in containers):
        containers.insert(0, slurmd)
    if settings.confinement:
        confinement.confine(containers[_index(containers)], settings.private_tmp)
    mounts = containers[_index(containers)].setdefault("volumeMounts", [])
    ours = ("slurm-key", PEOPLE_VOLUME, SERVICES_VOLUME, HEALTH_CHECKS_VOLUME, HEALTH_SCRIPTS_VOLUME)
    mounts[:] = [m for m in mounts if m.get("name") not in ours]
    mounts.append({"name": "slurm-key", "mountPath": KEY_PATH, "subPath": "slurm.key", "readOnly": True})
    volumes = [v for v in spec.get("volumes") or [] if v.get("name") not in ours]
    volumes.append(
        {
            "name": "slurm-key",
            "secret": {
                "secretName": settings.auth_secret,
                "items": [{"key": "slurm.key", "path": "slurm.key"}],
                "defaultMode": 0o400,
            },
        }
    )
    if settings.people_configmap:
        # The directory's people, where the images' name service looks (libnss-extrausers):
        # jobs run as their owner, with their groups.
        mounts.append({"name": PEOPLE_VOLUME, "mountPath": PEOPLE_PATH, "readOnly": True})
        volumes.append({"name": PEOPLE_VOLUME, "configMap": {"name": settings.people_configmap}})
    if settings.services_configmap:
        mounts.append({"name": SERVICES_VOLUME, "mountPath": SERVICES_PATH, "readOnly": True})
        volumes.append({"name": SERVICES_VOLUME, "configMap": {"name": settings.services_configmap}})
    _mount_health_checks(settings, mounts, volumes)
    spec["volumes"] = volumes
    shared_volumes.mount(spec, containers[_index(containers)], settings.shared_volumes)
    volumes = spec["volumes"]
    spec.update(
        {
            "nodeName": node,
            "hostname": slurm_name,
            "containers": containers,
            "volumes": volumes,
            "affinity": nodeset.affinity or spec.get("affinity") or None,
            "nodeSelector": nodeset.node_selector or spec.get("nodeSelector") or None,
            "tolerations": [*nodeset.tolerations, *(spec.get("tolerations") or [])] or None,
        }
    )
    # The runtime's default seccomp profile, unless the template chose one: with
    # CAP_SYS_ADMIN it still lets slurmd mount and unshare for confinement (issue #38), and
    # container steps run under it too, their runtime making the image the root without
    # pivot_root, which the profile refuses (sunk.containers.runner says why that is safe).
    spec.setdefault("securityContext", {}).setdefault("seccompProfile", {"type": "RuntimeDefault"})
    spec.setdefault("terminationGracePeriodSeconds", GRACE_S)
    spec.setdefault("enableServiceLinks", False)
    if settings.hosts_domain:
        _name_in(spec, settings.hosts_domain)
    spec.setdefault("automountServiceAccountToken", False)
    spec = {k: v for k, v in spec.items() if v is not None}
    annotations = {
        **(meta.get("annotations") or {}),
        TEMPLATE_HASH: template_hash(nodeset, settings),
        SLURMD_CONF: conf,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": slurm_name,
            "namespace": nodeset.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": KIND,
                    "name": nodeset.name,
                    "uid": nodeset.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def template_hash(nodeset: NodeSet, settings: Settings) -> str:
    """A digest of what every member of the NodeSet shares (image, resources, template,
    partitions and features, whether the directory's people are mounted, the shared
    volumes, whether jobs are confined, whether steps run in containers, the operator's
    services and health check mounts): members made from an older spec, or before a
    directory was set, have a different one."""
    shared = {
        "image": nodeset.image,
        "resources": nodeset.resources,
        "template": nodeset.template,
        "partitions": nodeset.partitions,
        "features": nodeset.features,
        "reserve": nodeset.memory_reserve_mib,
    }
    if settings.people_configmap:  # absent otherwise, so that existing members keep their hash
        shared["people"] = settings.people_configmap
    if settings.shared_volumes:  # likewise
        shared["shared_volumes"] = [[v.claim, v.path, v.read_only] for v in settings.shared_volumes]
    if not settings.confinement:  # on is the default, so members made with it keep their hash
        shared["confinement"] = False  # (its capabilities and preflight, and slurmd's plugins)
    if settings.private_tmp:  # slurmd loads job_container/tmpfs at start, in its own namespace
        shared["private_tmp"] = True
    if settings.services_configmap:  # likewise: the services run are fixed at a member's start
        shared["services"] = [settings.services_configmap, settings.services_digest]
    if settings.health_checks_configmap:  # likewise: a Pod's volumes are fixed at its creation
        shared["health_checks"] = [settings.health_checks_configmap, settings.health_check_scripts_configmap]
    return hashlib.sha256(json.dumps(shared, sort_keys=True).encode()).hexdigest()[:12]


def _mount_health_checks(settings: Settings, mounts: list[Json], volumes: list[Json]) -> None:
    """The runner and the scripts, executable (0555): slurmd executes the runner by its path."""
    if not settings.health_checks_configmap:
        return
    mounts.append({"name": HEALTH_CHECKS_VOLUME, "mountPath": HEALTH_CHECKS_PATH, "readOnly": True})
    volumes.append(
        {
            "name": HEALTH_CHECKS_VOLUME,
            "configMap": {"name": settings.health_checks_configmap, "defaultMode": 0o555},
        }
    )
    if settings.health_check_scripts_configmap:
        mounts.append({"name": HEALTH_SCRIPTS_VOLUME, "mountPath": HEALTH_SCRIPTS_PATH, "readOnly": True})
        volumes.append(
            {
                "name": HEALTH_SCRIPTS_VOLUME,
                "configMap": {
                    "name": settings.health_check_scripts_configmap,
                    "defaultMode": 0o555,
                    "optional": True,
                },
            }
        )


def _name_in(spec: Json, domain: str) -> None:
    """Make the member's hostname (its Slurm node name) resolve in domain, and search it.

    srun inside a job gives slurmctld its host by short name, and slurmctld stalls about
    ten seconds on one it cannot resolve; jobs also reach each other by node name. Not part
    of the template hash: members made before keep running, and new ones get the name."""
    spec["subdomain"] = domain.split(".")[0]
    searches = spec.setdefault("dnsConfig", {}).setdefault("searches", [])
    if domain not in searches:
        searches.append(domain)


def _index(containers: list[Json]) -> int:
    return next(i for i, c in enumerate(containers) if c.get("name") == CONTAINER)


def _merge(base: Json, ours: Json) -> Json:
    """The template's slurmd container with our fields on top (its env, mounts, securityContext stay)."""
    merged = copy.deepcopy(base)
    merged.update({k: v for k, v in ours.items() if k != "resources" or v})
    return merged


def slurm_name_of(pod: Json) -> str:
    """The Slurm node a member Pod runs (its label; its name for Pods made before the label)."""
    meta = pod.get("metadata") or {}
    return str((meta.get("labels") or {}).get(SLURM_NODE_LABEL) or meta.get("name") or "")
