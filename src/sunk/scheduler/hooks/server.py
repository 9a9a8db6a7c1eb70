"""The hooks API the placeholder jobs call (R5.2, R5.5).

  POST /v1/pods/{uid}/jobs/{job_id}/started      the script runs: look at the job now
  POST /v1/pods/{uid}/jobs/{job_id}/terminating  Slurm is ending the job: delete the Pod;
                                                 200 once it is gone, 202 if it is still
                                                 terminating after a short long-poll

Every call must carry the token of the Pod named in the path (or a fresh signature made
with its key), and the job must be that Pod's job. Anything else gets 401/403 and changes
nothing. Either call only hurries a read of the job from Slurm; Slurm's answer decides.
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
from collections.abc import Awaitable, Callable
from typing import Protocol

from aiohttp import web

from sunk.runtime.ports import Clock
from sunk.scheduler.hooks.auth import Verifier
from sunk.scheduler.hooks.holds import Holds
from sunk.scheduler.translate import PodRef

log = logging.getLogger(__name__)
# Below the 10 s a placeholder's curl waits: one round usually covers a Pod's deletion.
LONG_POLL_S = 8.0
REFUSAL_LOG_EVERY_S = 10.0


class HookTarget(Protocol):
    """What the hooks API needs from the scheduler."""

    async def pod_of_job(self, job_id: int) -> PodRef | None: ...

    async def job_started(self, ref: PodRef, job_id: int) -> None: ...

    async def job_terminating(self, ref: PodRef, job_id: int) -> None: ...

    async def wait_pod_gone(self, ref: PodRef, job_id: int, within: float) -> bool:
        """True once the Pod no longer needs this job's resources: it is gone, it has
        finished, or it has moved on to another job (a rejected placement)."""
        ...

    def why_waiting(self, ref: PodRef, job_id: int) -> str:
        """Why the Pod of this job (or a member of its gang) is still there, in words."""
        ...

    def acting_now(self) -> bool: ...


Outcome = Callable[[str], None]


class HooksServer:
    def __init__(
        self,
        target: HookTarget,
        verifier: Verifier,
        clock: Clock,
        on_call: Outcome | None = None,
        holds: Holds | None = None,
    ) -> None:
        self._target = target
        self._holds = holds or Holds(kill_wait_s=30, clock=clock.monotonic)
        self._verifier = verifier
        self._on_call = on_call or (lambda _outcome: None)
        self.app = web.Application()
        self.app.router.add_post("/v1/pods/{uid}/jobs/{job_id}/started", self._guard(self._started))
        self.app.router.add_post(
            "/v1/pods/{uid}/jobs/{job_id}/terminating", self._guard(self._terminating, holds=True)
        )
        self._runner: web.AppRunner | None = None
        self.port = 0
        self._refusals = RefusalLog(clock.monotonic)

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> int:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        # Replicas on one host may share the port (followers answer 503), as behind a Service.
        site = web.TCPSite(self._runner, host, port, reuse_port=True, ssl_context=tls)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []  # the port actually bound
        self.port = sockets[0].getsockname()[1] if sockets else port
        return self.port

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()

    def _guard(
        self, handler: Handler, *, holds: bool = False
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        """`handler` behind authentication and the job's ownership check; `holds`: its
        answers are what a placeholder holding its node waits for (noted in `Holds`)."""

        async def guarded(request: web.Request) -> web.Response:
            uid = request.match_info["uid"]
            job_text = request.match_info["job_id"]
            headers = request.headers
            problem = self._authenticate(request, uid)
            if problem is not None:
                self._refusals.note(f"{request.path} from {request.remote}: {problem}")
                self._on_call("unauthenticated")
                return web.json_response({"error": problem}, status=401)
            response, outcome, ref = await answer(request, uid, job_text)
            self._on_call(outcome)
            if holds and job_text.isdigit():
                self._note_hold(request, int(job_text), ref, uid, outcome)
            # Only an authenticated call gets a signed answer, and only for that call.
            response.headers["X-Sunk-Answer"] = self._verifier.sign_answer(
                uid, request.path, headers.get("X-Sunk-Nonce", ""), response.status
            )
            return response

        async def answer(
            request: web.Request, uid: str, job_text: str
        ) -> tuple[web.Response, str, PodRef | None]:
            if not job_text.isdigit():
                return (
                    web.json_response({"error": "job id must be a number"}, status=400),
                    "bad_request",
                    None,
                )
            job_id = int(job_text)
            if not self._target.acting_now():
                return web.json_response({"error": "not the leader; retry"}, status=503), "not_leader", None
            ref = await self._target.pod_of_job(job_id)
            if ref is None or ref.uid != uid:
                log.warning("refused a hook call: job %s does not belong to Pod %s", job_id, uid)
                refused = web.json_response({"error": "this job does not belong to this Pod"}, status=403)
                return refused, "forbidden", None
            try:
                response, outcome = await handler(request, ref, job_id)
            except Exception as err:  # the script retries; say why here, once, in one line
                log.warning("hook call %s failed: %s: %s", request.path, type(err).__name__, err)
                failed = web.json_response({"error": "the scheduler could not act yet; retry"}, status=503)
                return failed, "error", ref
            return response, outcome, ref

        return guarded

    def _authenticate(self, request: web.Request, uid: str) -> str | None:
        """None for a call with the Pod's token or signature; otherwise why not. Whatever a
        caller sends, the answer is a refusal, never an error: a malformed header must
        not reach the log as a traceback on every call, past the refusal log's throttle."""
        headers = request.headers
        if not _PLAIN.fullmatch(uid):
            return "malformed Pod UID"
        if not _PLAIN.fullmatch(headers.get("X-Sunk-Nonce", "x")):
            return "malformed nonce"  # the answer is signed over it: it must encode as it is
        token = headers.get("X-Sunk-Token")
        try:
            if token is not None:
                return self._verifier.check_token(uid, token)
            return self._verifier.check(
                uid,
                request.method,
                request.path,
                headers.get("X-Sunk-Timestamp", ""),
                headers.get("X-Sunk-Nonce", ""),
                headers.get("X-Sunk-Signature", ""),
            )
        except (ValueError, TypeError, UnicodeError) as err:
            return f"malformed credentials ({type(err).__name__})"

    async def _started(self, _request: web.Request, ref: PodRef, job_id: int) -> tuple[web.Response, str]:
        await self._target.job_started(ref, job_id)
        return web.json_response({"pod": str(ref)}), "started"

    async def _terminating(self, _request: web.Request, ref: PodRef, job_id: int) -> tuple[web.Response, str]:
        await self._target.job_terminating(ref, job_id)
        gone = await self._target.wait_pod_gone(ref, job_id, LONG_POLL_S)
        response = web.json_response({"pod": "gone" if gone else "terminating"}, status=200 if gone else 202)
        return response, "terminating_gone" if gone else "terminating_wait"

    def _note_hold(
        self, request: web.Request, job_id: int, ref: PodRef | None, uid: str, outcome: str
    ) -> None:
        """Tell `Holds` what this terminating call was answered. A "gone" for a caller that
        already hung up (its curl gave up first) never reached it: it counts as a wait."""
        answer = _HOLD_ANSWERS.get(outcome, outcome)
        if answer == "gone" and (request.transport is None or request.transport.is_closing()):
            answer = "terminating"
        self._holds.answered(
            job_id,
            str(ref) if ref is not None else f"with UID {uid}",
            answer,
            lambda: self._target.why_waiting(ref, job_id) if ref is not None else "the job is no Pod's",
        )


# What a Pod UID and a nonce may hold: what placeholders send, and nothing that would not
# encode the same way on both ends of a signature.
_PLAIN = re.compile(r"[A-Za-z0-9._-]{1,128}")
Handler = Callable[[web.Request, PodRef, int], Awaitable[tuple[web.Response, str]]]
# The call's outcome (sunk_hook_calls_total) → its answer as sunk_hook_terminating_wait_seconds
# labels it.
_HOLD_ANSWERS = {"terminating_gone": "gone", "terminating_wait": "terminating", "forbidden": "not_its_pod"}


class RefusalLog:
    """Unauthenticated calls, logged at most once per REFUSAL_LOG_EVERY_S with a count: a
    flood of forged calls must not flood the log (or the disk) too."""

    def __init__(self, clock: Callable[[], float]) -> None:
        """`clock`: the scheduler's monotonic clock (`Clock.monotonic`), which tests move on by hand."""
        self._clock = clock
        self._last = -REFUSAL_LOG_EVERY_S
        self._unlogged = 0

    def note(self, what: str) -> None:
        now = self._clock()
        if now - self._last < REFUSAL_LOG_EVERY_S:
            self._unlogged += 1
            return
        more = f" ({self._unlogged} more since the last such line)" if self._unlogged else ""
        log.warning("refused an unauthenticated hook call to %s%s", what, more)
        self._last, self._unlogged = now, 0


class PodGoneWaiters:
    """Lets hook calls wait for a Pod's DELETED event instead of polling. Calls for one Pod
    may overlap (a placeholder whose call gave up before its long poll ended asks again
    while the first is still waiting here): they share one event, forgotten only when the
    last of them is done, so that no call misses the deletion and waits out its poll."""

    def __init__(self) -> None:
        self._events: dict[str, tuple[asyncio.Event, int]] = {}  # uid → (event, calls waiting)

    def deleted(self, uid: str) -> None:
        found = self._events.get(uid)
        if found is not None:
            found[0].set()

    async def wait(self, uid: str, still_there: Callable[[], bool], within: float) -> bool:
        event, waiting = self._events.get(uid) or (asyncio.Event(), 0)
        self._events[uid] = (event, waiting + 1)
        try:
            if not still_there():
                return True
            try:
                await asyncio.wait_for(event.wait(), within)
            except TimeoutError:
                return not still_there()
            return True
        finally:
            event, waiting = self._events[uid]
            if waiting > 1:
                self._events[uid] = (event, waiting - 1)
            else:
                del self._events[uid]
