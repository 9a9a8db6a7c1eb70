"""The narrow interfaces through which the scheduler's controllers reach Kubernetes and
Slurm.

Controllers are handed these at construction and never reach past them: the real
adapters (`sunk.kube.client.KubeClient`, `sunk.slurm.client.SlurmClient`) satisfy them in
production, and the in-memory fakes of `tests/fakes` in unit tests. Every failure comes
out as the project's own error (`KubeError`, `SlurmError`), transport failures included.
"""

from __future__ import annotations

from typing import Any, Protocol

from sunk.slurm.dialect import Dialect, Submission
from sunk.slurm.models import SlurmJob, SlurmNode
from sunk.slurm.request import JobRequest

Json = dict[str, Any]


class KubePort(Protocol):
    """What controllers write to (and read past the caches from) the API server."""

    async def get(self, path: str) -> Json: ...

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None: ...

    async def patch_pod(self, namespace: str, name: str, uid: str, patch: Json) -> Json: ...

    async def patch_pod_status(self, namespace: str, name: str, status: Json) -> Json: ...

    async def delete_pod(self, namespace: str, name: str, uid: str) -> None: ...

    async def create_event(self, namespace: str, event: Json) -> None: ...


class SubmitAnswer(Protocol):
    @property
    def job_id(self) -> int: ...

    @property
    def warning(self) -> str | None: ...


class SlurmPort(Protocol):
    """What controllers ask of slurmrestd, in the REST version chosen at start-up."""

    @property
    def dialect(self) -> Dialect: ...

    def submission(self, job: JobRequest, script: str, environment: dict[str, str]) -> Submission: ...

    def owner_name(self, job: SlurmJob) -> str: ...

    async def submit(self, submission: Submission) -> SubmitAnswer: ...

    async def jobs(self) -> list[SlurmJob]: ...

    async def job(self, job_id: int) -> SlurmJob | None: ...

    async def job_group(self, job_id: int) -> list[SlurmJob]: ...

    async def cancel(self, job_id: int, *, signal: str | None = None) -> None: ...

    async def set_excluded_nodes(self, job_id: int, nodes: list[str]) -> None: ...

    async def release_job(self, job_id: int) -> None: ...

    async def nodes(self) -> list[SlurmNode]: ...

    async def node(self, name: str) -> SlurmNode | None: ...

    async def drain(self, node: str, reason: str) -> str | None: ...

    async def resume(self, node: str) -> str | None: ...
