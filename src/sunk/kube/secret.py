"""`sunk ensure-hooks-secret`: make the hooks secrets once, keep them forever.

The chart cannot generate secrets in a template: `helm template` (and every GitOps tool
built on it) would render new random values on each run and break the key of every running
placeholder job. Instead a small Job runs this before the scheduler starts: it creates each
Secret when it is missing and leaves an existing one untouched, so the rendered manifests
hold no secret at all and stay the same from one render to the next.

Two Secrets: the one that signs hook credentials, and (optionally) a TLS certificate for
the hooks API that is its own CA, handed to placeholder jobs so they can verify it.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import ipaddress
import logging
import secrets
import sys
from collections.abc import Awaitable, Callable

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from sunk.kube.client import KubeClient, KubeError

log = logging.getLogger(__name__)
KEY = "secret"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def ensure_hooks_secret(kube: KubeClient, namespace: str, name: str) -> bool:
    """Create Secret `name` with a fresh random `secret` key unless it exists; True if made."""
    data = {KEY: _b64(secrets.token_urlsafe(48).encode())}
    return await _ensure(kube, namespace, name, "Opaque", data, KEY)


async def ensure_tls_secret(
    kube: KubeClient,
    namespace: str,
    name: str,
    hosts: list[str],
    *,
    common_name: str = "sunk hooks API",
    labels: dict[str, str] | None = None,
) -> bool:
    """Create a kubernetes.io/tls Secret for a server (the hooks API, slurmrestd) unless it
    exists; True if made. The certificate is its own CA (ca.crt), which clients verify it with."""
    cert, key = self_signed(hosts, name=common_name)
    data = {"tls.crt": _b64(cert), "tls.key": _b64(key), "ca.crt": _b64(cert)}
    return await _ensure(kube, namespace, name, "kubernetes.io/tls", data, "tls.crt", labels)


def self_signed(hosts: list[str], days: int = 3650, name: str = "sunk hooks API") -> tuple[bytes, bytes]:
    """(certificate, key) in PEM for `hosts` (DNS names or IP addresses), valid `days`;
    `name` is its subject's common name, what `openssl x509 -subject` shows."""
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    # The names live in the SANs; a common name is limited to 64 characters.
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


async def _ensure(
    kube: KubeClient,
    namespace: str,
    name: str,
    kind: str,
    data: dict[str, str],
    needed: str,
    labels: dict[str, str] | None = None,
) -> bool:
    path = f"/api/v1/namespaces/{namespace}/secrets"
    try:
        existing = await kube.request("GET", f"{path}/{name}")
    except KubeError as err:
        if not err.not_found:
            raise
    else:
        if not ((existing.get("data") or {}).get(needed)):
            raise ValueError(
                f"Secret {namespace}/{name} exists but has no key {needed!r}; add one or delete it"
            )
        return False
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels or {"app.kubernetes.io/name": "sunk-scheduler"},
        },
        "type": kind,
        "data": data,
    }
    try:
        await kube.request("POST", path, body=body)
    except KubeError as err:
        if err.conflict:  # made by a concurrent run: that one stands
            return False
        raise
    return True


def ensure_and_report(
    command: str,
    namespace: str,
    kubeconfig: str | None,
    ensure: Callable[[KubeClient], Awaitable[list[tuple[str, bool]]]],
) -> int:
    """Run a chart hook's `ensure` (which Secrets it made) and say, per Secret, whether it
    was made or left alone (never their contents); 1 with the reason on failure."""

    async def connected() -> list[tuple[str, bool]]:
        kube = await KubeClient.connect(kubeconfig)
        try:
            return await ensure(kube)
        finally:
            await kube.close()

    try:
        results = asyncio.run(connected())
    except (KubeError, ValueError) as err:
        print(f"sunk {command}: {err}", file=sys.stderr)
        return 1
    for name, made in results:
        print(f"Secret {namespace}/{name} {'created' if made else 'exists; left as it is'}")
    return 0
