"""Credentials for hooks API calls (R5.5).

The scheduler holds one secret. Each placeholder job gets two credentials derived from it
and the Pod's UID, so a job can speak only for its own Pod:

- a **token**, sent as it is with every call. Both calls are hints: `started` and
  `terminating` make the scheduler read the job from Slurm sooner, and only what Slurm
  then says causes an action (a bind, a Pod deletion). So a token that leaks (a sniffed
  plain-HTTP call, a replay) lets its holder at most hurry the reads of that one Pod's
  job, each read once however often it is asked for. Sending it costs the placeholder
  nothing beyond curl, where signing cost two more processes per call.
- a **key**, which never leaves the job: the scheduler signs its answers with it.

Calls signed with the key over the method, path, a timestamp and a random nonce (what
placeholders submitted before tokens send) are still taken: a forged call fails the
signature, a replayed one reuses a nonce or is too old, and a call for another Pod fails
because the key is bound to the UID in the path.

Nonces are remembered in memory, so after a restart (or on a replica that has just become
leader) only calls signed after the process began acting are taken: a call captured before
cannot be replayed then. Placeholders sign every attempt afresh, so a genuine call caught
by that rule succeeds on its retry.

The answer is signed (`answer_signature`) over the call's path, the nonce the call brought
and the status: the placeholder exits only on an answer the scheduler signed for that very
call, so a forged "200, the Pod is gone" cannot free a job's resources while its Pod still
runs. The nonce is the placeholder's own fresh random number, so no answer seen before,
genuine or not, matches a later call.
"""

from __future__ import annotations

import hashlib
import hmac
import math
from dataclasses import dataclass, field

from sunk.runtime.ports import Clock

# How old a call may be. Generous because a busy node can take a while to fork curl after
# signing; replays inside the window are caught by the nonce, which is kept twice as long.
MAX_SKEW_S = 300


def pod_key(secret: bytes, pod_uid: str) -> str:
    return hmac.new(secret, b"sunk-pod:" + pod_uid.encode(), hashlib.sha256).hexdigest()


def pod_token(secret: bytes, pod_uid: str) -> str:
    """Derived apart from the key: a token seen on the wire reveals nothing of the key."""
    return hmac.new(secret, b"sunk-pod-token:" + pod_uid.encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class HookCredentials:
    """Where placeholder jobs reach the hooks API, and the secret their keys derive from."""

    url: str
    secret: bytes = field(repr=False)
    ca_pem: str = ""  # what placeholders verify the hooks API's certificate with ("": plain HTTP)

    def environment_for(self, pod_uid: str) -> dict[str, str]:
        """What the placeholder of Pod `pod_uid` is told to reach the hooks API with: where
        it listens, the Pod's token and signing key, and the CA to verify it by."""
        return {
            "SUNK_HOOK_URL": self.url,
            "SUNK_HOOK_TOKEN": pod_token(self.secret, pod_uid),
            "SUNK_HOOK_KEY": pod_key(self.secret, pod_uid),
            **({"SUNK_HOOK_CA": self.ca_pem} if self.ca_pem else {}),
        }


def signature(key_hex: str, method: str, path: str, timestamp: str, nonce: str) -> str:
    # One field per line, each line ended: what a shell here-string feeds to openssl.
    message = f"{method}\n{path}\n{timestamp}\n{nonce}\n".encode()
    return hmac.new(bytes.fromhex(key_hex), message, hashlib.sha256).hexdigest()


def answer_signature(key_hex: str, path: str, nonce: str, status: int) -> str:
    message = f"ANSWER\n{path}\n{nonce}\n{status}\n".encode()
    return hmac.new(bytes.fromhex(key_hex), message, hashlib.sha256).hexdigest()


class Verifier:
    def __init__(self, secret: bytes, clock: Clock) -> None:
        self._secret = secret
        self._clock = clock
        self._seen: dict[str, float] = {}  # nonce → when it may be forgotten
        # Calls signed before this moment are refused: their nonces may have been seen by
        # an earlier process (or another replica) whose memory is gone. Set when acting.
        self.not_before = 0.0

    def sign_answer(self, pod_uid: str, path: str, nonce: str, status: int) -> str:
        return answer_signature(pod_key(self._secret, pod_uid), path, nonce, status)

    def check_token(self, pod_uid: str, token: str) -> str | None:
        """None if `token` is the Pod's; otherwise why the call is refused."""
        if not _hex(token):
            return "malformed token"
        if not hmac.compare_digest(pod_token(self._secret, pod_uid), token):
            return "bad token"
        return None

    def check(self, pod_uid: str, method: str, path: str, timestamp: str, nonce: str, sig: str) -> str | None:
        """None if the call is genuine and fresh; otherwise why it is refused."""
        if not (timestamp and nonce and sig):
            return "missing X-Sunk-Token (or X-Sunk-Timestamp, X-Sunk-Nonce and X-Sunk-Signature)"
        try:
            sent = float(timestamp)
        except ValueError:
            return "malformed timestamp"
        if not math.isfinite(sent):  # NaN compares false with everything: no window holds it
            return "malformed timestamp"
        if not _hex(sig):
            return "malformed signature"
        now = self._clock.now()
        if abs(now - sent) > MAX_SKEW_S:
            return "timestamp outside the accepted window"
        expected = signature(pod_key(self._secret, pod_uid), method, path, timestamp, nonce)
        if not hmac.compare_digest(expected, sig):
            return "bad signature"
        if sent < self.not_before:
            return "signed before this scheduler began acting (a replay, or a call to sign again)"
        while self._seen:  # insertion order is expiry order: forget from the front
            oldest = next(iter(self._seen))
            if self._seen[oldest] > now:
                break
            del self._seen[oldest]
        if nonce in self._seen:
            return "replayed nonce"
        self._seen[nonce] = now + 2 * MAX_SKEW_S
        return None


def _hex(text: str) -> bool:
    """Tokens and signatures are lowercase hex digests; anything else (empty, non-ASCII, of
    another length) is refused before it reaches a comparison that would fail on it."""
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)
