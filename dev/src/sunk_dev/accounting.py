"""The dev cluster's accounting: MariaDB and slurmdbd on 127.0.0.1, with a cluster, two
accounts and the QoS the tests use (low, high preempting low by cancel, urgent by requeue)
made in it, for `sunk dev up --accounting`."""

from __future__ import annotations

import subprocess

from sunk_dev import procs, slurmroot, topology
from sunk_dev.errors import DevClusterError
from sunk_dev.layout import HOST, Layout
from sunk_dev.slurmrun import SlurmRuntime, cli_env, run_cli, runtime, short_hostname

ACCOUNTS = ("acct1", "acct2")
QOS = {
    "low": "Priority=10",
    "high": "Priority=1000 Preempt=low PreemptMode=cancel",
    "urgent": "Priority=1000 Preempt=low PreemptMode=requeue",
}
DB_PASSWORD = "sunk-dev-only"  # loopback-only throwaway database


def start(layout: Layout, rt: SlurmRuntime) -> None:
    """Start MariaDB (its data made on first use) and slurmdbd, and fill in the accounts."""
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
