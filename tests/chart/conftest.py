"""Rendering the chart with the real helm binary (the `helm` fixture lives in tests/conftest.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parents[2] / "charts" / "sunk-scheduler"


def render(helm: Path, *sets: str, namespace: str = "team", release: str = "r1") -> list[dict[str, Any]]:
    argv = [str(helm), "template", release, str(CHART), "--namespace", namespace]
    for value in sets:
        argv += ["--set", value]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]
