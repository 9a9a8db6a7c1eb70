"""`sunk operator` settings from flags, with SUNK_OPERATOR_* environment variables as defaults."""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass
from pathlib import Path

from sunk.flags import parse_bind, parse_duration, true_or_false
from sunk.ldap.models import DirectorySettings
from sunk.operator.accounts import mapping
from sunk.operator.accounts.mapping import GroupMapping
from sunk.operator.nodeset import shared_volumes
from sunk.operator.nodeset.shared_volumes import SharedVolume


@dataclass(frozen=True)
class OperatorConfig:
    namespace: str
    release: str
    slurm_api_base: str
    slurm_jwt_key_file: Path
    conf_server: str
    auth_secret: str
    slurmd_image: str
    slurm_user: str = "slurm"
    scheduler_token_secret: str = ""
    slurm_api_version: str | None = None
    slurm_ca_file: str | None = None
    poll_s: float = 5.0
    leader_elect: bool = False
    lease_name: str = "sunk-operator"
    metrics_bind: tuple[str, int] = ("0.0.0.0", 8080)
    health_bind: tuple[str, int] = ("0.0.0.0", 8081)
    kubeconfig: str | None = None
    topology: str = ""
    topology_labels: tuple[str, ...] = ()
    slurm_configmap: str = ""
    directory: DirectorySettings | None = None  # people come from this directory when set
    people_configmap: str = ""  # where they are written (login and slurmd Pods mount it)
    directory_interval_s: float = 300.0
    confinement: bool = False
    private_tmp: bool = False  # jobs get their own /tmp and /dev/shm (needs confinement)
    hosts_domain: str = ""  # where members are named (members.Settings.hosts_domain)
    allow_host_access: bool = False
    allowed_images: tuple[str, ...] = ()  # slurmd images NodeSets may name beside the default's
    shared_volumes: tuple[SharedVolume, ...] = ()  # mounted in every slurmd Pod
    account_mappings: tuple[GroupMapping, ...] = ()  # Slurm accounts kept from these groups
    slurm_cluster: str = ""  # Slurm's ClusterName, where those accounts' associations live
    accounts_interval_s: float = 30.0
    services_configmap: str = ""  # the operator's own services for slurmd Pods (sunk-services)
    services_digest: str = ""  # a digest of them: a change rolls the members
    slurm_native_metrics: bool = False  # slurmctld serves slurm_* itself: serve only sunk_*
    health_checks_configmap: str = ""  # slurmd's health check runner, mounted into members
    health_check_scripts_configmap: str = ""  # the operator's own check scripts, beside it
    node_conditions: tuple[str, ...] = ()  # Node condition types that name a fault when True
    health_replace_after_s: int = 0  # a member a check drained this long is replaced (0: never)
    health_replace_max_unavailable: int = 1  # members of a NodeSet away at once, for that


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get("SUNK_OPERATOR_" + name.upper().replace("-", "_"), default)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    def flag(name: str, help: str, default: str | None = None, required: bool = False) -> None:
        value = _env(name, default)
        parser.add_argument(f"--{name}", default=value, required=required and value is None, help=help)

    flag("namespace", "the NodeSets' and slurmd Pods' namespace", os.environ.get("POD_NAMESPACE"), True)
    flag("release", "the chart's release name (labels every slurmd Pod)", None, True)
    flag("slurm-api-base", "slurmrestd's URL", None, True)
    flag("slurm-jwt-key-file", "Slurm's JWT key (jwt_hs256.key): the operator signs short tokens", None, True)
    flag("slurm-user", "the Slurm user the operator's tokens name", "slurm")
    flag("slurm-api-version", "force a slurmrestd version (default: the newest both speak)")
    flag("slurm-ca-file", "CA certificate (PEM) that signed slurmrestd's, for https (default: the system's)")
    flag("conf-server", "slurmctld's host:port, from which slurmd fetches its configuration", None, True)
    flag("auth-secret", "the Secret holding slurm.key, mounted into every slurmd Pod", None, True)
    flag("scheduler-token-secret", "a Secret whose `token` the operator keeps fresh for the scheduler", "")
    flag("slurmd-image", "the slurmd image of NodeSets that name none", "")
    flag(
        "allowed-slurmd-images",
        "comma-separated images or repositories NodeSets may name as their slurmd image, beside "
        "any tag of --slurmd-image's repository (others are refused: they would run with slurm.key)",
        "",
    )
    flag("poll-interval", "how often Slurm's nodes are listed", "5s")
    flag("leader-elect", "true: act only while holding the Lease (run several replicas)", "false")
    flag("lease-name", "name of the Lease in the namespace", "sunk-operator")
    flag("metrics-port", "port of /metrics", "8080")
    flag("probes-port", "port of /healthz and /readyz", "8081")
    flag("kubeconfig", "kubeconfig file (default: in-cluster, then ~/.kube/config)")
    flag("topology", "tree or block: write topology.conf from Node labels (default: none)", "")
    flag("topology-labels", "comma-separated Node labels, leaf level first (block: one)", "")
    flag("confinement", "cgroup: slurmd Pods confine jobs in cgroups (the chart's default); off: not", "off")
    flag(
        "private-tmp",
        "true: slurm.conf gives each job its own /tmp and /dev/shm (job_container/tmpfs), so "
        "slurmd runs in a mount namespace able to pin theirs (needs --confinement=cgroup)",
        "false",
    )
    flag(
        "allow-host-access",
        "true: NodeSet templates may ask for privileged containers, hostPath volumes, host "
        "namespaces or added capabilities (refused otherwise: they would give root on the Nodes)",
        "false",
    )
    flag(
        "hosts-domain",
        "the headless Service's domain (name.namespace.svc.cluster-domain) slurmd Pods are named "
        "in and search, so Slurm's host names resolve (the chart's <release>-hosts); none: not named",
        "",
    )
    flag("slurm-configmap", "the ConfigMap of slurm.conf, where topology.conf is written", "")
    flag("directory-uri", "the LDAP directory people come from (ldap://, ldaps://); none: no people", "")
    flag("directory-bind-dn", "the identity the operator reads the directory as", "")
    flag("directory-password-file", "a file holding that identity's password (from a Secret)", "")
    flag("directory-user-base", "where people are searched (e.g. ou=people,dc=example,dc=org)", "")
    flag("directory-group-base", "where groups are searched", "")
    flag("directory-user-filter", "which entries are people", "(objectClass=posixAccount)")
    flag("directory-group-filter", "which entries are groups", "(objectClass=posixGroup)")
    flag("directory-ssh-key-attribute", "the attribute holding a person's SSH public keys", "sshPublicKey")
    flag("directory-ca-file", "the CA that signed the directory's certificate (ldaps:// or StartTLS)", "")
    flag("directory-start-tls", "true: upgrade ldap:// to TLS before binding", "false")
    flag("directory-interval", "how often the directory is read", "5m")
    flag("people-configmap", "the ConfigMap people are written to (default: <release>-people)", "")
    flag(
        "accounts-from-directory",
        'JSON list of {"group", "account", "qos", "defaultQos", "parent"}: Slurm accounts kept '
        "from these directory groups (the chart's accounting.fromDirectory.groups); empty: none",
        "",
    )
    flag("slurm-cluster", "Slurm's ClusterName (where the accounts' associations are made)", "")
    flag("accounts-interval", "how often slurmdbd's accounts are compared with the groups", "30s")
    flag(
        "services-configmap",
        "a ConfigMap of services and start-up scripts every slurmd Pod runs beside slurmd "
        "(the chart's slurmd.services and slurmd.startupScripts); empty: none",
        "",
    )
    flag("services-digest", "a digest of those services: members made before a change are replaced", "")
    flag(
        "health-checks-configmap",
        "the ConfigMap of slurmd's health check runner and its settings (the chart's "
        "slurm.healthChecks), mounted into every slurmd Pod; empty: no health checks",
        "",
    )
    flag(
        "node-conditions",
        "comma-separated Node condition types that name a fault when their status is True "
        "(Node Problem Detector's KernelDeadlock...): a member's Slurm node is drained while its "
        "Node has one; empty: none",
        "",
    )
    flag(
        "health-check-scripts-configmap",
        "a ConfigMap of your own check scripts, mounted beside the runner (needs "
        "--health-checks-configmap); empty: none",
        "",
    )
    flag(
        "health-replace-after",
        "replace a member its health checks have drained this long, once it runs no job (30m, 1h; 0: never)",
        "0",
    )
    flag(
        "health-replace-max-unavailable",
        "at most this many members of a NodeSet away at once, whatever the cause, for a "
        "replacement to start (0: never replace)",
        "1",
    )
    flag(
        "slurm-native-metrics",
        "true: slurmctld serves Slurm's metrics itself (MetricsType=metrics/openmetrics, 25.11+), "
        "so the operator serves only its sunk_* ones; false: it serves slurm_* under the same names",
        "false",
    )
    flag(
        "shared-volumes",
        "CLAIM:PATH[:ro],...: claims every slurmd Pod mounts (the chart's sharedVolumes)",
        "",
    )


def topology_settings(plugin: str, labels: str, configmap: str) -> tuple[str, tuple[str, ...]]:
    """The topology plugin and its labels, checked: a wrong one is a start-up error."""
    names = tuple(label.strip() for label in labels.split(",") if label.strip())
    if not plugin:
        return "", ()
    if plugin not in ("tree", "block"):
        raise ValueError(f"--topology must be tree or block, not {plugin!r}")
    if not names:
        raise ValueError("--topology needs --topology-labels: the Node labels that describe the network")
    if plugin == "block" and len(names) != 1:
        raise ValueError("--topology=block takes exactly one label in --topology-labels")
    if not configmap:
        raise ValueError("--topology needs --slurm-configmap: where topology.conf is written")
    return plugin, names


def directory_settings(args: argparse.Namespace) -> DirectorySettings | None:
    """The directory to read people from, checked: a half-given one is a start-up error
    that names the missing flag."""
    if not args.directory_uri:
        return None
    if not args.directory_uri.startswith(("ldap://", "ldaps://")):
        raise ValueError(f"--directory-uri must start with ldap:// or ldaps://, not {args.directory_uri!r}")
    for flag in ("bind_dn", "password_file", "user_base", "group_base"):
        if not getattr(args, f"directory_{flag}"):
            raise ValueError(f"--directory-uri needs --directory-{flag.replace('_', '-')}")
    return DirectorySettings(
        uri=args.directory_uri,
        bind_dn=args.directory_bind_dn,
        password_file=Path(args.directory_password_file),
        user_base=args.directory_user_base,
        group_base=args.directory_group_base,
        user_filter=args.directory_user_filter,
        group_filter=args.directory_group_filter,
        ssh_key_attribute=args.directory_ssh_key_attribute,
        ca_file=Path(args.directory_ca_file) if args.directory_ca_file else None,
        start_tls=true_or_false(args, "directory-start-tls"),
    )


def account_settings(args: argparse.Namespace, people: bool) -> tuple[GroupMapping, ...]:
    """The group to account mapping, checked: it needs people and a cluster name."""
    found = mapping.parse(args.accounts_from_directory or "")
    if found and not people:
        raise ValueError(
            "--accounts-from-directory needs --directory-uri: accounts follow the directory's groups"
        )
    if found and not args.slurm_cluster:
        raise ValueError("--accounts-from-directory needs --slurm-cluster (Slurm's ClusterName)")
    return found


def node_conditions(text: str) -> tuple[str, ...]:
    """The --node-conditions list; Ready (True is well) and the operator's own
    SlurmHealthCheck (it mirrors a drain, it does not cause one) are refused."""
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    for kind in kinds:
        if kind in ("Ready", "SlurmHealthCheck") or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_./-]*", kind):
            raise ValueError(f"--node-conditions: {kind!r} is not a fault condition type")
    return kinds


def from_args(args: argparse.Namespace) -> OperatorConfig:
    if args.confinement not in ("cgroup", "off"):
        raise ValueError(f"--confinement must be cgroup or off, not {args.confinement!r}")
    private_tmp = true_or_false(args, "private-tmp")
    if private_tmp and args.confinement != "cgroup":
        raise ValueError(
            "--private-tmp=true needs --confinement=cgroup: a job's own /tmp is part of confining it"
        )
    health_scripts = args.health_check_scripts_configmap or ""
    if health_scripts and not args.health_checks_configmap:
        raise ValueError(
            "--health-check-scripts-configmap needs --health-checks-configmap: the runner runs the scripts"
        )
    replace_after_s = int(parse_duration(args.health_replace_after))
    if replace_after_s and not args.health_checks_configmap:
        raise ValueError("--health-replace-after needs --health-checks-configmap: only checks drain that way")
    budget = str(args.health_replace_max_unavailable)
    if not budget.isdigit():
        raise ValueError(f"--health-replace-max-unavailable must be a whole number, not {budget!r}")
    topology, topology_labels = topology_settings(
        args.topology or "", args.topology_labels or "", args.slurm_configmap or ""
    )
    return OperatorConfig(
        namespace=args.namespace,
        release=args.release,
        slurm_api_base=args.slurm_api_base,
        slurm_jwt_key_file=Path(args.slurm_jwt_key_file),
        conf_server=args.conf_server,
        auth_secret=args.auth_secret,
        slurmd_image=args.slurmd_image or "",
        slurm_user=args.slurm_user,
        scheduler_token_secret=args.scheduler_token_secret or "",
        slurm_api_version=args.slurm_api_version,
        slurm_ca_file=args.slurm_ca_file or None,
        poll_s=parse_duration(args.poll_interval),
        leader_elect=true_or_false(args, "leader-elect"),
        lease_name=args.lease_name,
        metrics_bind=parse_bind(f":{args.metrics_port}"),
        health_bind=parse_bind(f":{args.probes_port}"),
        kubeconfig=args.kubeconfig,
        topology=topology,
        topology_labels=topology_labels,
        slurm_configmap=args.slurm_configmap or "",
        directory=directory_settings(args),
        people_configmap=args.people_configmap or f"{args.release}-people",
        directory_interval_s=parse_duration(args.directory_interval),
        confinement=args.confinement == "cgroup",
        private_tmp=private_tmp,
        hosts_domain=args.hosts_domain or "",
        allow_host_access=true_or_false(args, "allow-host-access"),
        allowed_images=tuple(i.strip() for i in (args.allowed_slurmd_images or "").split(",") if i.strip()),
        shared_volumes=shared_volumes.parse(args.shared_volumes or ""),
        account_mappings=account_settings(args, bool(args.directory_uri)),
        slurm_cluster=args.slurm_cluster or "",
        accounts_interval_s=parse_duration(args.accounts_interval),
        services_configmap=args.services_configmap or "",
        services_digest=args.services_digest or "",
        slurm_native_metrics=true_or_false(args, "slurm-native-metrics"),
        health_checks_configmap=args.health_checks_configmap or "",
        health_check_scripts_configmap=health_scripts,
        node_conditions=node_conditions(args.node_conditions or ""),
        health_replace_after_s=replace_after_s,
        health_replace_max_unavailable=int(budget),
    )
