"""`sunk ensure-slurm-secrets`: the Slurm chart's keys and tokens, made once and kept.

A template cannot make them: every `helm template` (and every GitOps sync built on it)
would render new random bytes, and a new slurm.key or JWT key cuts every daemon, job
credential and token off from the cluster at once. So the chart renders no secret at all;
its hook Job runs this before anything else, and it creates each Secret only when it is
missing. An existing Secret is never changed, so upgrades and re-installs keep the keys.

- the auth Secret: `slurm.key` (auth/slurm and cred/slurm, 1 KiB) and `jwt_hs256.key`
  (auth/jwt, 32 bytes);
- the token Secret: `token`, a JWT for the Pod scheduler, signed with that JWT key (read
  back from the auth Secret, so a token made later still matches an older key);
- optionally MariaDB's password, for the in-cluster accounting database;
- optionally the login Pods' SSH host key (ed25519, OpenSSH's format), so every login
  replica, and every restart, shows users the same host identity;
- optionally slurmrestd's TLS certificate (its own CA, `ca.crt`, which the scheduler, the
  operator and the hook Jobs verify it with) for the restapi Service's names.
"""

from __future__ import annotations

import base64
import secrets
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sunk.kube.client import KubeClient, KubeError
from sunk.kube.secret import ensure_and_report, ensure_tls_secret
from sunk.operator import token_keeper
from sunk.slurm.jwt import mint

SLURM_KEY = "slurm.key"
JWT_KEY = "jwt_hs256.key"
TOKEN = "token"
PASSWORD = "password"
HOST_KEY = "ssh_host_ed25519_key"
LABELS = {"app.kubernetes.io/name": "slurm", "app.kubernetes.io/managed-by": "sunk"}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def ensure_slurm_secrets(
    kube: KubeClient,
    namespace: str,
    *,
    auth_secret: str,
    token_secret: str,
    token_user: str,
    mariadb_secret: str | None = None,
    host_keys_secret: str | None = None,
    restapi_tls_secret: str | None = None,
    restapi_tls_hosts: tuple[str, ...] = (),
) -> list[tuple[str, bool]]:
    """Each Secret's name and whether this run created it (False: it existed, untouched)."""
    if restapi_tls_secret and not restapi_tls_hosts:
        raise ValueError("--restapi-tls-secret needs at least one --restapi-tls-host")
    fresh = {SLURM_KEY: _b64(secrets.token_bytes(1024)), JWT_KEY: _b64(secrets.token_bytes(32))}
    auth, made_auth = await _ensure(kube, namespace, auth_secret, fresh)
    made = [(auth_secret, made_auth)]
    jwt_key = base64.b64decode(auth[JWT_KEY])
    token = {TOKEN: _b64(mint(jwt_key, token_user, token_keeper.LIFETIME_S).encode())}
    made.append((token_secret, (await _ensure(kube, namespace, token_secret, token))[1]))
    if mariadb_secret:
        # Hex: safe unquoted in slurmdbd.conf and in any client's option file.
        password = {PASSWORD: _b64(secrets.token_hex(24).encode())}
        made.append((mariadb_secret, (await _ensure(kube, namespace, mariadb_secret, password))[1]))
    if host_keys_secret:
        made.append((host_keys_secret, (await _ensure(kube, namespace, host_keys_secret, ssh_host_key()))[1]))
    if restapi_tls_secret:
        hosts = list(restapi_tls_hosts)
        tls = await ensure_tls_secret(
            kube, namespace, restapi_tls_secret, hosts, common_name="slurmrestd", labels=LABELS
        )
        made.append((restapi_tls_secret, tls))
    return made


def ssh_host_key() -> dict[str, str]:
    """A fresh ed25519 host key pair, as the files sshd reads (base64, as Secret data)."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return {HOST_KEY: _b64(private), f"{HOST_KEY}.pub": _b64(public + b" login\n")}


async def _ensure(
    kube: KubeClient, namespace: str, name: str, data: dict[str, str]
) -> tuple[dict[str, str], bool]:
    """(the Secret's data, made now?): create it with `data` unless it exists; an existing
    one must hold every key of `data` (it is used as it is)."""
    existing = await _read(kube, namespace, name)
    if existing is None:
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace, "labels": LABELS},
            "type": "Opaque",
            "data": data,
        }
        try:
            await kube.request("POST", f"/api/v1/namespaces/{namespace}/secrets", body=body)
        except KubeError as err:
            if not err.conflict:
                raise
            # Made by a concurrent run meanwhile: that one stands.
            existing = await _read(kube, namespace, name)
        else:
            return data, True
    if existing is None:
        raise ValueError(f"Secret {namespace}/{name} was created by someone else and then deleted; run again")
    missing = sorted(k for k in data if not existing.get(k))
    if missing:
        raise ValueError(
            f"Secret {namespace}/{name} exists but has no {', '.join(missing)}: add the missing key(s), "
            "or delete the Secret to have a new one made (a new key locks out everything using the old)"
        )
    return existing, False


async def _read(kube: KubeClient, namespace: str, name: str) -> dict[str, str] | None:
    try:
        secret: dict[str, Any] = await kube.request("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}")
    except KubeError as err:
        if err.not_found:
            return None
        raise
    return dict(secret.get("data") or {})


def run(
    namespace: str,
    auth_secret: str,
    token_secret: str,
    token_user: str,
    mariadb_secret: str | None,
    kubeconfig: str | None,
    host_keys_secret: str | None = None,
    restapi_tls_secret: str | None = None,
    restapi_tls_hosts: tuple[str, ...] = (),
) -> int:
    """The command: prints which Secrets it made (never their contents); 1 on failure."""

    async def ensure(kube: KubeClient) -> list[tuple[str, bool]]:
        return await ensure_slurm_secrets(
            kube,
            namespace,
            auth_secret=auth_secret,
            token_secret=token_secret,
            token_user=token_user,
            mariadb_secret=mariadb_secret,
            host_keys_secret=host_keys_secret,
            restapi_tls_secret=restapi_tls_secret,
            restapi_tls_hosts=restapi_tls_hosts,
        )

    return ensure_and_report("ensure-slurm-secrets", namespace, kubeconfig, ensure)
