"""slurmctld's own metrics endpoint (`MetricsType=metrics/openmetrics`), as Slurm 26.05.5 from
Debian sid served it (tests/unit/samples/slurm-26.05.5-1/metrics/, recorded from a real
slurmctld: three nodes, one running job holding a GPU, two pending; `slurm.conf` and
`scontrol`/`squeue` output recorded beside it; `accounting/`: the same cluster a little later
with slurmdbd and `AccountingStorageTRES=gres/gpu`, and a second GPU job).

The operator serves Slurm's state under these names on releases without the endpoint; these
tests hold the two to the same names, types and labels, and pin what the endpoint was
measured to get wrong, so a Slurm release that fixes it shows up here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.test_slurm_metrics import listed, metrics, recorded_jobs, recorded_nodes, view

RECORDED = Path(__file__).parent / "samples" / "slurm-26.05.5-1" / "metrics"
LEAVES = ("nodes", "jobs", "partitions", "scheduler", "jobs-users-accts")
ACCOUNTING = RECORDED / "accounting"
CHART_METRICS = Path(__file__).parents[2] / "charts" / "slurm" / "templates" / "_metrics.tpl"


def families(name: str, directory: Path = RECORDED) -> dict[str, Metric]:
    text = (directory / f"{name}.txt").read_text()
    return {family.name: family for family in text_string_to_metric_families(text)}


def slurmctld_families(directory: Path = RECORDED) -> dict[str, Metric]:
    found: dict[str, Metric] = {}
    for leaf in LEAVES:
        leaf_families = families(leaf, directory)
        assert not found.keys() & leaf_families.keys(), f"{leaf} repeats a family of another leaf"
        found |= leaf_families
    return found


def operator_families() -> dict[str, Metric]:
    """Every slurm_* family the operator serves from a full listing (nodes, partitions, jobs,
    diag), recorded on 24.11."""
    scrape = listed(metrics(), view(recorded_nodes(), recorded_jobs()))
    return {f.name: f for f in scrape.registry.collect() if f.name.startswith("slurm_")}


def label_names(family: Metric) -> set[tuple[str, ...]]:
    return {tuple(sorted(sample.labels)) for sample in family.samples}


def value(family: Metric, **labels: str) -> float:
    [found] = [s.value for s in family.samples if s.labels == labels]
    return found


def scontrol_nodes(name: str = "scontrol-show-node", directory: Path = RECORDED) -> dict[str, dict[str, str]]:
    """`scontrol show node` as node name -> its KEY=VALUE fields."""
    nodes: dict[str, dict[str, str]] = {}
    for block in (directory / f"{name}.txt").read_text().split("\n\n"):
        fields = dict(re.findall(r"(\w+)=(\S*)", block))
        if "NodeName" in fields:
            nodes[fields["NodeName"]] = fields
    return nodes


@pytest.mark.parametrize("directory", [RECORDED, ACCOUNTING], ids=["plain", "accounting"])
def test_every_slurm_family_the_operator_serves_slurmctld_serves_alike(directory: Path) -> None:
    """A dashboard or alert written once reads the same series from the operator (24.11) and
    from slurmctld (26.05): same name, same type, same label names."""
    native = slurmctld_families(directory)
    ours = operator_families()
    assert len(ours) >= 60  # the check below is only as good as what it compares
    differences = []
    for name, family in sorted(ours.items()):
        theirs = native.get(name)
        if theirs is None:
            differences.append(f"{name}: slurmctld 26.05 does not serve it")
        elif theirs.type != family.type:
            differences.append(f"{name}: ours is a {family.type}, slurmctld's a {theirs.type}")
        elif label_names(theirs) != label_names(family):
            differences.append(f"{name}: labels {label_names(family)} against {label_names(theirs)}")
    assert differences == []


@pytest.mark.parametrize("directory", [RECORDED, ACCOUNTING], ids=["plain", "accounting"])
def test_slurmctld_serves_every_family_as_a_slurm_gauge_on_exactly_five_leaves(directory: Path) -> None:
    native = slurmctld_families(directory)
    assert len(native) == 259
    assert {f.type for f in native.values()} == {"gauge"}
    assert all(name.startswith("slurm_") for name in native)
    assert [len(families(leaf, directory)) for leaf in LEAVES] == [38, 30, 73, 58, 60]


def test_metrics_itself_is_an_index_of_the_leaves_the_chart_scrapes() -> None:
    """`/metrics` lists the leaves and is not scrapable; the chart scrapes only leaves
    slurmctld lists (the per-user one only when asked)."""
    index = (RECORDED / "index.txt").read_text()
    listed_paths = set(re.findall(r"'(/metrics/[\w-]+)'", index))
    assert listed_paths == {f"/metrics/{leaf}" for leaf in LEAVES}
    assert "# TYPE" not in index  # plain text, nothing to scrape
    chart_paths = set(re.findall(r'"(/metrics/[\w-]+)"', CHART_METRICS.read_text()))
    assert chart_paths == listed_paths


def test_slurmctld_fills_its_memory_bytes_series_with_mb() -> None:
    """Measured: the `_bytes` series hold Slurm's MB counts (RealMemory=4000 reads 4000), so
    they are off by 2^20 from their name; the operator serves true bytes. When this fails,
    Slurm fixed it: the operator may then serve the same values (docs/operations.md, Units)."""
    nodes = families("nodes")
    shown = scontrol_nodes()
    for node, fields in shown.items():
        assert value(nodes["slurm_node_memory_bytes"], node=node) == int(fields["RealMemory"])
        assert value(nodes["slurm_node_memory_alloc_bytes"], node=node) == int(fields["AllocMem"])
        assert value(nodes["slurm_node_memory_effective_bytes"], node=node) == int(fields["RealMemory"])
    assert value(nodes["slurm_node_memory_bytes"], node="n1") == 4000  # 4000 MB, not 4 GB
    partitions = families("partitions")
    batch = sum(int(fields["RealMemory"]) for fields in shown.values())
    assert value(partitions["slurm_partition_nodes_mem_tot"], partition="batch") == batch == 9000
    assert value(partitions["slurm_partition_nodes_mem_alloc"], partition="batch") == 1000
    assert value(families("jobs")["slurm_jobs_memory_alloc"]) == 1000  # the job's --mem=1000


def test_slurmctld_counts_powering_down_nodes_as_powering_up() -> None:
    """Measured: with n3 POWERING_UP slurmctld says 0 nodes power up, and with n3
    POWERING_DOWN it says 1 (and serves no powering-down family at all)."""
    assert "POWERING_UP" in scontrol_nodes()["n3"]["State"]
    up = families("nodes")
    assert value(up["slurm_nodes_powering_up"]) == 0
    down_state = scontrol_nodes("scontrol-show-node-n3-powering-down")["n3"]["State"]
    assert down_state == "IDLE+POWERING_DOWN"
    down = families("nodes-n3-powering-down")
    assert value(down["slurm_nodes_powering_up"]) == 1
    assert not any("powering_down" in name for name in down)


def test_slurmctld_counts_no_gpus_without_gpu_tres() -> None:
    """Measured without `AccountingStorageTRES=gres/gpu` (which slurmctld refuses without
    slurmdbd): every node has Gres=gpu:2 and n1 runs a job holding one, yet the GPU totals
    read 0 and only the node's allocated count sees it. The operator counts GRES, so the two
    sources agree on GPUs only where accounting tracks gres/gpu (the chart sets it with
    accounting on)."""
    shown = scontrol_nodes()
    assert {fields["Gres"] for fields in shown.values()} == {"gpu:2"}
    nodes = families("nodes")
    assert {s.value for s in nodes["slurm_node_gpus"].samples} == {0}
    assert value(nodes["slurm_node_gpus_alloc"], node="n1") == 1
    assert value(families("jobs")["slurm_jobs_gpus_alloc"]) == 0
    assert {s.value for s in families("partitions")["slurm_partition_gpus"].samples} == {0}


def test_with_gpu_tres_slurmctld_counts_gpus_as_the_operator_does() -> None:
    """Measured with slurmdbd and `AccountingStorageTRES=gres/gpu` (what the chart sets with
    accounting on): the totals follow the GRES, and a job's GPUs count from its allocated
    TRES (job 1 started before GPUs were tracked, so only job 4's one counts)."""
    shown = scontrol_nodes(directory=ACCOUNTING)
    nodes = families("nodes", ACCOUNTING)
    for node, fields in shown.items():
        assert value(nodes["slurm_node_gpus"], node=node) == int(fields["Gres"].removeprefix("gpu:"))
    assert value(nodes["slurm_node_gpus_alloc"], node="n1") == 2
    assert value(families("jobs", ACCOUNTING)["slurm_jobs_gpus_alloc"]) == 1
    partitions = families("partitions", ACCOUNTING)
    assert value(partitions["slurm_partition_gpus"], partition="batch") == 6
    assert value(partitions["slurm_partition_jobs_gpus_alloc"], partition="batch") == 1
    assert value(nodes["slurm_node_memory_bytes"], node="n1") == 4000  # still MB
