"""A short operator fault run (R10.5): jobs through a NodeSet that scales, rolls out and
follows cordons while the operator, slurmctld and slurmrestd are restarted or frozen and
kube-apiserver is frozen, 20 faults; no job killed, no busy member deleted, no stale
record, no wedged NodeSet, no drain left. The full run is
`python -m tests.faults.operator_chaos --faults 100`; see docs/reliability.md."""

from __future__ import annotations

import os
import random

import pytest

from sunk_dev import DevCluster
from tests.faults.operator_chaos import platform_run, report

pytestmark = pytest.mark.real_nodes


@pytest.mark.timeout(900)
def test_r10_5_no_job_is_killed_by_the_platform_under_20_random_faults(dev_cluster: DevCluster) -> None:
    seed = int(os.environ.get("SUNK_CHAOS_SEED") or random.randrange(1_000_000))
    with platform_run(dev_cluster, seed, 20) as run:
        record = run.run()
        # Printed before the cleanup, which may itself fail when the run left a member wedged.
        summary = report(record, seed)
        print(summary, flush=True)
    assert not record.violations, summary
