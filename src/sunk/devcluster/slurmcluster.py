"""The Slurm half of the dev cluster: munged, optional MariaDB + slurmdbd, slurmctld, one
slurmd per node (`slurmd -N`, each on its own port) and slurmrestd with JWT auth."""

from __future__ import annotations

import os
import secrets
import socket
import stat
import subprocess
from dataclasses import dataclass

import httpx

from sunk.devcluster import procs, topology
from sunk.devcluster.errors import DevClusterError
from sunk.devcluster.layout import HOST, Layout

REST_VERSION = "v0.0.38"
TOKEN_LIFESPAN_S = 30 * 24 * 3600
FAST_SCHEDULING = "batch_sched_delay=0,sched_min_interval=0,default_queue_depth=1000,bf_interval=5"
ACCOUNTS = ("acct1", "acct2")
QOS = {
    "low": "Priority=10",
    "high": "Priority=1000 Preempt=low PreemptMode=cancel",
    "urgent": "Priority=1000 Preempt=low PreemptMode=requeue",
}
DB_PASSWORD = "sunk-dev-only"  # loopback-only throwaway database


@dataclass(frozen=True)
class SlurmSpec:
    nodes: list[topology.NodePlan]
    kill_wait: int = 30
    accounting: bool = False
    preempt_mode: str = "CANCEL"


def short_hostname() -> str:
    """slurmctld insists on the short host name in SlurmctldHost."""
    return socket.gethostname().split(".")[0]


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
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        # The host has fewer CPUs than the nodes declare; trust the configuration.
        "SlurmdParameters=config_overrides",
        "DefMemPerCPU=100",
        "ReturnToService=2",
        "GresTypes=gpu",
        f"KillWait={spec.kill_wait}",
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
            f"RealMemory={topology.MEMORY_MIB_PER_NODE} Gres=gpu:{topology.GPUS_PER_NODE} "
            f"Feature={','.join(node.slurm_features)} State=UNKNOWN"
        )
    lines += [
        "PartitionName=batch Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1",
        "PartitionName=high Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=10",
    ]
    return "\n".join(lines) + "\n"


def cli_env(layout: Layout) -> dict[str, str]:
    """Environment for Slurm's CLI tools: SLURM_JWT must be absent or they switch to JWT."""
    env = {k: v for k, v in os.environ.items() if k != "SLURM_JWT"}
    env["SLURM_CONF"] = str(layout.slurm_conf)
    return env


def run_cli(layout: Layout, *argv: str, timeout: float = 30) -> str:
    result = subprocess.run(list(argv), env=cli_env(layout), capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise DevClusterError(f"`{' '.join(argv)}` failed: {(result.stderr or result.stdout).strip()[:300]}")
    return result.stdout


def _prepare_files(spec: SlurmSpec, layout: Layout) -> None:
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
        subprocess.run(["mungekey", "-c", "-k", str(key), "-b", "1024"], check=True)
    key.chmod(0o600)
    jwt_key = etc / "jwt.key"
    if not jwt_key.exists():
        jwt_key.write_bytes(secrets.token_bytes(32))
    jwt_key.chmod(0o600)
    # gres/gpu drops GPUs without a device file, so every fake GPU is a character device.
    for i in range(topology.GPUS_PER_NODE):
        dev = layout.slurm / "fakedev" / f"gpu{i}"
        if not dev.exists():
            os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    layout.slurm_conf.write_text(render_slurm_conf(spec, layout, short_hostname()))
    last_gpu = topology.GPUS_PER_NODE - 1
    (etc / "gres.conf").write_text(f"Name=gpu File={layout.slurm / 'fakedev'}/gpu[0-{last_gpu}]\n")
    for conf in (layout.slurm_conf, etc / "gres.conf"):
        conf.chmod(0o644)


def start(spec: SlurmSpec, layout: Layout) -> None:
    _prepare_files(spec, layout)
    dirs = (layout.pids, layout.logs)
    env = cli_env(layout)
    munge_dir = layout.slurm / "munge"
    munged = procs.spawn(
        "munged",
        [
            "munged",
            "--foreground",
            f"--key-file={munge_dir / 'munge.key'}",
            f"--socket={layout.munge_socket}",
            f"--pid-file={munge_dir / 'munged.pid'}",
            f"--seed-file={munge_dir / 'munged.seed'}",
            f"--log-file={layout.logs / 'munged-own.log'}",
        ],
        *dirs,
    )
    procs.wait_until(
        layout.munge_socket.exists, timeout=15, what="munged", watch=[munged], log_dir=layout.logs
    )
    if spec.accounting:
        _start_accounting(layout)

    ctld = procs.spawn("slurmctld", ["slurmctld", "-D", "-i"], *dirs, env=env)
    procs.wait_until(
        lambda: "UP" in run_cli(layout, "scontrol", "ping", timeout=5),
        timeout=30,
        what="slurmctld to answer",
        watch=[ctld],
        log_dir=layout.logs,
    )
    slurmds = [
        procs.spawn(f"slurmd-{n.slurm_node}", ["slurmd", "-D", "-N", n.slurm_node], *dirs, env=env)
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

    rest_env = dict(env, SLURM_JWT="daemon")
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
            f"{HOST}:{layout.ports.slurmrestd}",
        ],
        *dirs,
        env=rest_env,
    )
    output = run_cli(layout, "scontrol", "token", "username=root", f"lifespan={TOKEN_LIFESPAN_S}")
    token = output.strip().removeprefix("SLURM_JWT=")
    layout.slurm_token.write_text(token + "\n")
    layout.slurm_token.chmod(0o600)
    procs.wait_until(
        lambda: rest_ping(layout),
        timeout=30,
        what="slurmrestd to answer with the root token",
        watch=[rest],
        log_dir=layout.logs,
    )


def rest_ping(layout: Layout) -> bool:
    token = layout.slurm_token.read_text().strip()
    resp = httpx.get(
        f"{layout.rest_url}/slurm/{REST_VERSION}/ping",
        headers={"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": token},
        timeout=5,
    )
    return resp.status_code == 200 and not resp.json().get("errors")


def _idle_nodes(layout: Layout) -> int:
    out = run_cli(layout, "sinfo", "-h", "-N", "-r", "-p", "batch", "-t", "idle", "-o", "%N", timeout=5)
    return len(out.split())


def _start_accounting(layout: Layout) -> None:
    dirs = (layout.pids, layout.logs)
    db = layout.slurm / "db"
    sock = db / "mysqld.sock"
    if not (db / "data" / "mysql").exists():
        db.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={db / 'data'}",
                "--user=root",
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
            ],
            check=True,
            capture_output=True,
        )
    mariadb = procs.spawn(
        "mariadbd",
        [
            "mariadbd",
            "--no-defaults",
            f"--datadir={db / 'data'}",
            f"--socket={sock}",
            f"--port={layout.ports.mariadb}",
            f"--bind-address={HOST}",
            "--user=root",
            "--innodb-buffer-pool-size=128M",
            "--innodb-lock-wait-timeout=900",
            "--skip-log-bin",
        ],
        *dirs,
    )

    def sql(statement: str) -> str:
        return run_cli(layout, "mariadb", "--no-defaults", "-S", str(sock), "-u", "root", "-e", statement)

    procs.wait_until(
        lambda: bool(sql("select 1")),
        timeout=60,
        what="MariaDB",
        watch=[mariadb],
        log_dir=layout.logs,
    )
    sql(
        f"CREATE USER IF NOT EXISTS 'slurm'@'{HOST}' IDENTIFIED BY '{DB_PASSWORD}'; "
        f"GRANT ALL ON slurm_acct_db.* TO 'slurm'@'{HOST}';"
    )
    etc = layout.slurm / "etc"
    conf = etc / "slurmdbd.conf"
    conf.write_text(
        "\n".join(
            [
                "AuthType=auth/munge",
                f"AuthInfo=socket={layout.munge_socket}",
                "AuthAltTypes=auth/jwt",
                f"AuthAltParameters=jwt_key={etc / 'jwt.key'}",
                f"DbdHost={short_hostname()}",
                f"DbdAddr={HOST}",
                f"DbdPort={layout.ports.slurmdbd}",
                "SlurmUser=root",
                "StorageType=accounting_storage/mysql",
                f"StorageHost={HOST}",
                f"StoragePort={layout.ports.mariadb}",
                "StorageUser=slurm",
                f"StoragePass={DB_PASSWORD}",
                "StorageLoc=slurm_acct_db",
                f"PidFile={layout.slurm / 'slurmdbd.pid'}",
                f"LogFile={layout.logs / 'slurmdbd-own.log'}",
                "DebugLevel=info",
            ]
        )
        + "\n"
    )
    conf.chmod(0o600)  # slurmdbd refuses a readable slurmdbd.conf
    dbd = procs.spawn("slurmdbd", ["slurmdbd", "-D"], *dirs, env=cli_env(layout))
    procs.wait_until(
        lambda: run_cli(layout, "sacctmgr", "-n", "show", "cluster", timeout=10) is not None,
        timeout=60,
        interval=0.5,
        what="slurmdbd",
        watch=[dbd],
        log_dir=layout.logs,
    )
    sacctmgr = ("sacctmgr", "-i")
    _tolerate_exists(layout, *sacctmgr, "add", "cluster", "sunkdev")
    for name, options in QOS.items():
        _tolerate_exists(layout, *sacctmgr, "add", "qos", name, *options.split())
    _tolerate_exists(layout, *sacctmgr, "add", "account", ",".join(ACCOUNTS), "Cluster=sunkdev")
    users = ("root", topology.JOB_USER)
    for account in ACCOUNTS:
        for user in users:
            _tolerate_exists(layout, *sacctmgr, "add", "user", user, f"Account={account}")
    run_cli(
        layout,
        *sacctmgr,
        "modify",
        "user",
        ",".join(users),
        "set",
        "qos=normal,low,high,urgent",
        "DefaultQOS=normal",
    )


def _tolerate_exists(layout: Layout, *argv: str) -> None:
    """sacctmgr exits non-zero when there is nothing to add; that is fine on a re-run."""
    subprocess.run(list(argv), env=cli_env(layout), capture_output=True, timeout=30)


def cancel_all_jobs(layout: Layout) -> None:
    """Kill every job at once so job processes end through Slurm before the daemons stop."""
    env = cli_env(layout)
    jobs = subprocess.run(
        ["squeue", "-h", "-o", "%A"], env=env, capture_output=True, text=True, timeout=10
    ).stdout.split()
    if not jobs:
        return
    subprocess.run(["scancel", "--full", "-s", "KILL", *jobs], env=env, capture_output=True, timeout=30)
    subprocess.run(["scancel", *jobs], env=env, capture_output=True, timeout=30)
