"""An async slurmrestd client with JWT auth (httpx).

The token comes from a string or a file; the file is re-read whenever it changes, so a
rotated token is picked up without a restart. The token never appears in logs, reprs or
exception messages.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import httpx

from sunk.metrics import SLURM_ERRORS, SLURM_LATENCY
from sunk.slurm import v0038 as dialect
from sunk.slurm.errors import SlurmError, SlurmJobGone, SlurmUnavailable, raise_for
from sunk.slurm.models import SlurmJob, SlurmNode


class TokenSource:
    def __init__(self, token: str | None = None, path: Path | None = None) -> None:
        if not token and path is None:
            raise ValueError(
                "no Slurm token: pass --slurm-auth-token, --slurm-auth-token-file, or set "
                "SUNK_SLURM_AUTH_TOKEN / SUNK_SLURM_AUTH_TOKEN_FILE"
            )
        self._token = (token or "").strip()
        self._path = path
        self._mtime: float | None = None

    def get(self) -> str:
        if self._path is None:
            return self._token
        try:
            mtime = os.stat(self._path).st_mtime
        except OSError as err:
            raise SlurmUnavailable(f"cannot read the Slurm token file {self._path}: {err.strerror}") from None
        if mtime != self._mtime:
            self._token = self._path.read_text().strip().removeprefix("SLURM_JWT=")
            self._mtime = mtime
        return self._token

    def __repr__(self) -> str:
        return f"TokenSource(path={self._path!s}, token=<redacted>)"


class SlurmClient:
    def __init__(
        self, base_url: str, tokens: TokenSource, *, user: str = "root", timeout: float = 15
    ) -> None:
        self.user = user
        self._tokens = tokens
        self._prefix = f"/slurm/{dialect.VERSION}"
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            timeout=timeout,
            # No proxy or netrc lookups per request, and a small pool: httpcore checks every
            # idle connection before each request, so a large pool costs CPU on every call.
            trust_env=False,
            limits=httpx.Limits(max_connections=8, max_keepalive_connections=8),
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(
        self,
        method: str,
        path: str,
        what: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        as_user: str | None = None,
        endpoint: str = "",
    ) -> dict[str, Any]:
        headers = {
            "X-SLURM-USER-NAME": as_user or self.user,
            "X-SLURM-USER-TOKEN": self._tokens.get(),
        }
        endpoint = f"{method} {endpoint or path}"
        started = time.perf_counter()
        try:
            resp = await self._http.request(
                method, self._prefix + path, json=json, params=params, headers=headers
            )
        except httpx.HTTPError as err:
            SLURM_ERRORS.labels(endpoint, "unreachable").inc()
            raise SlurmUnavailable(
                f"cannot reach slurmrestd at {self._http.base_url} to {what}: {type(err).__name__}"
            ) from None
        finally:
            SLURM_LATENCY.labels(endpoint).observe(time.perf_counter() - started)
        try:
            body = resp.json()
        except ValueError:
            body = None
        try:
            raise_for(resp.status_code, body, resp.text, what)
        except SlurmError as err:
            SLURM_ERRORS.labels(endpoint, type(err).__name__).inc()
            raise
        return body if isinstance(body, dict) else {}

    async def ping(self) -> None:
        await self._call("GET", "/ping", "ping slurmctld")

    async def submit(self, body: dict[str, Any], *, as_user: str | None = None) -> int:
        reply = await self._call("POST", "/job/submit", "submit a job", json=body, as_user=as_user)
        return int(reply["job_id"])

    async def jobs(self, *, changed_since: int | None = None) -> list[SlurmJob]:
        params = {"update_time": changed_since} if changed_since else None
        reply = await self._call("GET", "/jobs", "list jobs", params=params)
        return [dialect.parse_job(j) for j in reply.get("jobs") or []]

    async def job(self, job_id: int) -> SlurmJob | None:
        try:
            reply = await self._call("GET", f"/job/{job_id}", f"read job {job_id}", endpoint="/job/{id}")
        except SlurmJobGone:
            return None
        jobs = reply.get("jobs") or []
        return dialect.parse_job(jobs[0]) if jobs else None

    async def cancel(self, job_id: int, *, signal: str | None = None) -> None:
        """Cancel (SIGKILL after KillWait) or, with `signal`, only signal the job."""
        params = {"signal": signal} if signal else None
        try:
            await self._call(
                "DELETE", f"/job/{job_id}", f"cancel job {job_id}", params=params, endpoint="/job/{id}"
            )
        except SlurmJobGone:
            return

    async def nodes(self) -> list[SlurmNode]:
        reply = await self._call("GET", "/nodes", "list nodes")
        return [dialect.parse_node(n) for n in reply.get("nodes") or []]

    async def node(self, name: str) -> SlurmNode | None:
        reply = await self._call("GET", f"/node/{name}", f"read node {name}", endpoint="/node/{name}")
        nodes = reply.get("nodes") or []
        return dialect.parse_node(nodes[0]) if nodes else None
