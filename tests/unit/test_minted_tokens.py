"""The operator's own slurmrestd tokens: signed from the mounted key, renewed well before
they run out, never stored (R10.1)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from sunk.slurm import tokens
from sunk.slurm.errors import SlurmUnavailable
from sunk.slurm.tokens import MintedTokens


def claims(token: str) -> dict[str, object]:
    body = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))))


def test_r10_1_a_token_names_the_user_and_is_reused_until_half_its_life(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = tmp_path / "jwt_hs256.key"
    key.write_bytes(b"k" * 32)
    clock = [1_000_000.0]
    monkeypatch.setattr(tokens.time, "time", lambda: clock[0])
    source = MintedTokens(key, "slurm", lifetime_s=600)
    first = source.get()
    assert claims(first)["sun"] == "slurm" and claims(first)["exp"] == 1_000_600
    clock[0] += 299
    assert source.get() == first
    clock[0] += 2
    assert claims(source.get())["exp"] == 1_000_901


def test_r10_1_an_unreadable_key_is_a_slurm_outage_not_a_crash(tmp_path: Path) -> None:
    with pytest.raises(SlurmUnavailable, match="JWT key"):
        MintedTokens(tmp_path / "missing", "slurm").get()
