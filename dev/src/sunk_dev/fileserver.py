"""Network storage for the dev cluster's real Nodes: a GlusterFS server on the Pod bridge and
its FUSE client on every Node, from Debian's packages.

Why GlusterFS: the kernels we run on often have no NFS client (this project's CI machines
offer FUSE but not `nfs`), and a user's cluster reaches its ReadWriteMany volumes over the
network. GlusterFS serves files from user space, its client is FUSE, and it keeps each
file's owner: a job's files belong to the job's user on every Node, as on NFS.

The server (glusterd and the brick process it starts) is a host of its own on the cluster's
bridge: a network namespace `sunkfs<k>` whose one link is attached to `sunkbr<k>` with the
address 10.(64+k).254.1, so it listens there and nowhere else. It also runs in a private
mount namespace in which GlusterFS's state, run and log directories are the run directory's
(`fileserver/`): nothing lands in the host's /var/lib/glusterd or /run. It serves one volume,
`sunk`, from one brick (`fileserver/brick`).

Only the host reaches it: its clients all run in the host's network namespace, so they
connect from the host's address on the bridge (the gateway, or one of the Nodes' addresses,
which are the host's too). No Pod mounts it (Pods get hostPath volumes into the Nodes'
mounts). So an nftables table in the server's namespace refuses every connection from any
other address (Pods, anything else on the bridge) before glusterd or a brick sees it: no
volume file, no read-only `gluster --remote-host` queries, no brick. And the volume's own
`auth.allow` names the same addresses, as a site would set it, so a brick refuses a client
from elsewhere even past the firewall (all but the server's own address, which glusterd
trusts as a member of its pool and hands the volume's internal credentials).

Each real Node mounts the volume over `volumes/` in its own mount namespace
(`fileclient-real-<i>`, started before that Node's kubelet), and so does the volume
provisioner (`fileclient-provisioner`). A PersistentVolume's path is therefore the same
directory of one network file system on every Node, reached over TCP through the bridge by
each Node's own client with its own caches: a site's file system mounted on every host,
which the PersistentVolumes then point into. The host itself never mounts it.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from xml.etree import ElementTree

from sunk_dev import hostnet, procs, slurmroot
from sunk_dev.errors import DevClusterError
from sunk_dev.layout import Layout

SERVER = "fileserver"
VOLUME = "sunk"
FSTYPE = "fuse.glusterfs"
CLI_TIMEOUT_S = 60
# glusterd's own settings; the ports are free because the namespace is the server's alone.
GLUSTERD_VOL = """\
volume management
    type mgmt/glusterd
    option working-directory /var/lib/glusterd
    option transport-type socket
    option transport.socket.listen-port 24007
    option ping-timeout 0
    option event-threads 1
    option max-port 60999
end-volume
"""
# Run inside the server's namespaces: its own state, run and log directories, then glusterd.
SERVE = (
    'mount --bind "$1/state" /var/lib/glusterd && mount --bind "$1/run" /run'
    ' && mount --bind "$1/log" /var/log/glusterfs && exec glusterd -N -f "$1/glusterd.vol"'
)


# The server's firewall, applied in its namespace before glusterd starts; the table goes
# with the namespace. `lo`: the brick fetches its volume file from glusterd at the server's
# own address.
FIREWALL = """\
table inet sunk_fileserver {{
  chain input {{
    type filter hook input priority 0; policy drop;
    iif "lo" accept
    ct state established,related accept
    ip saddr {{ {gateway}, {nodes} }} accept
    meta l4proto tcp reject with tcp reset
    reject
  }}
}}
"""


def allowed_clients(net: hostnet.PodNetwork) -> tuple[str, str]:
    """The host's addresses on the bridge, the only ones the server answers: the gateway
    (what the kernel picks as the clients' source) and the Nodes' range (10.(64+k).255.x)."""
    return net.gateway, net.node_ip(0).rpartition(".")[0] + ".0/24"


def auth_allow(net: hostnet.PodNetwork) -> str:
    """The same addresses in the volume's `auth.allow` syntax (addresses and wildcards)."""
    gateway, nodes = allowed_clients(net)
    return f"{gateway},{nodes.rpartition('.')[0]}.*"


def server_dir(layout: Layout) -> Path:
    return layout.root / "fileserver"


def client_name(owner: str) -> str:
    return f"fileclient-{owner}"


# -- the server ------------------------------------------------------------------------------
def start_server(layout: Layout) -> None:
    """The server's namespace on the bridge, glusterd, and the volume, started; returns once
    the brick serves. A no-op when it already runs."""
    running = procs.load(layout.pids, SERVER)
    if running is not None and running.alive():
        return
    net = hostnet.network_of(layout)
    _remove_namespace(net)  # a crashed run's
    here = server_dir(layout)
    for sub in ("state", "run", "log", "brick"):
        (here / sub).mkdir(parents=True, exist_ok=True)
    (here / "glusterd.vol").write_text(GLUSTERD_VOL)
    ns, prefix = net.file_server_ns, net.cidr.split("/")[1]
    hostnet.run_ip("netns", "add", ns)
    hostnet.run_ip("link", "add", ns, "type", "veth", "peer", "name", "eth0", "netns", ns)
    hostnet.run_ip("link", "set", ns, "master", net.bridge, "up")
    hostnet.run_ip("-n", ns, "addr", "add", f"{net.file_server_ip}/{prefix}", "dev", "eth0")
    hostnet.run_ip("-n", ns, "link", "set", "eth0", "up")
    hostnet.run_ip("-n", ns, "link", "set", "lo", "up")
    gateway, nodes = allowed_clients(net)
    firewall = subprocess.run(
        ["ip", "netns", "exec", ns, "nft", "-f", "-"],
        input=FIREWALL.format(gateway=gateway, nodes=nodes),
        capture_output=True,
        text=True,
    )
    if firewall.returncode:
        raise DevClusterError(f"the file server's firewall in {ns} failed: {firewall.stderr.strip()}")
    server = procs.spawn(
        SERVER,
        ["ip", "netns", "exec", ns, *procs.in_private_mounts(SERVE, str(here))],
        layout.pids,
        layout.logs,
    )
    procs.wait_until(
        lambda: _cli(layout, "volume", "list").returncode == 0,
        timeout=30,
        what="glusterd to answer",
        watch=[server],
        log_dir=layout.logs,
    )
    if VOLUME not in _cli(layout, "volume", "list").stdout.split():
        brick = f"{net.file_server_ip}:{here / 'brick' / VOLUME}"
        # `force`: the brick is a directory on the root file system, which GlusterFS warns of.
        _cli_checked(layout, "volume", "create", VOLUME, "transport", "tcp", brick, "force")
    _cli_checked(layout, "volume", "set", VOLUME, "auth.allow", auth_allow(net))
    _cli_checked(layout, "volume", "start", VOLUME, "force")
    procs.wait_until(
        lambda: brick_online(_cli(layout, "volume", "status", VOLUME, "--xml").stdout),
        timeout=30,
        what=f"the GlusterFS brick of volume {VOLUME} to come online",
        watch=[server],
        log_dir=layout.logs,
    )


def brick_online(status_xml: str) -> bool:
    """Whether `gluster volume status --xml` shows every brick online (status 1)."""
    # Our own glusterd's answer, read from its CLI: not untrusted input.
    nodes = ElementTree.fromstring(status_xml).findall(".//volume/node")  # noqa: S314
    return bool(nodes) and all(node.findtext("status") == "1" for node in nodes)


def stop_server(layout: Layout) -> bool:
    """Stop every process in the server's namespace (glusterd and its bricks, all started by
    us there) and remove the namespace with its link; True if anything was running."""
    tracked = procs.load(layout.pids, SERVER)
    net = hostnet.network_of(layout)
    found = _remove_namespace(net)
    if tracked is not None:
        procs.stop(tracked, layout.pids, timeout=5)
        found = True
    return found


def on_server(layout: Layout, path: Path) -> Path:
    """Where a file under `volumes/` (as the Nodes see it) lies on the server's brick: for
    tests that check a write went through the server. Never write there."""
    return server_dir(layout) / "brick" / VOLUME / path.relative_to(layout.volumes)


def remove_data(layout: Layout) -> None:
    """Delete the server's directory (the brick's data with it) once nothing is mounted
    there and nothing runs in it."""
    slurmroot.remove_root(server_dir(layout))


def leftovers(layout: Layout) -> list[str]:
    net = hostnet.network_of(layout)
    found = []
    if Path("/run/netns", net.file_server_ns).exists():
        found.append(f"network namespace {net.file_server_ns}")
    if server_dir(layout).exists():
        found.append(f"file server data in {server_dir(layout)}")
    return found


def _remove_namespace(net: hostnet.PodNetwork) -> bool:
    if not Path("/run/netns", net.file_server_ns).exists():
        return False
    pids = subprocess.run(["ip", "netns", "pids", net.file_server_ns], capture_output=True, text=True)
    ours = [int(p) for p in pids.stdout.split()]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in ours:
            procs.signal_quietly(pid, sig)
        deadline = time.monotonic() + 5
        while any(procs.is_running(p) for p in ours) and time.monotonic() < deadline:
            time.sleep(0.05)
    hostnet.run_ip("netns", "delete", net.file_server_ns, check=False)  # takes its link with it
    return True


def _cli(layout: Layout, *argv: str) -> subprocess.CompletedProcess[str]:
    """The gluster command, run in the server's network and mount namespaces."""
    tracked = procs.load(layout.pids, SERVER)
    if tracked is None:
        raise DevClusterError("the file server is not running")
    return subprocess.run(
        ["nsenter", "-t", str(tracked.pid), "-m", "-n", "gluster", "--mode=script", *argv],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
    )


def _cli_checked(layout: Layout, *argv: str) -> None:
    done = _cli(layout, *argv)
    if done.returncode:
        raise DevClusterError(
            f"`gluster {' '.join(argv)}` failed: {(done.stdout + done.stderr).strip()} "
            f"(glusterd's log: {server_dir(layout) / 'log' / 'glusterd.log'})"
        )


# -- the clients -----------------------------------------------------------------------------
def start_client(layout: Layout, owner: str, mount_ns_of: int | None = None) -> procs.Tracked:
    """Mount the volume over `volumes/`: in the mount namespace of process `mount_ns_of` (a
    Node's containerd), or in a new private one (None). Returns once it is mounted."""
    name = client_name(owner)
    running = procs.load(layout.pids, name)
    if running is not None and running.alive():
        return running
    layout.volumes.mkdir(parents=True, exist_ok=True)
    mount = [
        "glusterfs",
        "--no-daemon",
        f"--volfile-server={hostnet.network_of(layout).file_server_ip}",
        f"--volfile-id={VOLUME}",
        f"--log-file={layout.logs / f'{name}.gluster.log'}",
        str(layout.volumes),
    ]
    if mount_ns_of is None:
        argv = procs.in_private_mounts('exec "$@"', *mount)
    else:
        argv = ["nsenter", f"--mount=/proc/{mount_ns_of}/ns/mnt", "--", *mount]
    client = procs.spawn(name, argv, layout.pids, layout.logs)
    procs.wait_until(
        lambda: mounted(client.pid, layout.volumes),
        timeout=30,
        what=f"{name} to mount the shared volume at {layout.volumes}",
        watch=[client],
        log_dir=layout.logs,
    )
    return client


def mounted(pid: int, point: Path) -> bool:
    """Whether process `pid` sees the GlusterFS volume mounted at `point`."""
    for line in Path(f"/proc/{pid}/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[1] == str(point) and parts[2] == FSTYPE:
            return True
    return False


def stop_client(layout: Layout, owner: str) -> None:
    tracked = procs.load(layout.pids, client_name(owner))
    if tracked is not None:
        procs.stop(tracked, layout.pids, timeout=10)
