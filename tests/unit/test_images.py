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

from sunk_dev import buildah, images, slurmroot
from sunk_dev.errors import DevClusterError

REPO = Path(__file__).resolve().parents[2]
REPO_IMAGES = REPO / "images"
JUNK = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the repository's images/ (and of what the sunk image's context takes from
    the repository: pyproject.toml, README.md, requirements.lock, src/) that a test may edit."""
    copy = tmp_path / "images"
    shutil.copytree(REPO_IMAGES, copy)
    shutil.copy2(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copy2(REPO / "README.md", tmp_path / "README.md")
    shutil.copy2(REPO / "requirements.lock", tmp_path / "requirements.lock")
    shutil.copytree(REPO / "src", tmp_path / "src", ignore=JUNK)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.md").write_text("# notes\n")
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


def test_the_suite_is_part_of_every_slurm_images_key(tree: Path) -> None:
    """Catches 24.11 and 26.05 sharing keys: one version's tarball would stand for the other's."""
    trixie = images.image_keys(tree, "trixie")
    sid = images.image_keys(tree, "sid")
    slurm_images = [name for name in images.IMAGES if name not in images.UNVERSIONED]
    assert all(trixie[name] != sid[name] for name in (images.DEBIAN, *slurm_images))


def test_the_images_without_slurm_are_made_once_for_every_version(tree: Path) -> None:
    """Catches sunk and mariadb keyed (and so built) per Slurm version, or built on sid for
    26.05: they are the same trixie images whatever Slurm the cluster runs."""
    assert set(images.UNVERSIONED) == {"sunk", "mariadb"}
    trixie = images.image_keys(tree, "trixie")
    sid = images.image_keys(tree, "sid")
    for name, suite in images.UNVERSIONED.items():
        assert suite == "trixie"
        assert trixie[name] == sid[name], name
        assert images.suite_of(name, "sid") == "trixie"
        assert images._tag(name, "26.05") == images._tag(name, "24.11") == f"localhost/sunk/{name}:trixie"
        same = images.archive_of(name, "24.11", trixie[name])
        assert images.archive_of(name, "26.05", trixie[name]) == same
    assert images._tag("slurmd", "26.05") == "localhost/sunk/slurmd:26.05"


# -- the sunk image's context: the repository's source --------------------------------------------
def test_a_source_change_rebuilds_the_sunk_image_only(tree: Path) -> None:
    """Catches a sunk image that keeps running old code after src/ changed (its key must
    cover the package's source), and a source edit that rebuilds the Slurm images."""
    before = images.image_keys(tree, "trixie")
    cli = tree.parent / "src" / "sunk" / "cli.py"
    cli.write_text(cli.read_text() + "# an edit\n")
    after = images.image_keys(tree, "trixie")
    assert {name for name in images.IMAGES if after[name] != before[name]} == {"sunk"}


def test_a_change_to_the_step_container_runtime_rebuilds_slurmd_and_sunk_only(tree: Path) -> None:
    """Catches slurmd images that keep an old src/sunk/containers (its build context
    copies it in), and a change there that rebuilds images that do not hold it."""
    before = images.image_keys(tree, "trixie")
    runner = tree.parent / "src" / "sunk" / "containers" / "runner.py"
    runner.write_text(runner.read_text() + "# an edit\n")
    after = images.image_keys(tree, "trixie")
    assert {name for name in images.IMAGES if after[name] != before[name]} == {"slurmd", "sunk"}


@pytest.mark.parametrize("extra", ["pyproject.toml", "src/sunk/new_module.py"])
def test_the_package_files_are_part_of_the_sunk_key(tree: Path, extra: str) -> None:
    """Catches a key blind to pyproject.toml (dependencies) or to a module added to src/."""
    before = images.image_keys(tree, "trixie")["sunk"]
    target = tree.parent / extra
    target.write_text((target.read_text() if target.exists() else "") + "# more\n")
    assert images.image_keys(tree, "trixie")["sunk"] != before


def test_unrelated_files_and_caches_leave_the_sunk_key_alone(tree: Path) -> None:
    """Catches a key over the whole checkout (any doc edit would rebuild the image) or over
    bytecode caches (every test run would)."""
    before = images.image_keys(tree, "trixie")["sunk"]
    (tree.parent / "docs" / "notes.md").write_text("# other notes\n")
    (tree.parent / "tests").mkdir()
    (tree.parent / "tests" / "test_x.py").write_text("x = 1\n")
    cache = tree.parent / "src" / "sunk" / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "cli.cpython-313.pyc").write_bytes(b"\0bytecode")
    (tree.parent / "src" / "sunk.egg-info").mkdir()
    (tree.parent / "src" / "sunk.egg-info" / "PKG-INFO").write_text("Name: sunk\n")
    (tree.parent / ".venv").mkdir()
    (tree.parent / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert images.image_keys(tree, "trixie")["sunk"] == before


def test_the_staged_sunk_context_holds_the_package_and_no_caches(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Catches a build context without pyproject.toml, README.md (pyproject's readme) or
    src/ (the Dockerfile COPYs them), one that carries bytecode, or a staging directory
    left behind in the cache."""
    monkeypatch.setenv("SUNK_CACHE", str(tmp_path / "cache"))
    (tree.parent / "src" / "sunk" / "__pycache__").mkdir(exist_ok=True)
    (tree.parent / "src" / "sunk" / "__pycache__" / "cli.cpython-313.pyc").write_bytes(b"\0")
    with images.staged_context(tree, "sunk") as context:
        assert context != tree / "sunk" and context.is_relative_to(tmp_path / "cache")
        files = {p.relative_to(context).as_posix() for p in context.rglob("*") if p.is_file()}
        assert {"Dockerfile", "pyproject.toml", "README.md", "src/sunk/cli.py"} <= files
        assert not [f for f in files if "__pycache__" in f or f.endswith(".pyc")]
        assert images.context_digest(context) == images.context_digest(images.context_files(tree, "sunk"))
    assert not context.exists()
    with images.staged_context(tree, "login") as context:
        assert context == tree / "login"  # an image whose directory is its whole context


def test_a_missing_package_file_is_named(tree: Path) -> None:
    """Catches an obscure failure (or a silently smaller key) outside a full checkout."""
    (tree.parent / "pyproject.toml").unlink()
    with pytest.raises(DevClusterError, match=r"pyproject\.toml"):
        images.image_keys(tree, "trixie")


# -- the two images that are not Slurm's -----------------------------------------------------------
def _user(name: str) -> str:
    users = re.findall(r"^USER\s+(\S+)", (REPO_IMAGES / name / "Dockerfile").read_text(), re.MULTILINE)
    assert users, name
    return str(users[-1])


def test_sunk_and_mariadb_run_as_fixed_numeric_non_root_users() -> None:
    """Catches a user that runAsNonRoot cannot check (a name), root, or a MariaDB uid that
    collides with the Slurm images' fixed ids (volumes shared between them would mix up)."""
    assert _user("sunk") == "65532:65532"
    assert _user("mariadb") == "999:999"
    slurm_ids = {
        int(i) for i in re.findall(r"--uid (\d+)", (REPO_IMAGES / "slurm-base" / "Dockerfile").read_text())
    }
    assert slurm_ids == {64030, 990, 991}
    assert 999 not in slurm_ids


def test_the_entrypoints_take_their_command_from_args() -> None:
    """Catches an entrypoint that would swallow `args: [operator, ...]` or run without tini."""
    sunk = (REPO_IMAGES / "sunk" / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["tini", "--", "sunk"]' in sunk
    mariadb = (REPO_IMAGES / "mariadb" / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["tini", "--", "sunk-mariadb-entrypoint"]' in mariadb
    assert re.search(r"^CMD \[\]", mariadb, re.MULTILINE), (
        "the base's CMD [bash] would become mariadbd's argument"
    )
    entrypoint = REPO_IMAGES / "mariadb" / "sunk-mariadb-entrypoint"
    assert entrypoint.stat().st_mode & 0o111, "COPY keeps the mode: the script must be executable"


def test_the_mariadb_entrypoint_never_puts_the_password_on_a_command_line() -> None:
    """Catches the password reaching an argv (visible in /proc to every process of the Pod)
    or the environment of the server: it may only go through the shell's own printf."""
    script = (REPO_IMAGES / "mariadb" / "sunk-mariadb-entrypoint").read_text()
    for line in script.splitlines():
        code = line.split("#", 1)[0]
        if "$password" in code or "$quoted" in code:
            assert re.search(r"(^|\s)(printf|case|quoted=|\[ -n|\*\))", code), line
            assert not re.search(
                r"\b(mariadb|mariadbd|sed|grep|echo|env|export)\b[^|]*\$(password|quoted)", code
            ), line


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
    assert buildah.failed_step(BUILD_LOG) == (
        "STEP 3/3 (RUN set -eux; apt-get update; apt-get install -y catatonit)"
    )


def test_a_log_without_steps_has_no_failed_step() -> None:
    """Catches a made-up step when buildah failed before its first one (a bad flag, say)."""
    assert buildah.failed_step("Error: unknown flag: --pull-never\n") is None


def test_a_long_step_is_shortened() -> None:
    """Catches a one-sentence error message swollen by a 40-line RUN instruction."""
    step = buildah.failed_step("STEP 2/2: RUN " + "x " * 500 + "\n")
    assert step is not None and len(step) < 130


def test_warm_images_call_no_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Catches a warm start that still runs buildah (or anything else) when every tarball exists."""
    monkeypatch.setenv("SUNK_CACHE", str(tmp_path))
    keys = images.image_keys(REPO_IMAGES, "trixie")
    store = tmp_path / "images"
    store.mkdir()
    for name in images.IMAGES:
        label = "trixie" if name in images.UNVERSIONED else "24.11"
        (store / f"{name}-{label}-{keys[name][:12]}.tar").write_bytes(b"")

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"ran {args}")

    monkeypatch.setattr(subprocess, "run", refuse)
    built = images.ensure_images("24.11", tmp_path / "log")
    assert built["slurmd"].ref == f"localhost/sunk/slurmd:24.11-{keys['slurmd'][:12]}"
    assert built["slurmd"].tag == "localhost/sunk/slurmd:24.11"
    assert built["sunk"].ref == f"localhost/sunk/sunk:trixie-{keys['sunk'][:12]}"
    assert built["mariadb"].tag == "localhost/sunk/mariadb:trixie"
    assert list(built) == list(images.IMAGES)  # the dev cluster imports every one of them
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
        argv = buildah.buildah_argv(storage, [sub, "--pull=never", "x"])
        assert _subcommand(argv) == sub
        assert _has_pair(argv, "--network", "host"), sub
        assert _has_pair(argv, "--isolation", "oci"), sub
        if sub != "from":  # `buildah from` starts nothing itself and takes no --runtime-flag
            assert _has_pair(argv, "--runtime-flag", f"root={storage / 'runc'}"), sub
    for sub in ("pull", "push", "inspect", "images", "rmi"):
        argv = buildah.buildah_argv(storage, [sub, "x"])
        assert "--network" not in argv, sub  # these refuse the flag
        assert argv[-2:] == [sub, "x"]


def test_every_buildah_command_overlays_var_lib_in_a_private_namespace(tmp_path: Path) -> None:
    """Catches buildah's blob-info cache landing in the host's /var/lib/containers/cache (it
    ignores --root): /var/lib must be an overlay whose upper layer is in the storage, mounted
    in the command's own mount namespace, never on the host."""
    storage = tmp_path / "storage"
    argv = buildah.buildah_argv(storage, ["push", "a", "b"])
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
    buildah.prepare_host_dirs(storage)
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
    env = buildah.buildah_env(storage)
    assert env["CONTAINERS_CONF"] == str(storage / "containers.conf")
    assert "CONTAINERS_STORAGE_CONF" not in env and "STORAGE_DRIVER" not in env
    assert Path(env["TMPDIR"]).is_relative_to(storage)


def test_a_storage_under_var_lib_is_refused(tmp_path: Path) -> None:
    """Catches overlaying /var/lib while buildah's own storage lies inside it: the storage
    would be read through the overlay and copied up into itself."""
    with pytest.raises(DevClusterError, match="/var/lib"):
        buildah.prepare_host_dirs(Path("/var/lib/sunk-test-never-created/storage"))
    assert not Path("/var/lib/sunk-test-never-created").exists()


@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_a_cold_build_runs_every_buildah_command_off_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    """Catches any buildah call of a whole cold build (Debian base, loading a parent back from
    its tarball, each Dockerfile, exports, removing superseded images) that bypasses the
    private namespace, our environment, or --network host where it can start a container;
    and, for sunk and mariadb, a build on the wrong Debian base (26.05's is sid, theirs is
    trixie) or a sunk build without its source or pip's CA bundle."""
    monkeypatch.setenv("SUNK_CACHE", str(tmp_path / "cache"))
    ca = tmp_path / "ca.crt"
    ca.write_text("a CA bundle\n")
    monkeypatch.setenv("PIP_CERT", str(ca))
    storage = tmp_path / "cache" / "images" / "storage"
    calls: list[tuple[list[str], dict[str, str] | None]] = []
    contexts: dict[str, set[str]] = {}

    def fake_run(argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        argv = list(argv)
        if "buildah" not in argv:
            return subprocess.CompletedProcess(argv, 0, b"", b"")  # debootstrap, tar
        calls.append((argv, kwargs.get("env")))
        sub = _subcommand(argv)
        if sub == "bud":
            context = Path(argv[-1])
            contexts[argv[argv.index("--tag") + 1]] = {
                p.relative_to(context).as_posix() for p in context.rglob("*") if p.is_file()
            }
        if sub == "push":
            target = next(a for a in argv if a.startswith("docker-archive:"))
            Path(target.split(":")[1]).write_bytes(b"")
        if sub == "images":
            return subprocess.CompletedProcess(argv, 0, f"localhost/sunk/slurmd:{version}-000000000000\n", "")
        return subprocess.CompletedProcess(argv, 1 if sub == "inspect" else 0, b"", b"")

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setattr(slurmroot, "_ensure_debootstrap", lambda log: None)
    monkeypatch.setattr(buildah, "_slim", lambda tree, suite: None)
    monkeypatch.setattr(buildah, "remove_work", lambda work: shutil.rmtree(work))
    monkeypatch.setattr(images, "remove_work", lambda work: shutil.rmtree(work))
    built = images.ensure_images(version, tmp_path / "log")
    assert all(b.archive.is_file() for b in built.values())

    seen = {_subcommand(argv) for argv, _ in calls}
    assert {"bud", "pull", "push", "inspect", "images", "rmi"} <= seen  # the test covers them all
    buds = [argv for argv, _ in calls if _subcommand(argv) == "bud"]
    suites = {"trixie"} | {slurmroot.SUITES[version]}
    assert len(buds) == len(images.IMAGES) + len(suites)  # each suite's Debian base is built too
    for argv, env in calls:
        assert argv[:5] == ["unshare", "--mount", "--propagation", "private", "--"], argv
        assert argv[argv.index("-c") + 1] == buildah._VAR_LIB_OVERLAY
        assert _has_pair(argv, "--root", str(storage / "root")), argv
        if _subcommand(argv) in STARTS_CONTAINERS:
            assert _has_pair(argv, "--network", "host"), argv
        assert env is not None and env["CONTAINERS_CONF"] == str(storage / "containers.conf")

    def bud_of(name: str) -> list[str]:
        return next(argv for argv in buds if argv[argv.index("--tag") + 1] == built[name].ref)

    keys = images.image_keys(REPO_IMAGES, slurmroot.SUITES[version])
    trixie_base = f"localhost/sunk/debian:trixie-{images.base_key('trixie')[:12]}"
    for name in images.UNVERSIONED:
        assert f"--build-arg=BASE={trixie_base}" in bud_of(name), name
    own_base = f"localhost/sunk/debian:{slurmroot.SUITES[version]}-{keys[images.DEBIAN][:12]}"
    assert f"--build-arg=BASE={own_base}" in bud_of("slurm-base")
    assert _has_pair(bud_of("sunk"), "--secret", f"id=pip-cert,src={ca}")
    assert "--secret" not in bud_of("slurmd")
    assert {"Dockerfile", "pyproject.toml", "README.md", "src/sunk/cli.py"} <= contexts[built["sunk"].ref]
    assert not list((tmp_path / "cache" / "images").glob(".context-*")), "the staged context was left behind"


def test_the_manifest_of_a_clusters_images_reads_back_what_was_imported(tmp_path: Path) -> None:
    """Catches tests and charts deploying a different build than the Nodes hold (a later
    ensure_images rebuilds sunk after a source edit), or a manifest that loses an image."""
    built = {
        name: images.Built(
            name, f"localhost/sunk/{name}:x-{i:012d}", f"localhost/sunk/{name}:x", tmp_path / name
        )
        for i, name in enumerate(images.IMAGES)
    }
    images.write_manifest(tmp_path / "images.json", built)
    assert images.read_manifest(tmp_path / "images.json") == built
    with pytest.raises(DevClusterError, match="real Nodes"):
        images.read_manifest(tmp_path / "absent.json")
