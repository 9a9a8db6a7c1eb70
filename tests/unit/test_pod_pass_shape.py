"""How far a Pod's submit and bind passes travel through the scheduler's modules
(issue #54): few calls from one module into another, and few back into a module the pass
had left, so that a pass reads as gather → plan → execute. `python -m bench.pod_pass_steps -v`
lists every step when one of these fails."""

from __future__ import annotations

import pytest
from bench.pod_pass_steps import Trace, passes

MAX_STEPS = 45
MAX_RETURNS = 10


@pytest.fixture(scope="module")
async def traced() -> dict[str, Trace]:
    return await passes()


@pytest.mark.parametrize("name", ["submit", "bind"])
async def test_issue54_a_pods_pass_takes_at_most_about_45_steps_between_scheduler_modules(
    traced: dict[str, Trace], name: str
) -> None:
    """Catches a step that reads, decides and writes across several modules again."""
    assert len(traced[name].steps) <= MAX_STEPS


@pytest.mark.parametrize("name", ["submit", "bind"])
async def test_issue54_a_pods_pass_goes_back_into_a_module_it_left_at_most_10_times(
    traced: dict[str, Trace], name: str
) -> None:
    """Catches a planner reading the Pod's object again instead of its view, or a reader
    calling back into its caller (a callback, a listing passed as a function)."""
    assert traced[name].returns <= MAX_RETURNS
