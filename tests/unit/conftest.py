"""Fixtures of the controller unit tests."""

from __future__ import annotations

import pytest

from tests.fakes.scheduler_world import FakeClock


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """One hand-advanced clock for the controllers (hand it to `World`), the job index and
    the fakes alike (these two still read the `time` module: the clock stands in for it)."""
    clock = FakeClock()
    for module in FakeClock.TIME_READERS:
        monkeypatch.setattr(module, "time", clock)
    return clock
