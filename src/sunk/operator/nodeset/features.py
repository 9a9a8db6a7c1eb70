"""Features pending jobs ask for, and whether a roll-out would take the last of them away.

A NodeSet's features (and the part_<partition> feature of each partition it joins) reach
Slurm through its members' `slurmd --conf`. A template change that drops one replaces the
members without it; a job still pending with `--constraint` naming it would then wait for
ever. Such a roll-out is held, naming the feature and the jobs, until they run or go.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from sunk.slurm.models import SlurmJob

# Names in a constraint expression ("gpu&(fast|[rack1*2&rack2])"); counts are digits only.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]*")


def asked_for(expression: str) -> set[str]:
    """The feature names a job's constraint expression mentions."""
    return set(_NAME.findall(expression))


def pending_by_feature(jobs: Iterable[SlurmJob]) -> dict[str, tuple[int, ...]]:
    """Feature → the pending jobs whose constraint names it, in ascending order."""
    found: dict[str, set[int]] = {}
    for job in jobs:
        if job.pending and job.features:
            for feature in asked_for(job.features):
                found.setdefault(feature, set()).add(job.job_id)
    return {feature: tuple(sorted(ids)) for feature, ids in found.items()}


def in_conf(conf: str) -> set[str]:
    """The features of a `slurmd --conf` line (Features=a,b)."""
    listed = next((w[len("Features=") :] for w in conf.split() if w.startswith("Features=")), "")
    return set(filter(None, listed.split(",")))


def held_back(
    dropped: set[str], offered_elsewhere: set[str], pending: Mapping[str, tuple[int, ...]]
) -> dict[str, tuple[int, ...]]:
    """The dropped features no other Slurm node offers that pending jobs still ask for."""
    return {f: pending[f] for f in sorted(dropped - offered_elsewhere) if pending.get(f)}
