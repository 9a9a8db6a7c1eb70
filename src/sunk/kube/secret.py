"""`sunk ensure-hooks-secret`: make the hooks secret once, keep it forever.

The chart cannot generate the secret in a template: `helm template` (and every GitOps tool
built on it) would render a new random value on each run and break the key of every running
placeholder job. Instead a small Job runs this before the scheduler starts: it creates the
Secret when it is missing and leaves an existing one untouched, so the rendered manifests
hold no secret at all and stay the same from one render to the next.
"""

from __future__ import annotations

import base64
import logging
import secrets

from sunk.kube.client import KubeClient, KubeError

log = logging.getLogger(__name__)
KEY = "secret"


async def ensure_hooks_secret(kube: KubeClient, namespace: str, name: str) -> bool:
    """Create Secret `name` with a fresh random `secret` key unless it exists; True if made."""
    path = f"/api/v1/namespaces/{namespace}/secrets"
    try:
        existing = await kube.request("GET", f"{path}/{name}")
    except KubeError as err:
        if not err.not_found:
            raise
    else:
        if not ((existing.get("data") or {}).get(KEY)):
            raise ValueError(f"Secret {namespace}/{name} exists but has no key {KEY!r}; add one or delete it")
        return False
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "sunk-scheduler"},
        },
        "type": "Opaque",
        "data": {KEY: base64.b64encode(secrets.token_urlsafe(48).encode()).decode()},
    }
    try:
        await kube.request("POST", path, body=body)
    except KubeError as err:
        if err.conflict:  # made by a concurrent run: that one stands
            return False
        raise
    return True
