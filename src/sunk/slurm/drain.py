"""Draining a Slurm node (R5.3).

slurmrestd 22.05 cannot update nodes, and a job may drain its own node only when it runs
as root. The scheduler therefore drains with `scontrol`, authenticated by the same JWT it
uses for REST (`SLURM_JWT` in scontrol's environment switches it to auth/jwt). It needs
`scontrol` and a slurm.conf naming the controller (SLURM_CONF), both in the scheduler's
image or host.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil

from sunk.slurm.client import TokenSource

log = logging.getLogger(__name__)


class NodeDrainer:
    def __init__(self, tokens: TokenSource) -> None:
        self._tokens = tokens

    async def drain(self, node: str, reason: str) -> str | None:
        """Drain `node`; None on success, otherwise what went wrong (never the token)."""
        scontrol = shutil.which("scontrol")
        if scontrol is None:
            return "scontrol is not installed next to the scheduler, so it cannot drain nodes"
        env = {**os.environ, "SLURM_JWT": self._tokens.get()}
        proc = await asyncio.create_subprocess_exec(
            scontrol,
            "update",
            f"nodename={node}",
            "state=drain",
            f"reason={reason}",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await proc.communicate()
        if proc.returncode:
            return f"scontrol could not drain {node}: {err.decode(errors='replace').strip()[:200]}"
        log.warning("drained Slurm node %s: %s", node, reason)
        return None
