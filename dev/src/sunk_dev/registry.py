"""A real OCI registry for the dev cluster with real Nodes: Debian's docker-registry
(the CNCF distribution registry), on the host's address on the Pods' bridge.

Job steps in container images fetch from it (`srun --container=HOST:PORT/sunk/job:TAG`),
as they would from a user's registry. It speaks plain HTTP, as a registry inside a cluster
network often does; the chart is told so (`slurm.containers.insecureRegistries`). Its data
lives in the run directory and goes with it.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

from sunk_dev import images, procs
from sunk_dev.buildah import Builder, Image
from sunk_dev.errors import DevClusterError
from sunk_dev.images import Built
from sunk_dev.layout import Layout

PROGRAM = "docker-registry"


def registry_dir(layout: Layout) -> Path:
    return layout.root / "registry"


def address(layout: Layout, host: str) -> str:
    """host:port, as image references name the registry."""
    return f"{host}:{layout.ports.registry}"


def config(layout: Layout, host: str) -> str:
    """The registry's configuration: files under the run directory, deletes allowed (so a
    test can take an image away), no authentication, one address."""
    here = registry_dir(layout)
    return f"""\
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: {here / "data"}
  delete:
    enabled: true
http:
  addr: {address(layout, host)}
"""


def start(layout: Layout, host: str) -> None:
    """Write the configuration and start the registry on `host` (the bridge's gateway)."""
    here = registry_dir(layout)
    (here / "data").mkdir(parents=True, exist_ok=True)
    (here / "config.yml").write_text(config(layout, host))
    (here / "address").write_text(address(layout, host))
    serve(layout)


def serve(layout: Layout) -> None:
    """Start the registry made by `start` (again, after `stop`, with everything it held)."""
    here = registry_dir(layout)
    proc = procs.spawn("registry", [PROGRAM, "serve", str(here / "config.yml")], layout.pids, layout.logs)
    where = (here / "address").read_text()
    procs.wait_until(
        lambda: answers(where), timeout=20, what="the registry", watch=[proc], log_dir=layout.logs
    )


def stop(layout: Layout) -> None:
    """Stop the registry, as one that goes down would (its images stay for `serve`)."""
    procs.stop_many([p for p in procs.tracked(layout.pids) if p.name == "registry"], layout.pids, timeout=10)


def answers(where: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{where}/v2/", timeout=2) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def running_address(layout: Layout) -> str:
    """host:port of this cluster's registry; a clear error when it has none."""
    try:
        return (registry_dir(layout) / "address").read_text().strip()
    except OSError:
        raise DevClusterError(
            "this dev cluster runs no registry: start it with `sunk dev up --real-nodes N`"
        ) from None


def build_from_slurmd(layout: Layout, context: Path, name: str) -> str:
    """`build_and_push` FROM the slurmd image this cluster's Nodes run, as
    `sunk/<name>:<Slurm version>`, its build log `logs/<name>-image.log`."""
    built = images.read_manifest(layout.images_file)
    version = built["slurmd"].tag.rpartition(":")[2]
    log = layout.logs / f"{name}-image.log"
    return build_and_push(layout, context, built["slurmd"], f"sunk/{name}:{version}", log)


def build_and_push(layout: Layout, context: Path, parent: Built, repository: str, log: Path) -> str:
    """Build the Dockerfile in `context` FROM `parent` (an image of the dev build, passed as
    the build-arg named in `parent.name.upper()`) and push it to this cluster's registry as
    `repository` (e.g. `sunk/job:24.11`); returns the reference steps and Pods pull it by."""
    target = f"{running_address(layout)}/{repository}"
    builder = Builder(log, images.store_dir())
    builder.ensure_loaded(Image(parent.name, parent.ref, parent.archive))
    local = f"{images.REGISTRY}/{repository}"
    arg = f"--build-arg={parent.name.upper()}={parent.ref}"
    # --layers: a rebuild after a change to the context's last files reuses the layers before.
    build = ["bud", "--pull=never", "--layers", "--quiet", arg, "--tag", local, str(context)]
    builder.check(build, f"building {local}")
    builder.check(["push", "--quiet", "--tls-verify=false", local, f"docker://{target}"], f"pushing {target}")
    return target
