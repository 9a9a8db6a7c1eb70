"""The dev cluster's file server: reading GlusterFS's status, and where it sits on the bridge."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from sunk_dev import fileserver, hostnet
from sunk_dev.layout import Layout

STATUS = """<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<cliOutput><opRet>0</opRet><volStatus><volumes><volume><volName>sunk</volName>
<nodeCount>1</nodeCount>
<node><hostname>10.71.254.1</hostname><path>/tmp/d/fileserver/brick/sunk</path>
<status>{status}</status><port>{port}</port><pid>{pid}</pid></node>
<tasks/></volume></volumes></volStatus></cliOutput>"""
NO_BRICKS = """<?xml version="1.0"?><cliOutput><opRet>0</opRet><volStatus><volumes><volume>
<volName>sunk</volName><nodeCount>0</nodeCount><tasks/></volume></volumes></volStatus></cliOutput>"""


def test_a_brick_with_status_1_is_online() -> None:
    """Recorded from glusterfs-server 10.3: the wait for the volume ends here."""
    assert fileserver.brick_online(STATUS.format(status=1, port=53771, pid=25284))


def test_a_started_volume_whose_brick_is_not_up_yet_is_not_online() -> None:
    """Clients that mount before the brick listens get ENOTCONN on every file: wait."""
    assert not fileserver.brick_online(STATUS.format(status=0, port="N/A", pid=-1))


def test_a_volume_with_no_brick_listed_is_not_online() -> None:
    assert not fileserver.brick_online(NO_BRICKS)


@pytest.mark.parametrize("index", [0, 5, 99])
def test_the_file_server_address_is_on_the_bridge_and_is_no_node_or_pod_address(index: int) -> None:
    """The server is a host on the Pods' bridge: inside its network, never an address a Node
    or its Pods could be given (which would cut one of them off)."""
    net = hostnet.PodNetwork(index)
    server = net.file_server_ip
    assert net.contains(server)
    assert server != net.gateway
    for number in range(1, hostnet.MAX_REAL_NODES + 1):
        assert server != net.node_ip(number)
        first, _ = net.pod_range(number)
        assert server.rsplit(".", 2)[-2] != first.rsplit(".", 2)[-2], f"inside Node {number}'s Pod range"


def test_a_path_under_volumes_maps_to_the_same_path_on_the_brick(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    on_brick = fileserver.on_server(layout, layout.volumes / "pvc-1" / "token")
    assert on_brick == tmp_path / "fileserver" / "brick" / fileserver.VOLUME / "pvc-1" / "token"


@pytest.mark.parametrize("index", [0, 5, 99])
def test_issue52_the_server_admits_the_hosts_bridge_addresses_and_no_pods(index: int) -> None:
    """Catches an allow list that cuts off a Node's client (the gateway is the source the
    kernel picks; every Node address is the host's too) or that lets a Pod in."""
    net = hostnet.PodNetwork(index)
    gateway, nodes = fileserver.allowed_clients(net)
    admitted = ipaddress.ip_network(nodes)
    allow = fileserver.auth_allow(net).split(",")
    assert gateway == net.gateway and allow[0] == gateway
    assert allow[1] == nodes.rpartition(".")[0] + ".*"
    for number in range(1, hostnet.MAX_REAL_NODES + 1):
        assert ipaddress.ip_address(net.node_ip(number)) in admitted
        first, last = net.pod_range(number)
        for pod in (first, last):
            assert ipaddress.ip_address(pod) not in admitted and pod != gateway
    assert ipaddress.ip_address(net.file_server_ip) not in admitted
