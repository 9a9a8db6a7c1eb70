"""The fake of the components' `Clock` port (`sunk.runtime.ports.Clock`): one clock a test
moves on by hand, handed to the controllers, the job index and the fakes alike, so all of
them keep one time and no module's `time` is patched."""

from __future__ import annotations

import time
from collections.abc import Callable


class FakeClock:
    """Runs with the real time, `advance` putting it ahead; given a `start` (epoch seconds)
    it stands there instead until moved on (for tests that compare exact stamps)."""

    def __init__(self, start: float | None = None) -> None:
        self._start = start
        self._offset = 0.0

    def now(self) -> float:
        return self._base(time.time) + self._offset

    def monotonic(self) -> float:
        return self._base(time.monotonic) + self._offset

    def advance(self, seconds: float) -> None:
        self._offset += seconds

    def _base(self, real: Callable[[], float]) -> float:
        return real() if self._start is None else self._start
