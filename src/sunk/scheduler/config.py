"""Scheduler settings from flags, with environment variables as defaults (R1.2).

Every flag NAME can also come from SUNK_NAME (upper case, dashes as underscores), so
`eval "$(sunk dev env)"` is all a developer needs. The Slurm token is never part of any
printed form of the settings.
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from sunk.flags import parse_bind, parse_duration, true_or_false
from sunk.kube.resources import is_extended
from sunk.scheduler.jobs import DEFAULT_JOB_ID_RANGE, MAX_JOB_ID
from sunk.scheduler.policy import PolicyError
from sunk.scheduler.policy import parse as parse_policy
from sunk.scheduler.translate import DEFAULT_PREFIX
from sunk.scheduler.translate.job import DEFAULT_DEVICES

COMPONENTS = ("scheduler", "hooks")


@dataclass(frozen=True)
class Config:
    scheduler_name: str
    slurm_api_base: str
    slurm_token: str | None = field(default=None, repr=False)
    slurm_token_file: Path | None = None
    slurm_user: str = "root"
    slurm_api_version: str | None = None
    slurm_ca_file: str | None = None
    slurm_kill_wait_s: float = 30
    # The job IDs submissions ask for (first, last); None: above every ID seen, on the
    # number line Slurm's counter also walks (what a Config built in code gets).
    job_id_range: tuple[int, int] | None = None
    watch_namespaces: tuple[str, ...] = ()
    ignore_namespaces: tuple[str, ...] = ()
    annotation_prefix: str = DEFAULT_PREFIX
    hooks_bind: tuple[str, int] = ("0.0.0.0", 8000)
    metrics_bind: tuple[str, int] = ("0.0.0.0", 8080)
    health_bind: tuple[str, int] = ("0.0.0.0", 8081)
    components: tuple[str, ...] = ("scheduler",)
    kubeconfig: str | None = None
    slurmd_namespace: str = ""
    slurmd_selector: str = "app.kubernetes.io/name=slurmd"
    slurm_node_label: str = "sunk.coreweave.com/slurm-node"
    log_level: str = "info"
    log_format: str = "text"
    leader_elect: bool = False
    leader_election_namespace: str = "default"
    leader_election_id: str = ""
    static_cpu_pods: str = "warn"
    placement: str = "slurm"
    hooks_url: str | None = None
    hooks_secret: bytes | None = field(default=None, repr=False)
    hooks_tls_cert: Path | None = None
    hooks_tls_key: Path | None = None
    hooks_tls_ca: Path | None = None
    hooks_insecure_http: bool = False
    policy_file: Path | None = None
    devices: tuple[tuple[str, str], ...] = DEFAULT_DEVICES
    drain_cordoned_nodes: bool = False
    workers: int = 32  # concurrent reconciles; each mostly waits on the API server or Slurm
    # A safety net: job starts and ends reach the scheduler through the hooks API at once.
    slurm_poll_interval_s: float = 1.0


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get("SUNK_" + name.upper().replace("-", "_"), default)


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    def flag(name: str, help: str, default: str | None = None, **kw: object) -> None:
        parser.add_argument(f"--{name}", default=_env(name, default), help=help, **kw)  # type: ignore[arg-type]

    flag("scheduler-name", "Pods whose spec.schedulerName equals this are ours (required)")
    flag("slurm-api-base", "slurmrestd URL, e.g. http://slurm-controller:6820 (required)")
    flag("slurm-auth-token", "Slurm JWT (prefer --slurm-auth-token-file or the env variable)")
    flag("slurm-auth-token-file", "file holding the Slurm JWT; re-read when it changes")
    flag("slurm-user", "user name sent with the token", "root")
    flag(
        "slurm-api-version",
        "slurmrestd REST version to speak, e.g. v0.0.42 (default: the newest one both sides know)",
    )
    flag("slurm-ca-file", "CA certificate (PEM) that signed slurmrestd's, for https (default: the system's)")
    flag("slurm-kill-wait", "Slurm's KillWait; Pod grace periods must stay 5s below it", "30s")
    flag(
        "job-id-range",
        "FIRST-LAST: the job IDs submissions ask for, which Slurm's counter must never reach "
        f"(Slurm's MaxJobId at most FIRST; LAST at most {MAX_JOB_ID}); 'shared': above every ID "
        "seen, where Slurm's counter walks too",
        "{}-{}".format(*DEFAULT_JOB_ID_RANGE),
    )
    flag("watch-namespace", "comma-separated namespaces to watch (empty: all)", "")
    flag(
        "ignore-namespace",
        "comma-separated namespaces whose Pods are never placed, even when watching all: those "
        "holding the cluster's keys (the chart gives its own and slurmd's)",
        "",
    )
    flag("annotation-prefix", "prefix of the Pod annotations read", DEFAULT_PREFIX)
    flag("hooks-api-bind-address", "address of the hooks API", ":8000")
    flag("hooks-api-url", "URL placeholder jobs use to reach the hooks API (default: from the bind address)")
    flag("hooks-secret-file", "file with the secret that signs hook credentials (or SUNK_HOOKS_SECRET)")
    flag("hooks-tls-cert-file", "certificate (PEM) the hooks API serves; re-read when it changes")
    flag("hooks-tls-key-file", "its private key (PEM)")
    flag(
        "hooks-tls-ca-file", "CA (PEM) placeholder jobs verify the hooks API with (default: the certificate)"
    )
    flag(
        "hooks-insecure-http",
        "true: serve the hooks API over plain HTTP (a local dev cluster only: calls and answers "
        "can then be read on the network)",
        "false",
    )
    flag("metrics-bind-address", "address of the Prometheus metrics endpoint", ":8080")
    flag("health-probe-bind-address", "address of /healthz and /readyz", ":8081")
    flag(
        "components",
        "comma-separated parts to run in this process: scheduler, hooks",
        "scheduler,hooks",
    )
    flag("kubeconfig", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    flag("slurmd-namespace", "namespace of the slurmd Pods (empty: all)", "")
    flag("slurmd-selector", "label selector of the slurmd Pods", "app.kubernetes.io/name=slurmd")
    flag(
        "slurm-node-label",
        "label on a slurmd Pod naming its Slurm node",
        "sunk.coreweave.com/slurm-node",
    )
    flag("log-level", "debug, info, warning or error", "info")
    parser.add_argument("--zap-log-level", dest="log_level", help=argparse.SUPPRESS)
    flag("log-format", "text or json", "text")
    flag("leader-elect", "true: act only while holding the leader Lease (run several replicas)", "false")
    flag("leader-election-namespace", "namespace of the Lease (default: $POD_NAMESPACE or default)")
    flag("leader-election-id", "name of the Lease (default: the scheduler name)")
    flag("static-cpu-pods", "Guaranteed Pods with whole CPUs: warn (an Event) or refuse", "warn")
    flag(
        "placement",
        "slurm: Slurm picks any node that fits; pack: while a partly used node has room, a new "
        "Pod's job leaves idle nodes out, keeping them whole (Slurm still picks the node)",
        "slurm",
    )
    flag(
        "drain-cordoned-nodes",
        "true: cordoning a Node drains its Slurm node (reason: cordoned in Kubernetes), and "
        "uncordoning resumes it if sunk drained it",
        "false",
    )
    flag(
        "device-gres",
        "extended resource=GRES pairs, comma-separated; an empty GRES allows the resource without one; "
        "a Pod requesting a resource not listed is refused",
        "nvidia.com/gpu=gpu,rdma/ib=",
    )
    flag(
        "policy",
        "YAML file saying which Slurm identities, accounts, partitions, QoS, reservations, "
        "priorities, nodes and time limits Pods of each namespace may use; re-read when it changes "
        "(default: none, so nothing is granted and every Pod is refused)",
    )


def from_arguments(args: argparse.Namespace) -> Config:
    """Build the config, or raise ValueError with a message naming the flag to fix."""
    if not args.scheduler_name:
        raise ValueError("--scheduler-name is required (or set SUNK_SCHEDULER_NAME)")
    if not args.slurm_api_base:
        raise ValueError("--slurm-api-base is required (or set SUNK_SLURM_API_BASE)")
    if not args.slurm_auth_token and not args.slurm_auth_token_file:
        raise ValueError(
            "a Slurm token is required: --slurm-auth-token-file (or SUNK_SLURM_AUTH_TOKEN_FILE), "
            "or SUNK_SLURM_AUTH_TOKEN"
        )
    components = tuple(c.strip() for c in args.components.split(",") if c.strip())
    unknown = set(components) - set(COMPONENTS)
    if unknown:
        known = ", ".join(COMPONENTS)
        raise ValueError(f"--components: unknown {', '.join(sorted(unknown))}; choose from {known}")
    try:
        kill_wait = parse_duration(args.slurm_kill_wait)
        binds = [
            parse_bind(getattr(args, a))
            for a in ("hooks_api_bind_address", "metrics_bind_address", "health_probe_bind_address")
        ]
    except argparse.ArgumentTypeError as err:
        raise ValueError(str(err)) from None
    secret = os.environ.get("SUNK_HOOKS_SECRET", "").encode() or None
    if args.hooks_secret_file:
        try:
            secret = Path(args.hooks_secret_file).read_bytes().strip()
        except OSError as err:
            raise ValueError(
                f"--hooks-secret-file: cannot read {args.hooks_secret_file}: {err.strerror}"
            ) from None
    if secret is not None and len(secret) < 16:
        raise ValueError("the hooks secret must be at least 16 bytes long")
    if args.log_format not in ("text", "json"):
        raise ValueError("--log-format must be text or json")
    if args.static_cpu_pods not in ("warn", "refuse"):
        raise ValueError("--static-cpu-pods must be warn or refuse")
    if args.placement not in ("slurm", "pack"):
        raise ValueError(f"--placement must be slurm or pack, not {args.placement!r}")
    if args.policy:
        try:
            parse_policy(Path(args.policy).read_text(), args.policy)
        except OSError as err:
            raise ValueError(f"--policy: cannot read {args.policy}: {err.strerror}") from None
        except PolicyError as err:
            raise ValueError(f"--policy: {err}") from None
    watched = _names(args.watch_namespace)
    ignored = _names(args.ignore_namespace)
    both = sorted(set(watched) & set(ignored))
    if both:
        raise ValueError(f"--watch-namespace and --ignore-namespace both name {', '.join(both)}")
    devices = parse_devices(args.device_gres)
    drain_cordoned = true_or_false(args, "drain-cordoned-nodes")
    insecure = true_or_false(args, "hooks-insecure-http")
    if bool(args.hooks_tls_cert_file) != bool(args.hooks_tls_key_file):
        raise ValueError("--hooks-tls-cert-file and --hooks-tls-key-file go together")
    if "hooks" in components and not insecure and not args.hooks_tls_cert_file:
        raise ValueError(
            "the hooks API serves TLS: give --hooks-tls-cert-file and --hooks-tls-key-file (e.g. a "
            "kubernetes.io/tls Secret; the chart makes one), or --hooks-insecure-http=true for a local "
            "dev cluster"
        )
    for name in ("hooks_tls_cert_file", "hooks_tls_key_file", "hooks_tls_ca_file"):
        value = getattr(args, name)
        if value and not Path(value).is_file():
            raise ValueError(f"--{name.replace('_', '-')}: {value} is not a readable file")
    leader_elect = true_or_false(args, "leader-elect")
    return Config(
        job_id_range=parse_job_id_range(args.job_id_range),
        scheduler_name=args.scheduler_name,
        slurm_api_base=args.slurm_api_base,
        slurm_token=args.slurm_auth_token or None,
        slurm_token_file=Path(args.slurm_auth_token_file) if args.slurm_auth_token_file else None,
        slurm_user=args.slurm_user,
        slurm_api_version=args.slurm_api_version or None,
        slurm_ca_file=args.slurm_ca_file or None,
        slurm_kill_wait_s=kill_wait,
        watch_namespaces=watched,
        ignore_namespaces=ignored,
        annotation_prefix=args.annotation_prefix,
        hooks_bind=binds[0],
        metrics_bind=binds[1],
        health_bind=binds[2],
        components=components,
        kubeconfig=args.kubeconfig,
        slurmd_namespace=args.slurmd_namespace,
        slurmd_selector=args.slurmd_selector,
        slurm_node_label=args.slurm_node_label,
        log_level=args.log_level,
        log_format=args.log_format,
        leader_elect=leader_elect,
        leader_election_namespace=args.leader_election_namespace
        or os.environ.get("POD_NAMESPACE")
        or "default",
        leader_election_id=args.leader_election_id or args.scheduler_name,
        static_cpu_pods=args.static_cpu_pods,
        placement=args.placement,
        hooks_url=args.hooks_api_url or None,
        hooks_secret=secret,
        policy_file=Path(args.policy) if args.policy else None,
        devices=devices,
        hooks_tls_cert=Path(args.hooks_tls_cert_file) if args.hooks_tls_cert_file else None,
        hooks_tls_key=Path(args.hooks_tls_key_file) if args.hooks_tls_key_file else None,
        hooks_tls_ca=Path(args.hooks_tls_ca_file or args.hooks_tls_cert_file)
        if args.hooks_tls_cert_file
        else None,
        hooks_insecure_http=insecure,
        drain_cordoned_nodes=drain_cordoned,
    )


def parse_job_id_range(text: str) -> tuple[int, int] | None:
    """ "50000000-67108863" → (50000000, 67108863); "shared" → None."""
    if text.strip() == "shared":
        return None
    first, sep, last = text.strip().partition("-")
    if not (sep and first.isdigit() and last.isdigit() and 1 <= int(first) <= int(last) <= MAX_JOB_ID):
        low, high = DEFAULT_JOB_ID_RANGE
        raise ValueError(
            f"--job-id-range: {text!r} is not FIRST-LAST with 1 <= FIRST <= LAST <= {MAX_JOB_ID} "
            f"(Slurm reads the bits above as a federation's cluster); e.g. {low}-{high} with "
            f"MaxJobId={low} in slurm.conf, or 'shared'"
        )
    return int(first), int(last)


def parse_devices(text: str) -> tuple[tuple[str, str], ...]:
    """ "nvidia.com/gpu=gpu,rdma/ib=" → (("nvidia.com/gpu", "gpu"), ("rdma/ib", ""))."""
    pairs = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        resource, sep, gres = item.partition("=")
        if (
            not sep
            or not is_extended(resource.strip())
            or not re.fullmatch(r"[A-Za-z0-9_.:-]*", gres.strip())
        ):
            raise ValueError(
                f'--device-gres: "{item}" is not resource=GRES (examples: "nvidia.com/gpu=gpu", '
                '"nvidia.com/mig-1g.10gb=gpu:1g.10gb", "rdma/ib=" for no GRES)'
            )
        pairs.append((resource.strip(), gres.strip()))
    return tuple(pairs)
