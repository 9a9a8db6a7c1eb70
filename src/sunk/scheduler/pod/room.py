"""What the Pods this scheduler sees hold on each Node, in the kubelet's count (R4.3): one
cache's Pods (the slurmd Pods, or the scheduler's own), summed per Node.

Asked at every submission and binding, so it is kept up to date instead of summed again:
an informer replaces a cached object whenever it changes, so each look compares every
object with the one summed last time (one look-up each, by identity) and sums again only
what changed. A cache of thousands of Pods costs about a millisecond a look.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from sunk.kube import noderoom
from sunk.kube.resources import Requests

Json = dict[str, Any]
# The object summed, its Node, and what it holds there (None: it holds nothing, being
# unbound or finished).
_Entry = tuple[Json, str | None, Requests | None]


class NodeSums:
    """Node → what one cache's Pods there request, as the kubelet counts them."""

    def __init__(self, pods: Callable[[], Iterable[tuple[str, Json]]]) -> None:
        self._pods = pods  # (key, Pod) of every cached Pod
        self._seen: dict[str, _Entry] = {}
        self._by_node: dict[str, noderoom.Tally] = {}

    def look(self) -> dict[str, noderoom.Tally]:
        """The sums as the cache holds them now (not to be changed by the caller)."""
        visited = 0
        for key, pod in self._pods():
            visited += 1
            known = self._seen.get(key)
            if known is not None and known[0] is pod:
                continue
            if known is not None:
                self._count(known, -1)
            node = (pod.get("spec") or {}).get("nodeName")
            held = noderoom.requests_of(pod) if node and noderoom.counts(pod) else None
            entry = (pod, node, held)
            self._seen[key] = entry
            self._count(entry, 1)
        if len(self._seen) > visited:  # some are gone from the cache
            live = {key for key, _ in self._pods()}
            for key in [k for k in self._seen if k not in live]:
                self._count(self._seen.pop(key), -1)
        return self._by_node

    def held(self, key: str) -> tuple[str | None, Requests | None]:
        """Where the Pod `key` was counted at the last look, and what it holds there."""
        known = self._seen.get(key)
        return (known[1], known[2]) if known is not None else (None, None)

    def _count(self, entry: _Entry, sign: int) -> None:
        _, node, held = entry
        if node is None or held is None:
            return
        tally = self._by_node.setdefault(node, noderoom.Tally())
        tally.add(held, sign)
        if tally.pods == 0:
            del self._by_node[node]
