"""Which Slurm user a placeholder job runs as (R6.3, R3.5).

slurmrestd v0.0.38 refuses user_id/group_id in the job, so a job for another user is
submitted *as* that user: a root token plus the user's name in X-SLURM-USER-NAME.
slurmctld then runs it with that user's primary group. The name comes from this host's
user database (in a container: the image's /etc/passwd or its NSS configuration).
"""

from __future__ import annotations

import pwd
from dataclasses import dataclass


@dataclass(frozen=True)
class SubmitAs:
    user_name: str | None  # None: the scheduler's own Slurm user
    problem: str | None = None


def submit_as(user_id: int, group_id: int, default_user: str) -> SubmitAs:
    if user_id == 0 and group_id == 0:
        return SubmitAs(None if default_user == "root" else "root")
    try:
        entry = pwd.getpwuid(user_id)
    except KeyError:
        return SubmitAs(
            None,
            f"user-id {user_id} has no user name on the scheduler's host, and Slurm 22.05's "
            "REST API can only run a job as a named user: add the user to the scheduler's "
            "user database (e.g. its image's /etc/passwd) or use a known user-id",
        )
    if entry.pw_gid != group_id:
        return SubmitAs(
            None,
            f"group-id {group_id} cannot be honoured: Slurm 22.05's REST API runs the job with "
            f"user {entry.pw_name}'s primary group {entry.pw_gid}; drop the group-id annotation "
            f"or set it to {entry.pw_gid}",
        )
    return SubmitAs(entry.pw_name)
