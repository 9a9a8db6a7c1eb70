"""A real OCI registry for the dev cluster with real Nodes: Debian's docker-registry
(the CNCF distribution registry), as two servers on one store.

- **Pulls**: on the host's address on the Pods' bridge, read-only, without credentials.
  Every real Node's containerd pulls Pods' images from it and the slurmd Pods' `skopeo`
  fetches job steps' images from it (`srun --container=HOST:PORT/sunk/job:TAG`), as they
  would from a user's registry; neither can carry registry credentials (the chart's
  container steps do not take any yet), so reading stays open to the Pod network, and
  every write is refused there.
- **Pushes**: on 127.0.0.1 at the same port, the host's own builds only (`build_and_push`,
  buildah), and only with the password made at `start` (HTTP basic authentication against
  an htpasswd file). The password is kept owner-only in `registry/push.password` and handed
  to buildah in an auth file (`--authfile`), never on a command line or in a log.

Both speak plain HTTP, as a registry inside a cluster network often does; the chart is told
so (`slurm.containers.insecureRegistries`). They share one storage directory with no cache
in front of it, so an image pushed to one is at once pulled from the other. Its data lives
in the run directory and goes with it.
"""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
import json
import secrets
import urllib.error
import urllib.request
from pathlib import Path

from sunk_dev import images, procs
from sunk_dev.buildah import Builder, Image
from sunk_dev.errors import DevClusterError
from sunk_dev.images import Built
from sunk_dev.layout import HOST, Layout

PROGRAM = "docker-registry"
PULL, PUSH = "registry", "registry-push"  # the two servers' process names
PUSH_USER = "sunk-dev"
# bcrypt's cost for the push password: it is 32 random hex digits, which no cost protects
# better, and the registry checks it on every request of a push.
BCRYPT_COST = 6


def registry_dir(layout: Layout) -> Path:
    return layout.root / "registry"


def password_file(layout: Layout) -> Path:
    """The push password (owner-only), for whoever pushes by hand."""
    return registry_dir(layout) / "push.password"


def auth_file(layout: Layout) -> Path:
    """The same password as a containers-auth.json (owner-only), for buildah's `--authfile`."""
    return registry_dir(layout) / "auth.json"


def address(layout: Layout, host: str) -> str:
    """host:port, as image references name the registry."""
    return f"{host}:{layout.ports.registry}"


def push_address(layout: Layout) -> str:
    return address(layout, HOST)


def config(layout: Layout, host: str) -> str:
    """The pull server's configuration: the shared store, read-only (every write is refused
    with 405, so nothing starts an upload it would have to purge), no authentication, one
    address."""
    here = registry_dir(layout)
    return f"""\
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: {here / "data"}
  maintenance:
    readonly:
      enabled: true
    uploadpurging:
      enabled: false
http:
  addr: {address(layout, host)}
"""


def push_config(layout: Layout) -> str:
    """The push server's configuration: the same store, deletes allowed (so a test can take
    an image away), HTTP basic authentication against the htpasswd file, 127.0.0.1 only."""
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
auth:
  htpasswd:
    realm: sunk-dev-registry
    path: {here / "htpasswd"}
http:
  addr: {push_address(layout)}
"""


def bcrypt(password: str, cost: int = BCRYPT_COST) -> str:
    """`password`'s bcrypt hash, the only kind the registry's htpasswd takes, made by the
    system's libcrypt (libxcrypt on Debian) in this process: no tool, no argv."""
    name = ctypes.util.find_library("crypt") or "libcrypt.so.1"
    try:
        lib = ctypes.CDLL(name)
    except OSError as err:
        raise DevClusterError(f"the registry's password needs libcrypt ({name}): {err}") from None
    lib.crypt_gensalt.restype = ctypes.c_char_p
    lib.crypt_gensalt.argtypes = [ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p, ctypes.c_int]
    lib.crypt.restype = ctypes.c_char_p
    lib.crypt.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    salt = lib.crypt_gensalt(b"$2b$", cost, None, 0)
    hashed = lib.crypt(password.encode(), salt) if salt else None
    if not hashed or not hashed.startswith(b"$2b$"):
        raise DevClusterError(f"{name} made no bcrypt hash for the registry's password")
    return str(hashed.decode())


def make_credentials(layout: Layout) -> None:
    """A fresh push password: its file and buildah's auth file owner-only before anything is
    written to them, the htpasswd line the push server checks against."""
    here = registry_dir(layout)
    password = secrets.token_hex(16)
    token = base64.b64encode(f"{PUSH_USER}:{password}".encode()).decode()
    secret_files = {
        password_file(layout): password,
        auth_file(layout): json.dumps({"auths": {push_address(layout): {"auth": token}}}) + "\n",
    }
    for path, text in secret_files.items():
        path.touch(mode=0o600)
        path.chmod(0o600)
        path.write_text(text)
    (here / "htpasswd").write_text(f"{PUSH_USER}:{bcrypt(password)}\n")


def start(layout: Layout, host: str) -> None:
    """Write the configurations and credentials, and start the pull server on `host` (the
    bridge's gateway) and the push server on 127.0.0.1."""
    here = registry_dir(layout)
    (here / "data").mkdir(parents=True, exist_ok=True)
    (here / "config.yml").write_text(config(layout, host))
    (here / "push.yml").write_text(push_config(layout))
    make_credentials(layout)
    (here / "address").write_text(address(layout, host))
    serve(layout)


def serve(layout: Layout) -> None:
    """Start the servers made by `start` (again, after `stop`, with everything they held)."""
    here = registry_dir(layout)
    where = (here / "address").read_text()
    pull = procs.spawn(PULL, [PROGRAM, "serve", str(here / "config.yml")], layout.pids, layout.logs)
    push = procs.spawn(PUSH, [PROGRAM, "serve", str(here / "push.yml")], layout.pids, layout.logs)
    procs.wait_until(
        lambda: answers(where) and answers(push_address(layout), credentials(layout)),
        timeout=20,
        what="the registry",
        watch=[pull, push],
        log_dir=layout.logs,
    )


def stop(layout: Layout) -> None:
    """Stop the registry, as one that goes down would (its images stay for `serve`)."""
    procs.stop_many(
        [p for p in procs.tracked(layout.pids) if p.name in (PULL, PUSH)], layout.pids, timeout=10
    )


def credentials(layout: Layout) -> tuple[str, str]:
    """The push server's user and password."""
    return PUSH_USER, password_file(layout).read_text().strip()


def answers(where: str, login: tuple[str, str] | None = None) -> bool:
    """Whether the registry at `where` answers its API's base with 200 (as `login`, if given)."""
    request = urllib.request.Request(f"http://{where}/v2/")
    if login is not None:
        token = base64.b64encode(":".join(login).encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=2) as reply:  # noqa: S310  # http:// above
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def running_address(layout: Layout) -> str:
    """host:port of this cluster's registry, where Nodes and Pods pull from; a clear error
    when it has none."""
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
    `repository` (e.g. `sunk/job:24.11`), through the push server with its credentials;
    returns the reference steps and Pods pull it by (the pull server's address)."""
    target = f"{running_address(layout)}/{repository}"
    builder = Builder(log, images.store_dir())
    builder.ensure_loaded(Image(parent.name, parent.ref, parent.archive))
    local = f"{images.REGISTRY}/{repository}"
    arg = f"--build-arg={parent.name.upper()}={parent.ref}"
    # --layers: a rebuild after a change to the context's last files reuses the layers before.
    build = ["bud", "--pull=never", "--layers", "--quiet", arg, "--tag", local, str(context)]
    builder.check(build, f"building {local}")
    push(builder, layout, local, repository)
    return target


def push(builder: Builder, layout: Layout, local: str, repository: str) -> None:
    """Push the image `local` of `builder`'s storage to the push server as `repository`."""
    if not auth_file(layout).is_file():
        raise DevClusterError(
            "this dev cluster's registry was started before pushes took a password: restart it "
            "with `sunk dev down && sunk dev up --real-nodes N`"
        )
    destination = f"docker://{push_address(layout)}/{repository}"
    argv = ["push", "--quiet", "--tls-verify=false", f"--authfile={auth_file(layout)}", local, destination]
    builder.check(argv, f"pushing {destination}")
