"""slurmrestd's many ways of saying no, turned into exceptions a user can act on."""

from __future__ import annotations

from typing import Any


class SlurmError(Exception):
    """Base class; `retryable` says whether trying again later can help."""

    retryable = True


class SlurmUnavailable(SlurmError):
    """slurmrestd or slurmctld could not be reached."""


class SlurmNoAnswer(SlurmUnavailable):
    """The request went out but no answer came back (a timeout, a dropped connection):
    Slurm may have carried it out. A submission that ends so must be looked for before it
    is sent again."""


class SlurmAuthError(SlurmError):
    """The token was refused (slurmrestd often words this misleadingly)."""


class SlurmRejected(SlurmError):
    """slurmctld understood the request and refused it. Final (bad partition, account,
    QoS…) unless the error number says a later try can succeed (limits, fail-over)."""

    retryable = False

    def __init__(self, message: str, code: int | None = None, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.retryable = retryable


class SlurmJobGone(SlurmRejected):
    """The job ID is unknown to slurmctld (finished long ago, or state was wiped)."""


# slurmctld error numbers (slurm_errno.h) that we name in messages.
UNKNOWN_JOB = 2017
INVALID_NODE_NAME = 2010  # also what deleting a node that no longer exists answers

# Slurm error numbers after which the same request can succeed later: slurmctld or its
# database unreachable or failing over, socket and RPC timeouts, and limits that lift as
# other jobs end (MaxJobCount, per-user submit limits, QoS limits). Plain errno values
# (EINTR, EAGAIN, ETIMEDOUT, ECONNRESET, ECONNREFUSED) come through as themselves.
RETRYABLE_CODES = frozenset(
    {4, 11, 104, 110, 111, 112, 113}
    | set(range(1000, 1026))  # communication errors
    | set(range(1800, 1806))  # slurmctld unreachable, backing off
    | {
        2007,  # MaxJobCount reached
        2027,  # controller in standby mode
        2041,  # backup controller taking over
        2050,  # accounting policy: a submit limit of the user or account
        2074,  # a QoS limit
        2105,  # submissions disabled for now
        2131,  # in standby, use the backup
        5003,  # incomplete packet
        5004,  # socket timeout
        5005,  # zero bytes sent
        7000,  # slurmdbd unreachable
        7008,  # slurmdbd connection invalid
    }
)
# Error numbers that mean this request will never succeed as written: the Pod is refused
# with Slurm's words. Anything not listed here or above is retried with a back-off, so a
# transient error Slurm adds in a later release never refuses a Pod for good.
FINAL_CODES = frozenset(
    {
        2000,  # invalid partition name
        2001,  # no default partition
        2002,  # access denied
        2003,  # partition requires a group the user is not in
        2004,  # requested nodes not in the partition
        2005,  # too many CPUs requested
        2006,  # invalid node count
        2010,  # user id missing
        2014,  # no node configuration can ever satisfy the request
        2018,  # invalid node name
        2029,  # invalid feature (constraints)
        2044,  # invalid memory request
        2045,  # invalid account
        2051,  # invalid time limit
        2052,  # reservation access denied
        2053,  # invalid reservation
        2057,  # invalid wckey
        2066,  # invalid QoS
        2069,  # invalid CPU count
        2072,  # invalid GRES
        2099,  # invalid MCS label
        2113,  # group id missing
        2115,  # invalid TRES
        2119,  # invalid GRES type
        2122,  # unsupported GRES
        2130,  # partition not allowed for the association
        2133,  # invalid prefer
        2162,  # group id invalid
        2163,  # group id unknown
        2164,  # user id invalid
        2165,  # user id unknown
        2166,  # invalid association
        2170,  # invalid extra
    }
)


def classify(code: int | None) -> bool:
    """True when a request refused with `code` may succeed if tried again later."""
    if code is None:
        return True
    # 9000-9399: slurmrestd could not parse our request itself.
    return not (code in FINAL_CODES or 9000 <= code < 9400)


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
        # Newer slurmrestd puts what failed in `description` and why in `error`
        # ("Batch job submission failed" / "Invalid partition name specified").
        words = [str(w) for w in (err.get("description"), err.get("error")) if w]
        text = ": ".join(dict.fromkeys(words)) or "unknown error"
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
    known = [c for c in codes if c]
    if status >= 500 and not errors:
        raise SlurmUnavailable(f"slurmrestd failed to {what} (HTTP {status}): {detail}")
    if any(c in RETRYABLE_CODES for c in known):
        raise SlurmUnavailable(f"Slurm cannot {what} for now: {detail}")
    code = next((c for c in known if c in FINAL_CODES), known[0] if known else None)
    # A 400 is slurmrestd refusing to parse what we sent: retrying the same body cannot help.
    retryable = status != 400 and classify(code) and not any(c in FINAL_CODES for c in known)
    raise SlurmRejected(f"Slurm refused to {what}: {detail}", code, retryable=retryable)
