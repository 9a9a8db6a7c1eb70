"""Writes a controller waits to see in its cache ("assume until seen", client-go's
expectations).

A controller that writes an object and then looks at it again through an informer may see
the object as it was before its own write: the watch is a few milliseconds behind. Acting
on that old copy can undo the write's purpose (a Pod that still names the job it was just
moved off looks as if Slurm ended its job). So the controller records what it wrote, and a
pass that finds the cache still showing something else waits for it, up to a deadline
after which the cache is believed (the write may have been undone by someone else).
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from typing import Generic, TypeVar

V = TypeVar("V")
SEEN_WITHIN_S = 10.0


class Expectations(Generic[V]):
    def __init__(self, within: float = SEEN_WITHIN_S) -> None:
        self._within = within
        self._expected: dict[Hashable, tuple[V, float]] = {}

    def expect(self, key: Hashable, value: V) -> None:
        """This process just wrote `value` for `key`."""
        self._expected[key] = (value, time.monotonic())

    def unseen(self, key: Hashable, observed: V) -> bool:
        """True while the cache shows `observed` for `key` although this process wrote
        something else less than `within` seconds ago. An expectation seen, or too old, is
        dropped."""
        found = self._expected.get(key)
        if found is None:
            return False
        value, at = found
        if value != observed and time.monotonic() - at < self._within:
            return True
        del self._expected[key]
        return False

    def waiting_for(self) -> list[Hashable]:
        """What is still expected (seen or expired entries go as `unseen` meets them)."""
        return list(self._expected)

    def prune(self) -> None:
        now = time.monotonic()
        for key in [k for k, (_, at) in self._expected.items() if now - at >= self._within]:
            del self._expected[key]
