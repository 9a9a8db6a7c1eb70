"""A small list+watch cache of one kind of object.

List (paged), then watch from the list's resourceVersion with bookmarks so the version
stays fresh; when the server says the version is too old (410 Gone) or the stream breaks,
list again and report only the differences. Handlers see ("ADDED"|"MODIFIED"|"DELETED",
object) and must not block: the scheduler only enqueues keys there.

Objects are kept without `metadata.managedFields`: the API server's record of which client
set which field, which sunk never reads. On a Pod bound by sunk and run by a kubelet it is
about a third of the object, so a cache of thousands of Pods holds much less without it.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any

import aiohttp

from sunk.kube.client import KubeClient, KubeError

Json = dict[str, Any]
Handler = Callable[[str, Json], None]
log = logging.getLogger(__name__)

WATCH_TIMEOUT_S = 300
PAGE_SIZE = 500


def without_managed_fields(obj: Json) -> Json:
    """`obj` with its managedFields dropped (in place: the object is fresh off the wire)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def object_key(obj: Json) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


class Informer:
    def __init__(
        self,
        client: KubeClient,
        path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        name: str = "",
    ) -> None:
        self.name = name or path
        self._client = client
        self._path = path
        self._selectors: dict[str, str] = {}
        if label_selector:
            self._selectors["labelSelector"] = label_selector
        if field_selector:
            self._selectors["fieldSelector"] = field_selector
        self.store: dict[str, Json] = {}
        self.synced = asyncio.Event()
        self._handlers: list[Handler] = []
        self._resource_version = ""

    def add_handler(self, handler: Handler) -> None:
        self._handlers.append(handler)

    def get(self, key: str) -> Json | None:
        return self.store.get(key)

    def _emit(self, kind: str, obj: Json) -> None:
        for handler in self._handlers:
            handler(kind, obj)

    async def _list(self) -> None:
        fresh: dict[str, Json] = {}
        token = None
        while True:
            query: dict[str, Any] = {**self._selectors, "limit": PAGE_SIZE}
            if token:
                query["continue"] = token
            page = await self._client.request("GET", self._path, query=query)
            for item in page.get("items") or []:
                fresh[object_key(item)] = without_managed_fields(item)
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                self._resource_version = page["metadata"]["resourceVersion"]
                break
        old, self.store = self.store, fresh
        for key, obj in fresh.items():
            before = old.get(key)
            if before is None:
                self._emit("ADDED", obj)
            elif before["metadata"].get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                self._emit("MODIFIED", obj)
        for key, obj in old.items():
            if key not in fresh:
                self._emit("DELETED", obj)

    async def _watch(self) -> None:
        query = {
            **self._selectors,
            "resourceVersion": self._resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": WATCH_TIMEOUT_S,
        }
        async for event in self._client.watch(self._path, query):
            kind, obj = event.get("type"), without_managed_fields(event.get("object") or {})
            if kind == "ERROR":
                status = obj.get("code", 0)
                raise KubeError(status, obj.get("message", "watch error"))
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if version:
                self._resource_version = version
            if kind == "BOOKMARK":
                continue
            key = object_key(obj)
            if kind == "DELETED":
                self.store.pop(key, None)
            else:
                self.store[key] = obj
            self._emit(str(kind), obj)

    async def run(self) -> None:
        """Run until cancelled; never gives up (the API server may restart at any time)."""
        delay = 0.5
        need_list = True
        while True:
            try:
                if need_list:
                    await self._list()
                    self.synced.set()
                    need_list = False
                await self._watch()
                delay = 0.5  # a watch that ended normally just times out; re-watch
            except asyncio.CancelledError:
                raise
            except (TimeoutError, aiohttp.ServerTimeoutError):
                # Nothing came, not even a bookmark: the connection is dead. Watch again from
                # the last version seen; the server answers 410 if that is too old.
                log.info("%s: the watch went silent; watching again", self.name)
            except KubeError as err:
                need_list = True
                if not err.gone:
                    log.warning("%s: %s; listing again in %.1fs", self.name, err, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 10)
            except Exception as err:
                need_list = True
                log.warning(
                    "%s: watch failed (%s); listing again in %.1fs",
                    self.name,
                    type(err).__name__,
                    delay,
                )
                await asyncio.sleep(delay + random.uniform(0, delay / 2))  # noqa: S311
                delay = min(delay * 2, 10)
