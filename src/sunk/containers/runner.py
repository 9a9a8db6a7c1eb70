"""`sunk-step-container run`: what slurmstepd executes, as the job's user, for one task of a
step started with `--container=IMAGE` (the chart's oci.conf, `RunTimeRun`).

Every failure it can foresee is printed to the step's stderr as one `sunk: ...` line and
ends the task with exit code 125 (the code container tools use for "the runtime failed,
your command never ran"); the node stays as it was. Slurm sees a task that failed, never a
daemon error, so nothing is drained.
"""

from __future__ import annotations

import argparse
import grp
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import spec
from .cache import CacheError, ImageCache
from .reference import BadReference, ImageRef, LocalRoot, parse

RUNTIME_FAILED = 125
MOUNTS_VARIABLE = "SUNK_CONTAINER_MOUNTS"


class StepError(RuntimeError):
    """A problem the person who ran the step can act on."""


def read_env_file(path: Path) -> dict[str, str]:
    """Slurm's environment file for the step (CreateEnvFile=null: NUL-terminated entries)."""
    env: dict[str, str] = {}
    for entry in path.read_bytes().split(b"\0"):
        key, sep, value = entry.decode("utf-8", "surrogateescape").partition("=")
        if sep and key:
            env[key] = value
    return env


def requested_mounts(value: str, allowed: Sequence[str]) -> list[spec.Mount]:
    """`SRC[:DST[:ro]]`, comma-separated (Pyxis's --container-mounts form), each source inside
    one of the directories the cluster allows (the chart's slurm.containers.allowedMounts)."""
    mounts: list[spec.Mount] = []
    for item in filter(None, (part.strip() for part in value.split(","))):
        fields = item.split(":")
        if len(fields) > 3 or not fields[0]:
            raise StepError(f"{MOUNTS_VARIABLE}: {item!r} is not SRC[:DST[:ro]]")
        source = os.path.normpath(fields[0])
        target = os.path.normpath(fields[1]) if len(fields) > 1 and fields[1] else source
        flags = fields[2] if len(fields) > 2 else ""
        if flags not in ("", "ro", "rw"):
            raise StepError(f"{MOUNTS_VARIABLE}: {item!r}: the only options are ro and rw")
        if not source.startswith("/") or not target.startswith("/"):
            raise StepError(f"{MOUNTS_VARIABLE}: {item!r}: both paths must be absolute")
        if not any(_inside(source, root) for root in allowed):
            where = ", ".join(allowed) or "nothing (the cluster allows no mounts)"
            raise StepError(
                f"{MOUNTS_VARIABLE}: {source} is outside what this cluster lets containers mount: {where}"
            )
        if not os.path.isdir(source):
            raise StepError(f"{MOUNTS_VARIABLE}: {source} is not a directory on node {os.uname().nodename}")
        mounts.append(spec.Mount(source, target, read_only=flags == "ro"))
    return mounts


def _inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def default_mounts(home: str, allowed: Sequence[str]) -> list[spec.Mount]:
    """The user's home, when it is in an allowed directory, and every allowed directory
    that exists on the node: shared volumes are where jobs and Pods meet."""
    mounts = [spec.Mount(root, root) for root in allowed if os.path.isdir(root)]
    if home and os.path.isdir(home) and not any(_inside(home, m.source) for m in mounts):
        mounts.append(spec.Mount(home, home))
    return mounts


# Directories Slurm's MPI plugins name in the task's environment: the PMIx server's socket
# and files live there, and an MPI library in the image must reach them at the same path.
MPI_DIRECTORIES = ("PMIX_SERVER_TMPDIR",)


def mpi_mounts(job_env: Mapping[str, str], uid: int | None = None) -> list[spec.Mount]:
    """Slurm's PMIx directories of this step, bound at their own paths, so `srun --mpi=pmix`
    works from inside the image as it does on the node: the server's (PMIX_SERVER_TMPDIR) and
    the one it gives the ranks for their session files (`spmix_appdir_*`). For a container
    step Slurm makes the latter beside the server's, in the step's spool directory, which the
    image's read-only root does not have: Open MPI 5 then fails to make its session directory,
    tears its own runtime down and still returns success from MPI_Init, and the first call
    that needs its progress engine (MPI_Comm_dup, so mpi4py's object reductions) jumps to a
    freed address."""
    found = []
    for name in MPI_DIRECTORIES:
        path = os.path.normpath(job_env.get(name) or "/")
        if path != "/" and os.path.isdir(path):
            found.append(spec.Mount(path, path))
    server = os.path.normpath(job_env.get("PMIX_SERVER_TMPDIR") or "/")
    job, step = job_env.get("SLURM_JOB_ID", ""), job_env.get("SLURM_STEP_ID", "")
    if server != "/" and job.isdecimal() and step.isdecimal():
        base = os.path.dirname(server)
        uid = os.getuid() if uid is None else uid
        # Slurm 24.11 puts the job's user in the name; older releases did not.
        for leaf in (f"spmix_appdir_{uid}_{job}.{step}", f"spmix_appdir_{job}.{step}"):
            path = os.path.join(base, leaf)
            if os.path.isdir(path):
                found.append(spec.Mount(path, path))
                break
    return found


def working_directory(job_env: Mapping[str, str], mounts: Sequence[spec.Mount]) -> str | None:
    """Where the task starts: the directory srun was run from, when the container sees it."""
    wanted = job_env.get("PWD") or job_env.get("SLURM_SUBMIT_DIR")
    if not wanted:
        return None
    for mount in mounts:
        if _inside(wanted, mount.source):
            return mount.target + wanted[len(mount.source) :]
    return None


def image_config(bundle: Path) -> tuple[dict[str, str], str]:
    """The image's environment and working directory, from umoci's config.json."""
    try:
        process = json.loads((bundle / "config.json").read_text()).get("process", {})
    except (OSError, ValueError):
        return {}, "/"
    env = dict(item.split("=", 1) for item in process.get("env", []) if "=" in item)
    return env, process.get("cwd") or "/"


def _user_files(rootfs: Path, workdir: Path, uid: int, gid: int) -> tuple[str, str]:
    entry = pwd.getpwuid(uid)
    line = f"{entry.pw_name}:x:{uid}:{gid}:{entry.pw_gecos}:{entry.pw_dir}:{entry.pw_shell}"
    groups = [
        f"{g.gr_name}:x:{g.gr_gid}:{','.join(g.gr_mem)}"
        for g in grp.getgrall()
        if g.gr_gid == gid or entry.pw_name in g.gr_mem
    ]
    image_passwd = _read(rootfs / "etc" / "passwd")
    image_group = _read(rootfs / "etc" / "group")
    passwd_path, group_path = workdir / "passwd", workdir / "group"
    passwd_path.write_text(spec.passwd_file(image_passwd, line, entry.pw_name, uid))
    group_path.write_text(spec.group_file(image_group, groups))
    return str(passwd_path), str(group_path)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sunk-step-container")
    parser.add_argument("--cache-dir", type=Path, default=Path("/var/cache/sunk/containers"))
    parser.add_argument("--cache-max-gib", type=float, default=20.0)
    parser.add_argument("--allow-mount", action="append", default=[])
    parser.add_argument("--insecure-registry", action="append", default=[])
    parser.add_argument("--runtime", default="crun")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run")
    run.add_argument("--container", required=True)
    run.add_argument("--env-file", type=Path, required=True)
    run.add_argument("--spool", type=Path, required=True)
    run.add_argument("--name", required=True)
    run.add_argument("argv", nargs=argparse.REMAINDER)
    return parser


def step_command(argv: Sequence[str]) -> list[str]:
    """The step's command: what follows the `--` that ends the runtime's own options (a
    `--` inside the command is the command's)."""
    return list(argv[1:]) if argv[:1] == ["--"] else list(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    command = step_command(args.argv)
    try:
        return _run(args, command)
    except (StepError, CacheError, BadReference) as exc:
        print(f"sunk: {exc}", file=sys.stderr, flush=True)
        return RUNTIME_FAILED


@dataclass(frozen=True)
class Step:
    """One task of a container step, as Slurm handed it over."""

    command: list[str]
    uid: int
    gid: int
    job_env: Mapping[str, str]
    mounts: list[spec.Mount]
    workdir: Path
    runtime: str
    name: str


def _run(args: argparse.Namespace, command: list[str]) -> int:
    if not command:
        raise StepError("the step has no command to run in the container")
    uid = os.getuid()
    job_env = read_env_file(args.env_file)
    image = parse(args.container)
    home = job_env.get("HOME") or pwd.getpwuid(uid).pw_dir
    mounts = default_mounts(home, args.allow_mount)
    mounts += requested_mounts(job_env.get(MOUNTS_VARIABLE, ""), args.allow_mount)
    mounts += mpi_mounts(job_env, uid)
    workdir = args.spool / "sunk-container"
    workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    _own_environment(workdir)
    step = Step(command, uid, os.getgid(), job_env, mounts, workdir, args.runtime, args.name)
    try:
        if isinstance(image, LocalRoot):
            return _run_local(step, image)
        return _run_image(step, image, args)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _own_environment(workdir: Path) -> None:
    """slurmstepd starts this program with its own environment (root's HOME among it), not
    the job's: skopeo, umoci and crun would look for settings where this user may not read.
    They get a home and temporary directory of this task's own instead."""
    for name in ("HOME", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR", "XDG_CACHE_HOME", "TMPDIR"):
        os.environ.pop(name, None)
    os.environ["HOME"] = str(workdir)
    os.environ["XDG_RUNTIME_DIR"] = str(workdir)
    os.environ["TMPDIR"] = str(workdir)


def _run_local(step: Step, image: LocalRoot) -> int:
    root = Path(image.path)
    bundle = root if (root / "rootfs").is_dir() else None
    rootfs = bundle / "rootfs" if bundle else root
    if not rootfs.is_dir():
        raise StepError(f"{image.path} is not a directory on node {os.uname().nodename}")
    env, cwd = image_config(bundle) if bundle else ({}, "/")
    return _start(step, rootfs, env, cwd)


def _run_image(step: Step, image: ImageRef, args: argparse.Namespace) -> int:
    limit = int(args.cache_max_gib * 2**30)
    cache = ImageCache(args.cache_dir, step.uid, limit, args.insecure_registry)
    ready = cache.ensure(image)
    if ready.note:
        print(f"sunk: {image.name}: {ready.note}", file=sys.stderr, flush=True)
    with cache.using(ready) as bundle:
        env, cwd = image_config(bundle)
        return _start(step, bundle / "rootfs", env, cwd)


def _start(step: Step, rootfs: Path, image_env: Mapping[str, str], image_cwd: str) -> int:
    passwd, group = _user_files(rootfs, step.workdir, step.uid, step.gid)
    task = spec.TaskSpec(
        rootfs=str(rootfs),
        argv=step.command,
        uid=step.uid,
        gid=step.gid,
        job_env=step.job_env,
        image_env=image_env,
        image_cwd=image_cwd,
        cwd=working_directory(step.job_env, step.mounts),
        mounts=step.mounts,
        passwd=passwd,
        group=group,
    )
    bundle = step.workdir / "bundle"
    bundle.mkdir(mode=0o700, exist_ok=True)
    (bundle / "config.json").write_text(json.dumps(spec.runtime_spec(task)))
    state = step.workdir / "state"
    state.mkdir(mode=0o700, exist_ok=True)
    runtime = [step.runtime, "--root", str(state), "--cgroup-manager=disabled"]
    # slurmd runs under the runtime's default seccomp profile, which refuses two calls crun
    # would make. keyctl(2): no session keyring of its own, the step keeps the job's as a
    # plain step would. pivot_root(2): the image is made the root by moving its mount onto /
    # and chroot, which a process of the step could undo only to reach what it started from,
    # slurmd's own file system as the job's user: what a plain step of the same job sees.
    # Slurm signals the whole step; crun passes signals on to the task, so this process
    # only waits for it and then tidies up.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)
    try:
        return subprocess.run(
            [*runtime, "run", "--no-new-keyring", "--no-pivot", "--bundle", str(bundle), step.name],
            check=False,
        ).returncode
    except FileNotFoundError as exc:
        raise StepError(f"this node has no container runtime ({step.runtime}): {exc.strerror}") from exc
