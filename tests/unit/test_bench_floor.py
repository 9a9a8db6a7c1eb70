"""The floor the benchmark measures sunk against (issue #22): computed from the raw Slurm
and kube-scheduler phases of the same run."""

from __future__ import annotations

import pytest
from bench.observe import Result
from bench.run_report import floor_rate

# The issue's own figures: 100 raw jobs in 2.31 s using 4.6 CPU seconds of the machine;
# 100 Pods bound by kube-scheduler with 2.0 CPU seconds and 3.4 writes per Pod.
RAW = Result("raw-slurm", 100, 2.31, cpu={"machine (busy)": 4.6})
KUBE = Result(
    "kube-scheduler",
    100,
    0.96,
    cpu={"machine (busy)": 2.0},
    writes={"POST pods": 1.0, "POST pods/binding": 1.0, "POST events": 0.95, "PATCH pods/status": 0.47},
)


def test_floor_all_at_once_is_a_raw_job_plus_the_kube_path_plus_one_write_on_every_core() -> None:
    per_pod = 0.046 + 0.020 * (3.42 + 1) / 3.42
    assert floor_rate(RAW, KUBE, cores=2, split=False) == pytest.approx(2 / per_pod, rel=1e-3)
    assert floor_rate(RAW, KUBE, cores=2, split=False) / RAW.rate == pytest.approx(0.64, abs=0.01)


def test_floor_never_exceeds_raw_slurms_own_rate() -> None:
    slow_raw = Result("raw-slurm", 100, 10.0, cpu={"machine (busy)": 4.6})  # 10/s, far below the CPU cap
    assert floor_rate(slow_raw, KUBE, cores=2, split=False) == pytest.approx(10.0)


def test_floor_with_split_cores_counts_only_the_kubernetes_half_against_the_kube_path() -> None:
    kube_side = 0.020 * (3.42 + 1) / 3.42
    fast_raw = Result("raw-slurm", 100, 1.0, cpu={"machine (busy)": 4.6})  # 100/s on Slurm's core
    assert floor_rate(fast_raw, KUBE, cores=2, split=True) == pytest.approx(1 / kube_side, rel=1e-3)
