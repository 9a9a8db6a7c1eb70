"""A short fault-injection run under 30 random faults (scheduler, slurmctld, slurmrestd and
kube-apiserver killed or frozen): every rule of the Pod/job promise holds. No Pod with two
jobs, no job without its Pod, no Pod deleted unless its job ended (and then with an Event
saying why), every bound Pod where its job runs, no drain without an Event, a scheduler
that never exits on its own; and PodGroups in the population bound whole on one job, gone
together, re-adopted whole or not at all. The full run is `python -m tests.faults.chaos --faults 200`;
see docs/reliability.md."""

from __future__ import annotations

import os
import random

import pytest

from sunk_dev import DevCluster
from sunk_dev.kubeapi import AdminKube
from tests.faults.chaos import ChaosOptions, run_chaos
from tests.support import SlurmRest

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(480)
def test_the_pod_job_promise_holds_under_30_random_faults(
    dev_cluster: DevCluster, kube: AdminKube, slurm: SlurmRest
) -> None:
    # SUNK_CHAOS_SEED repeats a run's choices (not its timing, which the machine decides).
    seed = int(os.environ.get("SUNK_CHAOS_SEED") or random.randrange(1_000_000))
    report = run_chaos(dev_cluster, kube, slurm, ChaosOptions(faults=30, seed=seed, settle_s=75))
    print(report.table())
    summary = f"{report.table()}\n\n{report.details()}"
    assert report.harness_error is None, summary
    assert not report.violations, summary
