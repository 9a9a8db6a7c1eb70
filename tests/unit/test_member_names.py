"""slurmd Pods are named in the chart's headless hosts Service and search it, so that
srun's host (a member, inside a batch job) and the job's other nodes resolve by name."""

from __future__ import annotations

import dataclasses

from sunk.operator.config import OperatorConfig
from sunk.operator.nodeset import members as m
from sunk.operator.nodeset.spec import NodeSet, parse
from tests.fakes.operator_world import CONFIG, SETTINGS, OperatorWorld, nodeset

DOMAIN = "slurm-hosts.slurm.svc.cluster.local"


async def member(config: OperatorConfig, template: dict[str, object] | None = None) -> dict[str, object]:
    world = OperatorWorld(config=config)
    world.add_node("node-1", "10.64.1.11")
    world.add_nodeset("a", **({"template": template} if template else {}))
    await world.reconcile("a")
    [pod] = world.members().values()
    spec: dict[str, object] = pod["spec"]
    return spec


async def test_a_member_is_named_in_the_hosts_domain_and_searches_it() -> None:
    """Catches a member whose Slurm node name does not resolve from slurmctld (it stalls
    about ten seconds at the end of each job srun started there)."""
    spec = await member(dataclasses.replace(CONFIG, hosts_domain=DOMAIN))
    assert spec["hostname"] == "a-001-011" and spec["subdomain"] == "slurm-hosts"
    assert spec["dnsConfig"] == {"searches": [DOMAIN]}


async def test_a_templates_own_dns_settings_are_kept_beside_the_hosts_domain() -> None:
    """Catches the operator replacing a NodeSet's own search domains or nameserver options."""
    ndots = [{"name": "ndots", "value": "2"}]
    own = {"spec": {"dnsConfig": {"searches": ["corp.example"], "options": ndots}}}
    spec = await member(dataclasses.replace(CONFIG, hosts_domain=DOMAIN), own)
    assert spec["dnsConfig"] == {
        "searches": ["corp.example", DOMAIN],
        "options": [{"name": "ndots", "value": "2"}],
    }


def test_naming_members_does_not_roll_the_ones_running() -> None:
    """Catches an upgrade that drains and replaces every member only to give it a name:
    members made before keep their template hash, and new ones get the name."""
    parsed = parse(nodeset("a"), "slurmd:latest")
    assert isinstance(parsed, NodeSet)
    named = dataclasses.replace(SETTINGS, hosts_domain=DOMAIN)
    assert m.template_hash(parsed, named) == m.template_hash(parsed, SETTINGS)


async def test_without_a_hosts_domain_members_are_as_before() -> None:
    spec = await member(CONFIG)
    assert "subdomain" not in spec and "dnsConfig" not in spec
