"""An async slurmrestd client with JWT auth (httpx), speaking the REST version chosen at
start-up through one dialect (see sunk.slurm.dialect). The token never appears in logs,
reprs or exception messages."""

from __future__ import annotations

import logging
import re
import ssl
import time
from dataclasses import dataclass
from typing import Any

import httpx

from sunk.metrics import SLURM_ERRORS, SLURM_LATENCY
from sunk.slurm.dataparser import VERSIONS as DATA_PARSER_VERSIONS
from sunk.slurm.dataparser import DataParser, job_states
from sunk.slurm.diag import SlurmDiag, parse_diag
from sunk.slurm.dialect import Dialect, Submission, partition_time_limits
from sunk.slurm.errors import (
    INVALID_NODE_NAME,
    SlurmError,
    SlurmJobGone,
    SlurmNoAnswer,
    SlurmRejected,
    SlurmUnavailable,
    describe,
    error_code,
    error_list,
    raise_for,
)
from sunk.slurm.models import JobState, SlurmJob, SlurmNode
from sunk.slurm.replies import decode, job_reply_decoder
from sunk.slurm.request import JobRequest
from sunk.slurm.scontrol import Scontrol
from sunk.slurm.tokens import Tokens
from sunk.slurm.v0038 import V0038

# Newest first: the order in which a served version is preferred.
SUPPORTED_VERSIONS = (*reversed(DATA_PARSER_VERSIONS), V0038.version)
# The highest priority an operator may give a job (sbatch's `--priority=TOP`).
TOP_PRIORITY = 0xFFFFFFFD

log = logging.getLogger(__name__)


class SlurmVersionError(Exception):
    """slurmrestd serves no REST version sunk speaks (or not the one forced)."""


def make_dialect(version: str, *, user: str = "root") -> Dialect:
    if version == V0038.version:
        return V0038(default_user=user)
    return DataParser(version)


def choose_version(served: list[str], forced: str | None = None) -> str:
    """The newest served version sunk speaks, or `forced` if served; else a sentence."""
    served_text = ", ".join(sorted(served)) or "none"
    spoken = ", ".join(sorted(SUPPORTED_VERSIONS))
    if forced:
        if forced not in SUPPORTED_VERSIONS:
            raise SlurmVersionError(f"--slurm-api-version {forced} is not one sunk speaks ({spoken})")
        if forced not in served:
            raise SlurmVersionError(
                f"--slurm-api-version {forced} is not served by this slurmrestd (it serves {served_text})"
            )
        return forced
    for version in SUPPORTED_VERSIONS:
        if version in served:
            return version
    raise SlurmVersionError(
        f"slurmrestd serves REST versions {served_text}, and sunk speaks {spoken}: run a Slurm "
        "release that serves one of them (23.11 to 26.05, or 22.05), or enable the matching "
        "openapi plugin in slurmrestd (-s)"
    )


def unreachable_reason(err: BaseException) -> str:
    """Why a connection failed, in words an operator can act on: the error's type, and
    for a certificate that does not verify or a server without TLS, what to do."""
    cause: BaseException | None = err
    while cause is not None:
        if isinstance(cause, ssl.SSLCertVerificationError):
            return (
                f"its TLS certificate does not verify ({cause.verify_message}); give the CA "
                "that signed it with --slurm-ca-file"
            )
        if isinstance(cause, ssl.SSLError) and cause.reason == "WRONG_VERSION_NUMBER":
            # A slurmrestd from before TLS (restapi.tls) answering an https URL.
            return "it answered in plain HTTP, not TLS: give its http:// URL, or serve it over TLS"
        cause = cause.__cause__ or cause.__context__
    return type(err).__name__


@dataclass(frozen=True)
class SubmitResult:
    job_id: int
    # Slurm accepted the job but said something about it (e.g. "Requested partition
    # configuration not available now"): the job exists and waits; the words are for an Event.
    warning: str | None = None


class SlurmClient:
    def __init__(
        self,
        base_url: str,
        tokens: Tokens,
        *,
        dialect: Dialect,
        user: str = "root",
        timeout: float = 15,
        ca_file: str | None = None,
    ) -> None:
        """A client of one REST version; `SlurmClient.connect` chooses it with slurmrestd.
        `ca_file`: the CA that signed slurmrestd's certificate (https URLs), in place of the
        system's; the chart's slurmrestd has its own."""
        self.user = user
        self._tokens = tokens
        self.dialect = dialect
        self._job_replies = job_reply_decoder(dialect.job_fields)
        self.release = ""  # Slurm's release as slurmrestd reports it, once seen
        self._scontrol = Scontrol(tokens)
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            timeout=timeout,
            # No proxy or netrc lookups per request, and a small pool: httpcore checks every
            # idle connection before each request, so a large pool costs CPU on every call.
            trust_env=False,
            limits=httpx.Limits(max_connections=8, max_keepalive_connections=8),
            verify=ssl.create_default_context(cafile=ca_file) if ca_file else True,
        )

    @property
    def version(self) -> str:
        return self.dialect.version

    async def aclose(self) -> None:
        await self._http.aclose()

    def _headers(self, as_user: str | None = None) -> dict[str, str]:
        return {"X-SLURM-USER-NAME": as_user or self.user, "X-SLURM-USER-TOKEN": self._tokens.get()}

    # -- which versions slurmrestd serves ---------------------------------------------------
    async def served_versions(self) -> list[str]:
        """The REST versions slurmrestd serves, from its OpenAPI description, or by asking
        each version sunk knows for a ping when the description is not available."""
        try:
            resp = await self._http.get("/openapi/v3", headers=self._headers())
        except httpx.HTTPError as err:
            raise SlurmUnavailable(
                f"cannot reach slurmrestd at {self._http.base_url}: {unreachable_reason(err)}"
            ) from None
        if resp.status_code in (401, 403):
            raise_for(resp.status_code, None, resp.text, "read its OpenAPI description")
        if resp.status_code == 200:
            try:
                paths = resp.json().get("paths") or {}
            except ValueError:
                paths = {}
            found = {m.group(1) for p in paths if (m := re.match(r"^/slurm/(v\d+\.\d+\.\d+)/", p))}
            if found:
                return sorted(found)
        served = []
        for version in SUPPORTED_VERSIONS:
            try:
                probe = await self._http.get(f"/slurm/{version}/ping", headers=self._headers())
            except httpx.HTTPError:
                continue
            if probe.status_code == 200:
                served.append(version)
        return sorted(served)

    @classmethod
    async def connect(
        cls,
        base_url: str,
        tokens: Tokens,
        *,
        user: str = "root",
        forced: str | None = None,
        ca_file: str | None = None,
    ) -> SlurmClient:
        """A client speaking the newest REST version both slurmrestd and sunk know (or
        `forced`). Raises SlurmUnavailable/SlurmAuthError while slurmrestd cannot be asked,
        SlurmVersionError when it serves nothing sunk speaks."""
        # Asking which versions are served uses no version-specific request.
        asking = cls(base_url, tokens, user=user, dialect=V0038(default_user=user), ca_file=ca_file)
        try:
            version = choose_version(await asking.served_versions(), forced)
        finally:
            await asking.aclose()
        return cls(base_url, tokens, user=user, dialect=make_dialect(version, user=user), ca_file=ca_file)

    # -- requests ---------------------------------------------------------------------------
    async def _request(
        self,
        method: str,
        path: str,
        what: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        as_user: str | None = None,
        endpoint: str = "",
        jobs: bool = False,
        api: str = "slurm",
    ) -> tuple[int, Any, str]:
        """(status, decoded body, the text when the answer is bad); `jobs`: the answer is a
        job listing or read, decoded down to the fields the dialect reads; `api`: slurm
        (slurmctld's) or slurmdb (slurmdbd's, through the same slurmrestd)."""
        endpoint = f"{method} {endpoint or path}"
        started = time.perf_counter()
        try:
            resp = await self._http.request(
                method,
                f"/{api}/{self.dialect.version}{path}",
                json=json,
                params=params,
                headers=self._headers(as_user),
            )
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as err:
            SLURM_ERRORS.labels(endpoint, "unreachable").inc()
            raise SlurmUnavailable(
                f"cannot reach slurmrestd at {self._http.base_url} to {what}: {unreachable_reason(err)}"
            ) from None
        except httpx.HTTPError as err:
            # The request may have been sent, and acted on, before the answer was lost.
            SLURM_ERRORS.labels(endpoint, "no_answer").inc()
            raise SlurmNoAnswer(
                f"slurmrestd at {self._http.base_url} did not answer to {what}: {type(err).__name__}"
            ) from None
        finally:
            SLURM_LATENCY.labels(endpoint).observe(time.perf_counter() - started)
        body = decode(resp.content, self._job_replies if jobs else None)
        if isinstance(body, dict) and not self.release:
            meta = body.get("meta") or {}
            about = meta.get("slurm") or meta.get("Slurm") or {}  # 22.05 capitalises it
            self.release = str(about.get("release") or "")
        # The text only serves error messages: not decoded again for a good answer.
        good = resp.status_code == 200 and isinstance(body, dict) and not body.get("errors")
        return resp.status_code, body, "" if good else resp.text

    async def _call(self, method: str, path: str, what: str, **kw: Any) -> dict[str, Any]:
        status, body, text = await self._request(method, path, what, **kw)
        try:
            raise_for(status, body, text, what)
        except SlurmError as err:
            SLURM_ERRORS.labels(f"{method} {kw.get('endpoint') or path}", type(err).__name__).inc()
            raise
        return body if isinstance(body, dict) else {}

    async def slurmdb(self, method: str, path: str, what: str, **kw: Any) -> dict[str, Any]:
        """One request to slurmdbd's endpoints (`/slurmdb/<version><path>`) in this client's
        REST version; Slurm's errors raised as for slurmctld's (sunk.slurm.accounts). A
        304 (a removal that found nothing to remove, recorded) is an empty success."""
        status, body, text = await self._request(method, path, what, api="slurmdb", **kw)
        if status == 304:
            return {}
        try:
            raise_for(status, body, text, what)
        except SlurmError as err:
            SLURM_ERRORS.labels(f"{method} {kw.get('endpoint') or path}", type(err).__name__).inc()
            raise
        return body if isinstance(body, dict) else {}

    async def ping(self) -> None:
        await self._call("GET", "/ping", "ping slurmctld")

    async def diag(self) -> SlurmDiag:
        """slurmctld's scheduler statistics (what sdiag prints): cheap to ask, no locks on
        jobs or nodes."""
        return parse_diag(await self._call("GET", "/diag", "read slurmctld's statistics"))

    async def submit(self, submission: Submission) -> SubmitResult:
        """Submit; a reply that carries a job ID means the job exists, whatever else it
        says, so it is returned (with Slurm's words) rather than raised."""
        what = "submit a job"
        status, body, text = await self._request(
            "POST", "/job/submit", what, json=submission.body, as_user=submission.as_user
        )
        job_id = body.get("job_id") if isinstance(body, dict) else None
        if isinstance(job_id, int) and job_id > 0:
            errors = error_list(body)
            real = [e for e in errors if error_code(e)]
            return SubmitResult(job_id, describe(real) if real else None)
        try:
            raise_for(status, body, text, what)
        except SlurmError as err:
            SLURM_ERRORS.labels("POST /job/submit", type(err).__name__).inc()
            raise
        raise SlurmUnavailable(
            f"slurmrestd accepted the submission but returned no job ID: {(text or str(body))[:200]}"
        )

    def submission(self, job: JobRequest, script: str, environment: dict[str, str]) -> Submission:
        return self.dialect.submission(job, script, environment)

    def owner_name(self, job: SlurmJob) -> str:
        return self.dialect.owner_name(job)

    async def jobs(self) -> list[SlurmJob]:
        params = dict(self.dialect.job_read_params)
        reply = await self._call("GET", "/jobs", "list jobs", params=params, jobs=True)
        return [self.dialect.parse_job(j) for j in reply.get("jobs") or []]

    async def job(self, job_id: int) -> SlurmJob | None:
        jobs = await self._read_job(job_id)
        return self.dialect.parse_job(jobs[0]) if jobs else None

    async def job_group(self, job_id: int) -> list[SlurmJob]:
        """A heterogeneous job's leader read with every component (Slurm answers a read of
        the leader's ID with all of them), or just the job; [] when Slurm has none."""
        return [self.dialect.parse_job(j) for j in await self._read_job(job_id)]

    async def _read_job(self, job_id: int) -> list[dict[str, Any]]:
        """Slurm's answer to a read of `job_id`, unparsed; [] when Slurm has no such job."""
        try:
            reply = await self._call(
                "GET",
                f"/job/{job_id}",
                f"read job {job_id}",
                params=dict(self.dialect.job_read_params),
                endpoint="/job/{id}",
                jobs=True,
            )
        except SlurmJobGone:
            return []
        jobs: list[dict[str, Any]] = reply.get("jobs") or []
        return jobs

    async def job_states(self, job_ids: list[int]) -> dict[int, JobState]:
        """Job ID → (its state in one word, every state word) for each of `job_ids` that
        Slurm still has, in one request (only where the dialect `reads_job_states`). Only
        the states travel: a burst of jobs ending costs one small answer where reading each
        would render and parse every job whole."""
        params = {"job_id": [str(job_id) for job_id in job_ids]}  # repeated: Slurm takes no list
        reply = await self._call(
            "GET", "/jobs/state/", "read job states", params=params, endpoint="/jobs/state"
        )
        return job_states(reply)

    async def cancel(self, job_id: int, *, signal: str | None = None) -> None:
        """Cancel (SIGKILL after KillWait) or, with `signal`, only signal the job."""
        params = {"signal": signal} if signal else None
        try:
            await self._call(
                "DELETE", f"/job/{job_id}", f"cancel job {job_id}", params=params, endpoint="/job/{id}"
            )
        except SlurmJobGone:
            return

    async def set_excluded_nodes(self, job_id: int, nodes: list[str]) -> None:
        """Make `nodes` the excluded nodes of pending job `job_id` (--placement=pack)."""
        await self._update_job(job_id, "update the excluded nodes of", self.dialect.exclusion_update(nodes))

    async def _update_job(self, job_id: int, what: str, body: dict[str, Any]) -> None:
        """One job update over REST; `what` reads before "job N" in an error."""
        await self._call("POST", f"/job/{job_id}", f"{what} job {job_id}", json=body, endpoint="/job/{id}")

    async def release_job(self, job_id: int) -> None:
        """Let a job submitted held (`JobRequest.hold`) start, ahead of every job waiting:
        the scheduler holds and releases only a job that takes back resources a running Pod
        already has (re-adoption), which must not queue behind jobs Slurm ranks higher.
        Slurm refuses a priority for a held job, and a release sets the priority the
        priority plugin computes, so the priority is set right after the release. The
        release is what matters: should the priority be refused (the job ended or runs
        already), the release stands."""
        await self._update_job(job_id, "release", {"hold": False})
        try:
            await self._update_job(
                job_id, "give the top priority to released", self.dialect.priority_update(TOP_PRIORITY)
            )
        except SlurmError as err:
            log.info("job %s is released, but keeps the priority Slurm gave it (%s)", job_id, err)

    async def nodes(self) -> list[SlurmNode]:
        reply = await self._call("GET", "/nodes", "list nodes")
        return [self.dialect.parse_node(n) for n in reply.get("nodes") or []]

    async def node(self, name: str) -> SlurmNode | None:
        reply = await self._call("GET", f"/node/{name}", f"read node {name}", endpoint="/node/{name}")
        nodes = reply.get("nodes") or []
        return self.dialect.parse_node(nodes[0]) if nodes else None

    async def partitions(self) -> dict[str, int | None]:
        """Slurm's partitions by name, each with its MaxTime in minutes (None: no limit, or
        one this REST version does not report)."""
        return partition_time_limits(await self._call("GET", "/partitions", "list partitions"))

    async def delete_node(self, name: str) -> None:
        """Delete a (dynamic) node's record; a node that is already gone is not an error."""
        try:
            await self._call("DELETE", f"/node/{name}", f"delete node {name}", endpoint="/node/{name}")
        except SlurmRejected as err:
            if err.code != INVALID_NODE_NAME:
                raise

    async def drain(self, node: str, reason: str) -> str | None:
        """Drain `node` with `reason`; None on success, otherwise what went wrong."""
        if not self.dialect.drains_over_rest:
            return await self._scontrol.drain(node, reason)
        body = self.dialect.drain_body(reason)
        return await self._update_node(node, body, f"drain node {node}", f"drain {node}")

    async def resume(self, node: str) -> str | None:
        """Resume a drained `node`; None on success, otherwise what went wrong."""
        if not self.dialect.drains_over_rest:
            return await self._scontrol.resume(node)
        return await self._update_node(node, {"state": ["RESUME"]}, f"resume node {node}", f"resume {node}")

    async def mark_down(self, node: str, reason: str) -> str | None:
        """Mark `node` DOWN with `reason` (its jobs are requeued or failed by their own
        settings); None on success, otherwise what went wrong."""
        if not self.dialect.drains_over_rest:
            return await self._scontrol.mark_down(node, reason)
        body = {"state": ["DOWN"], "reason": reason}
        return await self._update_node(node, body, f"mark node {node} down", f"mark {node} down")

    async def _update_node(self, node: str, body: dict[str, Any], doing: str, failed: str) -> str | None:
        """One node update over REST (`doing` names the call); None on success, otherwise
        "could not <failed>: <why>"."""
        try:
            await self._call("POST", f"/node/{node}", doing, json=body, endpoint="/node/{name}")
        except SlurmError as err:
            return f"could not {failed}: {err}"
        return None

    async def reconfigure(self) -> None:
        """Make slurmctld read its configuration files again and hand them to every slurmd
        (configless); no daemon restarts. Raises SlurmError when slurmctld refuses."""
        if not self.dialect.drains_over_rest:
            failure = await self._scontrol.reconfigure()
            if failure:
                raise SlurmUnavailable(failure)
            return
        await self._call("GET", "/reconfigure/", "reconfigure slurmctld")

    async def select_type(self) -> str | None:
        """Slurm's SelectTypeParameters (for the memory check of R7.3), if it can be read."""
        if not self.dialect.drains_over_rest:
            config = await self._scontrol.config()
            return None if config is None else config.get("SelectTypeParameters", "")
        reply = await self._call("GET", "/partitions", "list partitions")
        for partition in reply.get("partitions") or []:
            flags = partition.get("select_type")
            if flags:
                return ",".join(str(f) for f in flags)
        # Partitions that do not override the cluster's setting say nothing about it.
        return None
