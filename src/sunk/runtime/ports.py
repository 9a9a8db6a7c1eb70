"""What the runtime itself hands controllers: an informer's store as they read it, and
the clocks they read the time on.

The ports through which a component writes to Kubernetes and Slurm are shaped by that
component and live in it (`sunk.scheduler.ports`, the operator's in its controllers).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Protocol

Json = dict[str, Any]


class Cache(Protocol):
    """An informer's store as controllers read it: objects by key ("namespace/name", or
    "name" for cluster-scoped kinds)."""

    @property
    def store(self) -> Mapping[str, Json]: ...

    def get(self, key: str) -> Json | None: ...


class Clock(Protocol):
    """The time as a component reads it, handed to each module that needs it (built once
    by the component's app), so tests move it on by hand instead of patching modules."""

    def now(self) -> float:
        """Wall-clock seconds since the epoch: to compare with what Kubernetes and Slurm
        stamp (submit and start times, creation timestamps, signed calls)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back: for how long this process waited."""
        ...


class SystemClock:
    """The process's own clocks."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()
