"""Start daemons in the background and stop them again by the PID files they left.

A PID file records the PID and the kernel's start time of that process, so a stale file
whose PID was reused by an unrelated program is recognised and that program is left alone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sunk_dev.errors import DevClusterError


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces; it is wrapped in parentheses.
    return raw[raw.rindex(")") + 2 :].split()


def start_time(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def is_running(pid: int) -> bool:
    """True while the process exists and is not a zombie waiting to be reaped."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


@dataclass(frozen=True)
class Tracked:
    name: str
    pid: int
    started: int

    def alive(self) -> bool:
        return is_running(self.pid) and start_time(self.pid) == self.started


def load(pid_dir: Path, name: str) -> Tracked | None:
    try:
        data = json.loads((pid_dir / f"{name}.json").read_text())
        return Tracked(name, int(data["pid"]), int(data["started"]))
    except (OSError, ValueError, KeyError):
        return None


def tracked(pid_dir: Path) -> list[Tracked]:
    """Every process with a PID file, in name order."""
    found = (load(pid_dir, file.stem) for file in sorted(pid_dir.glob("*.json")))
    return [proc for proc in found if proc is not None]


def spawn(
    name: str,
    argv: Sequence[str],
    pid_dir: Path,
    log_dir: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Tracked:
    """Start `argv` in its own session, logging to log_dir/name.log, and record it."""
    pid_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / f"{name}.log", "ab") as log:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            # Daemons run in the cluster's directory, never the caller's (often a checkout):
            # slurmrestd's directory is where jobs without one write their output.
            cwd=cwd or pid_dir.parent,
            start_new_session=True,
        )
    started = start_time(proc.pid) or 0
    (pid_dir / f"{name}.json").write_text(json.dumps({"pid": proc.pid, "started": started}))
    return Tracked(name, proc.pid, started)


def stop(proc: Tracked, pid_dir: Path, timeout: float = 15.0) -> None:
    """SIGTERM, wait up to `timeout`, then SIGKILL; forget the PID file either way."""
    if proc.alive():
        signal_quietly(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while proc.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if proc.alive():
            signal_quietly(proc.pid, signal.SIGKILL)
            deadline = time.monotonic() + 5
            while proc.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
    (pid_dir / f"{proc.name}.json").unlink(missing_ok=True)


def stop_many(procs: Sequence[Tracked], pid_dir: Path, timeout: float = 15.0) -> None:
    """Signal a group at once, then wait for all of it (64 slurmd stop in parallel)."""
    for proc in procs:
        if proc.alive():
            signal_quietly(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(p.alive() for p in procs) and time.monotonic() < deadline:
        time.sleep(0.05)
    for proc in procs:
        stop(proc, pid_dir, timeout=1)


def signal_quietly(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def in_private_mounts(script: str, *args: str) -> list[str]:
    """argv that runs the shell `script` (its arguments: $1...) in a new, private mount
    namespace: whatever it mounts is seen by it and its children only, and goes with them."""
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh", *args]


def wait_until(
    condition: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    interval: float = 0.1,
    watch: Sequence[Tracked] = (),
    log_dir: Path | None = None,
) -> None:
    """Poll `condition` until it holds; fail at once, quoting its log, if a watched daemon dies."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except Exception:
            pass
        for proc in watch:
            if not proc.alive():
                raise DevClusterError(
                    f"{proc.name} exited while waiting for {what}; see {_log_hint(proc.name, log_dir)}"
                )
        if time.monotonic() >= deadline:
            raise DevClusterError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def _log_hint(name: str, log_dir: Path | None) -> str:
    if log_dir is None:
        return "its log"
    log = log_dir / f"{name}.log"
    try:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
    except OSError:
        return str(log)
    return f"{log} (last lines: {' | '.join(tail)})" if tail else str(log)


def leftovers(marker: str) -> list[int]:
    """PIDs whose environment contains `marker` (e.g. SLURM_CONF=<our slurm.conf>): job
    processes that slurmstepd started and that outlived their daemons."""
    found = []
    needle = marker.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def leftovers_by_argv(needle: str) -> list[int]:
    """PIDs whose command line contains `needle` (e.g. a containerd shim given our socket)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in argv:
            found.append(int(entry.name))
    return found


def kill_all(pids: Sequence[int]) -> None:
    for pid in pids:
        signal_quietly(pid, signal.SIGKILL)
