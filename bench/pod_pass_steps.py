"""How far a Pod's reconcile travels through the scheduler's own modules.

Follows the two busiest passes of a single Pod in the unit tests' world (in-memory
Kubernetes and Slurm, `tests.fakes.scheduler_world`): the pass that submits its job, and
the pass that binds it once the job started. A *step* is a call from one `sunk.scheduler`
module into another; a *return* is a step into a module the pass had already entered
(the controller's own module counts as entered from the start). Building a dataclass
record is not a step: its generated `__init__` is data, not a decision. Few steps and few returns
mean the pass reads as read → plan → execute rather than as modules calling back and forth.

Not a timing: the counts are the same on any machine for the same code.

    python -m bench.pod_pass_steps [-v]

`-v` prints every step, marking returns with `<-`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from tests.fakes.scheduler_world import World, pod

SCOPE = "sunk.scheduler"
ENTRY = "sunk.scheduler.pod.controller"


@dataclass
class Trace:
    """The module-to-module steps of one pass."""

    steps: list[tuple[str, str, str, bool]] = field(default_factory=list)
    entered: set[str] = field(default_factory=lambda: {ENTRY})
    _seen: set[int] = field(default_factory=set)
    _frames: list[FrameType] = field(default_factory=list)

    def __call__(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        # A coroutine or generator resuming fires 'call' again: only its first entry is a step.
        if id(frame) in self._seen:
            return
        self._seen.add(id(frame))
        self._frames.append(frame)  # keeps ids unique for the pass
        callee = frame.f_globals.get("__name__", "")
        caller_frame = frame.f_back
        caller = caller_frame.f_globals.get("__name__", "") if caller_frame else ""
        if not (callee.startswith(SCOPE) and caller.startswith(SCOPE)) or callee == caller:
            return
        if "__create_fn__" in frame.f_code.co_qualname:  # a dataclass's own __init__: data, not a step
            return
        again = callee in self.entered
        self.entered.add(callee)
        self.steps.append((caller, callee, frame.f_code.co_qualname, again))

    @property
    def returns(self) -> int:
        return sum(1 for *_, again in self.steps if again)


async def traced(run: Callable[[], Awaitable[object]]) -> Trace:
    trace = Trace()
    sys.setprofile(trace)
    try:
        await run()
    finally:
        sys.setprofile(None)
    return trace


async def passes() -> dict[str, Trace]:
    world = World()
    world.add_node("n1", slurm_node="sn-1")
    key = world.create(pod())
    await world.list_jobs()
    await world.list_nodes()
    submit = await traced(lambda: world.pod_controller.reconcile(key))
    assert world.job_id(key) is not None, "the submit pass submitted no job"
    world.slurm.start(world.job_id(key) or 0, "sn-1")
    await world.list_jobs()
    await world.list_nodes()
    bind = await traced(lambda: world.pod_controller.reconcile(key))
    assert world.pod(key)["spec"].get("nodeName") == "n1", "the bind pass did not bind"
    return {"submit": submit, "bind": bind}


def short(module: str) -> str:
    return module.removeprefix(SCOPE + ".")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="print every step")
    args = parser.parse_args()
    found = asyncio.run(passes())
    print("| pass | steps | returns |")
    print("|---|---|---|")
    for name, trace in found.items():
        print(f"| {name} | {len(trace.steps)} | {trace.returns} |")
    if args.verbose:
        for name, trace in found.items():
            print(f"\n{name}:")
            for caller, callee, function, again in trace.steps:
                mark = "<-" if again else "->"
                print(f"  {short(caller):28} {mark} {short(callee)}.{function}")


if __name__ == "__main__":
    main()
