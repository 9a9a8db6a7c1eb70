"""Fixtures of the controller unit tests."""

from __future__ import annotations

import pytest

from tests.fakes.clock import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    """One hand-advanced clock: hand it to `World`, which hands it to every module that
    reads the time and to the fakes."""
    return FakeClock()
