"""The Slurm JWTs sunk signs itself (sunk.slurm.jwt): the bytes slurmctld checks, and the
chart's keys and scheduler token made once from them (sunk.operator.chart.secrets)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any, cast

import pytest
from cryptography import x509

from sunk.kube.client import KubeClient, KubeError
from sunk.operator.chart.secrets import ensure_slurm_secrets
from sunk.slurm.jwt import mint

KEY = bytes(range(32))
# Made independently with openssl (HMAC-SHA256 over the base64url header and claims).
KNOWN = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJleHAiOjE3MDAwMDM2MDAsImlhdCI6MTcwMDAwMDAwMCwic3VuIjoicm9vdCJ9"
    ".vsx7ZuS5qUgn-6qp-VMKzUMuJdShMcIQ5JfEa_MzOjs"
)


def _decode(segment: str) -> dict[str, object]:
    return dict(json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))))


def test_a_token_matches_a_known_vector() -> None:
    assert mint(KEY, "root", 3600, now=1_700_000_000) == KNOWN


def test_the_claims_are_the_ones_slurm_reads() -> None:
    header, claims, _ = mint(KEY, "slurm", 300, now=1_000.7).split(".")
    assert _decode(header) == {"alg": "HS256", "typ": "JWT"}
    assert _decode(claims) == {"sun": "slurm", "iat": 1000, "exp": 1300}


def test_the_signature_is_hmac_sha256_with_the_key() -> None:
    token = mint(b"another key", "root", 60, now=5)
    signed, _, signature = token.rpartition(".")
    expected = hmac.new(b"another key", signed.encode(), hashlib.sha256).digest()
    assert base64.urlsafe_b64decode(signature + "=") == expected
    assert "=" not in token  # base64url without padding, as JWTs are written


def test_now_defaults_to_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sunk.slurm.jwt.time.time", lambda: 42.0)
    assert _decode(mint(KEY, "root", 10).split(".")[1])["exp"] == 52


@pytest.mark.parametrize(
    ("key", "user", "lifetime", "words"),
    [(b"", "root", 60, "key is empty"), (KEY, "", 60, "user name"), (KEY, "root", 0, "must be positive")],
)
def test_a_token_that_could_not_work_is_refused(key: bytes, user: str, lifetime: int, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        mint(key, user, lifetime)


class _Secrets:
    """The API server's Secrets, as far as ensure_slurm_secrets uses them."""

    def __init__(self, existing: dict[str, dict[str, str]]) -> None:
        self.data = dict(existing)
        self.created: list[str] = []

    async def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        if method == "GET":
            name = path.rsplit("/", 1)[1]
            if name not in self.data:
                raise KubeError(404, "not found")
            return {"data": self.data[name]}
        assert method == "POST" and body is not None
        self.data[body["metadata"]["name"]] = body["data"]
        self.created.append(body["metadata"]["name"])
        return body


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_r10_1_the_scheduler_token_is_signed_with_the_key_already_in_use() -> None:
    old_key = b"k" * 32
    fake = _Secrets({"s-auth": {"slurm.key": _b64(b"s" * 1024), "jwt_hs256.key": _b64(old_key)}})
    made = await ensure_slurm_secrets(
        cast(KubeClient, fake),
        "ns",
        auth_secret="s-auth",
        token_secret="s-token",
        token_user="root",
        mariadb_secret="s-db",
    )
    assert made == [("s-auth", False), ("s-token", True), ("s-db", True)]
    token = base64.b64decode(fake.data["s-token"]["token"]).decode()
    signed, _, signature = token.rpartition(".")
    expected = hmac.new(old_key, signed.encode(), hashlib.sha256).digest()
    assert base64.urlsafe_b64decode(signature + "=") == expected
    assert _decode(token.split(".")[1])["sun"] == "root"
    assert len(base64.b64decode(fake.data["s-db"]["password"])) == 48


async def test_r10_1_new_keys_have_the_sizes_slurm_expects_and_are_made_once() -> None:
    fake = _Secrets({})
    kube = cast(KubeClient, fake)
    await ensure_slurm_secrets(kube, "ns", auth_secret="a", token_secret="t", token_user="root")
    keys = {k: base64.b64decode(v) for k, v in fake.data["a"].items()}
    assert (len(keys["slurm.key"]), len(keys["jwt_hs256.key"])) == (1024, 32)
    again = await ensure_slurm_secrets(kube, "ns", auth_secret="a", token_secret="t", token_user="root")
    assert again == [("a", False), ("t", False)] and fake.created == ["a", "t"]


async def test_r10_1_an_existing_secret_without_its_key_is_reported_not_replaced() -> None:
    fake = _Secrets({"a": {"slurm.key": _b64(b"s" * 1024)}})
    with pytest.raises(ValueError, match=r"has no jwt_hs256\.key"):
        await ensure_slurm_secrets(
            cast(KubeClient, fake), "ns", auth_secret="a", token_secret="t", token_user="root"
        )
    assert fake.created == []


async def test_r10_1_the_login_host_key_is_made_once_in_openssh_format() -> None:
    """Issue #38: each login replica made its own host keys, so users saw the host change."""
    fake = _Secrets({})
    kube = cast(KubeClient, fake)
    made = await ensure_slurm_secrets(
        kube, "ns", auth_secret="a", token_secret="t", token_user="root", host_keys_secret="h"
    )
    assert made[-1] == ("h", True)
    private = base64.b64decode(fake.data["h"]["ssh_host_ed25519_key"]).decode()
    public = base64.b64decode(fake.data["h"]["ssh_host_ed25519_key.pub"]).decode()
    assert private.startswith("-----BEGIN OPENSSH PRIVATE KEY-----") and public.startswith("ssh-ed25519 ")
    again = await ensure_slurm_secrets(
        kube, "ns", auth_secret="a", token_secret="t", token_user="root", host_keys_secret="h"
    )
    assert again[-1] == ("h", False)
    assert base64.b64decode(fake.data["h"]["ssh_host_ed25519_key.pub"]).decode() == public


async def test_issue38_slurmrestds_certificate_covers_its_names_and_is_made_once() -> None:
    """Catches a certificate for the wrong names (every client's verification would fail)
    or one made anew on each upgrade (clients holding the old CA would be cut off)."""
    fake = _Secrets({})
    kube = cast(KubeClient, fake)
    hosts = ("r-restapi", "r-restapi.ns.svc")
    args = {"auth_secret": "a", "token_secret": "t", "token_user": "root"}
    made = await ensure_slurm_secrets(kube, "ns", **args, restapi_tls_secret="tls", restapi_tls_hosts=hosts)
    assert made[-1] == ("tls", True)
    pem = base64.b64decode(fake.data["tls"]["tls.crt"])
    certificate = x509.load_pem_x509_certificate(pem)
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == list(hosts)
    assert fake.data["tls"]["ca.crt"] == fake.data["tls"]["tls.crt"]  # its own CA
    again = await ensure_slurm_secrets(kube, "ns", **args, restapi_tls_secret="tls", restapi_tls_hosts=hosts)
    assert again[-1] == ("tls", False) and base64.b64decode(fake.data["tls"]["tls.crt"]) == pem
