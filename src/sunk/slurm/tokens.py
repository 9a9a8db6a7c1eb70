"""The Slurm JWT, from a string or a file that is re-read whenever it changes (a rotated
token is picked up without a restart). It never appears in logs, reprs or messages."""

from __future__ import annotations

import os
from pathlib import Path

from sunk.slurm.errors import SlurmUnavailable


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
