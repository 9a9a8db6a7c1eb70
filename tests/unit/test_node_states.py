"""R4.3, issue #55: the binding check reads Slurm's view of a node at most every
NODE_STATE_TTL_S, and bindings that find it stale together share one read; a view is never
older than the TTL when a binding uses it, and a failed read reaches every binding that
waited on it."""

from __future__ import annotations

import asyncio

import pytest

from sunk.scheduler.pod.node_states import NODE_STATE_TTL_S, NodeStates
from sunk.slurm.errors import SlurmUnavailable
from sunk.slurm.models import SlurmNode
from tests.fakes.clock import FakeClock


def slurm_node(name: str, flags: str) -> SlurmNode:
    return SlurmNode(name=name, state="idle", flags=tuple(flags.split(",")) if flags else (), reason="")


class Slurm:
    """Node reads that end when the test lets them, answering each node's flags then."""

    def __init__(self) -> None:
        self.reads: list[str] = []
        self.flags: dict[str, str] = {"sn-1": "", "sn-2": ""}
        self.may_answer = asyncio.Event()
        self.may_answer.set()
        self.fails: Exception | None = None

    async def node(self, name: str) -> SlurmNode | None:
        self.reads.append(name)
        await self.may_answer.wait()
        if self.fails is not None:
            raise self.fails
        return slurm_node(name, self.flags[name])


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_r4_3_bindings_that_find_a_node_stale_together_share_one_read() -> None:
    slurm, clock = Slurm(), FakeClock()
    states = NodeStates(slurm.node, clock)
    slurm.may_answer.clear()
    waiting = [asyncio.create_task(states.get("sn-1")) for _ in range(5)]
    other = asyncio.create_task(states.get("sn-2"))
    await settle()
    slurm.may_answer.set()
    views = await asyncio.gather(*waiting, other)
    assert sorted(slurm.reads) == ["sn-1", "sn-2"]
    assert [v.name if v else None for v in views] == ["sn-1"] * 5 + ["sn-2"]


async def test_r4_3_a_view_is_read_again_once_older_than_the_ttl() -> None:
    slurm, clock = Slurm(), FakeClock()
    states = NodeStates(slurm.node, clock)
    assert (await states.get("sn-1")) == slurm_node("sn-1", "")
    slurm.flags["sn-1"] = "DRAIN"
    clock.advance(NODE_STATE_TTL_S / 2)
    assert (await states.get("sn-1")) == slurm_node("sn-1", "")  # young enough
    clock.advance(NODE_STATE_TTL_S)
    assert (await states.get("sn-1")) == slurm_node("sn-1", "DRAIN")
    assert slurm.reads == ["sn-1", "sn-1"]


async def test_r4_3_a_view_counts_its_age_from_when_its_read_was_asked() -> None:
    """A slow answer must not pass for a fresh one: the next binding after the TTL from the
    question reads again, however late the answer came."""
    slurm, clock = Slurm(), FakeClock()
    states = NodeStates(slurm.node, clock)
    slurm.may_answer.clear()
    first = asyncio.create_task(states.get("sn-1"))
    await settle()
    clock.advance(NODE_STATE_TTL_S * 2)
    slurm.may_answer.set()
    await first
    await states.get("sn-1")
    assert slurm.reads == ["sn-1", "sn-1"]


async def test_r4_3_a_failed_read_reaches_every_binding_that_waited_and_the_next_reads_again() -> None:
    slurm, clock = Slurm(), FakeClock()
    states = NodeStates(slurm.node, clock)
    slurm.may_answer.clear()
    slurm.fails = SlurmUnavailable("slurmrestd is away")
    waiting = [asyncio.create_task(states.get("sn-1")) for _ in range(3)]
    await settle()
    slurm.may_answer.set()
    outcomes = await asyncio.gather(*waiting, return_exceptions=True)
    assert [type(o) for o in outcomes] == [SlurmUnavailable] * 3
    slurm.fails = None
    assert (await states.get("sn-1")) == slurm_node("sn-1", "")
    assert slurm.reads == ["sn-1", "sn-1"]


async def test_r4_3_a_binding_given_up_leaves_the_shared_read_to_the_others() -> None:
    slurm, clock = Slurm(), FakeClock()
    states = NodeStates(slurm.node, clock)
    slurm.may_answer.clear()
    given_up = asyncio.create_task(states.get("sn-1"))
    staying = asyncio.create_task(states.get("sn-1"))
    await settle()
    given_up.cancel()
    slurm.may_answer.set()
    assert (await staying) == slurm_node("sn-1", "")
    with pytest.raises(asyncio.CancelledError):
        await given_up
    assert slurm.reads == ["sn-1"]
