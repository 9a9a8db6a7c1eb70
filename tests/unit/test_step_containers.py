"""The runtime for job steps in container images (src/sunk/containers), without Slurm or
crun: what it accepts after --container=, the OCI spec it writes, which mounts it allows,
and its per-user image cache (skopeo and umoci replaced by a recorded command runner)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from sunk.containers import runner, spec
from sunk.containers.cache import CacheError, ImageCache
from sunk.containers.reference import BadReference, ImageRef, LocalRoot, parse

PACKAGE = Path(runner.__file__).parent


# -- what --container= accepts --------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("10.64.0.1:23500/sunk/job:24.11", "10.64.0.1:23500/sunk/job:24.11"),
        ("docker://registry.example.com/team/train:1.0", "registry.example.com/team/train:1.0"),
        ("nvcr.io#nvidia/pytorch:24.05-py3", "nvcr.io/nvidia/pytorch:24.05-py3"),
        ("debian:trixie", "docker.io/library/debian:trixie"),
        ("team/tool", "docker.io/team/tool:latest"),
        ("localhost/x@sha256:" + "a" * 64, "localhost/x@sha256:" + "a" * 64),
    ],
)
def test_r10_7_image_references_people_write_name_the_image_they_mean(text: str, name: str) -> None:
    parsed = parse(text)
    assert isinstance(parsed, ImageRef) and parsed.name == name


def test_r10_7_an_absolute_path_is_a_root_filesystem_on_the_node() -> None:
    assert parse("/opt/images/train/") == LocalRoot("/opt/images/train")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "is empty"),
        ("Not/An:Image:ref", "is not a"),
        ("registry.example.com/team/train:bad tag", "is not a valid tag"),
        ("oci-archive:///tmp/x.tar", "not supported"),
        ("/opt/../etc", "may not contain '..'"),
        ("x@sha256:1234", "64 hex digits"),
    ],
)
def test_r10_7_a_value_that_is_no_image_is_refused_saying_what_to_write(text: str, says: str) -> None:
    with pytest.raises(BadReference, match=says.replace("(", r"\(")):
        parse(text)


# -- the OCI spec ----------------------------------------------------------------------------


def task(**overrides: object) -> spec.TaskSpec:
    fields: dict[str, object] = {
        "rootfs": "/cache/images/sha256-1/rootfs",
        "argv": ["python3", "train.py"],
        "uid": 20001,
        "gid": 30000,
        "job_env": {"SLURM_JOB_ID": "7", "PATH": "/node/bin", "HOME": "/home/alice"},
        "image_env": {"PATH": "/opt/conda/bin:/usr/bin", "LANG": "C.UTF-8"},
    }
    fields.update(overrides)
    return spec.TaskSpec(**fields)  # type: ignore[arg-type]


def test_r10_7_the_task_runs_as_the_jobs_user_mapped_to_itself_never_root() -> None:
    made = spec.runtime_spec(task())
    assert made["process"]["user"] == {"uid": 20001, "gid": 30000}
    assert made["linux"]["uidMappings"] == [{"containerID": 20001, "hostID": 20001, "size": 1}]
    assert made["process"]["noNewPrivileges"] is True
    assert made["root"] == {"path": "/cache/images/sha256-1/rootfs", "readonly": True}


def test_r10_7_only_user_and_mount_namespaces_are_new_so_slurm_still_sees_and_signals_the_task() -> None:
    """Catches a PID or network namespace: Slurm could no longer account for or signal the
    task's processes, and MPI peers could not find each other."""
    assert {n["type"] for n in spec.runtime_spec(task())["linux"]["namespaces"]} == {"user", "mount"}


def test_r10_7_the_jobs_environment_reaches_the_task_but_the_images_path_is_kept() -> None:
    env = spec.runtime_spec(task())["process"]["env"]
    assert "SLURM_JOB_ID=7" in env and "HOME=/home/alice" in env
    assert "PATH=/opt/conda/bin:/usr/bin" in env and "PATH=/node/bin" not in env
    assert "LANG=C.UTF-8" in env


def test_r10_7_an_image_without_a_path_gets_the_standard_one() -> None:
    env = spec.environment({"SLURM_JOB_ID": "7"}, {})
    assert any(item.startswith("PATH=/usr/local/sbin:") for item in env)


def test_r10_7_the_jobs_tmp_dev_and_allowed_mounts_are_bound_in() -> None:
    made = spec.runtime_spec(task(mounts=[spec.Mount("/shared", "/data", read_only=True)]))
    by_target = {m["destination"]: m for m in made["mounts"]}
    assert by_target["/tmp"]["source"] == "/tmp" and by_target["/dev"]["source"] == "/dev"
    assert by_target["/data"]["source"] == "/shared" and "ro" in by_target["/data"]["options"]
    assert by_target["/proc"]["type"] == "bind"  # a new proc mount is refused in a Pod


def test_r10_7_the_image_knows_the_jobs_user_by_name() -> None:
    passwd = spec.passwd_file(
        "root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/home/a:/bin/sh\n",
        "alice:x:20001:30000:Alice:/home/alice:/bin/bash",
        "alice",
        20001,
    )
    assert passwd.splitlines() == [
        "root:x:0:0::/root:/bin/sh",
        "alice:x:20001:30000:Alice:/home/alice:/bin/bash",
    ]
    group = spec.group_file("root:x:0:\npeople:x:100:\n", ["people:x:30000:alice"])
    assert group.splitlines() == ["root:x:0:", "people:x:30000:alice"]


# -- mounts and the working directory ------------------------------------------------------------


def test_r10_7_a_mount_outside_the_allowed_directories_is_refused(tmp_path: Path) -> None:
    with pytest.raises(runner.StepError, match="outside what this cluster lets containers mount"):
        runner.requested_mounts("/etc/munge:/keys", [str(tmp_path)])


def test_r10_7_a_prefix_of_an_allowed_directory_is_not_inside_it(tmp_path: Path) -> None:
    """Catches a string-prefix check: /shared-secrets is not inside /shared."""
    (tmp_path / "shared-secrets").mkdir()
    with pytest.raises(runner.StepError, match="outside"):
        runner.requested_mounts(f"{tmp_path}/shared-secrets", [f"{tmp_path}/shared"])


def test_r10_7_an_allowed_mount_is_bound_where_asked_read_only_when_asked(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    mounts = runner.requested_mounts(f"{tmp_path}/data:/data:ro,{tmp_path}/data", [str(tmp_path)])
    assert mounts == [
        spec.Mount(f"{tmp_path}/data", "/data", True),
        spec.Mount(f"{tmp_path}/data", f"{tmp_path}/data"),
    ]


def test_r10_7_the_task_starts_where_srun_ran_when_the_container_sees_it() -> None:
    mounts = [spec.Mount("/shared", "/shared")]
    assert runner.working_directory({"PWD": "/shared/run1"}, mounts) == "/shared/run1"
    assert runner.working_directory({"PWD": "/root/elsewhere"}, mounts) is None


def test_r10_7_slurms_nul_separated_environment_file_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "environment"
    path.write_bytes(b"A=1\0MULTI=two\nlines\0EMPTY=\0")
    assert runner.read_env_file(path) == {"A": "1", "MULTI": "two\nlines", "EMPTY": ""}


def test_r10_7_a_failure_is_one_sunk_line_and_exit_125_never_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "env").write_bytes(b"HOME=/nonexistent\0")
    code = runner.main(
        [
            "run",
            "--container",
            "Not/An:Image:ref",
            "--env-file",
            str(tmp_path / "env"),
            "--spool",
            str(tmp_path),
            "--name",
            "t",
            "--",
            "true",
        ]
    )
    assert code == runner.RUNTIME_FAILED
    err = capsys.readouterr().err
    assert err.startswith("sunk: --container='Not/An:Image:ref'") and "Traceback" not in err


# -- the image cache -----------------------------------------------------------------------------


class Registry:
    """skopeo and umoci as a registry would answer: `images` maps a reference to its digest
    (a missing reference is refused as the registry does); unpacking writes a small rootfs."""

    def __init__(self, images: dict[str, str], rootfs_bytes: int = 4096) -> None:
        self.images = images
        self.rootfs_bytes = rootfs_bytes
        self.calls: list[list[str]] = []
        self.down = False

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        argv = list(argv)
        self.calls.append(argv)
        if argv[0] == "skopeo":
            return self._copy(argv)
        if argv[:2] == ["umoci", "unpack"]:
            target = Path(argv[-1])
            (target / "rootfs").mkdir(parents=True)
            (target / "rootfs" / "blob").write_bytes(b"x" * self.rootfs_bytes)
            (target / "config.json").write_text(
                json.dumps({"process": {"env": ["PATH=/usr/bin"], "cwd": "/"}})
            )
        return subprocess.CompletedProcess(argv, 0, "", "")

    def _copy(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        source, dest = argv[-2].removeprefix("docker://"), argv[-1]
        if self.down:
            return subprocess.CompletedProcess(argv, 1, "", "dial tcp: connection refused\n")
        if source not in self.images:
            return subprocess.CompletedProcess(
                argv, 1, "", f"reading manifest 1 in {source}: manifest unknown\n"
            )
        layout, tag = dest.removeprefix("oci:").rsplit(":", 1)
        index_path = Path(layout) / "index.json"
        index = json.loads(index_path.read_text()) if index_path.exists() else {"manifests": []}
        index["manifests"] = [
            m for m in index["manifests"] if m["annotations"]["org.opencontainers.image.ref.name"] != tag
        ]
        index["manifests"].append(
            {"digest": self.images[source], "annotations": {"org.opencontainers.image.ref.name": tag}}
        )
        Path(layout).mkdir(parents=True, exist_ok=True)
        index_path.write_text(json.dumps(index))
        return subprocess.CompletedProcess(argv, 0, "", "")

    def unpacks(self) -> int:
        return sum(1 for call in self.calls if call[:2] == ["umoci", "unpack"])


REF = ImageRef("reg:5000", "sunk/job", "1", None)
OTHER = ImageRef("reg:5000", "sunk/other", "1", None)


def make_cache(tmp_path: Path, registry: Registry, max_bytes: int = 10**9) -> ImageCache:
    return ImageCache(tmp_path, os.getuid(), max_bytes, ["reg:5000"], run=registry)


def test_r10_7_an_image_is_fetched_and_unpacked_once_then_reused(tmp_path: Path) -> None:
    registry = Registry({REF.name: "sha256:" + "1" * 64})
    cache = make_cache(tmp_path, registry)
    first, second = cache.ensure(REF), cache.ensure(REF)
    assert first.fetched and not second.fetched
    assert first.bundle == second.bundle and (first.bundle / "rootfs").is_dir()
    assert registry.unpacks() == 1
    assert "--src-tls-verify=false" in registry.calls[0]  # reg:5000 is listed as insecure


def test_r10_7_a_moved_tag_is_fetched_anew(tmp_path: Path) -> None:
    registry = Registry({REF.name: "sha256:" + "1" * 64})
    cache = make_cache(tmp_path, registry)
    old = cache.ensure(REF)
    registry.images[REF.name] = "sha256:" + "2" * 64
    new = cache.ensure(REF)
    assert new.digest != old.digest and new.fetched


def test_r10_7_a_missing_image_fails_with_the_registrys_words(tmp_path: Path) -> None:
    with pytest.raises(CacheError, match=r"cannot fetch reg:5000/sunk/job:1: .*manifest unknown"):
        make_cache(tmp_path, Registry({})).ensure(REF)


def test_r10_7_with_the_registry_down_a_cached_image_still_runs_and_says_so(tmp_path: Path) -> None:
    registry = Registry({REF.name: "sha256:" + "1" * 64})
    cache = make_cache(tmp_path, registry)
    cache.ensure(REF)
    registry.down = True
    ready = cache.ensure(REF)
    assert "could not reach the registry" in ready.note and "connection refused" in ready.note


def test_r10_7_the_least_recently_used_image_is_evicted_when_the_cache_is_full(tmp_path: Path) -> None:
    registry = Registry(
        {REF.name: "sha256:" + "1" * 64, OTHER.name: "sha256:" + "2" * 64}, rootfs_bytes=600_000
    )
    cache = make_cache(tmp_path, registry, max_bytes=1_000_000)
    first = cache.ensure(REF)
    os.utime(first.bundle, (1, 1))  # long unused
    second = cache.ensure(OTHER)
    assert not first.bundle.exists() and second.bundle.exists()
    assert any(call[:2] == ["umoci", "gc"] for call in registry.calls)


def test_r10_7_an_image_a_task_runs_from_is_never_evicted(tmp_path: Path) -> None:
    registry = Registry(
        {REF.name: "sha256:" + "1" * 64, OTHER.name: "sha256:" + "2" * 64}, rootfs_bytes=600_000
    )
    cache = make_cache(tmp_path, registry, max_bytes=1_000_000)
    first = cache.ensure(REF)
    os.utime(first.bundle, (1, 1))
    with cache.using(first):
        cache.ensure(OTHER)
        assert (first.bundle / "rootfs").is_dir()


def test_r10_7_a_cache_directory_someone_else_made_is_refused(tmp_path: Path) -> None:
    """Catches a runtime that would run another user's planted image as this user."""
    (tmp_path / str(os.getuid())).mkdir(mode=0o755)
    with pytest.raises(CacheError, match="not a private directory"):
        make_cache(tmp_path, Registry({})).prepare()


# -- it runs in the slurmd image with nothing but the standard library ---------------------------


def test_r10_7_the_runtime_imports_only_the_standard_library_and_itself() -> None:
    """Catches an import of the rest of sunk or a third-party package: the slurmd image has
    neither, only Debian's python3 and this package copied as sunk_containers."""
    import sys

    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: this package
                    continue
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top == "__future__" or top in sys.stdlib_module_names, f"{path.name} imports {name}"


def test_r10_7_skopeos_log_line_is_reduced_to_its_message(tmp_path: Path) -> None:
    """Catches the step's error carrying skopeo's time= and level= fields, which bury the
    registry's words."""

    def refuse(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        said = 'time="2026-11-27T19:02:59Z" level=fatal '
        said += 'msg="initializing source: reading manifest 1: manifest unknown"'
        return subprocess.CompletedProcess(list(argv), 1, "", said + "\n")

    cache = ImageCache(tmp_path, os.getuid(), 10**9, run=refuse)
    with pytest.raises(CacheError) as refused:
        cache.ensure(REF)
    assert str(refused.value) == (
        "cannot fetch reg:5000/sunk/job:1: initializing source: reading manifest 1: manifest unknown"
    )


def test_r10_7_slurms_pmix_directory_is_bound_so_mpi_in_the_image_finds_its_server(tmp_path: Path) -> None:
    """Catches `srun --mpi=pmix --container=...` failing to start: the MPI library in the
    image looks for the PMIx server's socket under PMIX_SERVER_TMPDIR."""
    pmix = tmp_path / "pmix.7.0"
    pmix.mkdir()
    assert runner.mpi_mounts({"PMIX_SERVER_TMPDIR": f"{pmix}/"}) == [spec.Mount(str(pmix), str(pmix))]
    assert runner.mpi_mounts({"PMIX_SERVER_TMPDIR": str(tmp_path / "gone")}) == []
    assert runner.mpi_mounts({}) == []


def test_issue49_slurms_pmix_directory_for_the_ranks_session_files_is_bound_writable(tmp_path: Path) -> None:
    """Catches MPI_Comm_dup (mpi4py's reductions of Python objects) crashing every rank of a
    container step: Slurm makes the ranks' session directory beside the PMIx server's, in the
    step's spool, which the image's read-only root lacks; Open MPI 5 then tears its runtime
    down in MPI_Init and still reports success."""
    spool = tmp_path / "oci-job7-0"
    server, ranks = spool / "pmix.7.0", spool / "spmix_appdir_1000_7.0"
    server.mkdir(parents=True)
    env = {"PMIX_SERVER_TMPDIR": f"{spool}//pmix.7.0/", "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0"}
    assert runner.mpi_mounts(env, 1000) == [spec.Mount(str(server), str(server))]
    ranks.mkdir()
    mounts = runner.mpi_mounts(env, 1000)
    assert mounts == [spec.Mount(str(server), str(server)), spec.Mount(str(ranks), str(ranks))]
    assert not any(m.read_only for m in mounts)
    # Another user's directory of the same step is never bound; the older name without the user is.
    assert runner.mpi_mounts(env, 1001) == [spec.Mount(str(server), str(server))]
    older = spool / "spmix_appdir_7.0"
    older.mkdir()
    assert runner.mpi_mounts(env, 1001)[1:] == [spec.Mount(str(older), str(older))]


def test_r10_7_a_double_dash_inside_the_command_is_the_commands_own() -> None:
    """Catches every `--` being dropped from the step's command (`srun --container=... git
    checkout -- file` would run `git checkout file`)."""
    assert runner.step_command(["--", "git", "checkout", "--", "file"]) == ["git", "checkout", "--", "file"]
    assert runner.step_command(["true"]) == ["true"]
