"""The dev registry lets each of its users do what it needs and no more (issue #52): the
Nodes' containerd and the slurmd Pods' skopeo pull without credentials from the server on
the Pods' bridge, which refuses every write; the host's builds push to the server on
127.0.0.1, which refuses anyone without the password kept in the run directory. Debian's
docker-registry, started by the dev package on free loopback ports; "the bridge" is a
second loopback address standing in for the bridge's gateway."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from sunk_dev import procs, registry
from sunk_dev.buildah import Builder
from sunk_dev.layout import Layout, Ports
from tests.support import free_port

BRIDGE = "127.0.0.2"  # stands in for the bridge's gateway, where Pods and Nodes pull
MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"  # what buildah pushes


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Layout]:
    if not Path("/usr/bin/docker-registry").exists():
        pytest.skip("Debian's docker-registry is not installed (`sunk dev up --real-nodes N` installs it)")
    root = tmp_path_factory.mktemp("registry")
    layout = Layout(root, Ports().shifted(free_port() - Ports().registry))
    for sub in (layout.pids, layout.logs):
        sub.mkdir(parents=True, exist_ok=True)
    registry.start(layout, BRIDGE)
    try:
        yield layout
    finally:
        procs.stop_many(procs.tracked(layout.pids), layout.pids, timeout=10)


def call(
    where: str,
    method: str,
    path: str,
    body: bytes = b"",
    login: tuple[str, str] | None = None,
    **headers: str,
) -> tuple[int, dict[str, str], bytes]:
    """One request to the registry's API: its status, headers and body, errors included."""
    request = urllib.request.Request(f"http://{where}{path}", data=body or None, method=method)
    for name, value in headers.items():
        request.add_header(name.replace("_", "-"), value)
    if login is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(login).encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, dict(reply.headers), reply.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def push_blob(where: str, repository: str, data: bytes, login: tuple[str, str] | None) -> int:
    """A monolithic blob upload (POST, then PUT with the digest); the status of the first
    step that fails, or of the last."""
    status, headers, _ = call(where, "POST", f"/v2/{repository}/blobs/uploads/", login=login)
    if status != 202:
        return status
    location = headers["Location"]
    location = location.split(where, 1)[-1] if where in location else location
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    joiner = "&" if "?" in location else "?"
    status, _, _ = call(
        where,
        "PUT",
        f"{location}{joiner}digest={digest}",
        data,
        login,
        Content_Type="application/octet-stream",
    )
    return status


def push_image(where: str, repository: str, tag: str, login: tuple[str, str] | None) -> tuple[int, str]:
    """A one-layer image pushed as the registry API does it; (status, manifest digest)."""
    layer, config = os.urandom(64), json.dumps({"architecture": "amd64", "os": "linux"}).encode()
    for blob in (layer, config):
        status = push_blob(where, repository, blob, login)
        if status != 201:
            return status, ""

    def descriptor(kind: str, data: bytes) -> dict[str, object]:
        return {"mediaType": kind, "size": len(data), "digest": "sha256:" + hashlib.sha256(data).hexdigest()}

    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": descriptor("application/vnd.docker.container.image.v1+json", config),
            "layers": [descriptor("application/vnd.docker.image.rootfs.diff.tar.gzip", layer)],
        }
    ).encode()
    status, _, _ = call(
        where, "PUT", f"/v2/{repository}/manifests/{tag}", manifest, login, Content_Type=MANIFEST
    )
    return status, "sha256:" + hashlib.sha256(manifest).hexdigest()


def test_issue52_a_push_without_the_password_is_refused(served: Layout) -> None:
    push = registry.push_address(served)
    assert push_image(push, "sunk/anyone", "1", None)[0] == 401
    assert push_image(push, "sunk/anyone", "1", (registry.PUSH_USER, "not-the-password"))[0] == 401
    status, _, _ = call(
        registry.running_address(served), "GET", "/v2/sunk/anyone/manifests/1", Accept=MANIFEST
    )
    assert status == 404  # nothing of it landed


def test_issue52_the_host_pushes_with_the_password_and_pods_pull_without_one(served: Layout) -> None:
    status, digest = push_image(registry.push_address(served), "sunk/job", "1", registry.credentials(served))
    assert status == 201
    status, headers, _ = call(
        registry.running_address(served), "GET", "/v2/sunk/job/manifests/1", Accept=MANIFEST
    )
    assert (status, headers.get("Docker-Content-Digest")) == (200, digest)


def test_issue52_the_server_on_the_bridge_refuses_every_write_even_with_the_password(served: Layout) -> None:
    pull = registry.running_address(served)
    for login in (None, registry.credentials(served)):
        assert push_image(pull, "sunk/from-a-pod", "1", login)[0] == 405
    status, digest = push_image(registry.push_address(served), "sunk/kept", "1", registry.credentials(served))
    assert status == 201
    assert call(pull, "DELETE", f"/v2/sunk/kept/manifests/{digest}")[0] == 405
    assert call(pull, "GET", "/v2/sunk/kept/manifests/1", Accept=MANIFEST)[0] == 200


def test_issue52_the_push_password_is_in_owner_only_files_and_nowhere_else(served: Layout) -> None:
    _, password = registry.credentials(served)
    for secret in (registry.password_file(served), registry.auth_file(served)):
        assert secret.stat().st_mode & 0o777 == 0o600, secret
    here = registry.registry_dir(served)
    for path in [*here.glob("*.yml"), here / "htpasswd", *served.logs.glob("*")]:
        assert password not in path.read_text(errors="replace"), path
    for tracked in procs.tracked(served.pids):
        assert password not in Path(f"/proc/{tracked.pid}/cmdline").read_bytes().decode(errors="replace")


def test_issue52_buildah_pushes_with_the_auth_file_and_not_without_it(served: Layout, tmp_path: Path) -> None:
    """The way `build_and_push` pushes (buildah with `--authfile`), in a storage of the
    test's own: an empty image from scratch."""
    if shutil.which("buildah") is None:
        pytest.skip("buildah is not installed (`sunk dev up --real-nodes N` installs it)")
    builder = Builder(tmp_path / "buildah.log", tmp_path / "store")
    local = "localhost/sunk-test/empty:1"
    made = builder.run(["from", "--name", "empty", "scratch"], "making an empty container")
    assert made.returncode == 0, (tmp_path / "buildah.log").read_text()[-2000:]
    builder.check(["commit", "--quiet", "empty", local], "committing it")
    target = f"docker://{registry.push_address(served)}/sunk/empty:1"
    refused = builder.run(
        ["push", "--quiet", "--tls-verify=false", local, target], "pushing without credentials"
    )
    assert refused.returncode != 0
    registry.push(builder, served, local, "sunk/empty:1")
    status, _, _ = call(
        registry.running_address(served), "GET", "/v2/sunk/empty/manifests/1", Accept=OCI_MANIFEST
    )
    assert status == 200
