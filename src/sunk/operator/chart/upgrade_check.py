"""`sunk check-partitions`: refuse a chart upgrade that would drop a partition in use.

Removing a partition from slurm.conf while jobs still name it makes slurmctld lose those
jobs, or refuse the new configuration altogether. The chart runs this check as a
pre-upgrade hook with the partitions of the *new* values: if any unfinished job (pending,
running, suspended, completing...) names a partition that is not among them, the hook
fails, Helm stops the upgrade before changing anything, and Slurm keeps running as it was.

It fails closed: when slurmrestd cannot be asked, nobody can tell which jobs would be hit,
so the upgrade is stopped too, with a message saying why.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Collection, Iterable
from pathlib import Path

from sunk.slurm.client import SlurmClient, SlurmVersionError
from sunk.slurm.errors import SlurmError
from sunk.slurm.jwt import mint
from sunk.slurm.models import SlurmJob
from sunk.slurm.tokens import TokenSource

TOKEN_LIFETIME_S = 300


class CheckFailed(Exception):
    """The jobs could not be listed: the upgrade must not go on."""


def jobs_in_dropped_partitions(jobs: Iterable[SlurmJob], keep: Collection[str]) -> dict[str, list[int]]:
    """Per partition missing from `keep`, the IDs of the unfinished jobs naming it (a job
    submitted to several partitions names each of them), in ascending order."""
    users: dict[str, set[int]] = {}
    for job in jobs:
        if not job.active:
            continue
        for partition in filter(None, (p.strip() for p in job.partition.split(","))):
            if partition not in keep:
                users.setdefault(partition, set()).add(job.job_id)
    return {partition: sorted(ids) for partition, ids in sorted(users.items())}


def refusals(jobs: Iterable[SlurmJob], keep: Collection[str]) -> list[str]:
    """One sentence per partition that may not be dropped; empty when the upgrade is safe."""
    return [
        f"refusing to drop partition {partition}: jobs {', '.join(map(str, ids))} still use it"
        for partition, ids in jobs_in_dropped_partitions(jobs, keep).items()
    ]


def read_key(path: Path) -> bytes:
    """Slurm's JWT key, mounted from the chart's auth Secret."""
    try:
        return path.read_bytes()
    except OSError as err:
        raise CheckFailed(f"cannot read Slurm's JWT key {path}: {err.strerror}") from None


async def list_jobs(
    api_base: str,
    key: bytes,
    user: str,
    attempts: int = 3,
    pause_s: float = 2.0,
    ca_file: str | None = None,
) -> list[SlurmJob]:
    """Every job slurmctld knows, read as `user` with a short token signed with `key`; a
    read that fails is tried up to `attempts` times (slurmrestd may be restarting)."""
    tokens = TokenSource(token=mint(key, user, TOKEN_LIFETIME_S))
    last: SlurmError | None = None
    for attempt in range(attempts):
        if attempt:
            await asyncio.sleep(pause_s)
        try:
            client = await SlurmClient.connect(api_base, tokens, user=user, ca_file=ca_file)
            try:
                return await client.jobs()
            finally:
                await client.aclose()
        except SlurmVersionError as err:
            raise CheckFailed(str(err)) from None
        except SlurmError as err:
            last = err
    raise CheckFailed(
        f"{last}; the upgrade is stopped because nobody can tell which jobs a removed partition "
        "would strand. Make slurmrestd answer (kubectl get pods -l app.kubernetes.io/name=slurmrestd) "
        "and upgrade again"
    )


async def check(
    api_base: str, key: bytes, user: str, keep: Collection[str], ca_file: str | None = None
) -> list[str]:
    """The refusals for an upgrade keeping only `keep`; raises CheckFailed when unknowable."""
    return refusals(await list_jobs(api_base, key, user, ca_file=ca_file), keep)


def run(api_base: str, key_file: Path, user: str, keep: str, ca_file: str | None = None) -> int:
    """The command: 0 when the upgrade may go on; 1, with one line per reason, when not."""
    partitions = {p.strip() for p in keep.split(",") if p.strip()}
    try:
        lines = asyncio.run(check(api_base, read_key(key_file), user, partitions, ca_file))
    except CheckFailed as err:
        print(f"sunk check-partitions: {err}", file=sys.stderr)
        return 1
    for line in lines:
        print(line, file=sys.stderr)
    if lines:
        print(
            "sunk check-partitions: the upgrade is stopped and Slurm runs on unchanged; keep those "
            "partitions in slurm.partitions until their jobs end (or cancel the jobs), then upgrade again",
            file=sys.stderr,
        )
        return 1
    print(f"no unfinished job uses a partition outside {', '.join(sorted(partitions)) or 'the new values'}")
    return 0
