"""Rendering the charts with the real helm binary (the `helm` fixture lives in tests/conftest.py)."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sunk_dev.platform import build_chart_dependencies

CHARTS = Path(__file__).resolve().parents[2] / "charts"
CHART = CHARTS / "sunk-scheduler"
SLURM_CHART = CHARTS / "slurm"


def render_text(
    helm: Path,
    chart: Path,
    *sets: str,
    namespace: str = "team",
    release: str = "r1",
    values: dict[str, Any] | None = None,
    api_versions: tuple[str, ...] = (),
) -> str:
    """`helm template` of `chart` with `--set` items and, optionally, a values file and API
    versions the cluster is said to offer (CRDs such as monitoring.coreos.com/v1/ServiceMonitor)."""
    argv = [str(helm), "template", release, str(chart), "--namespace", namespace]
    for api in api_versions:
        argv += ["--api-versions", api]
    for value in sets:
        argv += ["--set", value]
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as file:
        if values is not None:
            yaml.safe_dump(values, file)
            file.flush()
            argv += ["--values", file.name]
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def render_chart(
    helm: Path,
    chart: Path,
    *sets: str,
    namespace: str = "team",
    release: str = "r1",
    values: dict[str, Any] | None = None,
    api_versions: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    text = render_text(
        helm, chart, *sets, namespace=namespace, release=release, values=values, api_versions=api_versions
    )
    return [doc for doc in yaml.safe_load_all(text) if doc]


# The scheduler chart refuses to render without the tenants' namespaces it places Pods of.
TENANTS = "scheduler.scope.namespaces=tenants"


def render(helm: Path, *sets: str, namespace: str = "team", release: str = "r1") -> list[dict[str, Any]]:
    """The scheduler chart placing Pods of namespace `tenants`, unless `sets` say otherwise."""
    return render_chart(helm, CHART, TENANTS, *sets, namespace=namespace, release=release)


@pytest.fixture(scope="session")
def slurm_chart(helm: Path) -> Iterator[Path]:
    """charts/slurm, its sub-chart packed from the current charts/sunk-scheduler."""
    build_chart_dependencies(helm, SLURM_CHART)
    yield SLURM_CHART
