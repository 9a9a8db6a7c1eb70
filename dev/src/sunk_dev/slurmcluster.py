"""The Slurm half of the dev cluster: munged, optional MariaDB + slurmdbd, slurmctld, one
slurmd per node (`slurmd -N`, each on its own port) and slurmrestd with JWT auth.

Slurm 22.05 runs from the host's Debian 12 packages; 24.11 and 26.05 run chrooted into a
Debian root (see slurmroot.py). Which one a running cluster uses is recorded in
`slurm-runtime.json` in its run directory, and every Slurm command goes through
`runtime(layout).argv(...)` so callers never need to know.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

import httpx

from sunk.scheduler.jobs import DEFAULT_JOB_ID_RANGE
from sunk_dev import accounting, procs, slurmroot, topology
from sunk_dev.errors import DevClusterError
from sunk_dev.layout import HOST, Layout
from sunk_dev.slurmrun import SlurmRuntime, cli_env, run_cli, runtime, short_hostname, write_runtime

# The only REST version Slurm 22.05 can serve; newer clusters: use rest_version(layout).
REST_VERSION = "v0.0.38"
# Probed when GET /openapi/v3 does not say which versions are served.
PROBE_REST_VERSIONS = tuple(f"v0.0.{n}" for n in range(36, 46))
TOKEN_LIFESPAN_S = 30 * 24 * 3600
FAST_SCHEDULING = "batch_sched_delay=0,sched_min_interval=0,default_queue_depth=1000,bf_interval=5"


@dataclass(frozen=True)
class SlurmSpec:
    nodes: list[topology.NodePlan]
    kill_wait: int = 30
    accounting: bool = False
    preempt_mode: str = "CANCEL"
    version: str = slurmroot.DEFAULT_VERSION
    root: Path | None = None  # the Debian root for versions other than the host's
    proctrack: str = "linuxproc"

    @property
    def modern(self) -> bool:
        return self.version != slurmroot.HOST_VERSION


def host_release() -> str:
    """The version of the host's slurmctld package ("" when it is not installed)."""
    try:
        done = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", "slurmctld"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def render_slurm_conf(spec: SlurmSpec, layout: Layout, host: str) -> str:
    etc, state = layout.slurm / "etc", layout.slurm / "state"
    ports = layout.ports
    lines = [
        "# Written by `sunk dev up`; regenerated on every start.",
        "ClusterName=sunkdev",
        f"SlurmctldHost={host}({HOST})",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"SlurmctldPort={ports.slurmctld}",
        f"SlurmdPort={ports.slurmd_base}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={layout.munge_socket}",
        "AuthAltTypes=auth/jwt",
        f"AuthAltParameters=jwt_key={etc / 'jwt.key'}",
        f"StateSaveLocation={state / 'ctld'}",
        f"SlurmdSpoolDir={state / 'd' / '%n'}",
        f"SlurmctldPidFile={layout.slurm / 'slurmctld.pid'}",
        f"SlurmdPidFile={state / 'd' / '%n' / 'slurmd.pid'}",
        f"SlurmctldLogFile={layout.logs / 'slurmctld.log'}",
        f"SlurmdLogFile={layout.logs / 'slurmd-%n.log'}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "MailProg=/bin/true",
        f"ProctrackType=proctrack/{spec.proctrack}",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        # 24.11 and later reject SwitchType and JobCompType=jobcomp/none (none is the default).
        *([] if spec.modern else ["JobCompType=jobcomp/none"]),
        "MpiDefault=none",
        *([] if spec.modern else ["SwitchType=switch/none"]),
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        # The host has fewer CPUs than the nodes declare; trust the configuration.
        "SlurmdParameters=config_overrides",
        "DefMemPerCPU=100",
        "ReturnToService=2",
        "GresTypes=gpu",
        f"KillWait={spec.kill_wait}",
        # Slurm's counter stays below the scheduler's own job IDs (its --job-id-range default).
        f"MaxJobId={DEFAULT_JOB_ID_RANGE[0]}",
        f"SchedulerParameters={FAST_SCHEDULING}",
        f"PreemptMode={spec.preempt_mode}",
    ]
    if spec.accounting:
        lines += [
            "PreemptType=preempt/qos",
            "AccountingStorageType=accounting_storage/slurmdbd",
            f"AccountingStorageHost={HOST}",
            f"AccountingStoragePort={ports.slurmdbd}",
            f"AccountingStoragePass={layout.munge_socket}",
            "AccountingStorageEnforce=associations,limits,qos",
            "AccountingStorageTRES=gres/gpu",
            "PriorityType=priority/multifactor",
            "PriorityWeightQOS=100000",
        ]
    else:
        lines += [
            "PreemptType=preempt/partition_prio",
            "AccountingStorageType=accounting_storage/none",
        ]
    for node in spec.nodes:
        lines.append(
            f"NodeName={node.slurm_node} NodeHostname={host} NodeAddr={HOST} "
            f"Port={ports.slurmd(node.index)} CPUs={node.cpus} "
            f"RealMemory={topology.MEMORY_MIB_PER_NODE} Gres=gpu:{node.gpus} "
            f"Feature={','.join(node.slurm_features)} State=UNKNOWN"
        )
    lines += [
        "PartitionName=batch Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1",
        "PartitionName=high Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=10",
    ]
    return "\n".join(lines) + "\n"


def _prepare_files(spec: SlurmSpec, layout: Layout, rt: SlurmRuntime) -> None:
    etc = layout.slurm / "etc"
    for sub in ("etc", "state/ctld", "state/d", "munge", "fakedev"):
        (layout.slurm / sub).mkdir(parents=True, exist_ok=True)
    for node in spec.nodes:
        (layout.slurm / "state" / "d" / node.slurm_node).mkdir(exist_ok=True)
    # slurmrestd runs as nobody and munged wants a traversable socket directory.
    for path in (layout.root, layout.slurm, etc, layout.slurm / "munge"):
        path.chmod(0o755)
    key = layout.slurm / "munge" / "munge.key"
    if not key.exists():
        subprocess.run(
            rt.argv(["mungekey", "-c", "-k", str(key), "-b", "1024"]), env=cli_env(layout, rt), check=True
        )
    key.chmod(0o600)
    jwt_key = etc / "jwt.key"
    if not jwt_key.exists():
        jwt_key.write_bytes(secrets.token_bytes(32))
    jwt_key.chmod(0o600)
    # gres/gpu drops GPUs without a device file, so every fake GPU is a character device:
    # NVIDIA's major (195) for newer Slurm, /dev/null's numbers for 22.05 as before. They live
    # in the run directory, which a root sees at the same path.
    gpus = max((node.gpus for node in spec.nodes), default=1)
    for i in range(gpus):
        dev = layout.slurm / "fakedev" / f"gpu{i}"
        if not dev.exists():
            os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(195, i) if spec.modern else os.makedev(1, 3))
    layout.slurm_conf.write_text(render_slurm_conf(spec, layout, short_hostname()))
    (etc / "gres.conf").write_text(f"Name=gpu File={layout.slurm / 'fakedev'}/gpu[0-{gpus - 1}]\n")
    confs = [layout.slurm_conf, etc / "gres.conf"]
    if spec.modern:
        # No cgroups for the pretend nodes: they all share this host.
        (etc / "cgroup.conf").write_text("CgroupPlugin=disabled\nIgnoreSystemd=yes\n")
        confs.append(etc / "cgroup.conf")
    for conf in confs:
        conf.chmod(0o644)


def start(spec: SlurmSpec, layout: Layout) -> None:
    if spec.modern and spec.root is None:
        raise DevClusterError(f"Slurm {spec.version} needs its Debian root (slurmroot.ensure_root)")
    rt = SlurmRuntime(
        version=spec.version,
        release=_root_release(spec.root) if spec.root else host_release(),
        root=spec.root,
        cluster_dir=layout.root,
    )
    write_runtime(layout, rt)
    _prepare_files(spec, layout, rt)
    dirs = (layout.pids, layout.logs)
    env = cli_env(layout, rt)
    munge_dir = layout.slurm / "munge"
    munged = procs.spawn(
        "munged",
        rt.argv(
            [
                "munged",
                "--foreground",
                f"--key-file={munge_dir / 'munge.key'}",
                f"--socket={layout.munge_socket}",
                f"--pid-file={munge_dir / 'munged.pid'}",
                f"--seed-file={munge_dir / 'munged.seed'}",
                f"--log-file={layout.logs / 'munged-own.log'}",
            ]
        ),
        *dirs,
        env=env,
    )
    procs.wait_until(
        layout.munge_socket.exists, timeout=15, what="munged", watch=[munged], log_dir=layout.logs
    )
    if spec.accounting:
        accounting.start(layout, rt)

    ctld = procs.spawn("slurmctld", rt.argv(["slurmctld", "-D", "-i"]), *dirs, env=env)
    procs.wait_until(
        lambda: "UP" in run_cli(layout, "scontrol", "ping", timeout=5),
        timeout=30,
        what="slurmctld to answer",
        watch=[ctld],
        log_dir=layout.logs,
    )
    slurmds = [
        procs.spawn(f"slurmd-{n.slurm_node}", rt.argv(["slurmd", "-D", "-N", n.slurm_node]), *dirs, env=env)
        for n in spec.nodes
    ]
    procs.wait_until(
        lambda: _idle_nodes(layout) >= len(spec.nodes),
        timeout=60 + len(spec.nodes),
        interval=0.25,
        what=f"{len(spec.nodes)} Slurm nodes to become idle",
        watch=[ctld, *slurmds],
        log_dir=layout.logs,
    )

    listen = f"{HOST}:{layout.ports.slurmrestd}"
    if spec.modern:
        # slurmrestd refuses root; SLURM_JWT=daemon makes it accept the clients' tokens. The
        # default plugin set of 24.11 wants slurmdbd, so name the plugins served. Compact
        # JSON: pretty-printing makes a job listing about three times larger.
        plugins = "openapi/slurmctld,openapi/slurmdbd" if spec.accounting else "openapi/slurmctld"
        rest_argv = rt.argv(
            [
                "env",
                "SLURM_JWT=daemon",
                "SLURMRESTD_JSON=compact",
                "slurmrestd",
                "-a",
                "rest_auth/jwt",
                "-s",
                plugins,
                listen,
            ],
            user="nobody:nogroup",
        )
        rest = procs.spawn("slurmrestd", rest_argv, *dirs, env=env)
    else:
        rest = procs.spawn(
            "slurmrestd",
            [
                "slurmrestd",
                "-u",
                "nobody",
                "-a",
                "rest_auth/jwt",
                "-s",
                "openapi/v0.0.38,openapi/v0.0.37,openapi/v0.0.36",
                listen,
            ],
            *dirs,
            env=dict(env, SLURM_JWT="daemon"),
        )
    output = run_cli(layout, "scontrol", "token", "username=root", f"lifespan={TOKEN_LIFESPAN_S}")
    token = output.strip().removeprefix("SLURM_JWT=")
    layout.slurm_token.write_text(token + "\n")
    layout.slurm_token.chmod(0o600)
    served: list[tuple[str, ...]] = [()]

    def rest_answers() -> bool:
        served[0] = served_rest_versions(layout)
        return bool(served[0])

    procs.wait_until(
        rest_answers,
        timeout=30,
        what="slurmrestd to answer with the root token",
        watch=[rest],
        log_dir=layout.logs,
    )
    rt = SlurmRuntime(rt.version, rt.release, rt.root, served[0], rt.cluster_dir)
    write_runtime(layout, rt)
    procs.wait_until(
        lambda: rest_ping(layout),
        timeout=30,
        what="slurmrestd to answer a ping",
        watch=[rest],
        log_dir=layout.logs,
    )


def _root_release(root: Path) -> str:
    data = slurmroot.read_marker(root) or {}
    return str(data.get("slurm", ""))


def _auth_headers(layout: Layout) -> dict[str, str]:
    token = layout.slurm_token.read_text().strip()
    return {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": token}


def served_rest_versions(layout: Layout) -> tuple[str, ...]:
    """REST versions slurmrestd serves, oldest first: from its OpenAPI document, or by
    pinging each known version when that document does not list them."""
    headers = _auth_headers(layout)
    found: set[str] = set()
    with httpx.Client(base_url=layout.rest_url, headers=headers, timeout=10) as http:
        try:
            resp = http.get("/openapi/v3")
            if resp.status_code == 200:
                for path in resp.json().get("paths", {}):
                    match = re.match(r"^/slurm/(v\d+\.\d+\.\d+)/", path)
                    if match:
                        found.add(match.group(1))
        except (httpx.HTTPError, ValueError, AttributeError):
            pass
        if not found:
            for version in PROBE_REST_VERSIONS:
                try:
                    resp = http.get(f"/slurm/{version}/ping")
                except httpx.HTTPError:
                    continue
                if resp.status_code == 200:
                    found.add(version)
    return tuple(sorted(found, key=_version_key))


def rest_version(layout: Layout) -> str:
    """The newest REST version the running cluster's slurmrestd serves."""
    versions = runtime(layout).rest_versions or served_rest_versions(layout)
    if not versions:
        raise DevClusterError(f"slurmrestd at {layout.rest_url} serves no REST version we know")
    return max(versions, key=_version_key)


def rest_ping(layout: Layout) -> bool:
    resp = httpx.get(
        f"{layout.rest_url}/slurm/{rest_version(layout)}/ping",
        headers=_auth_headers(layout),
        timeout=5,
    )
    return resp.status_code == 200 and not resp.json().get("errors")


def _idle_nodes(layout: Layout) -> int:
    out = run_cli(layout, "sinfo", "-h", "-N", "-r", "-p", "batch", "-t", "idle", "-o", "%N", timeout=5)
    return len(out.split())


def cancel_all_jobs(layout: Layout) -> None:
    """Kill every job at once so job processes end through Slurm before the daemons stop."""
    rt = runtime(layout)
    env = cli_env(layout, rt)
    jobs = subprocess.run(
        rt.argv(["squeue", "-h", "-o", "%A"]), env=env, capture_output=True, text=True, timeout=10
    ).stdout.split()
    if not jobs:
        return
    subprocess.run(
        rt.argv(["scancel", "--full", "-s", "KILL", *jobs]), env=env, capture_output=True, timeout=30
    )
    subprocess.run(rt.argv(["scancel", *jobs]), env=env, capture_output=True, timeout=30)
