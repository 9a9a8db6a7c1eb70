"""The Pods this scheduler places, as its informers hold them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from sunk.runtime.ports import Cache

Json = dict[str, Any]


class PodStore:
    """Pods of our scheduler in the watched namespaces (one informer per namespace, or one)."""

    def __init__(self, informers: Mapping[str, Cache]) -> None:
        self._informers = informers  # namespace ("" = all) → Informer

    def get(self, key: str) -> Json | None:
        namespace = key.split("/", 1)[0]
        informer = self._informers.get("") or self._informers.get(namespace)
        result: Json | None = informer.get(key) if informer else None
        return result

    def all_keys(self) -> list[str]:
        return [key for informer in self._informers.values() for key in informer.store]

    def items(self) -> Iterator[tuple[str, Json]]:
        """(key, Pod) of every Pod cached."""
        for informer in self._informers.values():
            yield from informer.store.items()

    def watches(self, namespace: str) -> bool:
        return "" in self._informers or namespace in self._informers
