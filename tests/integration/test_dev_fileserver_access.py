"""The dev cluster's GlusterFS server answers its real clients alone (issue #52): the host's
FUSE clients (every Node's and the provisioner's, all in the host's network namespace, so
from the host's address on the bridge) mount and write; a Pod's address on the bridge is
refused before glusterd or a brick sees it; and the volume's own `auth.allow` refuses a
client from elsewhere that gets past the firewall. Debian's GlusterFS, started by the dev
package on a bridge of the test's own (a cluster index no running cluster uses), without
Nodes; needs root and FUSE, as real Nodes do."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sunk_dev import fileserver, hostnet, procs
from sunk_dev.layout import Layout, Ports

POD_NS = "sunktestpod"  # a Pod's network namespace on the test's bridge
ACCEPT_RULE = ("nft", "-a", "-e", "insert", "rule", "inet", "sunk_fileserver", "input", "ip", "saddr")
CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()
    print("connected")
except OSError as err:
    print(type(err).__name__)
"""


def free_index() -> int:
    """A cluster index whose bridge and file server namespace do not exist: never a running
    cluster's (the real lane is 0, the kwok lane 5)."""
    for index in range(99, 80, -1):
        net = hostnet.PodNetwork(index)
        if (
            not Path("/sys/class/net", net.bridge).exists()
            and not Path("/run/netns", net.file_server_ns).exists()
        ):
            return index
    pytest.skip("no free cluster index for a test bridge")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Layout]:
    if os.geteuid() != 0 or not Path("/dev/fuse").exists():
        pytest.skip("the file server's test needs root and /dev/fuse, as real Nodes do")
    if not (shutil.which("glusterd") and shutil.which("glusterfs") and shutil.which("nft")):
        pytest.skip("GlusterFS or nftables is not installed (`sunk dev up --real-nodes N` installs them)")
    layout = Layout(tmp_path_factory.mktemp("fileserver"), Ports().shifted(free_index() * 1000))
    for sub in (layout.pids, layout.logs):
        sub.mkdir(parents=True, exist_ok=True)
    net = hostnet.network_of(layout)
    prefix = net.cidr.split("/")[1]
    hostnet.run_ip("netns", "delete", POD_NS, check=False)  # a crashed run's
    hostnet.run_ip("link", "add", net.bridge, "type", "bridge")
    try:
        # the host's addresses on the bridge, as `hostnet.prepare` gives them: gateway, Node 1
        for address in (net.gateway, net.node_ip(1)):
            hostnet.run_ip("addr", "add", f"{address}/{prefix}", "dev", net.bridge)
        hostnet.run_ip("link", "set", net.bridge, "up")
        hostnet.run_ip("netns", "add", POD_NS)
        hostnet.run_ip("link", "add", POD_NS, "type", "veth", "peer", "name", "eth0", "netns", POD_NS)
        hostnet.run_ip("link", "set", POD_NS, "master", net.bridge, "up")
        hostnet.run_ip("-n", POD_NS, "addr", "add", f"{net.pod_range(1)[0]}/{prefix}", "dev", "eth0")
        hostnet.run_ip("-n", POD_NS, "link", "set", "eth0", "up")
        hostnet.run_ip("-n", POD_NS, "link", "set", "lo", "up")
        fileserver.start_server(layout)
        yield layout
    finally:
        procs.stop_many(procs.tracked(layout.pids), layout.pids, timeout=10)
        fileserver.stop_server(layout)
        hostnet.run_ip("netns", "delete", POD_NS, check=False)
        hostnet.run_ip("link", "delete", net.bridge, check=False)
        if not mounted_below(layout):
            fileserver.remove_data(layout)


def mounted_below(layout: Layout) -> bool:
    return any(str(layout.root) in line for line in Path("/proc/self/mounts").read_text().splitlines())


def connect(netns: list[str], host: str, port: int) -> str:
    """What a TCP connection from `netns` (argv prefix) to host:port meets."""
    done = subprocess.run([*netns, "python3", "-c", CONNECT, host, str(port)], capture_output=True, text=True)
    return done.stdout.strip() or done.stderr.strip()


def mount_attempt(netns: list[str], layout: Layout, name: str, seconds: float = 15) -> str:
    """A GlusterFS client run from `netns`, in a private mount namespace, that mounts the
    volume and writes a file in it; what it got ("written", or the shell's error)."""
    point = layout.root / name
    point.mkdir()
    log = layout.logs / f"{name}.gluster.log"
    server = hostnet.network_of(layout).file_server_ip
    script = (
        f"glusterfs --volfile-server={server} --volfile-id={fileserver.VOLUME}"
        ' --log-file="$2" "$1" || exit 3; i=0;'
        ' until grep -q " $1 fuse.glusterfs " /proc/mounts || [ $i -ge 50 ]; do sleep 0.1; i=$((i+1)); done;'
        ' grep -q " $1 fuse.glusterfs " /proc/mounts || { echo never mounted; exit 4; };'
        ' echo hello > "$1/probe" && echo written; umount -l "$1"'
    )
    try:
        done = subprocess.run(
            [*netns, *procs.in_private_mounts(script, str(point), str(log))],
            capture_output=True,
            text=True,
            timeout=seconds,
        )
    except subprocess.TimeoutExpired:
        return "timed out"
    return (done.stdout + done.stderr).strip()


def test_issue52_the_hosts_client_mounts_and_writes_through_the_server(served: Layout) -> None:
    """What every Node and the provisioner do (their source is the bridge's gateway)."""
    client = fileserver.start_client(served, "host-test")
    try:
        subprocess.run(
            ["nsenter", "-t", str(client.pid), "-m", "sh", "-c", f"echo hello > {served.volumes}/from-host"],
            check=True,
        )
        assert (fileserver.on_server(served, served.volumes / "from-host")).read_text() == "hello\n"
    finally:
        fileserver.stop_client(served, "host-test")


def test_issue52_a_pod_on_the_bridge_reaches_neither_glusterd_nor_a_brick(served: Layout) -> None:
    server = hostnet.network_of(served).file_server_ip
    pod = ["ip", "netns", "exec", POD_NS]
    assert connect(pod, server, 24007) == "ConnectionRefusedError"
    assert connect([], server, 24007) == "connected"  # the host, the same port: the test is sound
    said = mount_attempt(pod, served, "from-pod")
    assert "written" not in said, said
    assert not (fileserver.server_dir(served) / "brick" / fileserver.VOLUME / "probe").exists()


def test_issue52_the_volume_refuses_a_client_from_elsewhere_past_the_firewall(served: Layout) -> None:
    """With the firewall opened to the Pod's address (as if it were not there), glusterd hands
    the Pod the volume file, and the brick refuses the address: auth.allow holds on its own.
    (Not from the server's own address: glusterd trusts that as a member of its pool.)"""
    net = hostnet.network_of(served)
    in_server = ["ip", "netns", "exec", net.file_server_ns]
    opened = subprocess.run(
        [*in_server, *ACCEPT_RULE, net.pod_range(1)[0], "accept"],
        capture_output=True,
        text=True,
        check=True,
    )
    handle = opened.stdout.rsplit("handle", 1)[1].split()[0]
    try:
        said = mount_attempt(["ip", "netns", "exec", POD_NS], served, "past-the-firewall")
    finally:
        subprocess.run(
            [*in_server, "nft", "delete", "rule", "inet", "sunk_fileserver", "input", "handle", handle]
        )
    assert "written" not in said, said
    bricks = fileserver.server_dir(served) / "log" / "bricks"
    logged = "".join(p.read_text() for p in bricks.glob("*.log"))
    assert f'received addr = "{net.pod_range(1)[0]}"' in logged, (
        "the brick never saw the Pod: the test proves nothing"
    )
    assert "Cannot authenticate client" in logged or "AUTH_FAILED" in logged, logged[-2000:]
