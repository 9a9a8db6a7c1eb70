"""What the runtime itself hands controllers: an informer's store as they read it.

The ports through which a component writes to Kubernetes and Slurm are shaped by that
component and live in it (`sunk.scheduler.ports`, the operator's in its controllers).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

Json = dict[str, Any]


class Cache(Protocol):
    """An informer's store as controllers read it: objects by key ("namespace/name", or
    "name" for cluster-scoped kinds)."""

    @property
    def store(self) -> Mapping[str, Json]: ...

    def get(self, key: str) -> Json | None: ...
