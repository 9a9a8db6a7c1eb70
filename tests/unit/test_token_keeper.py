"""The scheduler's Slurm token is renewed by the operator before it runs out (R10.1), and
left alone while it has time."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from sunk.operator.token_keeper import LIFETIME_S, TokenKeeper, needs_renewal
from sunk.slurm.jwt import expires_at, mint

NOW = 2_000_000_000.0
HOUR = 3600


class FakeSecrets:
    def __init__(self, token: str) -> None:
        self.data = {"token": base64.b64encode(token.encode()).decode()}
        self.patches: list[dict[str, Any]] = []

    async def request(
        self, method: str, path: str, *, body: Any = None, content_type: str = ""
    ) -> dict[str, Any]:
        if method == "PATCH":
            self.patches.append(body)
            self.data.update(body["data"])
        return {"data": dict(self.data)}

    def token(self) -> str:
        return base64.b64decode(self.data["token"]).decode()


def keeper(tmp_path: Path, secrets: FakeSecrets) -> TokenKeeper:
    key = tmp_path / "jwt_hs256.key"
    key.write_bytes(b"k" * 32)
    return TokenKeeper(secrets, "slurm", "slurm-scheduler-token", key)


def test_issue38_a_token_with_less_than_3_hours_left_or_unreadable_is_renewed() -> None:
    assert not needs_renewal(mint(b"k", "root", 4 * HOUR, now=NOW), NOW)
    assert needs_renewal(mint(b"k", "root", 2 * HOUR, now=NOW), NOW)
    assert needs_renewal("not-a-token", NOW)


async def test_issue38_the_operator_writes_a_fresh_6_hour_token_when_due(tmp_path: Path) -> None:
    secrets = FakeSecrets(mint(b"k" * 32, "root", 6 * HOUR, now=NOW - 4 * HOUR))
    assert await keeper(tmp_path, secrets).renew_if_due(NOW)
    assert expires_at(secrets.token()) == int(NOW) + LIFETIME_S == int(NOW) + 6 * HOUR


async def test_r10_1_a_token_with_time_left_is_not_rewritten(tmp_path: Path) -> None:
    secrets = FakeSecrets(mint(b"k" * 32, "root", LIFETIME_S, now=NOW))
    assert not await keeper(tmp_path, secrets).renew_if_due(NOW + 2 * HOUR)
    assert secrets.patches == []
