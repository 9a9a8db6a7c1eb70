"""The `sunk` command: the scheduler, the operator and the small commands their charts run.

A checkout adds `sunk dev ...` and `sunk demo` (the dev package, dev/): other installed
packages may add commands through the `sunk.commands` entry points, which are looked up
only when named, so `sunk scheduler` and `sunk operator` load nothing of them."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from sunk.flags import parse_duration
from sunk.operator import config as operator_config
from sunk.scheduler import config
from sunk.scheduler.translate import DEFAULT_PREFIX, Settings


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sunk",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="In a checkout (after `make bootstrap`) also: sunk dev {up,down,status,env,...}, sunk demo",
    )
    sub = parser.add_subparsers(dest="command", required=True)
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
    slurm_secrets.add_argument("--host-keys-secret", help="also a Secret with the login Pods' SSH host key")
    slurm_secrets.add_argument("--restapi-tls-secret", help="also a TLS Secret (its own CA) for slurmrestd")
    slurm_secrets.add_argument(
        "--restapi-tls-host", action="append", default=[], help="a name slurmrestd's certificate covers"
    )
    slurm_secrets.add_argument("--kubeconfig", default=config._env("kubeconfig"))
    partitions = sub.add_parser(
        "check-partitions",
        help="fail when an unfinished Slurm job uses a partition not in --keep (a pre-upgrade hook Job)",
    )
    partitions.add_argument("--slurm-api-base", required=True, help="slurmrestd's URL")
    partitions.add_argument("--slurm-jwt-key-file", required=True, type=Path, help="Slurm's jwt_hs256.key")
    partitions.add_argument("--slurm-ca-file", help="CA certificate (PEM) that signed slurmrestd's (https)")
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
    apply.add_argument("--slurm-ca-file", help="CA certificate (PEM) that signed slurmrestd's (https)")
    apply.add_argument("--slurm-user", default="slurm", help="the Slurm user the applier's tokens name")
    apply.add_argument("--interval", type=float, default=5.0, help="seconds between passes")
    apply.add_argument("--alive-file", type=Path, help="touched every pass (for a liveness probe)")
    apply.add_argument("--metrics-port", type=int, default=0, help="serve /metrics on this port (0: none)")
    apply.add_argument(
        "--pod-name",
        default=os.environ.get("POD_NAME", ""),
        help="this sidecar's Pod, annotated so the kubelet copies a changed ConfigMap now ($POD_NAME)",
    )
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
        help="the scheduler's trust policy file, to judge the Pod as the scheduler would (without it "
        "only the translation is judged; a scheduler without one refuses every Pod)",
    )
    return parser


# Commands a sunk checkout adds; named here only to say where they come from.
CHECKOUT_COMMANDS = frozenset({"dev", "demo"})


def _commands(parser: argparse.ArgumentParser) -> set[str]:
    return {
        name
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name in action.choices
    }


def run_added_command(name: str, argv: Sequence[str]) -> int | None:
    """Run a command another installed package adds (`sunk dev` from a checkout's dev
    package); None when no package adds `name`, so that argparse reports it."""
    from importlib.metadata import entry_points

    for entry in entry_points(group="sunk.commands", name=name):
        command: Callable[[Sequence[str]], int] = entry.load()
        return command(argv)
    if name in CHECKOUT_COMMANDS:
        print(
            f"sunk {name}: this command comes with a sunk checkout, not with this install: "
            "clone the repository and run `make bootstrap` (or `make demo`) there",
            file=sys.stderr,
        )
        return 2
    return None


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
    """slurmctld's sidecar: runs until SIGTERM (see sunk.operator.chart.config_apply)."""
    import asyncio

    from sunk import logs
    from sunk.operator.chart.config_apply import run_forever

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
            args.slurm_ca_file,
            args.metrics_port,
            args.pod_name,
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

    from sunk.scheduler.explain import explain, explain_group, manifests, render_text
    from sunk.scheduler.policy import PERMISSIVE
    from sunk.scheduler.policy import parse as parse_policy
    from sunk.scheduler.translate import gang

    try:
        texts = [sys.stdin.read() if f == "-" else Path(f).read_text() for f in args.filename]
        pods, groups = manifests(texts)
        kill_wait = int(parse_duration(args.slurm_kill_wait))
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
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv and not argv[0].startswith("-") and argv[0] not in _commands(parser):
        added = run_added_command(argv[0], argv[1:])
        if added is not None:
            return added
    args = parser.parse_args(argv)
    if args.command == "explain":
        # `sunk explain ... | head` ends quietly. Never for the servers: a server must
        # outlive a client that hangs up before its answer is written.
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        if args.command in ("scheduler", "operator"):
            return run_server(args.command, args)
        if args.command == "explain":
            return run_explain(args)
        if args.command == "ensure-hooks-secret":
            return run_ensure_hooks_secret(args)
        if args.command == "ensure-slurm-secrets":
            from sunk.operator.chart import secrets

            return secrets.run(
                args.namespace,
                args.auth_secret,
                args.token_secret,
                args.token_user,
                args.mariadb_secret,
                args.kubeconfig,
                args.host_keys_secret,
                args.restapi_tls_secret,
                tuple(args.restapi_tls_host),
            )
        if args.command == "remove-nodesets":
            from sunk.operator.chart import uninstall

            return uninstall.run(args.namespace, args.kubeconfig)
        if args.command == "apply-config":
            return run_apply_config(args)
        if args.command == "check-partitions":
            from sunk.operator.chart import upgrade_check

            return upgrade_check.run(
                args.slurm_api_base, args.slurm_jwt_key_file, args.slurm_user, args.keep, args.slurm_ca_file
            )
    except KeyboardInterrupt:
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
