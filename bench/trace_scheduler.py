"""`sunk` with a trace of the scheduler's steps for each Pod, for `bench.run --trace FILE`.

    python -m bench.trace_scheduler FILE scheduler [flags...]

Wraps, before the scheduler starts, the calls a Pod's way through sunk is made of, and
writes one line per step to FILE (wall-clock time, what, which, start/end): the work
queue (a Pod key queued, taken by a worker, done), every slurmrestd request, every API
server request (the binding among them) and the placeholders' hook calls. With
BENCH_SLURM_POOL=N set, the scheduler's client keeps N connections to slurmrestd instead
of its 8 (an experiment, for issue #55). A diagnostic,
not a measurement: the writes cost the scheduler a little CPU, so a traced run's rates are
not compared with untraced ones.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Hashable
from typing import Any, TextIO

import httpx

from sunk.cli import main as sunk_main
from sunk.kube.client import KubeClient
from sunk.runtime.queue import WorkQueue
from sunk.scheduler.hooks.server import HooksServer
from sunk.slurm.client import SlurmClient


def traced_call(out: TextIO, kind: str, describe: Callable[..., str], call: Any) -> Any:
    """`call` (a coroutine function) writing a line when it starts and when it ends."""

    @functools.wraps(call)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        what = describe(*args, **kwargs)
        out.write(f"{time.time():.4f} {kind} {what} start\n")
        try:
            return await call(*args, **kwargs)
        finally:
            out.write(f"{time.time():.4f} {kind} {what} end\n")

    return wrapper


def traced_step(out: TextIO, kind: str, step: Callable[..., Any]) -> Callable[..., Any]:
    """A plain method `step(self, key)` writing a line each time it is called."""

    @functools.wraps(step)
    def wrapper(self: Any, key: Hashable, *args: Any) -> Any:
        out.write(f"{time.time():.4f} queue {key} {kind}\n")
        return step(self, key, *args)

    return wrapper


def install(out: TextIO) -> None:
    SlurmClient._request = traced_call(  # type: ignore[method-assign]
        out, "slurm", lambda _self, method, path, *_a, **_k: f"{method}:{path}", SlurmClient._request
    )
    if pool := int(os.environ.get("BENCH_SLURM_POOL", "0")):
        # An experiment: the scheduler's connections to slurmrestd (8 in sunk.slurm.client).
        init = SlurmClient.__init__

        @functools.wraps(init)
        def init_with_pool(self: SlurmClient, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            http = self._http
            self._http = httpx.AsyncClient(
                base_url=http.base_url,
                timeout=http.timeout,
                trust_env=False,
                limits=httpx.Limits(max_connections=pool, max_keepalive_connections=pool),
            )
            out.write(f"{time.time():.4f} setup slurmrestd-pool {pool} set\n")

        SlurmClient.__init__ = init_with_pool  # type: ignore[method-assign]
    KubeClient.request = traced_call(  # type: ignore[method-assign]
        out, "kube", lambda _self, method, path, *_a, **_k: f"{method}:{path}", KubeClient.request
    )
    for name in ("_started", "_terminating"):
        setattr(
            HooksServer,
            name,
            traced_call(
                out,
                "hook" + name,
                lambda _self, _request, ref, job_id: f"{ref.namespace}/{ref.name}:{job_id}",
                getattr(HooksServer, name),
            ),
        )
    WorkQueue.add = traced_step(out, "add", WorkQueue.add)  # type: ignore[method-assign]
    WorkQueue.done = traced_step(out, "done", WorkQueue.done)  # type: ignore[method-assign]
    get = WorkQueue.get

    async def traced_get(self: WorkQueue) -> Hashable:
        key = await get(self)
        out.write(f"{time.time():.4f} queue {key} get\n")
        return key

    WorkQueue.get = traced_get  # type: ignore[method-assign]


if __name__ == "__main__":
    with open(sys.argv[1], "w", buffering=1) as trace:
        install(trace)
        sys.exit(sunk_main(sys.argv[2:]))
