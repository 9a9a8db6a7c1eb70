"""`sunk dev ...` and `sunk demo`: the commands this package adds to `sunk` in a checkout.

sunk's own command line finds them through the `sunk.commands` entry points of this
package (dev/pyproject.toml) and loads them only when one is named, so the scheduler and
the operator never import the dev cluster."""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from sunk_dev import (
    ClusterSpec,
    DevCluster,
    DevClusterError,
    directory_admin,
    platform,
    prometheus,
    realcluster,
    registry,
    report,
    slurmroot,
    slurmrun,
    story,
    storydemo,
)
from sunk_dev.demo import demo
from sunk_dev.kubeapi import AdminKube


def dev_parser() -> argparse.ArgumentParser:
    dev = argparse.ArgumentParser(
        prog="sunk dev", description="The local real cluster for the demo and the tests."
    )
    dev_sub = dev.add_subparsers(dest="dev_command", required=True)
    up = dev_sub.add_parser("up", help="start etcd, kube-apiserver, kwok and Slurm on 127.0.0.1")
    up.add_argument("--nodes", type=int, default=4, help="Slurm nodes / Kubernetes Nodes (4)")
    up.add_argument("--accounting", action="store_true", help="also run MariaDB + slurmdbd (QoS, accounts)")
    up.add_argument(
        "--directory", action="store_true", help="also run an LDAP directory (slapd) with a few people in it"
    )
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
    prom = dev_sub.add_parser(
        "prometheus",
        help="start a Prometheus (Debian's, on 127.0.0.1) scraping the cluster's annotated Services; "
        "print its URL",
    )
    prom.add_argument(
        "--rules",
        metavar="NAMESPACE/CONFIGMAP",
        help="also evaluate the Slurm chart's alert rules from this ConfigMap (a release installed "
        "with metrics.rules.configMap=true has <release>-prometheus-rules); without it, no rules",
    )
    pictures = dev_sub.add_parser(
        "dashboard-pictures",
        help="a PNG of each of the chart's dashboards for a release, taken in headless Chromium from "
        "the dev Prometheus's graph page (installs Debian's chromium on first use)",
    )
    pictures.add_argument("--namespace", default="slurm", help="the release's namespace (slurm)")
    pictures.add_argument("--nodeset", default="compute", help="the NodeSet dashboard's NodeSet (compute)")
    pictures.add_argument("--range", default="30m", help="how far back each graph reaches (30m)")
    pictures.add_argument(
        "--out", type=Path, help="where to write them (the checkout's docs/images, else ./dashboard-pictures)"
    )
    dev_sub.add_parser("status", help="show what runs and whether it answers")
    dev_sub.add_parser("env", help="print `export` lines for kubectl, Slurm's CLI and sunk")
    slurm = dev_sub.add_parser(
        "slurm",
        help="run a Slurm command (squeue, sinfo, scontrol, sacctmgr...) of the running cluster",
    )
    slurm.add_argument("slurm_argv", nargs=argparse.REMAINDER, metavar="CMD [ARGS...]")
    image = dev_sub.add_parser(
        "image",
        help="build a Dockerfile FROM the slurmd image the real Nodes run, push it to the dev registry, "
        "print its reference (what Nodes and `srun --container` pull)",
    )
    image.add_argument("context", type=Path, help="the build context: a directory with a Dockerfile")
    image.add_argument("name", help="the image's name in the registry: sunk/NAME:<Slurm version>")
    release = dev_sub.add_parser(
        "release",
        help="helm upgrade --install the Slurm chart as release `slurm` in NAMESPACE on the real Nodes, "
        "with the dev values (images, directory, registry) and then each -f file on top",
    )
    release.add_argument("namespace")
    release.add_argument(
        "-f",
        "--values",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="a values file, merged as helm merges -f files: maps key by key, lists whole (repeatable)",
    )
    _directory_parsers(dev_sub)
    return dev


def _directory_parsers(dev_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`sunk dev people ...` and `sunk dev group ...`: the dev directory, changed as its admin."""
    people = dev_sub.add_parser("people", help="add, remove or list people in the dev cluster's directory")
    people_sub = people.add_subparsers(dest="people_command", required=True)
    add = people_sub.add_parser("add", help="add a person (in the `people` group, so with a Slurm account)")
    add.add_argument("name")
    add.add_argument("--uid", type=int, help="their UID (the next one above everyone's)")
    add.add_argument("--group", action="append", default=[], metavar="G", help="also in group G (repeatable)")
    key = add.add_mutually_exclusive_group()
    key.add_argument("--key-file", type=Path, metavar="PATH", help="their SSH public key (a .pub file)")
    key.add_argument(
        "--generate-key",
        action="store_true",
        help="make them a key pair under the run directory (the default without --key-file)",
    )
    add.add_argument("--password-file", type=Path, metavar="PATH", help="a file holding their password")
    people_sub.add_parser("remove", help="remove a person and their groups' mentions of them").add_argument(
        "name"
    )
    people_sub.add_parser("list", help="everyone and every group in the directory")
    group = dev_sub.add_parser("group", help="add or remove a group in the dev cluster's directory")
    group_sub = group.add_subparsers(dest="group_command", required=True)
    gadd = group_sub.add_parser("add", help="add a group")
    gadd.add_argument("name")
    gadd.add_argument("--gid", type=int, help="its GID (the next one above every group's)")
    gadd.add_argument(
        "--member", nargs="+", default=[], metavar="NAME", help="people already in the directory"
    )
    group_sub.add_parser("remove", help="remove a group").add_argument("name")


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
            directory=args.directory,
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
        platform.demo(cluster)
    elif args.dev_command == "node":
        (cluster.stop_node if args.action == "stop" else cluster.start_node)(args.name)
        print(f"{args.name} {'stopped' if args.action == 'stop' else 'started'}")
    elif args.dev_command == "prometheus":
        run_prometheus(cluster, args.rules)
    elif args.dev_command == "dashboard-pictures":
        run_dashboard_pictures(cluster, args.namespace, args.nodeset, args.range, args.out)
    elif args.dev_command == "env":
        cluster.require_running()
        sys.stdout.write(cluster.env_text())
    elif args.dev_command == "slurm":
        return run_slurm_command(cluster, args.slurm_argv)
    elif args.dev_command in ("people", "group"):
        run_directory_command(cluster, args)
    elif args.dev_command == "image":
        run_image(cluster, args.context, args.name)
    elif args.dev_command == "release":
        run_release(cluster, args.namespace, args.values)
    return 0


def run_image(cluster: DevCluster, context: Path, name: str) -> None:
    """`sunk dev image`: the reference alone on stdout, so `IMAGE=$(sunk dev image ...)`."""
    cluster.require_running()
    if not (context / "Dockerfile").is_file():
        raise DevClusterError(f"no Dockerfile in {context}")
    log = cluster.layout.logs / f"{name}-image.log"
    print(f"building {context} FROM the Nodes' slurmd image (log: {log})...", file=sys.stderr)
    print(registry.build_from_slurmd(cluster.layout, context, name))


def run_release(cluster: DevCluster, namespace: str, files: Sequence[Path]) -> None:
    """`sunk dev release`: say what was installed, and where the values went."""
    extra = []
    for path in files:
        try:
            extra.append(yaml.safe_load(path.read_text()) or {})
        except (OSError, yaml.YAMLError) as err:
            raise DevClusterError(f"cannot read the values file {path}: {err}") from None
    kube = AdminKube(cluster.layout)
    try:
        plat, seconds = story.release(cluster, kube, namespace, *extra)
    finally:
        kube.close()
    print(
        f"helm upgrade --install {plat.release} charts/slurm -n {namespace} -f {plat.values_file}: "
        f"ready in {seconds:.0f} s\n"
        f"  {plat.values_file}: the dev values (images, real Nodes, directory, registry), then "
        f"{', '.join(map(str, files)) or 'nothing more'} merged on top (lists replace lists)\n"
        f"  the scheduler {namespace}-{plat.release} places Pods of the namespaces in its values' scope "
        f"(made: {plat.tenants}, {plat.strangers})"
    )


def run_directory_command(cluster: DevCluster, args: argparse.Namespace) -> None:
    """`sunk dev people ...` / `sunk dev group ...`; each says what changed and when it shows."""
    layout = cluster.layout
    # The operator's next read, then the kubelet's ConfigMap sync (docs/devcluster.md).
    later = "within directory.interval + about 90 s (under two minutes with the dev values' 10 s)"
    if args.dev_command == "group":
        if args.group_command == "add":
            gid = directory_admin.add_group(layout, args.name, gid=args.gid, members=args.member)
            print(f"added the group {args.name} (GID {gid}); it shows on the login and slurmd Pods {later}")
        else:
            directory_admin.remove_group(layout, args.name)
            print(f"removed the group {args.name}; it is gone from the Pods {later}")
    elif args.people_command == "add":
        added = directory_admin.add_person(
            layout,
            args.name,
            uid=args.uid,
            groups=args.group,
            key_file=args.key_file,
            password_file=args.password_file,
        )
        print(
            f"added {added.name} (UID {added.uid}, groups {','.join(added.groups)}); they can log in {later}"
        )
        if added.private_key:
            print(f"their private key: {added.private_key}")
    elif args.people_command == "remove":
        directory_admin.remove_person(layout, args.name)
        print(f"removed {args.name}; their logins are refused {later}")
    else:
        sys.stdout.write(directory_admin.describe(directory_admin.snapshot(layout)))


def run_prometheus(cluster: DevCluster, rules: str | None) -> None:
    """`sunk dev prometheus`: start it (or update its rules) and say where it is."""
    source = _configmap(rules) if rules else None
    cluster.require_running()
    layout = cluster.layout
    url = prometheus.ensure_running(layout, prometheus.fetch_rules(layout, *source) if source else None)
    print(url)
    print(f"graph page: {url}/graph, alerts: {url}/alerts, targets: {url}/targets")
    if prometheus.missing_web_assets(layout):
        print(
            "sunk: the graph page's scripts come from Debian packages that are not installed: "
            f"apt-get install --no-install-recommends {' '.join(prometheus.WEB_PACKAGES)}",
            file=sys.stderr,
        )


def run_dashboard_pictures(
    cluster: DevCluster, namespace: str, nodeset: str, range_: str, out: Path | None
) -> None:
    """`sunk dev dashboard-pictures`: the running Prometheus (started without rules if none
    runs; a running one keeps its rules), Chromium, then one PNG per dashboard."""
    import datetime

    from sunk_dev import prereqs, procs
    from sunk_dev.dashboards import chart_dashboards_dir, pictures

    if not re.fullmatch(r"\d+[smhdw]", range_):
        raise DevClusterError(f"--range takes a Prometheus duration such as 30m or 2h, not {range_!r}")
    cluster.require_running()
    layout = cluster.layout
    running = procs.load(layout.pids, prometheus.PROCESS)
    base = (
        prometheus.url(layout)
        if running is not None and running.alive()
        else prometheus.ensure_running(layout, None)
    )
    also = prometheus.WEB_PACKAGES if prometheus.missing_web_assets(layout) else ()
    browser = prereqs.ensure_browser(layout.logs / "browser-install.log", also)
    root = prereqs.repo_root()
    out = out or (root / "docs" / "images" if root else Path("dashboard-pictures"))
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    about = pictures.about(namespace, range_, pictures.prometheus_version(base), when)
    print(f"taking the pictures from {base} in {browser} (about a minute each)...", file=sys.stderr)
    written = pictures.take(
        base,
        pictures.load(chart_dashboards_dir()),
        out,
        browser,
        namespace=namespace,
        nodeset=nodeset,
        range_=range_,
        about=about,
    )
    for path in written:
        print(path)


def _configmap(text: str) -> tuple[str, str]:
    namespace, _, name = text.partition("/")
    if not namespace or not name or "/" in name:
        raise DevClusterError(
            f"--rules takes NAMESPACE/CONFIGMAP (e.g. slurm/slurm-prometheus-rules), not {text!r}"
        )
    return namespace, name


def run_slurm_command(cluster: DevCluster, argv: Sequence[str]) -> int:
    """Run one Slurm CLI the way the running cluster's Slurm needs (chrooted or not)."""
    argv = list(argv[1:] if argv[:1] == ["--"] else argv)
    if not argv:
        raise DevClusterError("name the Slurm command to run, e.g. `sunk dev slurm sinfo`")
    cluster.require_running()
    rt = slurmrun.runtime(cluster.layout)
    try:
        return subprocess.run(rt.argv(argv), env=slurmrun.cli_env(cluster.layout, rt)).returncode
    except FileNotFoundError as err:
        raise DevClusterError(f"cannot run {argv[0]}: {err}") from None


def run_demo(scheduler_only: bool) -> int:
    return demo(DevCluster()) if scheduler_only else storydemo.run()


def dev_command(argv: Sequence[str]) -> int:
    """`sunk dev ARGS`."""
    return _guarded(lambda: run_dev(dev_parser().parse_args(argv)))


def demo_command(argv: Sequence[str]) -> int:
    """`sunk demo [--scheduler-only]`."""
    parser = argparse.ArgumentParser(
        prog="sunk demo",
        description="Bring the dev cluster up (if needed) and show it working: Slurm trains and "
        "Kubernetes serves on the same three real Nodes (examples/train-and-serve).",
    )
    parser.add_argument(
        "--scheduler-only",
        action="store_true",
        help="only sunk's Pod scheduler, on imitation (kwok) Nodes: no real Nodes needed",
    )
    args = parser.parse_args(argv)
    return _guarded(lambda: run_demo(args.scheduler_only))


def _guarded(command: Callable[[], int]) -> int:
    # `sunk dev status | head` ends quietly.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        return command()
    except DevClusterError as err:
        print(f"sunk: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
