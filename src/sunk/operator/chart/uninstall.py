"""`sunk remove-nodesets`: the Slurm chart's pre-delete hook.

`helm uninstall` would otherwise remove the operator, the NodeSet CRD and the NodeSets at
once: members would be deleted under running jobs, or NodeSets would be left with a
finalizer nobody removes. This hook deletes the release's NodeSets first and waits while
the still-running operator takes each member out the job-safe way (drain, wait for its
jobs, delete), printing what each NodeSet waits for. Helm's --timeout bounds the wait; a
timed-out uninstall changed nothing else and can be run again.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from sunk.kube.client import KubeClient, KubeError
from sunk.operator.nodeset.spec import API_VERSION, PLURAL

POLL_S = 5.0


async def remove_nodesets(kube: KubeClient, namespace: str, poll_s: float = POLL_S) -> None:
    path = f"/apis/{API_VERSION}/namespaces/{namespace}/{PLURAL}"
    said: dict[str, str] = {}
    while True:
        try:
            listed = await kube.get(path)
        except KubeError as err:
            if err.not_found:  # no CRD: nothing to remove
                print("no NodeSet CRD; nothing to remove")
                return
            raise
        items: list[dict[str, Any]] = listed.get("items") or []
        if not items:
            print(f"no NodeSets left in {namespace}")
            return
        for obj in items:
            meta = obj["metadata"]
            if not meta.get("deletionTimestamp"):
                await kube.request("DELETE", f"{path}/{meta['name']}")
                print(f"NodeSet {meta['name']}: deleted; its members leave once their jobs end")
            summary = (obj.get("status") or {}).get("summary") or "waiting for the operator"
            if said.get(meta["name"]) != summary:
                said[meta["name"]] = summary
                print(f"NodeSet {meta['name']}: {summary}", flush=True)
        await asyncio.sleep(poll_s)


def run(namespace: str, kubeconfig: str | None) -> int:
    async def connected() -> None:
        kube = await KubeClient.connect(kubeconfig)
        try:
            await remove_nodesets(kube, namespace)
        finally:
            await kube.close()

    try:
        asyncio.run(connected())
    except KubeError as err:
        print(f"sunk remove-nodesets: {err}", file=sys.stderr)
        return 1
    return 0
