"""Slurm's JWTs (auth/jwt), signed here with the cluster's `jwt_hs256.key`.

A token is what `scontrol token` prints: HS256 over the claims Slurm reads, `sun` (the user
the token speaks for), `iat` and `exp`. Signing it in Python lets a component that holds
the key (the chart's hook Job, the operator) make its own without a Slurm command or a
running slurmctld. The standard library is enough; the token is never logged.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Mapping

# Compact JSON with sorted keys: the bytes Slurm's own tokens carry (libjwt sorts them).
_HEADER = {"alg": "HS256", "typ": "JWT"}


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _segment(value: Mapping[str, object]) -> str:
    return _b64url(json.dumps(value, separators=(",", ":"), sort_keys=True).encode())


def mint(key: bytes, user: str, lifetime_s: int, now: float | None = None) -> str:
    """A token for Slurm user `user`, valid `lifetime_s` seconds from `now` (default: now)."""
    if not key:
        raise ValueError("Slurm's JWT key is empty: it must hold the bytes of jwt_hs256.key")
    if not user:
        raise ValueError("a Slurm token needs a user name")
    if lifetime_s <= 0:
        raise ValueError(f"a Slurm token's lifetime must be positive, not {lifetime_s} s")
    issued = int(time.time() if now is None else now)
    claims = {"exp": issued + lifetime_s, "iat": issued, "sun": user}
    signed = f"{_segment(_HEADER)}.{_segment(claims)}"
    signature = hmac.new(key, signed.encode(), hashlib.sha256).digest()
    return f"{signed}.{_b64url(signature)}"


def expires_at(token: str) -> int | None:
    """The token's `exp` claim (epoch seconds), or None when it cannot be read. The
    signature is not checked: this only says when a token we hold runs out."""
    try:
        body = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        exp = claims["exp"]
    except (IndexError, ValueError, KeyError, TypeError):
        return None
    return exp if isinstance(exp, int) else None
