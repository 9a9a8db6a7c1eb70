"""What only scontrol can do on Slurm 22.05: drain a node (R5.3), read the configuration (R7.3).

Newer Slurm (REST v0.0.40+) does both over REST; this module is used only with v0.0.38.

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

from sunk.slurm.tokens import Tokens

log = logging.getLogger(__name__)


class Scontrol:
    def __init__(self, tokens: Tokens) -> None:
        self._tokens = tokens

    async def _run(self, *args: str) -> tuple[int, str, str]:
        scontrol = shutil.which("scontrol")
        if scontrol is None:
            return 127, "", "scontrol is not installed next to the scheduler"
        env = {**os.environ, "SLURM_JWT": self._tokens.get()}
        proc = await asyncio.create_subprocess_exec(
            scontrol, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await proc.communicate()
        return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace").strip()[:200]

    async def drain(self, node: str, reason: str) -> str | None:
        """Drain `node`; None on success, otherwise what went wrong (never the token)."""
        code, _, err = await self._run("update", f"nodename={node}", "state=drain", f"reason={reason}")
        if code:
            return f"could not drain {node}: {err}"
        log.warning("drained Slurm node %s: %s", node, reason)
        return None

    async def resume(self, node: str) -> str | None:
        code, _, err = await self._run("update", f"nodename={node}", "state=resume")
        if code != 0:
            return f"could not resume {node}: {err}"
        return None

    async def mark_down(self, node: str, reason: str) -> str | None:
        """`scontrol update state=down`; None on success, otherwise what went wrong."""
        code, _, err = await self._run("update", f"nodename={node}", "state=down", f"reason={reason}")
        if code:
            return f"could not mark {node} down: {err}"
        log.warning("marked Slurm node %s DOWN: %s", node, reason)
        return None

    async def reconfigure(self) -> str | None:
        """`scontrol reconfigure` (22.05's REST has no such call); None on success."""
        code, _, err = await self._run("reconfigure")
        return f"could not reconfigure slurmctld: {err}" if code else None

    async def config(self) -> dict[str, str] | None:
        """`scontrol show config` as a dict, or None when it cannot be read."""
        code, out, _ = await self._run("show", "config")
        if code:
            return None
        pairs = (line.split("=", 1) for line in out.splitlines() if " = " in line)
        return {key.strip(): value.strip() for key, value in pairs}


def memory_oversubscription_warning(select: str) -> str | None:
    """R7.3: without a *_Memory select type, Slurm lets jobs oversubscribe memory."""
    if "MEMORY" in select.upper():
        return None
    return (
        f"Slurm's SelectTypeParameters is {select or 'unset'}: memory is not a consumable resource, so "
        "Slurm may place Pods whose memory requests exceed a node's memory (OOM kills). Use CR_Core_Memory, "
        "CR_CPU_Memory or CR_Socket_Memory"
    )
