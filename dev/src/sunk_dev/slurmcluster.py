"""The Slurm half of the dev cluster: munged, optional MariaDB + slurmdbd, slurmctld, one
slurmd per node (`slurmd -N`, each on its own port) and slurmrestd with JWT auth.

Slurm 22.05 runs from the host's Debian 12 packages; 24.11 and 26.05 run chrooted into a
Debian root (see slurmroot.py). Which one a running cluster uses is recorded in
`slurm-runtime.json` in its run directory, and every Slurm command goes through
`runtime(layout).argv(...)` so callers never need to know.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import stat
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from sunk_dev import procs, slurmroot, topology
from sunk_dev.errors import DevClusterError
from sunk_dev.layout import HOST, Layout

# The only REST version Slurm 22.05 can serve; newer clusters: use rest_version(layout).
REST_VERSION = "v0.0.38"
# Probed when GET /openapi/v3 does not say which versions are served.
PROBE_REST_VERSIONS = tuple(f"v0.0.{n}" for n in range(36, 46))
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
    version: str = slurmroot.DEFAULT_VERSION
    root: Path | None = None  # the Debian root for versions other than the host's
    proctrack: str = "linuxproc"

    @property
    def modern(self) -> bool:
        return self.version != slurmroot.HOST_VERSION


@dataclass(frozen=True)
class SlurmRuntime:
    """How to run this cluster's Slurm: on the host (root None) or chrooted into a root."""

    version: str = slurmroot.HOST_VERSION
    release: str = ""
    root: Path | None = None
    rest_versions: tuple[str, ...] = ()
    cluster_dir: Path | None = None  # bind-mounted at the same path inside the root

    def argv(self, cmd: Sequence[str], user: str | None = None) -> list[str]:
        """`cmd` wrapped so it runs with this Slurm, as `user` ("name:group") if given. The
        process started keeps the PID of `cmd` itself in both cases."""
        if self.root is None:
            return ["chroot", f"--userspec={user}", "/", *cmd] if user else list(cmd)
        return slurmroot.launcher(self.root, cmd, user=user, bind=self.cluster_dir)

    def to_json(self) -> str:
        data = asdict(self)
        data["root"] = str(self.root) if self.root else None
        data["cluster_dir"] = str(self.cluster_dir) if self.cluster_dir else None
        data["rest_versions"] = list(self.rest_versions)
        return json.dumps(data, indent=2) + "\n"


def runtime(layout: Layout) -> SlurmRuntime:
    """The runtime of the cluster under `layout`; the host's Slurm when none was recorded."""
    try:
        data = json.loads(layout.slurm_runtime.read_text())
        return SlurmRuntime(
            version=str(data["version"]),
            release=str(data.get("release") or ""),
            root=Path(data["root"]) if data.get("root") else None,
            rest_versions=tuple(str(v) for v in data.get("rest_versions") or ()),
            cluster_dir=Path(data["cluster_dir"]) if data.get("cluster_dir") else layout.root,
        )
    except (OSError, ValueError, KeyError, TypeError):
        return SlurmRuntime(cluster_dir=layout.root)


def write_runtime(layout: Layout, rt: SlurmRuntime) -> None:
    tmp = layout.slurm_runtime.with_suffix(".tmp")
    tmp.write_text(rt.to_json())
    tmp.chmod(0o644)
    tmp.replace(layout.slurm_runtime)


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


def cli_env(layout: Layout, rt: SlurmRuntime | None = None) -> dict[str, str]:
    """Environment for Slurm's CLI tools: SLURM_JWT must be absent or they switch to JWT."""
    rt = rt or runtime(layout)
    env = {k: v for k, v in os.environ.items() if k != "SLURM_JWT"}
    env["SLURM_CONF"] = str(layout.slurm_conf)
    if rt.root is not None:
        env["PATH"] = slurmroot.ROOT_PATH  # the caller's PATH may name host-only directories
    return env


def run_cli(layout: Layout, *argv: str, timeout: float = 30) -> str:
    """Run a Slurm (or MariaDB) command of the cluster's Slurm and return its output."""
    rt = runtime(layout)
    result = subprocess.run(
        rt.argv(argv), env=cli_env(layout, rt), capture_output=True, text=True, timeout=timeout
    )
    if result.returncode != 0:
        raise DevClusterError(f"`{' '.join(argv)}` failed: {(result.stderr or result.stdout).strip()[:300]}")
    return result.stdout


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
        _start_accounting(layout, rt)

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


def _start_accounting(layout: Layout, rt: SlurmRuntime) -> None:
    dirs = (layout.pids, layout.logs)
    db = layout.slurm / "db"
    sock = db / "mysqld.sock"
    if not (db / "data" / "mysql").exists():
        db.mkdir(parents=True, exist_ok=True)
        install = subprocess.run(
            rt.argv(
                [
                    "mariadb-install-db",
                    "--no-defaults",
                    f"--datadir={db / 'data'}",
                    "--user=root",
                    "--auth-root-authentication-method=socket",
                    "--skip-test-db",
                ]
            ),
            env=cli_env(layout, rt),
            capture_output=True,
            text=True,
        )
        if install.returncode:
            raise DevClusterError(
                f"mariadb-install-db failed: {(install.stderr or install.stdout).strip()[-300:]}"
            )
    mariadb = procs.spawn(
        "mariadbd",
        rt.argv(
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
                # MariaDB 11.8 turns this on by default; slurmdbd warns it dies on write conflicts.
                *(["--innodb-snapshot-isolation=OFF"] if rt.root is not None else []),
            ]
        ),
        *dirs,
        env=cli_env(layout, rt),
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
    env = cli_env(layout, rt)
    if (
        rt.root is not None
        and (rt.root / slurmroot.CLIENT_LIBRARY_DIR.lstrip("/") / "libmariadb.so.3").exists()
    ):
        env["LD_LIBRARY_PATH"] = slurmroot.CLIENT_LIBRARY_DIR  # see slurmroot.CLIENT_LIBRARY_FROM
    dbd = procs.spawn("slurmdbd", rt.argv(["slurmdbd", "-D"]), *dirs, env=env)
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
    rt = runtime(layout)
    subprocess.run(rt.argv(argv), env=cli_env(layout, rt), capture_output=True, timeout=30)


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
