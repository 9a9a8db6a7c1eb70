"""What the Pods this scheduler sees hold on each Node, in the kubelet's count (R4.3): each
cache's Pods (the slurmd Pods, and the scheduler's own) summed per Node (`NodeSums`), and
the two put together around one Pod (`Tallies`), with the Pods being bound.

Asked at every submission and binding, so it is kept up to date instead of summed again:
an informer replaces a cached object whenever it changes, so each look compares every
object with the one summed last time (one look-up each, by identity) and sums again only
what changed. A cache of thousands of Pods costs about a millisecond a look.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sunk.kube import noderoom
from sunk.kube.resources import Requests
from sunk.runtime.ports import Cache

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


class Tallies:
    """Node → what the Pods there request in the kubelet's count: the slurmd Pods (from
    their cache) and this scheduler's own (from `mine`)."""

    def __init__(self, mine: Callable[[], Iterable[tuple[str, Json]]], slurmd: Cache) -> None:
        self._mine = NodeSums(mine)
        # The informer replaces its store on a relist: read it through at each look.
        self._slurmd = NodeSums(lambda: slurmd.store.items())

    def beside(self, pods: Sequence[tuple[str, Json]]) -> dict[str, noderoom.Tally]:
        """The slurmd Pods, and `pods` (each on its Node)."""
        tallies = dict(self._slurmd.look())
        for node, other in pods:
            count_on(tallies, node, noderoom.requests_of(other))
        return tallies

    def around(self, key: str, uid: str, in_flight: Mapping[str, Json]) -> dict[str, noderoom.Tally]:
        """The slurmd Pods, this scheduler's Pods bound and those being bound (`in_flight`,
        UID → the Pod as bound), but the Pod `key` (UID `uid`) itself. (A Pod in both caches,
        a slurmd Pod naming this scheduler, would count twice: no NodeSet makes one.)"""
        mine, theirs = self._mine.look(), self._slurmd.look()
        tallies = {
            node: tally.plus(theirs[node]) if node in theirs else tally for node, tally in mine.items()
        }
        for node, tally in theirs.items():
            tallies.setdefault(node, tally)
        besides: list[tuple[str, Requests, int]] = []
        own_node, held = self._mine.held(key)
        if own_node is not None and held is not None:  # the Pod itself, should it be bound already
            besides.append((own_node, held, -1))
        for other_uid, other in in_flight.items():
            if other_uid != uid and noderoom.counts(other):
                besides.append((other["spec"]["nodeName"], noderoom.requests_of(other), 1))
        for node, requests, sign in besides:
            count_on(tallies, node, requests, sign)
        return tallies


def count_on(tallies: dict[str, noderoom.Tally], node: str, requests: Requests, sign: int = 1) -> None:
    """Count one Pod more (sign -1: fewer) on `node` in `tallies`, on a copy of its tally:
    the tallies NodeSums keeps stay as they are."""
    tallies[node] = (tallies.get(node) or noderoom.Tally()).copy()
    tallies[node].add(requests, sign)
