"""Keeps the scheduler's slurmrestd token short-lived and fresh: the chart's hook Job makes
the first one, and the operator, which holds the JWT key, replaces it when fewer than 3 of
its 6 hours are left. The scheduler re-reads the mounted file when it changes (the kubelet
updates a Secret volume within a minute or two), so nothing restarts. A token that leaks is
worth hours, not weeks; the price is that the scheduler keeps working only 3 to 6 hours
after the operator stops renewing, which its readiness and logs then say.
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
LIFETIME_S = 6 * 3600
RENEW_WHEN_LEFT_S = 3 * 3600
CHECK_EVERY_S = 300.0


class SecretsPort(Protocol):
    async def request(self, method: str, path: str, *, body: Any = None, content_type: str = ...) -> Json: ...


def needs_renewal(token: str, now: float) -> bool:
    """A token that cannot be read, or with fewer than 3 hours left, is replaced."""
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
        log.info(
            "renewed Secret %s for the scheduler (valid %d hours)",
            self.path.rsplit("/", 1)[-1],
            LIFETIME_S // 3600,
        )
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
