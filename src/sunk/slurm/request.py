"""The batch job sunk asks Slurm for, in Slurm's own terms, and how a job's submitter is
recognised again when Slurm lists it.

The dialects render a `JobRequest` into the body their REST version takes; what a job is
*for* (a Pod, a gang member) is the scheduler's business and never reaches this package.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Exclusive(enum.Enum):
    """Who may share a node with the job; named as Slurm's OverSubscribe/exclusive modes."""

    NONE = "none"  # nobody: the job gets whole nodes
    OK = "ok"  # anyone
    USER = "user"  # jobs of the same user only
    MCS = "mcs"  # jobs with the same MCS label only
    TOPO = "topo"  # whole topology segment (newer Slurm only)


@dataclass(frozen=True)
class JobRequest:
    """One task on one node. `name` is how its submitter finds the job again, so it is also
    written where only an operator's token can write (see `owner_tag`)."""

    name: str
    cpus: int
    memory_mib: int
    user_id: int = 0
    group_id: int = 0
    gres: tuple[tuple[str, int], ...] = ()  # e.g. (("gpu", 2),)
    excluded_nodes: tuple[str, ...] = ()
    required_nodes: tuple[str, ...] = ()
    exclusive: Exclusive | None = None
    comment: str = ""
    account: str | None = None
    constraints: str | None = None
    partition: str | None = None
    prefer: str | None = None
    qos: str | None = None
    reservation: str | None = None
    priority: int | None = None
    workdir: str | None = None
    time_limit_min: int | None = None
    # Submitted held: Slurm gives it an ID but starts nothing until it is released.
    hold: bool = False


def gres_text(gres: tuple[tuple[str, int], ...], prefix: str = "") -> str:
    """Slurm's spelling of a GRES request: "gpu:2,gpu:1g.10gb:1" (with "gres/" for TRES)."""
    return ",".join(f"{prefix}{name}:{count}" for name, count in gres)


_RUN_AS = " runas="


def owner_tag(name: str, slurm_uid: int) -> str:
    """What sunk writes into a field only its token may set (admin_comment): the job's name
    and the Slurm user the job must run as."""
    return f"{name}{_RUN_AS}{slurm_uid}"


def name_of_owner_tag(tag: str) -> tuple[str, int] | None:
    """(name, Slurm uid) from an owner tag, or None when `tag` is not one."""
    name, sep, uid = tag.rpartition(_RUN_AS)
    if not sep or not uid.isdigit():
        return None
    return name, int(uid)
