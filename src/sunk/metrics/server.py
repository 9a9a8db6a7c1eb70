"""HTTP endpoints for operators: /metrics, and /healthz and /readyz on the probe port."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from sunk.metrics import REGISTRY


async def _start(app: web.Application, host: str, port: int) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


async def serve_metrics(host: str, port: int, registry: CollectorRegistry = REGISTRY) -> web.AppRunner:
    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return await _start(app, host, port)


async def serve_probes(host: str, port: int, not_ready: Callable[[], str | None]) -> web.AppRunner:
    """/healthz: the event loop answers. /readyz: start-up done (see Scheduler.not_ready)."""

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_request: web.Request) -> web.Response:
        problem = not_ready()
        return web.Response(text=problem or "ok", status=503 if problem else 200)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return await _start(app, host, port)
