"""Images pinned by digest (issue #38 point 9): a digest in the values makes every container
of that image, and the operator's default slurmd image, run exactly that image; a value
that is not a sha256 digest fails the render naming the image."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chart.conftest import CHART, TENANTS, render_chart

DIGEST = "sha256:" + "ab" * 32


def images(objects: list[dict[str, Any]]) -> Iterator[str]:
    for obj in objects:
        spec = (obj.get("spec") or {}).get("template", {}).get("spec") or {}
        for box in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            yield box["image"]


def test_a_digest_pins_every_container_of_that_image(helm: Path, slurm_chart: Path) -> None:
    objects = render_chart(
        helm, slurm_chart, f"controller.image.digest={DIGEST}", f"slurmd.image.digest={DIGEST}"
    )
    slurmctld = [image for image in images(objects) if image.startswith("slurmctld:")]
    assert slurmctld and all(image == f"slurmctld:24.11@{DIGEST}" for image in slurmctld)
    [operator] = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "r1-operator"]
    args = operator["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--slurmd-image=slurmd:24.11@{DIGEST}" in args


def test_without_a_digest_images_keep_their_tags(helm: Path, slurm_chart: Path) -> None:
    assert not [image for image in images(render_chart(helm, slurm_chart)) if "@" in image]


def test_the_schedulers_image_takes_a_digest(helm: Path) -> None:
    objects = render_chart(helm, CHART, TENANTS, f"scheduler.image.digest={DIGEST}")
    assert {image.split("@")[1] for image in images(objects)} == {DIGEST}


@pytest.mark.parametrize("value", ["latest", "sha256:abc", "md5:" + "ab" * 16])
def test_a_digest_that_is_not_sha256_fails_naming_the_image(
    helm: Path, slurm_chart: Path, value: str
) -> None:
    with pytest.raises(subprocess.CalledProcessError) as failed:
        render_chart(helm, slurm_chart, f"controller.image.digest={value}")
    assert "of slurmctld is not sha256:<64 hex digits>" in failed.value.stderr
