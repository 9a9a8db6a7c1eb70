"""sunk's Grafana dashboards, built with Grafana's foundation SDK and written as JSON into
the Slurm chart (charts/slurm/dashboards/), which loads them through Grafana's sidecar.

The JSON is generated, never edited: `python -m sunk_dev.dashboards` writes it and
`python -m sunk_dev.dashboards --check` (and a unit test) fails when the committed files
differ from a fresh generation. Builders, not JSON, so every panel goes through the same
helpers (sunk_dev.dashboards.kit) and the tests can read every query back out. Only the
dev package knows this: nothing under src/sunk imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sunk_dev.dashboards import cluster, controller, nodeset, scheduler
from sunk_dev.dashboards.kit import Dashboard, JSONEncoder

# File name in charts/slurm/dashboards/ → the dashboard's builder.
DASHBOARDS: dict[str, Callable[[], Dashboard]] = {
    "sunk-cluster.json": cluster.dashboard,
    "sunk-nodeset.json": nodeset.dashboard,
    "sunk-slurm-controller.json": controller.dashboard,
    "sunk-pod-scheduler.json": scheduler.dashboard,
}


def render(build: Callable[[], Dashboard]) -> str:
    """The dashboard as Grafana's JSON: keys sorted and indented, so a change reads as a
    small diff, and panels numbered in order (Grafana wants an id per panel)."""
    model = build().build()
    for number, panel in enumerate(model.panels or [], start=1):
        panel.id_val = number
    return JSONEncoder(sort_keys=True, indent=2).encode(model) + "\n"


def generate() -> dict[str, str]:
    """Every dashboard's file name and JSON text."""
    return {name: render(build) for name, build in DASHBOARDS.items()}


def chart_dashboards_dir() -> Path:
    """charts/slurm/dashboards of the checkout this package was installed from (editable)."""
    return Path(__file__).resolve().parents[4] / "charts" / "slurm" / "dashboards"


def stale(directory: Path) -> list[str]:
    """The files in `directory` that differ from a fresh generation, are missing, or are
    left from a dashboard that no longer exists."""
    fresh = generate()
    found = {p.name for p in directory.glob("*.json")}
    differing = [
        name
        for name, text in fresh.items()
        if not (directory / name).is_file() or (directory / name).read_text() != text
    ]
    return sorted(differing + sorted(found - set(fresh)))


def write(directory: Path) -> list[Path]:
    """Write every dashboard into `directory`, removing JSON files no dashboard makes."""
    directory.mkdir(parents=True, exist_ok=True)
    fresh = generate()
    for leftover in directory.glob("*.json"):
        if leftover.name not in fresh:
            leftover.unlink()
    paths = []
    for name, text in fresh.items():
        path = directory / name
        path.write_text(text)
        paths.append(path)
    return paths
