"""The dev cluster's registry: where it listens and how Nodes reach it (no server started)."""

from __future__ import annotations

from pathlib import Path

import yaml

from sunk_dev import registry
from sunk_dev.layout import Layout, Ports
from sunk_dev.realnode import RealNode


def test_the_registry_listens_on_the_one_address_it_is_given(tmp_path: Path) -> None:
    """Catches a registry on every address of the machine (servers the tests start listen
    on 127.0.0.1 or on the dev cluster's bridge only)."""
    layout = Layout(tmp_path, Ports().shifted(3000))
    conf = yaml.safe_load(registry.config(layout, "10.67.0.1"))
    assert conf["http"]["addr"] == "10.67.0.1:26500"
    assert conf["storage"]["filesystem"]["rootdirectory"] == str(tmp_path / "registry" / "data")


def test_a_nodes_containerd_reaches_the_registry_over_plain_http(tmp_path: Path) -> None:
    """Catches a Node that tries HTTPS against the plain-HTTP registry (every pull fails
    with "server gave HTTP response to HTTPS client")."""
    layout = Layout(tmp_path)
    node = RealNode(layout, 1)
    node._write_registry_hosts()
    [hosts] = (node.dir / "registry-hosts").glob("*/hosts.toml")
    assert hosts.parent.name.endswith(":23500")
    assert f'server = "http://{hosts.parent.name}"' in hosts.read_text()
