"""Answer predictions over HTTP with the newest checkpoint train.py wrote.

GET /predict?x=0.5&y=-0.25 returns the model's answer as JSON, with the checkpoint that
gave it, the true value of the surface it learnt, and which Pod answered. GET /healthz is
200 once a checkpoint is loaded (the Deployment's readiness probe). Before each answer the
server looks at the checkpoint directory's `latest` pointer and loads a newer checkpoint
when training has written one, so a Pod serves the newest model without a restart.
"""

from __future__ import annotations

import argparse
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import torch
from train import Model, target


class Checkpoints:
    """The model of the checkpoint `latest` names, reloaded when the pointer moves."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.lock = threading.Lock()
        self.name = ""
        self.meta: dict[str, Any] = {}
        self.model = Model()

    def refresh(self) -> bool:
        try:
            name = (self.directory / "latest").read_text().strip()
        except FileNotFoundError:
            return bool(self.name)
        if name == self.name:
            return True
        state = torch.load(self.directory / name, weights_only=True)
        model = Model()
        model.load_state_dict(state["model"])
        model.eval()
        with self.lock:
            self.model, self.name = model, name
            self.meta = {k: state[k] for k in ("epoch", "loss", "job", "ranks")}
        print(
            f"serving {name} (job {state['job']}, epoch {state['epoch']}, loss {state['loss']:.5f})",
            flush=True,
        )
        return True

    def predict(self, x: float, y: float) -> dict[str, Any]:
        point = torch.tensor([[x, y]])
        with self.lock, torch.no_grad():
            answer = self.model(point).item()
            return {"prediction": answer, "checkpoint": self.name, **self.meta}


def handler(checkpoints: Checkpoints) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            ready = checkpoints.refresh()
            if url.path == "/healthz":
                self.reply(200 if ready else 503, {"ready": ready})
            elif url.path == "/predict" and ready:
                query = parse_qs(url.query)
                try:
                    x, y = float(query["x"][0]), float(query["y"][0])
                except (KeyError, ValueError):
                    self.reply(400, {"error": "give two numbers: /predict?x=0.5&y=-0.25"})
                    return
                truth = target(torch.tensor([[x, y]])).item()
                self.reply(200, {**checkpoints.predict(x, y), "truth": truth, "pod": socket.gethostname()})
            elif url.path == "/predict":
                self.reply(503, {"error": f"no checkpoint in {checkpoints.directory} yet"})
            else:
                self.reply(404, {"error": "try /predict?x=0.5&y=-0.25"})

        def reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode() + b"\n"
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return  # probes every few seconds would drown the model's own lines

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", type=Path, required=True)
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    torch.set_num_threads(1)
    checkpoints = Checkpoints(args.checkpoints)
    if not checkpoints.refresh():
        print(f"no checkpoint in {args.checkpoints} yet: not ready until training writes one", flush=True)
    print(f"listening on port {args.port}", flush=True)
    ThreadingHTTPServer(("", args.port), handler(checkpoints)).serve_forever()


if __name__ == "__main__":
    main()
