"""slurmrestd's many ways of saying no, turned into exceptions a user can act on."""

from __future__ import annotations

from typing import Any


class SlurmError(Exception):
    """Base class; `retryable` says whether trying again later can help."""

    retryable = True


class SlurmUnavailable(SlurmError):
    """slurmrestd or slurmctld could not be reached."""


class SlurmAuthError(SlurmError):
    """The token was refused (slurmrestd often words this misleadingly)."""


class SlurmRejected(SlurmError):
    """slurmctld understood the request and refused it (bad partition, account, QoS…)."""

    retryable = False

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class SlurmJobGone(SlurmRejected):
    """The job ID is unknown to slurmctld (finished long ago, or state was wiped)."""


# slurmctld error numbers (slurm_errno.h) that we name in messages.
UNKNOWN_JOB = 2017
# What slurmrestd 22.05 reports when slurmctld refused the token: a generic -1 ("Unable to
# find JobId=1", "Failed while looking for jobs") or 5005 "Zero Bytes were transmitted".
_AUTH_FAILURE_CODES = {-1, 5005}
_AUTH_FAILURE_WORDS = ("unspecified error", "zero bytes were transmitted")
_TOKEN_WORDS = ("token", "authentication", "auth/jwt", "jwt", "unable to authenticate")


def error_list(body: Any) -> list[dict[str, Any]]:
    errors = body.get("errors") if isinstance(body, dict) else None
    return [e for e in errors or [] if isinstance(e, dict)]


def error_code(err: dict[str, Any]) -> int | None:
    for key in ("error_number", "error_code", "errno"):
        value = err.get(key)
        if isinstance(value, int) and value:
            return value
    return None


def _raw_code(err: dict[str, Any]) -> int | None:
    for key in ("error_number", "error_code", "errno"):
        value = err.get(key)
        if isinstance(value, int):
            return value
    return None


def describe(errors: list[dict[str, Any]]) -> str:
    parts = []
    for err in errors:
        text = err.get("description") or err.get("error") or "unknown error"
        code = error_code(err)
        parts.append(f"{text} (Slurm error {code})" if code else str(text))
    return "; ".join(parts) or "no details given"


def raise_for(status: int, body: Any, text: str, what: str) -> None:
    """Raise the right exception for a slurmrestd reply, or return if it is a success."""
    errors = error_list(body)
    if status == 200 and not errors:
        return
    if status == 401 or (status == 403):
        raise SlurmAuthError(
            f"slurmrestd refused our credentials while trying to {what}: check the token "
            "(--slurm-auth-token or its file) and the user name header"
        )
    detail = describe(errors) if errors else text.strip()[:300]
    codes = {error_code(e) for e in errors}
    if UNKNOWN_JOB in codes:
        raise SlurmJobGone(f"could not {what}: {detail}", UNKNOWN_JOB)
    generic = errors and all(
        _raw_code(e) in _AUTH_FAILURE_CODES
        and any(word in str(e.get("error", "")).lower() for word in _AUTH_FAILURE_WORDS)
        for e in errors
    )
    if status >= 500 and (generic or any(word in detail.lower() for word in _TOKEN_WORDS)):
        raise SlurmAuthError(
            f"slurmrestd could not {what}, most likely because slurmctld refused the token "
            f"(slurmrestd says: {detail}); check that the token is valid, not expired and signed "
            "with the cluster's jwt key"
        )
    if status in (502, 503, 504):
        raise SlurmUnavailable(f"slurmrestd could not {what}: {detail}")
    code = next((c for c in codes if c), None)
    if status >= 500 and not errors:
        raise SlurmUnavailable(f"slurmrestd failed to {what} (HTTP {status}): {detail}")
    raise SlurmRejected(f"Slurm refused to {what}: {detail}", code)
