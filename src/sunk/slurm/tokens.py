"""The Slurm JWT, from a string or a file that is re-read whenever it changes (a rotated
token is picked up without a restart). It never appears in logs, reprs or messages."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Protocol

from sunk.slurm.errors import SlurmUnavailable
from sunk.slurm.jwt import mint


class Tokens(Protocol):
    """Where a Slurm client gets the token for its next request."""

    def get(self) -> str: ...


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


class MintedTokens:
    """Short-lived tokens signed with Slurm's JWT key (what `scontrol token` makes), for a
    component that holds the key: a fresh one well before the last runs out, none stored."""

    def __init__(self, key_path: Path, user: str, lifetime_s: int = 3600) -> None:
        self._key_path = key_path
        self._user = user
        self._lifetime_s = lifetime_s
        self._token = ""
        self._renew_at = 0.0

    def get(self) -> str:
        now = time.time()
        if now >= self._renew_at:
            try:
                key = self._key_path.read_bytes()
            except OSError as err:
                why = f"cannot read Slurm's JWT key {self._key_path}: {err.strerror}"
                raise SlurmUnavailable(why) from None
            self._token = mint(key, self._user, self._lifetime_s, now=now)
            self._renew_at = now + self._lifetime_s / 2
        return self._token

    def __repr__(self) -> str:
        return f"MintedTokens(key={self._key_path!s}, user={self._user})"
