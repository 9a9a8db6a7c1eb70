"""The trust policy the dev cluster's schedulers run with: the permissive one, chosen out loud.

A scheduler without a policy refuses every Pod (issue #38). The demo, the benchmarks and
the tests place Pods as any Slurm user, root included, as the reference system does, so
they pass this file with `--policy`; the tests of the policy itself pass their own.
"""

from __future__ import annotations

import os
from pathlib import Path

from sunk.scheduler.policy import PERMISSIVE_YAML
from sunk_dev.layout import Layout


def permissive_policy(layout: Layout) -> Path:
    """The permissive policy as a file of the dev cluster (written whole, so a scheduler
    starting at the same moment never reads half of it)."""
    path = layout.root / "policy-permissive.yaml"
    if not path.exists() or path.read_text() != PERMISSIVE_YAML:
        fresh = path.with_name(f".{path.name}.{os.getpid()}")
        fresh.write_text(PERMISSIVE_YAML)
        os.replace(fresh, path)
    return path
