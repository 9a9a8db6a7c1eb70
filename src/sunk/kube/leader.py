"""Leader election on a coordination.k8s.io/v1 Lease (R8.1): only the holder acts.

Like client-go, a replica judges the Lease expired by its own clock: from the moment it
last saw the record change, not from the timestamps written by another machine. A leader
that cannot renew within its renew deadline stops acting before its Lease can expire, so
no two replicas ever act at once, and goes back to waiting for the Lease.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from typing import Any

from sunk.kube.client import KubeClient, KubeError

log = logging.getLogger(__name__)


def _now_micro() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LostLeadership(Exception):
    pass


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_s: float = 15,
        renew_deadline_s: float = 10,
        retry_s: float = 2,
    ) -> None:
        self._client = client
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self._collection = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.name = name
        self.identity = identity
        self.lease_s = lease_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_s = retry_s
        self.leading = asyncio.Event()
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0

    def _spec(self, previous: dict[str, Any] | None) -> dict[str, Any]:
        now = _now_micro()
        spec = dict((previous or {}).get("spec") or {})
        if spec.get("holderIdentity") != self.identity:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if previous else 0)
        spec.update(holderIdentity=self.identity, leaseDurationSeconds=int(self.lease_s), renewTime=now)
        return spec

    async def _try(self) -> bool:
        """One attempt to acquire or renew; True while we hold the Lease."""
        try:
            lease = await self._client.get(self._path)
        except KubeError as err:
            if not err.not_found:
                raise
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": self.name}}
            body["spec"] = self._spec(None)
            try:
                await self._client.request("POST", self._collection, body=body)
            except KubeError as create_err:
                if create_err.conflict:
                    return False
                raise
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, str(spec.get("renewTime")))
        if record != self._observed:
            self._observed, self._observed_at = record, time.monotonic()
        duration = float(spec.get("leaseDurationSeconds") or self.lease_s)
        expired = time.monotonic() > self._observed_at + duration
        if holder and holder != self.identity and not expired:
            return False
        lease["spec"] = self._spec(lease)
        try:
            await self._client.request("PUT", self._path, body=lease)
        except KubeError as err:
            if err.conflict:
                return False
            raise
        return True

    async def release(self) -> None:
        """Give the Lease up if we hold it, so a follower takes over at once. Best effort:
        if it fails, the Lease simply runs out."""
        if not self.leading.is_set():
            return
        self.leading.clear()
        try:
            lease = await self._client.get(self._path)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            spec.update(holderIdentity="", leaseDurationSeconds=1, renewTime=_now_micro())
            lease["spec"] = spec
            await self._client.request("PUT", self._path, body=lease)
            log.info("released Lease %s", self.name)
        except KubeError as err:
            log.warning("could not release Lease %s (%s); it expires on its own", self.name, err)

    async def acquire(self) -> None:
        while True:
            try:
                if await self._try():
                    self.leading.set()
                    log.info("became leader (Lease %s, identity %s)", self.name, self.identity)
                    return
            except KubeError as err:
                log.warning("leader election: %s", err)
            await asyncio.sleep(self.retry_s)

    async def keep(self) -> None:
        """Renew until renewal fails for longer than the renew deadline, then raise. No
        attempt may outlast the deadline (a hung API server must not keep us acting past
        the point where another replica may take the Lease)."""
        last_ok = time.monotonic()
        while True:
            await asyncio.sleep(self.retry_s)
            left = self.renew_deadline_s - (time.monotonic() - last_ok)
            try:
                if await asyncio.wait_for(self._try(), timeout=max(0.5, left)):
                    last_ok = time.monotonic()
                    continue
                self.leading.clear()
                raise LostLeadership(f"another replica holds Lease {self.name}")
            except KubeError as err:
                log.warning("could not renew Lease %s: %s", self.name, err)
            except TimeoutError:
                log.warning("could not renew Lease %s: the API server did not answer in time", self.name)
            if time.monotonic() - last_ok > self.renew_deadline_s:
                self.leading.clear()
                raise LostLeadership(f"could not renew Lease {self.name} for {self.renew_deadline_s:.0f}s")
