"""Kubernetes service discovery for the dev Prometheus, which Debian builds without it.

Debian's prometheus package leaves out `kubernetes_sd_configs` (its Kubernetes client
libraries are not packaged), so a small process of ours does that part: every 2 s it lists
Services and EndpointSlices through the dev cluster's admin credentials and writes every
endpoint as a file-SD target carrying the labels Prometheus's own discovery gives it
(`__meta_kubernetes_namespace`, `__meta_kubernetes_service_name`,
`__meta_kubernetes_service_annotation_<name>`, ...; role `endpointslice`). Prometheus reads
the file (`file_sd_configs`) and applies the same relabelling a cluster's Prometheus applies
to its own discovery, so which Services are scraped, at which port and path, is decided by
the scrape annotations exactly as it would be there.

It runs as `python -m sunk_dev.prometheus_sd` with the run directory and port offset in
its environment, is recorded and stopped by PID like every dev-cluster process, and goes on
(logging the error) when the API server does not answer.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from sunk_dev.kubeapi import AdminKube
from sunk_dev.layout import Layout

PROCESS = "prometheus-sd"
EVERY = 2.0
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
Json = dict[str, Any]


def targets_file(layout: Layout) -> Path:
    return layout.root / "prometheus" / "kubernetes-targets.json"


def sanitized(name: str) -> str:
    """A label name as Prometheus's discovery writes annotation and label keys."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def service_labels(service: Json) -> dict[str, str]:
    meta = service["metadata"]
    labels = {
        "__meta_kubernetes_namespace": meta["namespace"],
        "__meta_kubernetes_service_name": meta["name"],
    }
    for kind, values in (("annotation", meta.get("annotations")), ("label", meta.get("labels"))):
        for key, value in (values or {}).items():
            labels[f"__meta_kubernetes_service_{kind}_{sanitized(key)}"] = value
            labels[f"__meta_kubernetes_service_{kind}present_{sanitized(key)}"] = "true"
    return labels


def target_groups(services: list[Json], slices: list[Json]) -> list[Json]:
    """One file-SD group per endpoint address and port of every Service's EndpointSlices,
    ready or not (as Prometheus's discovery lists them: relabelling decides what to keep)."""
    by_name = {(s["metadata"]["namespace"], s["metadata"]["name"]): s for s in services}
    groups = []
    for piece in slices:
        meta = piece["metadata"]
        service = by_name.get((meta["namespace"], (meta.get("labels") or {}).get(SERVICE_NAME_LABEL, "")))
        if service is None or piece.get("addressType") != "IPv4":
            continue
        common = {**service_labels(service), "__meta_kubernetes_endpointslice_name": meta["name"]}
        for endpoint in piece.get("endpoints") or []:
            ready = (endpoint.get("conditions") or {}).get("ready") is not False
            own = {"__meta_kubernetes_endpointslice_endpoint_conditions_ready": str(ready).lower()}
            ref = endpoint.get("targetRef") or {}
            if ref.get("kind") == "Pod":
                own["__meta_kubernetes_pod_name"] = ref["name"]
            if endpoint.get("nodeName"):
                own["__meta_kubernetes_endpointslice_endpoint_node_name"] = endpoint["nodeName"]
            for address in endpoint.get("addresses") or []:
                for port in piece.get("ports") or []:
                    labels = {**common, **own}
                    labels["__meta_kubernetes_endpointslice_port_name"] = port.get("name") or ""
                    groups.append({"targets": [f"{address}:{port['port']}"], "labels": labels})
    return sorted(groups, key=lambda g: (g["targets"], sorted(g["labels"].items())))


def discover(kube: AdminKube) -> list[Json]:
    services = kube.get("/api/v1/services")["items"]
    slices = kube.get("/apis/discovery.k8s.io/v1/endpointslices")["items"]
    return target_groups(services, slices)


def write(path: Path, groups: list[Json]) -> bool:
    """Replace the targets file in one rename (Prometheus never reads half of it) when its
    content changes; whether it did."""
    text = json.dumps(groups, indent=1, sort_keys=True)
    try:
        if path.read_text() == text:
            return False
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    os.replace(partial, path)
    return True


def run(layout: Layout) -> None:
    """List and write every EVERY seconds, for ever (until stopped by its PID)."""
    kube: AdminKube | None = None
    failing = False
    while True:
        try:
            kube = kube or AdminKube(layout)
            if write(targets_file(layout), discover(kube)):
                print("targets changed", flush=True)
            failing = False
        except Exception as err:  # an API server restarting, certificates not there yet
            if not failing:
                print(f"discovery failed (retrying every {EVERY:.0f} s): {err}", flush=True)
            failing = True
            if kube is not None:
                kube.close()
            kube = None
        time.sleep(EVERY)


if __name__ == "__main__":  # pragma: no cover - the process `prometheus.ensure_running` starts
    run(Layout.default())
