"""Issue #50: the chart hands Grafana its dashboards through the sidecar convention. With
metrics.dashboards.enabled, one ConfigMap per committed dashboard, labelled as the sidecar
looks for it, holding the committed JSON unchanged; without it, nothing."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.chart.conftest import render_chart
from tests.chart.test_slurm_chart import of_kind

Obj = dict[str, Any]
DIR = Path(__file__).resolve().parents[2] / "charts" / "slurm" / "dashboards"
ON = "metrics.dashboards.enabled=true"


def dashboards(objects: list[Obj]) -> dict[str, Obj]:
    """The dashboard ConfigMaps by the file name they hold."""
    found = {}
    for config_map in of_kind(objects, "ConfigMap"):
        for key in config_map.get("data") or {}:
            if key.endswith(".json") and config_map["metadata"]["name"].startswith("r1-dashboard-"):
                found[key] = config_map
    return found


@pytest.fixture(scope="module")
def rendered(helm: Path, slurm_chart: Path) -> list[Obj]:
    return render_chart(helm, slurm_chart, ON)


def test_no_dashboards_by_default(helm: Path, slurm_chart: Path) -> None:
    objects = render_chart(helm, slurm_chart)
    assert dashboards(objects) == {}
    assert not [
        o for o in of_kind(objects, "ConfigMap") if "grafana_dashboard" in (o["metadata"].get("labels") or {})
    ]


def test_one_configmap_per_committed_dashboard(rendered: list[Obj]) -> None:
    assert sorted(dashboards(rendered)) == sorted(p.name for p in DIR.glob("*.json"))
    assert len({c["metadata"]["name"] for c in dashboards(rendered).values()}) == len(
        list(DIR.glob("*.json"))
    )


def test_each_holds_its_committed_json_unchanged(rendered: list[Obj]) -> None:
    for name, config_map in dashboards(rendered).items():
        text = config_map["data"][name]
        assert text == (DIR / name).read_text(), name
        assert json.loads(text)["uid"], name


def test_each_carries_the_sidecars_label_in_the_release_namespace(rendered: list[Obj]) -> None:
    for name, config_map in dashboards(rendered).items():
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1", name
        assert config_map["metadata"]["namespace"] == "team", name
        assert "annotations" not in config_map["metadata"], name


def test_the_label_annotations_and_namespace_come_from_values(helm: Path, slurm_chart: Path) -> None:
    values = {
        "metrics": {
            "dashboards": {
                "enabled": True,
                "label": "example.com/dashboard",
                "labelValue": "slurm",
                "annotations": {"grafana_folder": "Slurm"},
                "namespace": "monitoring",
            }
        }
    }
    for name, config_map in dashboards(render_chart(helm, slurm_chart, values=values)).items():
        meta = config_map["metadata"]
        assert meta["labels"]["example.com/dashboard"] == "slurm", name
        assert "grafana_dashboard" not in meta["labels"], name
        assert meta["annotations"] == {"grafana_folder": "Slurm"}, name
        assert meta["namespace"] == "monitoring", name


def test_a_numeric_label_value_is_still_a_string(helm: Path, slurm_chart: Path) -> None:
    values = {"metrics": {"dashboards": {"enabled": True, "labelValue": 1}}}
    for config_map in dashboards(render_chart(helm, slurm_chart, values=values)).values():
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("metrics.dashboards.label=", "metrics.dashboards.label"),
        ("metrics.dashboards.labelValue=a b", "labelValue"),
    ],
)
def test_a_label_kubernetes_would_refuse_fails_the_render_naming_it(
    helm: Path, slurm_chart: Path, setting: str, named: str
) -> None:
    with pytest.raises(subprocess.CalledProcessError) as failed:
        render_chart(helm, slurm_chart, ON, setting)
    assert named in failed.value.stderr
