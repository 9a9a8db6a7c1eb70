"""The process both components run in: probes and metrics that answer from the first
second, a Slurm connection made patiently (slurmrestd may still be starting), the
component built once Slurm speaks, SIGTERM turned into a clean stop, and every client
closed on the way out.

`sunk scheduler` and `sunk operator` differ only in the component they build and in how
they get their Slurm tokens; everything a process needs around its component lives here
once, so a fix to start-up or shutdown reaches both."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
import socket
from collections.abc import Callable
from typing import Protocol

from sunk.kube.client import KubeClient
from sunk.metrics.server import serve_metrics, serve_probes
from sunk.slurm.client import SlurmClient
from sunk.slurm.errors import SlurmError
from sunk.slurm.tokens import Tokens

log = logging.getLogger(__name__)


class ShellSettings(Protocol):
    """What the shell reads of a component's settings (both components' configs have it)."""

    @property
    def kubeconfig(self) -> str | None: ...
    @property
    def metrics_bind(self) -> tuple[str, int]: ...
    @property
    def health_bind(self) -> tuple[str, int]: ...
    @property
    def slurm_api_base(self) -> str: ...
    @property
    def slurm_user(self) -> str: ...
    @property
    def slurm_api_version(self) -> str | None: ...
    @property
    def slurm_ca_file(self) -> str | None: ...


class Served(Protocol):
    """What the shell runs: a component that says whether it is ready and runs until
    cancelled."""

    def not_ready(self) -> str | None: ...

    async def run(self) -> None: ...


def identity() -> str:
    """This process's name in Leases and Events. Unique per process, as client-go's is, so
    that two replicas on one host still differ."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{secrets.token_hex(4)}"


async def connect_slurm(
    base_url: str, tokens: Tokens, *, user: str, forced: str | None, ca_file: str | None = None
) -> SlurmClient:
    """Choose the REST version before anything else. Waits while slurmrestd cannot be
    reached or refuses the token (it may be starting); a slurmrestd that serves no version
    sunk speaks raises SlurmVersionError, which stops the process with that sentence."""
    delay = 0.5
    while True:
        try:
            slurm = await SlurmClient.connect(base_url, tokens, user=user, forced=forced, ca_file=ca_file)
        except SlurmError as err:
            log.warning(
                "cannot ask slurmrestd which REST versions it serves (%s); retrying in %.0fs", err, delay
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10)
            continue
        break
    try:
        await slurm.ping()
    except SlurmError as err:
        log.warning("slurmrestd ping failed: %s", err)
    log.info("speaking slurmrestd %s to Slurm %s", slurm.version, slurm.release or "(release not reported)")
    return slurm


async def serve(
    settings: ShellSettings, tokens: Tokens, build: Callable[[KubeClient, SlurmClient], Served]
) -> None:
    """Run one component until SIGTERM. Probes answer before Slurm does: a slurmrestd slow
    to come up leaves the process not ready, never restarted by its liveness probe."""
    kube = await KubeClient.connect(settings.kubeconfig)
    main = asyncio.current_task()
    assert main is not None
    # SIGTERM (a roll-out, a drain of the Node) stops acting and hands the Lease over
    # through the normal clean-up, instead of dying mid-step.
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main.cancel)
    component: Served | None = None

    def not_ready() -> str | None:
        if component is None:
            return "waiting for slurmrestd to say which REST versions it serves"
        return component.not_ready()

    runners = [
        await serve_metrics(*settings.metrics_bind),
        await serve_probes(*settings.health_bind, not_ready),
    ]
    slurm = None
    try:
        slurm = await connect_slurm(
            settings.slurm_api_base,
            tokens,
            user=settings.slurm_user,
            forced=settings.slurm_api_version,
            ca_file=settings.slurm_ca_file,
        )
        component = build(kube, slurm)
        await component.run()
    except asyncio.CancelledError:
        log.info("stopped by SIGTERM")
    finally:
        for runner in runners:
            await runner.cleanup()
        if slurm is not None:
            await slurm.aclose()
        await kube.close()
