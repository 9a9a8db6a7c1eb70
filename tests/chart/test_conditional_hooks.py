"""Issue #55: hook Jobs rendered only when they have work (charts/slurm/templates/_hooks.tpl,
charts/sunk-scheduler/templates/_hooks.tpl).

`lookup` reads nothing under `helm template`, so a render here is the "cannot tell" path:
every hook Job must be there. The partition check's rule itself is kept apart from its
`lookup` (`slurm.configChangeNeedsCheck`), and is tested by handing it a live configuration
through a probe template in a copy of the chart: the ConfigMap data of an earlier render,
as the live cluster would hold it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.chart.conftest import CHART, render_chart

Obj = dict[str, Any]
CPU = {"name": "cpu", "default": True, "options": {"MaxTime": "1-00:00:00"}}
ON: Obj = {"enabled": True, "scheduler": {"scope": {"namespaces": "tenants"}}}
PROBE = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: probe}
{{- $live := (.Values.probe | default dict).live | default dict }}
data:
  needs: {{ include "slurm.configChangeNeedsCheck" (list . $live) | quote }}
  owned: {{ include "slurm.ownedSecrets" . | quote }}
"""


def named(objects: list[Obj], kind: str, name: str) -> Obj | None:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found[0] if found else None


@pytest.fixture(scope="module")
def probe_chart(slurm_chart: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of charts/slurm (sub-chart packed) with the probe template added."""
    copy = tmp_path_factory.mktemp("chart") / "slurm"
    shutil.copytree(slurm_chart, copy)
    (copy / "templates" / "zz-probe.yaml").write_text(PROBE)
    return copy


def probe(helm: Path, chart: Path, values: Obj) -> dict[str, str]:
    objects = render_chart(helm, chart, values=values)
    found = named(objects, "ConfigMap", "probe")
    assert found is not None
    return dict(found["data"])


def live_config(helm: Path, chart: Path, values: Obj) -> dict[str, str]:
    """The Slurm ConfigMap's data as an install with `values` leaves it in the cluster."""
    found = named(render_chart(helm, chart, values=values), "ConfigMap", "r1-slurm-config")
    assert found is not None
    return dict(found["data"])


@pytest.fixture(scope="module")
def live_cpu(helm: Path, probe_chart: Path) -> dict[str, str]:
    """What an install declaring partition `cpu` alone left in the cluster."""
    return live_config(helm, probe_chart, {"slurm": {"partitions": [CPU]}})


def test_issue55_without_a_cluster_to_ask_every_hook_job_is_rendered(helm: Path, slurm_chart: Path) -> None:
    """helm template (and --dry-run, GitOps renders): lookup answers nothing, so the Jobs
    are rendered as before, the safe side."""
    objects = render_chart(helm, slurm_chart, values={"slurm": {"partitions": [CPU]}, "scheduler": ON})
    for name in ("r1-secrets", "r1-partition-check", "r1-sunk-scheduler-hooks-secret", "r1-nodeset-removal"):
        assert named(objects, "Job", name) is not None, name
    # The proposed configuration goes with the check, and the secrets Job's account with it.
    assert named(objects, "ConfigMap", "r1-slurm-config-proposed") is not None
    for kind in ("ServiceAccount", "Role", "RoleBinding"):
        assert named(objects, kind, "r1-secrets") is not None
        assert named(objects, kind, "r1-sunk-scheduler-hooks-secret") is not None


def test_issue55_the_scheduler_chart_alone_renders_its_hook_job_unless_both_secrets_are_named(
    helm: Path,
) -> None:
    base = ("scheduler.scope.namespaces=tenants",)
    assert named(render_chart(helm, CHART, *base), "Job", "r1-sunk-scheduler-hooks-secret")
    named_both = (*base, "scheduler.hooks.secretName=a", "scheduler.hooks.tls.secretName=b")
    assert not [o for o in render_chart(helm, CHART, *named_both) if o["kind"] == "Job"]


def test_issue55_the_partition_check_is_off_when_turned_off(helm: Path, slurm_chart: Path) -> None:
    objects = render_chart(helm, slurm_chart, "partitionCheck.enabled=false")
    assert named(objects, "Job", "r1-partition-check") is None
    assert named(objects, "ConfigMap", "r1-slurm-config-proposed") is None


def test_issue55_the_secrets_rule_asks_for_every_secret_the_job_makes(helm: Path, probe_chart: Path) -> None:
    """The rule's list of Secrets is the Job's: each one the Role may read (a Secret the rule
    forgot would never be made again once the others exist)."""
    for values in ({}, {"login": {"enabled": False}, "accounting": {"enabled": False}}):
        owned = probe(helm, probe_chart, values)["owned"]
        objects = render_chart(helm, probe_chart, values=values)
        role = named(objects, "Role", "r1-secrets")
        assert role is not None
        readable = {n for rule in role["rules"] for n in rule.get("resourceNames", [])}
        assert set(json.loads(owned)) == readable


@pytest.mark.parametrize(
    ("after", "why"),
    [
        ({"slurm": {"partitions": [CPU]}}, ""),
        ({"slurm": {"partitions": [CPU, {"name": "gpu"}]}}, ""),
        ({"slurm": {"partitions": [CPU, {"name": "a"}, {"name": "b_2"}]}}, ""),
        ({"slurm": {"partitions": [CPU, {"name": "gpu", "options": {"MaxTime": "1:00:00"}}]}}, ""),
        (
            {
                "slurm": {
                    "partitions": [CPU, {"name": "gpu", "options": {"MaxTime": "1:00:00", "QOS": "gpu"}}]
                }
            },
            "added partitions with options the chart cannot vouch for: gpu (QOS=gpu)",
        ),
        ({"slurm": {"partitions": [{"name": "gpu", "default": True}]}}, "changed beyond added partitions"),
        ({"slurm": {"partitions": [{**CPU, "options": {}}]}}, "changed beyond added partitions"),
        (
            {"slurm": {"partitions": [CPU, {"name": "gpu"}], "extraConf": {"MaxJobCount": 5000}}},
            "changed beyond added partitions: slurm.conf",
        ),
        (
            {"slurm": {"partitions": [CPU], "cgroupConf": "ConstrainCores=yes\n"}},
            "changed beyond added partitions: cgroup.conf",
        ),
    ],
    ids=[
        "unchanged",
        "one-plain-partition-added",
        "two-plain-partitions-added",
        "added-with-vouched-options",
        "added-with-other-options",
        "partition-dropped",
        "partition-changed",
        "extraConf-too",
        "cgroup-conf",
    ],
)
def test_issue55_the_partition_check_runs_unless_the_upgrade_only_adds_partitions_slurm_cannot_refuse(
    helm: Path, probe_chart: Path, live_cpu: dict[str, str], after: Obj, why: str
) -> None:
    said = probe(helm, probe_chart, {**after, "probe": {"live": live_cpu}})["needs"]
    assert said.startswith(why) if why else said == ""


def test_issue55_with_no_live_configuration_the_check_runs(helm: Path, probe_chart: Path) -> None:
    assert probe(helm, probe_chart, {})["needs"] == "no live configuration to compare with"


def test_issue55_the_install_chain_is_probed_every_second_or_two_with_the_same_patience(
    helm: Path, slurm_chart: Path
) -> None:
    """MariaDB → slurmdbd → slurmctld wait on each other's readiness in turn on an install, so
    each probe's period adds to it; TCP connects are cheap to ask often. The time a slow
    start is allowed (startupProbe) stays what it was: 5 minutes for MariaDB, 10 for slurmctld."""
    objects = render_chart(helm, slurm_chart)

    def probes(kind: str, name: str, container: str) -> Obj:
        found = named(objects, kind, name)
        assert found is not None
        [c] = [c for c in found["spec"]["template"]["spec"]["containers"] if c["name"] == container]
        return dict(c)

    mariadb = probes("StatefulSet", "r1-mariadb", "mariadb")
    slurmdbd = probes("Deployment", "r1-accounting", "slurmdbd")
    slurmctld = probes("StatefulSet", "r1-controller", "slurmctld")
    for c, patience in ((mariadb, 300), (slurmctld, 600)):
        startup = c["startupProbe"]
        assert startup["periodSeconds"] == 1
        assert startup["periodSeconds"] * startup["failureThreshold"] == patience
    for c in (mariadb, slurmdbd, slurmctld):
        assert "tcpSocket" in c["readinessProbe"]
        assert c["readinessProbe"]["periodSeconds"] <= 2


def test_issue55_the_operator_and_scheduler_are_seen_ready_within_a_second(
    helm: Path, slurm_chart: Path
) -> None:
    """They are the last Pods of an install to be Ready (a Python start, then the first
    listings): a readiness period of 5 s added up to 5 s, after a startup probe of 2 s. Both
    are now asked every second; the time a slow start is allowed stays 3 minutes."""
    objects = render_chart(helm, slurm_chart, values={"scheduler": ON})
    for kind, name, container in (
        ("Deployment", "r1-operator", "operator"),
        ("Deployment", "r1-sunk-scheduler", "scheduler"),
    ):
        found = named(objects, kind, name)
        assert found is not None, name
        [c] = [c for c in found["spec"]["template"]["spec"]["containers"] if c["name"] == container]
        startup = c["startupProbe"]
        assert (startup["periodSeconds"], startup["periodSeconds"] * startup["failureThreshold"]) == (1, 180)
        assert c["readinessProbe"]["periodSeconds"] == 1
