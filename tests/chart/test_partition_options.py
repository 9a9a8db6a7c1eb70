"""Issue #55: a partition added with options the chart vouches for needs no pre-upgrade check
(charts/slurm/templates/_hooks.tpl, `slurm.unvouchedOptions`), because Slurm's parser
cannot refuse its line. That promise is only as good as the shapes in the chart, so the same
examples go to both: the chart's rule (helm) and Slurm's own parser (`scontrol`, as the
check's `parse` container runs it, in the dev cluster's Slurm root: 24.11 by default,
26.05 in its suite). Each vouched example must pass both; each near miss, a value Slurm
refuses, must be left to the check."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sunk_dev import slurmroot
from tests.chart.conftest import render_chart
from tests.conftest import SLURM

# Key -> values Slurm's parser accepts and the chart vouches for.
VOUCHED: dict[str, list[Any]] = {
    "MaxTime": [
        "INFINITE",
        "unlimited",
        60,
        "10:30",
        "1:00:00",
        "100:00:00",
        "2-12",
        "2-12:30",
        "1-00:00:00",
    ],
    "DefaultTime": [30, "1-00:00:00"],
    "PriorityTier": [0, 10, 65533],
    "PriorityJobFactor": [5],
    "MaxNodes": [0, 4, "UNLIMITED", "INFINITE"],
    "MaxCPUsPerNode": [4, "UNLIMITED"],
    "GraceTime": [0, 30],
    "OverSubscribe": ["NO", "no", "EXCLUSIVE", "YES:4", "FORCE:2", "Yes"],
    "ExclusiveUser": ["YES", "no"],
    "Hidden": ["YES"],
    "RootOnly": ["NO"],
    "ReqResv": ["YES"],
    "LLN": ["YES"],
    "AllowAccounts": ["ALL", "a,b", "a.b-c_d"],
    "AllowGroups": ["ALL", "users,admins"],
    "AllowQos": ["normal"],
    "DenyAccounts": ["x"],
    "DenyQos": ["slow"],
}
# Values Slurm's parser refuses: the chart must leave each to the check.
NEAR_MISSES: list[tuple[str, Any]] = [
    ("MaxTime", "1h"),
    ("MaxTime", "abc"),
    ("PriorityTier", 70000),
    ("PriorityTier", "x"),
    ("MaxNodes", -3),
    ("OverSubscribe", "MAYBE"),
    ("ExclusiveUser", "maybe"),
    ("GraceTime", "x"),
]
# Keys the chart does not vouch for (accepted by the parser or not): always checked.
OTHERS: list[tuple[str, Any]] = [("QOS", "normal"), ("MinNodes", 2), ("PreemptMode", "REQUEUE")]


def examples() -> list[tuple[str, Any]]:
    return [(key, value) for key, values in VOUCHED.items() for value in values]


def unvouched(helm: Path, chart: Path, options: list[tuple[str, Any]]) -> list[str]:
    """The chart's answer for each option alone: "" when it vouches for it."""
    probe = chart / "templates" / "zz-probe.yaml"
    lines = ["{{- $out := list -}}", "{{- range .Values.probe.options -}}"]
    lines.append('{{- $out = append $out (include "slurm.unvouchedOptions" (dict .key .value)) -}}')
    lines += ["{{- end -}}", "apiVersion: v1", "kind: ConfigMap", "metadata: {name: probe}"]
    lines.append("data: {answers: {{ $out | toJson | quote }}}")
    probe.write_text("\n".join(lines) + "\n")
    values = {"probe": {"options": [{"key": k, "value": v} for k, v in options]}}
    [found] = [o for o in render_chart(helm, chart, values=values) if o["metadata"]["name"] == "probe"]
    return list(json.loads(found["data"]["answers"]))


@pytest.fixture(scope="module")
def probe_chart(slurm_chart: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("chart") / "slurm"
    shutil.copytree(slurm_chart, copy)
    return copy


def test_issue55_the_chart_vouches_for_each_shape_slurm_accepts(helm: Path, probe_chart: Path) -> None:
    answers = unvouched(helm, probe_chart, examples())
    assert {f"{k}={v}": a for (k, v), a in zip(examples(), answers, strict=True) if a} == {}


def test_issue55_the_chart_leaves_near_misses_and_other_keys_to_the_check(
    helm: Path, probe_chart: Path
) -> None:
    options = NEAR_MISSES + OTHERS
    answers = unvouched(helm, probe_chart, options)
    assert answers == [f"{k}={v}" for k, v in options]


@pytest.fixture(scope="module")
def parses(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Whether Slurm's parser (scontrol, the check's `parse` command) accepts a partition
    line with one option, in the Slurm root of the suite's version."""
    if os.geteuid() != 0:
        pytest.skip("running Slurm's parser in its root needs root (unshare, chroot)")
    if SLURM not in slurmroot.SUITES:
        pytest.skip(f"the chart's images carry Slurm {' or '.join(slurmroot.SUITES)}, not {SLURM}")
    root, _ = slurmroot.ensure_root(SLURM)
    where = tmp_path_factory.mktemp("parse")
    base = "ClusterName=t\nSlurmctldHost=h\nAuthType=auth/slurm\nCredType=cred/slurm\nNodeName=n1 CPUs=1\n"

    def parse(key: str, value: Any) -> bool:
        (where / "slurm.conf").write_text(base + f"PartitionName=p Nodes=n1 {key}={value}\n")
        argv = ["env", f"SLURM_CONF={where}/slurm.conf", "scontrol", "show", "hostnames", "localhost"]
        done = subprocess.run(slurmroot.launcher(root, argv, bind=where), capture_output=True, timeout=30)
        return done.returncode == 0

    return parse


def test_issue55_slurms_parser_accepts_every_vouched_example(parses: Any) -> None:
    assert [f"{k}={v}" for k, v in examples() if not parses(k, v)] == []


def test_issue55_slurms_parser_refuses_every_near_miss(parses: Any) -> None:
    assert [f"{k}={v}" for k, v in NEAR_MISSES if parses(k, v)] == []
