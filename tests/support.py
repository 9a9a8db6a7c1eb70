"""Helpers the integration and end-to-end tests share: polling with deadlines and a small
slurmrestd client that checks Slurm's side independently of the scheduler's own code."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx

from sunk.devcluster import Layout
from sunk.devcluster.slurmcluster import REST_VERSION

T = TypeVar("T")


def wait_for(probe: Callable[[], T | None], *, timeout: float, what: str, every: float = 0.1) -> T:
    """Return the first truthy value of `probe`, or fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


def holds_for(probe: Callable[[], bool], *, seconds: float, what: str, every: float = 0.1) -> None:
    """Assert that `probe` stays true for a whole window (for "nothing happens" checks)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert probe(), f"{what} stopped holding"
        time.sleep(every)


class SlurmRest:
    def __init__(self, layout: Layout) -> None:
        token = layout.slurm_token.read_text().strip()
        self.http = httpx.Client(
            base_url=f"{layout.rest_url}/slurm/{REST_VERSION}",
            headers={"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": token},
            timeout=30,
        )

    def close(self) -> None:
        self.http.close()

    def submit(self, script: str, **job: Any) -> int:
        body = {"script": script, "job": {"environment": {"PATH": "/usr/bin:/bin"}, **job}}
        resp = self.http.post("/job/submit", json=body)
        data = resp.json()
        assert resp.status_code == 200 and not data.get("errors"), data
        return int(data["job_id"])

    def job(self, job_id: int) -> dict[str, Any]:
        data = self.http.get(f"/job/{job_id}").json()
        jobs: list[dict[str, Any]] = data.get("jobs", [])
        assert jobs, data
        return jobs[0]

    def cancel(self, job_id: int) -> None:
        resp = self.http.delete(f"/job/{job_id}")
        assert resp.status_code == 200, resp.text
