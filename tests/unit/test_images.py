"""The Slurm images' pure parts: cache keys, build order, the failed step of a build log."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from sunk.devcluster import images, slurmroot
from sunk.devcluster.errors import DevClusterError

REPO_IMAGES = Path(__file__).resolve().parents[2] / "images"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the repository's images/ that a test may edit."""
    copy = tmp_path / "images"
    shutil.copytree(REPO_IMAGES, copy)
    return copy


def _edit(tree: Path, name: str) -> None:
    dockerfile = tree / name / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "# an edit\n")


def test_editing_a_dockerfile_changes_its_key(tree: Path) -> None:
    """Catches a key that ignores the Dockerfile: an edited image would never be rebuilt."""
    before = images.image_keys(tree, "trixie")
    _edit(tree, "slurmd")
    after = images.image_keys(tree, "trixie")
    assert after["slurmd"] != before["slurmd"]


def test_a_new_file_in_the_context_changes_the_key(tree: Path) -> None:
    """Catches a key made of the Dockerfile alone: a COPYed file that changes must rebuild too."""
    before = images.image_keys(tree, "trixie")
    (tree / "login" / "sshd_config").write_text("PermitRootLogin no\n")
    assert images.image_keys(tree, "trixie")["login"] != before["login"]


def test_renaming_a_file_in_the_context_changes_the_key(tree: Path) -> None:
    """Catches a key blind to file names: a Dockerfile that COPYs start.sh would keep the key
    of a build that had the same bytes under another name (and failed to find start.sh)."""
    (tree / "login" / "a.sh").write_text("echo hi\n")
    before = images.image_keys(tree, "trixie")
    (tree / "login" / "a.sh").rename(tree / "login" / "start.sh")
    assert images.image_keys(tree, "trixie")["login"] != before["login"]


def test_editing_the_parent_changes_every_childs_key(tree: Path) -> None:
    """Catches keys not chained to the parent's: a child would keep running on the old base."""
    before = images.image_keys(tree, "trixie")
    _edit(tree, "slurm-base")
    after = images.image_keys(tree, "trixie")
    children = [name for name, (parent, _) in images.PARENTS.items() if parent == "slurm-base"]
    assert children
    for name in ["slurm-base", *children]:
        assert after[name] != before[name], name
    assert after["pause"] == before["pause"]


def test_editing_one_image_leaves_unrelated_keys_alone(tree: Path) -> None:
    """Catches one key for the whole directory: any edit would rebuild all seven images."""
    before = images.image_keys(tree, "trixie")
    _edit(tree, "slurmrestd")
    after = images.image_keys(tree, "trixie")
    changed = {name for name in images.IMAGES if after[name] != before[name]}
    assert changed == {"slurmrestd"}


def test_the_suite_is_part_of_every_key(tree: Path) -> None:
    """Catches 24.11 and 26.05 sharing keys: one version's tarball would stand for the other's."""
    trixie = images.image_keys(tree, "trixie")
    sid = images.image_keys(tree, "sid")
    assert all(trixie[name] != sid[name] for name in (images.DEBIAN, *images.IMAGES))


def test_the_build_order_puts_every_parent_first() -> None:
    """Catches building a child before its parent: the build would use a stale or missing base."""
    order = images.build_order(images.PARENTS)
    assert sorted(order) == sorted(images.IMAGES)
    for name, (parent, _) in images.PARENTS.items():
        if parent != images.DEBIAN:
            assert order.index(parent) < order.index(name), name
    assert tuple(order) == images.IMAGES  # IMAGES itself is listed in build order


def test_the_build_order_does_not_trust_the_listing_order() -> None:
    """Catches an order copied from the input: here a child is listed before its parent."""
    parents = {"child": ("mid", "A"), "mid": ("root", "A"), "root": (images.DEBIAN, "BASE")}
    order = images.build_order(parents)
    assert order.index("root") < order.index("mid") < order.index("child")


def test_a_cycle_is_refused() -> None:
    """Catches an endless loop (or a silently dropped image) when two images name each other."""
    with pytest.raises(DevClusterError, match="cycle"):
        images.build_order({"a": ("b", "X"), "b": ("a", "X")})


def test_parents_match_what_the_dockerfiles_build_from() -> None:
    """Catches PARENTS drifting from a Dockerfile: its key would not follow its real parent,
    and the build-arg passed would not be the one its FROM reads."""
    assert sorted(p.name for p in REPO_IMAGES.iterdir() if p.is_dir()) == sorted(images.IMAGES)
    for name, (_, arg) in images.PARENTS.items():
        text = (REPO_IMAGES / name / "Dockerfile").read_text()
        first_from = re.search(r"^FROM\s+(\S+)", text, re.MULTILINE)
        assert first_from is not None, name
        assert first_from.group(1) == f"${{{arg}}}", name
        assert re.search(rf"^ARG {arg}=", text, re.MULTILINE), name


BUILD_LOG = """\
$ unshare --mount --propagation private -- buildah bud --tag localhost/sunk/pause:24.11-abc images/pause
STEP 1/3: FROM localhost/sunk/debian:trixie-0123 AS fetch
STEP 2/3: ARG DEBIAN_FRONTEND=noninteractive
STEP 3/3: RUN set -eux;     apt-get update;     apt-get install -y catatonit
+ apt-get update
E: Unable to locate package catatonit
error building at STEP "RUN set -eux; apt-get update": exit status 100
"""


def test_the_failed_step_is_the_last_one_announced() -> None:
    """Catches reporting the first step (always FROM) instead of the one that failed."""
    assert images.failed_step(BUILD_LOG) == (
        "STEP 3/3 (RUN set -eux; apt-get update; apt-get install -y catatonit)"
    )


def test_a_log_without_steps_has_no_failed_step() -> None:
    """Catches a made-up step when buildah failed before its first one (a bad flag, say)."""
    assert images.failed_step("Error: unknown flag: --pull-never\n") is None


def test_a_long_step_is_shortened() -> None:
    """Catches a one-sentence error message swollen by a 40-line RUN instruction."""
    step = images.failed_step("STEP 2/2: RUN " + "x " * 500 + "\n")
    assert step is not None and len(step) < 130


def test_warm_images_call_no_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Catches a warm start that still runs buildah (or anything else) when every tarball exists."""
    monkeypatch.setenv("SUNK_CACHE", str(tmp_path))
    keys = images.image_keys(REPO_IMAGES, "trixie")
    store = tmp_path / "images"
    store.mkdir()
    for name in images.IMAGES:
        (store / f"{name}-24.11-{keys[name][:12]}.tar").write_bytes(b"")

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"ran {args}")

    monkeypatch.setattr(subprocess, "run", refuse)
    built = images.ensure_images("24.11", tmp_path / "log")
    assert built["slurmd"].ref == f"localhost/sunk/slurmd:24.11-{keys['slurmd'][:12]}"
    assert built["slurmd"].tag == "localhost/sunk/slurmd:24.11"
    assert all(b.archive.parent == store for b in built.values())


def test_an_unknown_version_is_refused() -> None:
    """Catches building images of the host's 22.05 (or a typo) from some other suite."""
    with pytest.raises(DevClusterError, match=r"24\.11"):
        images.ensure_images("22.05", Path("/nonexistent/log"))


# -- keeping buildah off the host -----------------------------------------------------------------
STARTS_CONTAINERS = ("bud", "build", "build-using-dockerfile", "run", "from")


def _subcommand(argv: Sequence[str]) -> str:
    """The buildah subcommand of a full command line (the word after the global options)."""
    rest = list(argv[argv.index("buildah") + 1 :])
    while rest[0].startswith("--"):
        rest = rest[2:]
    return rest[0]


def _has_pair(argv: Sequence[str], flag: str, value: str) -> bool:
    return any(argv[i] == flag and argv[i + 1] == value for i in range(len(argv) - 1))


def test_commands_that_can_start_a_container_use_the_host_network(tmp_path: Path) -> None:
    """Catches a container-starting buildah command without `--network host` (the Debian base's
    bud had none): buildah then used its default CNI network and left a cni-podman0 bridge,
    nftables tables and /var/lib/cni behind; runc's state must not go to /run/runc either."""
    storage = tmp_path / "storage"
    for sub in STARTS_CONTAINERS:
        argv = images.buildah_argv(storage, [sub, "--pull=never", "x"])
        assert _subcommand(argv) == sub
        assert _has_pair(argv, "--network", "host"), sub
        assert _has_pair(argv, "--isolation", "oci"), sub
        if sub != "from":  # `buildah from` starts nothing itself and takes no --runtime-flag
            assert _has_pair(argv, "--runtime-flag", f"root={storage / 'runc'}"), sub
    for sub in ("pull", "push", "inspect", "images", "rmi"):
        argv = images.buildah_argv(storage, [sub, "x"])
        assert "--network" not in argv, sub  # these refuse the flag
        assert argv[-2:] == [sub, "x"]


def test_every_buildah_command_overlays_var_lib_in_a_private_namespace(tmp_path: Path) -> None:
    """Catches buildah's blob-info cache landing in the host's /var/lib/containers/cache (it
    ignores --root): /var/lib must be an overlay whose upper layer is in the storage, mounted
    in the command's own mount namespace, never on the host."""
    storage = tmp_path / "storage"
    argv = images.buildah_argv(storage, ["push", "a", "b"])
    assert argv[:5] == ["unshare", "--mount", "--propagation", "private", "--"]
    script = argv[argv.index("-c") + 1]
    assert "lowerdir=/var/lib,upperdir=$1,workdir=$2" in script and script.endswith('exec "$@"')
    upper, work = argv[argv.index("-c") + 3 : argv.index("-c") + 5]
    assert Path(upper).is_relative_to(storage) and Path(work).is_relative_to(storage)
    assert argv.index("buildah") == argv.index("-c") + 5


def test_the_containers_conf_keeps_networking_in_the_storage(tmp_path: Path) -> None:
    """Catches a containers.conf buildah would ignore or that leaves /etc/cni in use: buildah
    created /etc/cni/net.d on every pull or build, and a container not given --network got
    the CNI network; both keys below were checked to take effect in buildah 1.28."""
    storage = tmp_path / "storage"
    images.prepare_host_dirs(storage)
    conf = tomllib.loads((storage / "containers.conf").read_text())
    assert conf["containers"]["netns"] == "host"
    assert Path(conf["network"]["network_config_dir"]).is_relative_to(storage)
    assert Path(conf["network"]["network_config_dir"]).is_dir()


def test_buildah_gets_our_containers_conf_and_not_the_callers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Catches buildah reading the system's containers.conf (CNI in /etc/cni, private network
    by default) or a caller's CONTAINERS_* settings, and temporary files going to /var/tmp."""
    storage = tmp_path / "storage"
    monkeypatch.setenv("CONTAINERS_CONF", "/etc/containers/containers.conf")
    monkeypatch.setenv("CONTAINERS_STORAGE_CONF", "/etc/containers/storage.conf")
    monkeypatch.setenv("STORAGE_DRIVER", "vfs")
    env = images.buildah_env(storage)
    assert env["CONTAINERS_CONF"] == str(storage / "containers.conf")
    assert "CONTAINERS_STORAGE_CONF" not in env and "STORAGE_DRIVER" not in env
    assert Path(env["TMPDIR"]).is_relative_to(storage)


def test_a_storage_under_var_lib_is_refused(tmp_path: Path) -> None:
    """Catches overlaying /var/lib while buildah's own storage lies inside it: the storage
    would be read through the overlay and copied up into itself."""
    with pytest.raises(DevClusterError, match="/var/lib"):
        images.prepare_host_dirs(Path("/var/lib/sunk-test-never-created/storage"))
    assert not Path("/var/lib/sunk-test-never-created").exists()


def test_a_cold_build_runs_every_buildah_command_off_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Catches any buildah call of a whole cold build (Debian base, loading a parent back from
    its tarball, each Dockerfile, exports, removing superseded images) that bypasses the
    private namespace, our environment, or --network host where it can start a container."""
    monkeypatch.setenv("SUNK_CACHE", str(tmp_path / "cache"))
    storage = tmp_path / "cache" / "images" / "storage"
    calls: list[tuple[list[str], dict[str, str] | None]] = []

    def fake_run(argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        argv = list(argv)
        if "buildah" not in argv:
            return subprocess.CompletedProcess(argv, 0, b"", b"")  # debootstrap, tar
        calls.append((argv, kwargs.get("env")))
        sub = _subcommand(argv)
        if sub == "push":
            target = next(a for a in argv if a.startswith("docker-archive:"))
            Path(target.split(":")[1]).write_bytes(b"")
        if sub == "images":
            return subprocess.CompletedProcess(argv, 0, "localhost/sunk/slurmd:24.11-000000000000\n", "")
        return subprocess.CompletedProcess(argv, 1 if sub == "inspect" else 0, b"", b"")

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setattr(slurmroot, "_ensure_debootstrap", lambda log: None)
    monkeypatch.setattr(images, "_slim", lambda tree, suite: None)
    monkeypatch.setattr(images, "_remove_work", lambda work: shutil.rmtree(work))
    built = images.ensure_images("24.11", tmp_path / "log")
    assert all(b.archive.is_file() for b in built.values())

    seen = {_subcommand(argv) for argv, _ in calls}
    assert {"bud", "pull", "push", "inspect", "images", "rmi"} <= seen  # the test covers them all
    buds = [argv for argv, _ in calls if _subcommand(argv) == "bud"]
    assert len(buds) == len(images.IMAGES) + 1  # the Debian base is built too
    for argv, env in calls:
        assert argv[:5] == ["unshare", "--mount", "--propagation", "private", "--"], argv
        assert argv[argv.index("-c") + 1] == images._VAR_LIB_OVERLAY
        assert _has_pair(argv, "--root", str(storage / "root")), argv
        if _subcommand(argv) in STARTS_CONTAINERS:
            assert _has_pair(argv, "--network", "host"), argv
        assert env is not None and env["CONTAINERS_CONF"] == str(storage / "containers.conf")
