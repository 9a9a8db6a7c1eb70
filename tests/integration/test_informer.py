"""The informer against the dev cluster's real API server (issue #11): it keeps a true copy
of what it watches whatever happens to its watch."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sunk.kube import informer as informer_module
from sunk.kube.client import KubeClient
from sunk.kube.informer import Informer
from sunk_dev import DevCluster
from sunk_dev.kubeapi import AdminKube
from tests.support import make_pod

pytestmark = pytest.mark.integration


def test_r8_2_a_watch_from_a_forgotten_version_gets_410_and_the_informer_lists_again(
    dev_cluster: DevCluster, kube: AdminKube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a long partition the last version an informer saw is gone from the server's
    history: the server answers its watch with 410 Gone. Watching on from "now" would miss
    whatever changed meanwhile, so the informer must list again, and stay a true copy."""
    monkeypatch.setattr(informer_module, "WATCH_TIMEOUT_S", 1)  # each watch ends after 1 s
    path = f"/api/v1/namespaces/{namespace}/pods"
    kube.create(path, make_pod("before", "nobody"))

    async def scenario() -> tuple[int, set[str], list[tuple[str, str]]]:
        client = await KubeClient.connect(str(dev_cluster.layout.kubeconfig))
        watcher = Informer(client, path, name="pods")
        lists = 0
        listing = watcher._list

        async def counted() -> None:
            nonlocal lists
            lists += 1
            await listing()

        watcher._list = counted  # type: ignore[method-assign]
        seen: list[tuple[str, str]] = []
        watcher.add_handler(lambda kind, pod: seen.append((kind, pod["metadata"]["name"])))
        task = asyncio.create_task(watcher.run())
        try:
            await asyncio.wait_for(watcher.synced.wait(), 20)
            # A version from long ago, as after a partition: the next watch gets 410 Gone.
            watcher._resource_version = "1"
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 20
            while lists < 2:
                assert loop.time() < deadline, "no second list after the watch was refused"
                await asyncio.sleep(0.05)
            await asyncio.to_thread(kube.delete, f"{path}/before")
            await asyncio.to_thread(kube.create, path, make_pod("after", "nobody"))
            while set(watcher.store) != {f"{namespace}/after"}:
                assert loop.time() < deadline, f"the copy is stuck at {sorted(watcher.store)}"
                await asyncio.sleep(0.05)
            return lists, set(watcher.store), seen
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.close()

    lists, store, seen = asyncio.run(scenario())
    assert lists == 2 and store == {f"{namespace}/after"}
    assert seen.count(("ADDED", "before")) == 1  # the second list announced nothing twice
    assert ("DELETED", "before") in seen and ("ADDED", "after") in seen


def test_the_informer_keeps_objects_without_their_managed_fields(
    dev_cluster: DevCluster, kube: AdminKube, namespace: str
) -> None:
    """The API server records which client set each field (managedFields, a third of a
    running Pod); nothing in sunk reads it, so neither the cache nor the handlers hold it,
    whether an object came from the list or from the watch."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    kube.create(path, make_pod("listed", "nobody"))
    assert kube.get(f"{path}/listed")["metadata"].get("managedFields"), "the server records them"

    async def scenario() -> list[dict[str, Any]]:
        client = await KubeClient.connect(str(dev_cluster.layout.kubeconfig))
        watcher = Informer(client, path, name="pods")
        handed: list[dict[str, Any]] = []
        watcher.add_handler(lambda _kind, pod: handed.append(pod))
        task = asyncio.create_task(watcher.run())
        try:
            await asyncio.wait_for(watcher.synced.wait(), 20)
            await asyncio.to_thread(kube.create, path, make_pod("watched", "nobody"))
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 20
            while f"{namespace}/watched" not in watcher.store:
                assert loop.time() < deadline, "the watch never brought the second Pod"
                await asyncio.sleep(0.05)
            return [*watcher.store.values(), *handed]
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.close()

    seen = asyncio.run(scenario())
    assert {pod["metadata"]["name"] for pod in seen} == {"listed", "watched"}
    assert not [pod for pod in seen if "managedFields" in pod["metadata"]]
