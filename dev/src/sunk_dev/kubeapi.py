"""A small synchronous admin client for the dev API server.

The dev cluster and the tests use it to create Nodes, Pods and namespaces and to read back
what the scheduler did. The scheduler itself uses its own async client (sunk.kube); the
tests deliberately check the server's state through this independent path.
"""

from __future__ import annotations

import ssl
import time
from typing import Any

import httpx

from sunk_dev.layout import Layout

Json = dict[str, Any]


class KubeError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status
        self.body = body


def is_ready(node: Json) -> bool:
    """Whether a Node object says Ready."""
    conditions = node.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


class AdminKube:
    def __init__(self, layout: Layout, *, token: str | None = None) -> None:
        """Admin identity by client certificate; pass `token` to act as someone else."""
        kube = layout.kube
        tls = ssl.create_default_context(cafile=str(kube / "ca.crt"))
        headers = {}
        if token is None:
            tls.load_cert_chain(str(kube / "admin.crt"), str(kube / "admin.key"))
        else:
            headers["Authorization"] = f"Bearer {token}"
        self.http = httpx.Client(base_url=layout.apiserver_url, verify=tls, headers=headers, timeout=30)

    def close(self) -> None:
        self.http.close()

    def request(self, method: str, path: str, body: Json | None = None, **params: Any) -> Json:
        headers = {}
        if method == "PATCH":
            headers["Content-Type"] = "application/merge-patch+json"
        resp = self.http.request(method, path, json=body, params=params or None, headers=headers)
        if resp.status_code >= 300:
            raise KubeError(resp.status_code, resp.text)
        result: Json = resp.json() if resp.content else {}
        return result

    def get(self, path: str, **params: Any) -> Json:
        return self.request("GET", path, **params)

    def find(self, path: str) -> Json | None:
        """GET that returns None instead of raising on 404."""
        try:
            return self.get(path)
        except KubeError as err:
            if err.status == 404:
                return None
            raise

    def create(self, path: str, body: Json) -> Json:
        return self.request("POST", path, body)

    def patch(self, path: str, body: Json) -> Json:
        return self.request("PATCH", path, body)

    def delete(self, path: str, **params: Any) -> Json | None:
        try:
            return self.request("DELETE", path, **params)
        except KubeError as err:
            if err.status == 404:
                return None
            raise

    def create_namespace(self, name: str, labels: dict[str, str] | None = None, *, within: float = 60) -> str:
        """Create a namespace (or keep the one there) and wait until Pods can be created in it.

        The API server refuses a Pod until the serviceaccount controller has made the
        namespace's `default` ServiceAccount; on a busy machine, or while that controller's
        watches reconnect after an API server restart, that takes a while."""
        metadata: Json = {"name": name}
        if labels:
            metadata["labels"] = labels
        try:
            self.create("/api/v1/namespaces", {"metadata": metadata})
        except KubeError as err:
            if err.status != 409:
                raise
        deadline = time.monotonic() + within
        while self.find(f"/api/v1/namespaces/{name}/serviceaccounts/default") is None:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"namespace {name} has no default ServiceAccount after {within:.0f} s: "
                    "is kube-controller-manager running? (see its log under the dev cluster's logs/)"
                )
            time.sleep(0.1)
        return name

    def serve_crd(self, crd: Json, *, within: float = 30) -> None:
        """Create a CustomResourceDefinition (or keep the one there) and wait until the API
        server serves it: a controller that watches its kind fails until then."""
        crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        path = f"{crds}/{crd['metadata']['name']}"
        if self.find(path) is None:
            self.create(crds, crd)
        deadline = time.monotonic() + within
        while True:
            conditions = ((self.find(path) or {}).get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"CustomResourceDefinition {crd['metadata']['name']} not served after {within:.0f} s"
                )
            time.sleep(0.1)

    def ready(self) -> bool:
        return self.http.get("/readyz").status_code == 200

    def ready_nodes(self) -> list[str]:
        return [node["metadata"]["name"] for node in self.get("/api/v1/nodes")["items"] if is_ready(node)]
