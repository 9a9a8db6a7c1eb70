"""Fixtures of the controller unit tests."""

from __future__ import annotations

import pytest

from sunk.testing.scheduler import Clock


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """One hand-advanced clock for the controllers, the job index and the fakes alike."""
    clock = Clock()
    for module in Clock.MODULES:
        monkeypatch.setattr(module, "time", clock)
    return clock
