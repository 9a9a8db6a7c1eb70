"""Raw-JSON access to the API server, on top of kubernetes_asyncio's configuration and
authentication (kubeconfig, in-cluster ServiceAccount, exec plugins).

The scheduler's hot paths (watches, binding, patches) handle plain dicts: the generated
typed models cost more to build than the whole decision that follows.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.exceptions import ApiException

Json = dict[str, Any]
# The API server sends a bookmark on every watch about once a minute: a watch that says
# nothing for longer than this is dead, whatever the TCP connection claims.
WATCH_READ_TIMEOUT_S = 90.0


class KubeError(Exception):
    """An answer of the API server (status >= 400), or none at all (status 0: refused,
    reset, timed out). Callers handle one kind of error: a transport failure must never
    escape as aiohttp's own exception and take a task (or the process) down."""

    def __init__(self, status: int, message: str) -> None:
        prefix = f"Kubernetes API error {status}" if status else "Kubernetes API server unreachable"
        super().__init__(f"{prefix}: {message}")
        self.status = status
        self.message = message

    @property
    def unreachable(self) -> bool:
        return self.status == 0

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409


def _message(body: str | bytes | None) -> str:
    try:
        return str(orjson.loads(body or b"{}").get("message") or body)
    except (ValueError, AttributeError):
        return str(body)[:300]


class KubeClient:
    def __init__(self, api: k8s.ApiClient) -> None:
        self._api = api

    @classmethod
    async def connect(cls, kubeconfig: str | None = None) -> KubeClient:
        """Use `kubeconfig`, else $KUBECONFIG / ~/.kube/config, else the in-cluster account."""
        configuration = k8s.Configuration()
        path = _kubeconfig_path(kubeconfig)
        if path:
            await k8s_config.load_kube_config(config_file=path, client_configuration=configuration)
        else:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        configuration.connection_pool_maxsize = 32
        api = k8s.ApiClient(configuration)
        _skip_environment_lookups(api)
        return cls(api)

    async def close(self) -> None:
        await self._api.close()

    async def _raw(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        request_timeout: float | aiohttp.ClientTimeout | None = 30,
    ) -> Any:
        try:
            return await self._api.call_api(
                path,
                method,
                query_params=list((query or {}).items()),
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=request_timeout,
            )
        except ApiException as err:
            raise KubeError(err.status or 0, _message(err.body)) from None
        except (aiohttp.ClientError, TimeoutError) as err:
            raise _unreachable(err) from None

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Json:
        resp = await self._raw(method, path, query=query, body=body, content_type=content_type)
        try:
            data = await _read(resp)
        except (aiohttp.ClientError, TimeoutError) as err:
            raise _unreachable(err) from None
        status = _status(resp)
        if status >= 400:
            # Without preloading, the client hands back error responses instead of raising.
            raise KubeError(status, _message(data))
        result: Json = orjson.loads(data) if data else {}
        return result

    async def watch(self, path: str, query: dict[str, Any]) -> AsyncIterator[Json]:
        """Yield watch events ({"type", "object"}) until the server closes the stream."""
        # No total limit (the server ends the watch itself), but a read limit: a connection
        # that went half-open would otherwise leave the cache silently stale for ever.
        resp = await self._raw(
            "GET",
            path,
            query={**query, "watch": "true"},
            request_timeout=aiohttp.ClientTimeout(sock_connect=10, sock_read=WATCH_READ_TIMEOUT_S),
        )
        status = _status(resp)
        if status >= 400:
            raise KubeError(status, _message(await _read(resp)))
        try:
            content = resp.content if hasattr(resp, "content") else resp.response.content
            async for line in content:
                if line.strip():
                    yield orjson.loads(line)  # every watch event of every Pod: the fast parser
        finally:
            resp.release() if hasattr(resp, "release") else resp.response.release()

    # -- the calls the scheduler makes --------------------------------------------------
    async def get(self, path: str) -> Json:
        return await self.request("GET", path)

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        await self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/pods/{name}/binding",
            body={
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name, "uid": uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            },
        )

    async def patch_pod(self, namespace: str, name: str, uid: str, patch: Json) -> Json:
        """Merge-patch a Pod; the UID in the patch makes it fail if the Pod was replaced."""
        patch = {**patch, "metadata": {**patch.get("metadata", {}), "uid": uid}}
        return await self.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            body=patch,
            content_type="application/merge-patch+json",
        )

    async def patch_pod_status(self, namespace: str, name: str, status: Json) -> Json:
        """Strategic merge: conditions merge by type, so others' conditions stay."""
        return await self.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}/status",
            body={"status": status},
            content_type="application/strategic-merge-patch+json",
        )

    async def delete_pod(self, namespace: str, name: str, uid: str, *, grace_s: int | None = None) -> None:
        """Delete the Pod with this UID (never a namesake made since); `grace_s` overrides
        its own grace period (0: its containers are killed at once)."""
        options: Json = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        if grace_s is not None:
            options["gracePeriodSeconds"] = grace_s
        await self.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body=options)

    async def create_event(self, namespace: str, event: Json) -> None:
        await self.request("POST", f"/apis/events.k8s.io/v1/namespaces/{namespace}/events", body=event)

    # -- the calls the operator adds ----------------------------------------------------
    async def create_pod(self, namespace: str, pod: Json) -> Json:
        return await self.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=pod)

    async def patch_merge(self, path: str, patch: Json) -> Json:
        """Merge-patch the object at `path` (a resourceVersion in the patch makes it
        conditional)."""
        return await self.request("PATCH", path, body=patch, content_type="application/merge-patch+json")

    async def patch_status(self, path: str, status: Json) -> Json:
        """Merge-patch the status subresource of the object at `path` (a custom resource)."""
        return await self.request(
            "PATCH", f"{path}/status", body={"status": status}, content_type="application/merge-patch+json"
        )

    async def patch_node_status(self, name: str, status: Json) -> Json:
        """Strategic merge on a Node's status: conditions merge by type, so the kubelet's
        and other tools' conditions stay."""
        return await self.request(
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            body={"status": status},
            content_type="application/strategic-merge-patch+json",
        )


def _unreachable(err: BaseException) -> KubeError:
    return KubeError(0, f"{type(err).__name__}: {err}" if str(err) else type(err).__name__)


def _skip_environment_lookups(api: k8s.ApiClient) -> None:
    """kubernetes_asyncio opens its aiohttp session with trust_env=True, which makes every
    request look up proxy variables and parse ~/.netrc in a thread: a fifth of the
    scheduler's CPU under load. A scheduler talks to one API server, never via a proxy."""
    session = api.rest_client.pool_manager
    if not hasattr(session, "_trust_env"):
        raise RuntimeError(
            "aiohttp.ClientSession no longer has _trust_env: revisit _skip_environment_lookups"
        )
    session._trust_env = False


def _kubeconfig_path(explicit: str | None) -> str | None:
    path = explicit or os.environ.get("KUBECONFIG")
    if path:
        return path
    default = os.path.expanduser("~/.kube/config")
    return default if os.path.exists(default) else None


def _status(resp: Any) -> int:
    status = getattr(resp, "status", None)
    if status is None:
        status = getattr(getattr(resp, "response", None), "status", None)
    return int(status) if isinstance(status, int) else 200


async def _read(resp: Any) -> bytes:
    """call_api returns an aiohttp response (or a thin wrapper of one) when not preloading."""
    if isinstance(resp, aiohttp.ClientResponse):
        data = await resp.read()
        resp.release()
        return data
    inner = getattr(resp, "response", None)
    if isinstance(inner, aiohttp.ClientResponse):
        data = await inner.read()
        inner.release()
        return data
    data = getattr(resp, "data", b"")
    return data if isinstance(data, bytes) else str(data).encode()
