"""The `sunk` command: `sunk dev up|down|status|env|slurm` and `sunk demo`."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from sunk import config
from sunk.devcluster import (
    ClusterSpec,
    DevCluster,
    DevClusterError,
    realcluster,
    report,
    slurmcluster,
    slurmroot,
)
from sunk.operator import config as operator_config
from sunk.translate import DEFAULT_PREFIX, Settings


def _add_dev(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dev = sub.add_parser("dev", help="the local real cluster for the demo and the tests")
    dev_sub = dev.add_subparsers(dest="dev_command", required=True)
    up = dev_sub.add_parser("up", help="start etcd, kube-apiserver, kwok and Slurm on 127.0.0.1")
    up.add_argument("--nodes", type=int, default=4, help="Slurm nodes / Kubernetes Nodes (4)")
    up.add_argument("--accounting", action="store_true", help="also run MariaDB + slurmdbd (QoS, accounts)")
    up.add_argument("--kill-wait", type=int, default=30, help="Slurm KillWait in seconds (30)")
    up.add_argument("--cpus-per-node", type=int, default=8, help="CPUs of each node (8)")
    up.add_argument("--gpus-per-node", type=int, default=4, help="(fake) GPUs of each node (4)")
    up.add_argument("--preempt-mode", default="CANCEL", choices=["CANCEL", "REQUEUE", "OFF"], help="(CANCEL)")
    up.add_argument(
        "--slurm",
        default=slurmroot.DEFAULT_VERSION,
        metavar="VERSION",
        help=f"Slurm release line: {', '.join(slurmroot.SUPPORTED)} ({slurmroot.DEFAULT_VERSION}; "
        "22.05 is the host's Debian 12 packages, the others run in a cached Debian root)",
    )
    up.add_argument(
        "--real-nodes",
        type=int,
        default=0,
        metavar="N",
        help="also N real kubelet Nodes (containerd, runc, CNI bridge) that run the Slurm images (0)",
    )
    node = dev_sub.add_parser("node", help="stop or start a real Node, as if its machine went down")
    node.add_argument("action", choices=["stop", "start"])
    node.add_argument("name", help="a real Node's name (real-1, real-2, ...)")
    dev_sub.add_parser(
        "platform",
        help="install the Slurm chart on the real Nodes (needs `up --real-nodes 3`) and show it working",
    )
    dev_sub.add_parser(
        "down",
        help="stop every process of the dev cluster; delete its real Nodes' images, containers and volumes "
        "(its logs stay until the next up)",
    )
    dev_sub.add_parser("status", help="show what runs and whether it answers")
    dev_sub.add_parser("env", help="print `export` lines for kubectl, Slurm's CLI and sunk")
    slurm = dev_sub.add_parser(
        "slurm",
        help="run a Slurm command (squeue, sinfo, scontrol, sacctmgr...) of the running cluster",
    )
    slurm.add_argument("slurm_argv", nargs=argparse.REMAINDER, metavar="CMD [ARGS...]")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sunk", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_dev(sub)
    sub.add_parser("demo", help="bring the dev cluster up (if needed) and show it working")
    scheduler = sub.add_parser("scheduler", help="run the scheduler (flags also read SUNK_* variables)")
    config.add_arguments(scheduler)
    operator = sub.add_parser(
        "operator", help="run the NodeSet operator: slurmd Pods from NodeSets (the Slurm chart runs it)"
    )
    operator_config.add_arguments(operator)
    operator.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    operator.add_argument("--log-format", default="json", choices=["json", "text"])
    ensure = sub.add_parser(
        "ensure-hooks-secret",
        help="create the hooks secret if it is missing, never change it (the chart runs this as a Job)",
    )
    ensure.add_argument("--namespace", required=True)
    ensure.add_argument("--name", required=True)
    ensure.add_argument("--kubeconfig", default=config._env("kubeconfig"))
    ensure.add_argument("--tls-secret", help="also make this kubernetes.io/tls Secret for the hooks API")
    ensure.add_argument(
        "--tls-host", action="append", default=[], help="a DNS name or address of the hooks API (repeat)"
    )
    # The Slurm chart's hook Jobs (charts/slurm): its keys and tokens, and the pre-upgrade check.
    slurm_secrets = sub.add_parser(
        "ensure-slurm-secrets",
        help="create the Slurm chart's keys and scheduler token if missing, never change them (a hook Job)",
    )
    slurm_secrets.add_argument("--namespace", required=True)
    slurm_secrets.add_argument("--auth-secret", required=True, help="Secret for slurm.key and jwt_hs256.key")
    slurm_secrets.add_argument("--token-secret", required=True, help="Secret for the scheduler's Slurm JWT")
    slurm_secrets.add_argument("--token-user", default="root", help="the Slurm user that token speaks for")
    slurm_secrets.add_argument("--mariadb-secret", help="also a Secret for the accounting database password")
    slurm_secrets.add_argument("--kubeconfig", default=config._env("kubeconfig"))
    partitions = sub.add_parser(
        "check-partitions",
        help="fail when an unfinished Slurm job uses a partition not in --keep (a pre-upgrade hook Job)",
    )
    partitions.add_argument("--slurm-api-base", required=True, help="slurmrestd's URL")
    partitions.add_argument("--slurm-jwt-key-file", required=True, type=Path, help="Slurm's jwt_hs256.key")
    partitions.add_argument("--slurm-user", default="slurm", help="the Slurm user the check's token names")
    partitions.add_argument("--keep", required=True, help="comma-separated partitions the new values declare")
    apply = sub.add_parser(
        "apply-config",
        help="apply a changed Slurm configuration with a reconfigure (slurmctld's sidecar, Slurm chart)",
    )
    apply.add_argument("--namespace", required=True)
    apply.add_argument("--configmap", required=True, help="the ConfigMap holding slurm.conf and its files")
    apply.add_argument("--config-dir", required=True, type=Path, help="where slurmctld mounts that ConfigMap")
    apply.add_argument("--slurm-api-base", required=True, help="slurmrestd's URL")
    apply.add_argument("--slurm-jwt-key-file", required=True, type=Path, help="Slurm's jwt_hs256.key")
    apply.add_argument("--slurm-user", default="slurm", help="the Slurm user the applier's tokens name")
    apply.add_argument("--interval", type=float, default=5.0, help="seconds between passes")
    apply.add_argument("--alive-file", type=Path, help="touched every pass (for a liveness probe)")
    apply.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    apply.add_argument("--log-format", default="json", choices=["json", "text"])
    remove = sub.add_parser(
        "remove-nodesets",
        help="delete the NodeSets, wait until their members left job-safely (a pre-delete hook Job)",
    )
    remove.add_argument("--namespace", required=True)
    remove.add_argument("--kubeconfig", default=config._env("kubeconfig"))
    explain = sub.add_parser("explain", help="show the placeholder job a Pod manifest would get, offline")
    explain.add_argument(
        "-f",
        "--filename",
        required=True,
        action="append",
        help="Pod manifest (YAML or JSON; - for stdin); repeat, or give several documents, for a PodGroup",
    )
    explain.add_argument("-o", "--output", choices=["text", "json"], default="text")
    explain.add_argument("--slurm-kill-wait", default=config._env("slurm-kill-wait", "30s"))
    explain.add_argument("--annotation-prefix", default=config._env("annotation-prefix", DEFAULT_PREFIX))
    explain.add_argument("--scheduler-name", default=config._env("scheduler-name", "sunk"))
    explain.add_argument(
        "--slurm-api-version",
        default=config._env("slurm-api-version"),
        help="slurmrestd version to render the body for (default: the newest sunk speaks)",
    )
    explain.add_argument(
        "--device-gres",
        default=config._env("device-gres", "nvidia.com/gpu=gpu,rdma/ib="),
        help="the scheduler's device table: extended resource=GRES pairs",
    )
    explain.add_argument(
        "--policy",
        default=config._env("policy"),
        help="the scheduler's trust policy file, to judge the Pod as the scheduler would",
    )
    return parser


def run_dev(args: argparse.Namespace) -> int:
    cluster = DevCluster()
    if args.dev_command == "up":
        spec = ClusterSpec(
            args.nodes,
            args.accounting,
            args.kill_wait,
            args.preempt_mode,
            args.cpus_per_node,
            args.slurm,
            args.gpus_per_node,
            args.real_nodes,
        )
        seconds = cluster.up(spec)
        print(f"dev cluster up in {seconds:.1f} s")
        report.print_status(cluster, cluster.status())
    elif args.dev_command == "down":
        stopped = cluster.down()
        print(f"stopped {len(stopped)} processes" if stopped else "nothing was running")
        left = realcluster.host_leftovers(cluster.layout)
        if left:
            print(f"sunk: real Nodes left this on the host: {'; '.join(left)}", file=sys.stderr)
            return 1
    elif args.dev_command == "status":
        status = cluster.status()
        report.print_status(cluster, status)
        return 0 if status.running else 1
    elif args.dev_command == "platform":
        from sunk.devcluster import platform

        platform.demo(cluster)
    elif args.dev_command == "node":
        (cluster.stop_node if args.action == "stop" else cluster.start_node)(args.name)
        print(f"{args.name} {'stopped' if args.action == 'stop' else 'started'}")
    elif args.dev_command == "env":
        cluster.require_running()
        sys.stdout.write(cluster.env_text())
    elif args.dev_command == "slurm":
        return run_slurm_command(cluster, args.slurm_argv)
    return 0


def run_slurm_command(cluster: DevCluster, argv: Sequence[str]) -> int:
    """Run one Slurm CLI the way the running cluster's Slurm needs (chrooted or not)."""
    import subprocess

    argv = list(argv[1:] if argv[:1] == ["--"] else argv)
    if not argv:
        raise DevClusterError("name the Slurm command to run, e.g. `sunk dev slurm sinfo`")
    cluster.require_running()
    rt = slurmcluster.runtime(cluster.layout)
    try:
        return subprocess.run(rt.argv(argv), env=slurmcluster.cli_env(cluster.layout, rt)).returncode
    except FileNotFoundError as err:
        raise DevClusterError(f"cannot run {argv[0]}: {err}") from None


def run_demo() -> int:
    from sunk.demo import demo

    return demo(DevCluster())


def run_server(name: str, args: argparse.Namespace) -> int:
    """`sunk scheduler` or `sunk operator`: settings from the flags, then the component
    until SIGTERM. A bad flag exits 2; so does a slurmrestd that speaks no version sunk knows."""
    import asyncio

    from sunk import logs
    from sunk.slurm.client import SlurmVersionError

    try:
        if name == "operator":
            from sunk.operator.app import run as run_operator

            main = run_operator(operator_config.from_args(args))
        else:
            from sunk.scheduler.app import run as run_scheduler

            main = run_scheduler(config.from_arguments(args))
    except ValueError as err:
        print(f"sunk {name}: {err}", file=sys.stderr)
        return 2
    logs.setup(args.log_level, args.log_format)
    try:
        asyncio.run(main)
    except SlurmVersionError as err:
        print(f"sunk {name}: {err}", file=sys.stderr)
        return 2
    return 0


def run_apply_config(args: argparse.Namespace) -> int:
    """slurmctld's sidecar: runs until SIGTERM (see sunk.operator.config_apply)."""
    import asyncio

    from sunk import logs
    from sunk.operator.config_apply import run_forever

    logs.setup(args.log_level, args.log_format)
    asyncio.run(
        run_forever(
            args.namespace,
            args.configmap,
            args.config_dir,
            args.slurm_api_base,
            args.slurm_jwt_key_file,
            args.slurm_user,
            args.interval,
            args.alive_file,
        )
    )
    return 0


def run_ensure_hooks_secret(args: argparse.Namespace) -> int:
    from sunk.kube.client import KubeClient
    from sunk.kube.secret import ensure_and_report, ensure_hooks_secret, ensure_tls_secret

    if args.tls_secret and not args.tls_host:
        print("sunk ensure-hooks-secret: --tls-secret needs at least one --tls-host", file=sys.stderr)
        return 2

    async def ensure(kube: KubeClient) -> list[tuple[str, bool]]:
        made = [(args.name, await ensure_hooks_secret(kube, args.namespace, args.name))]
        if args.tls_secret:
            made.append(
                (
                    args.tls_secret,
                    await ensure_tls_secret(kube, args.namespace, args.tls_secret, args.tls_host),
                )
            )
        return made

    return ensure_and_report("ensure-hooks-secret", args.namespace, args.kubeconfig, ensure)


def run_explain(args: argparse.Namespace) -> int:
    import json

    from sunk.explain import explain, explain_group, manifests, render_text
    from sunk.policy import PERMISSIVE
    from sunk.policy import parse as parse_policy
    from sunk.translate import gang

    try:
        texts = [sys.stdin.read() if f == "-" else Path(f).read_text() for f in args.filename]
        pods, groups = manifests(texts)
        kill_wait = int(config.parse_duration(args.slurm_kill_wait))
        policy = parse_policy(Path(args.policy).read_text(), args.policy) if args.policy else PERMISSIVE
        devices = config.parse_devices(args.device_gres)
    except (OSError, ValueError, argparse.ArgumentTypeError) as err:
        print(f"sunk explain: {err}", file=sys.stderr)
        return 2
    from sunk.slurm.client import SUPPORTED_VERSIONS

    version = args.slurm_api_version or SUPPORTED_VERSIONS[0]
    if version not in SUPPORTED_VERSIONS:
        spoken = ", ".join(SUPPORTED_VERSIONS)
        print(
            f"sunk explain: --slurm-api-version {version} is not one sunk speaks ({spoken})", file=sys.stderr
        )
        return 2
    settings = Settings(args.annotation_prefix, kill_wait, args.scheduler_name, devices)
    group = next((name for p in pods if (name := gang.group_of(p))), None)
    if group:
        report = explain_group(group, pods, groups, settings, version, policy)
    else:
        report = explain(pods[0], settings, version, policy)
    if args.output == "json":
        print(json.dumps(report, indent=2))
    else:
        print(render_text(report, settings))
    return 0 if report["valid"] else 1


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ("dev", "explain"):
        # `sunk dev status | head` ends quietly. Never for the scheduler: a server must
        # outlive a client that hangs up before its answer is written.
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        if args.command == "dev":
            return run_dev(args)
        if args.command == "demo":
            return run_demo()
        if args.command in ("scheduler", "operator"):
            return run_server(args.command, args)
        if args.command == "explain":
            return run_explain(args)
        if args.command == "ensure-hooks-secret":
            return run_ensure_hooks_secret(args)
        if args.command == "ensure-slurm-secrets":
            from sunk.operator import secrets

            return secrets.run(
                args.namespace,
                args.auth_secret,
                args.token_secret,
                args.token_user,
                args.mariadb_secret,
                args.kubeconfig,
            )
        if args.command == "remove-nodesets":
            from sunk.operator import uninstall

            return uninstall.run(args.namespace, args.kubeconfig)
        if args.command == "apply-config":
            return run_apply_config(args)
        if args.command == "check-partitions":
            from sunk.operator import upgrade_check

            return upgrade_check.run(args.slurm_api_base, args.slurm_jwt_key_file, args.slurm_user, args.keep)
    except DevClusterError as err:
        print(f"sunk: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
