"""Keeps the scheduler's slurmrestd token fresh: the chart's hook Job made it once with a
30-day life; the operator, which holds the JWT key, replaces it when fewer than 15 days
are left. The scheduler re-reads the mounted file when it changes, so nothing restarts.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from pathlib import Path
from typing import Any, Protocol

from sunk.kube.client import KubeError
from sunk.slurm.jwt import expires_at, mint

log = logging.getLogger(__name__)
Json = dict[str, Any]
LIFETIME_S = 30 * 24 * 3600
RENEW_WHEN_LEFT_S = 15 * 24 * 3600
CHECK_EVERY_S = 3600.0


class SecretsPort(Protocol):
    async def request(self, method: str, path: str, *, body: Any = None, content_type: str = ...) -> Json: ...


def needs_renewal(token: str, now: float) -> bool:
    """A token that cannot be read, or with fewer than 15 days left, is replaced."""
    exp = expires_at(token)
    return exp is None or exp - now < RENEW_WHEN_LEFT_S


class TokenKeeper:
    def __init__(
        self, kube: SecretsPort, namespace: str, secret: str, key_path: Path, user: str = "root"
    ) -> None:
        self.kube = kube
        self.path = f"/api/v1/namespaces/{namespace}/secrets/{secret}"
        self.key_path = key_path
        self.user = user

    async def renew_if_due(self, now: float | None = None) -> bool:
        """True when a new token was written."""
        now = time.time() if now is None else now
        secret = await self.kube.request("GET", self.path)
        current = base64.b64decode((secret.get("data") or {}).get("token") or "").decode(errors="replace")
        if not needs_renewal(current, now):
            return False
        token = mint(self.key_path.read_bytes(), self.user, LIFETIME_S, now=now)
        await self.kube.request(
            "PATCH",
            self.path,
            body={"data": {"token": base64.b64encode(token.encode()).decode()}},
            content_type="application/merge-patch+json",
        )
        log.info("renewed Secret %s for the scheduler (valid 30 days)", self.path.rsplit("/", 1)[-1])
        return True

    async def run(self) -> None:
        while True:
            try:
                await self.renew_if_due()
            except KubeError as err:
                # The status only: an answer's text could quote what was sent.
                log.warning(
                    "could not renew Secret %s: API status %s", self.path.rsplit("/", 1)[-1], err.status
                )
            except OSError as err:
                log.warning("could not read Slurm's JWT key %s: %s", self.key_path, err.strerror)
            await asyncio.sleep(CHECK_EVERY_S)
