"""`sunk demo` tells the train-and-serve story: it names each step with the time so far,
is never silent for long while one runs, and refuses at once on a machine without real Nodes."""

from __future__ import annotations

import re
import threading

import pytest

from sunk_dev import cluster, hostnet, storydemo
from sunk_dev.errors import DevClusterError


def test_a_long_step_says_it_is_still_running_at_each_heartbeat_and_how_long_it_took() -> None:
    """Catches a step that prints its name and then nothing until it ends (issue #37: a
    cold demo was silent for ten minutes)."""
    said: list[str] = []
    beats = threading.Event()

    def say(line: str) -> None:
        said.append(line)
        if len([s for s in said if "..." in s]) >= 2:
            beats.set()

    progress = storydemo.Progress(say, heartbeat=0.02)
    with progress.step("building the example's image", lambda: "squeue: 1 R"):
        assert beats.wait(timeout=10), said
    assert re.fullmatch(r"\[ 0:\d\d\] building the example's image", said[0])
    assert re.fullmatch(r"\[ 0:\d\d\]   \.\.\. squeue: 1 R \(\d+ s\)", said[1])
    assert re.fullmatch(r"\[ 0:\d\d\]   done in \d+ s", said[-1])


def test_a_heartbeat_whose_detail_fails_still_says_the_step_runs() -> None:
    """Catches a heartbeat thread that dies on its first failed squeue and leaves the
    screen silent for the rest of the step."""
    said: list[str] = []
    beat = threading.Event()

    def say(line: str) -> None:
        said.append(line)
        if "still at it" in line:
            beat.set()

    def broken() -> str:
        raise RuntimeError("the login Pod is restarting")

    with storydemo.Progress(say, heartbeat=0.02).step("training", broken):
        assert beat.wait(timeout=10), said


def test_a_machine_that_cannot_run_real_nodes_is_told_why_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches a demo that starts the cluster (or builds for minutes) and only then finds
    that real Nodes cannot run here."""
    monkeypatch.setattr(hostnet, "unusable_reason", lambda: "real Nodes need root")

    def no_cluster(*_: object) -> None:
        raise AssertionError("the demo touched the dev cluster")

    monkeypatch.setattr(cluster.DevCluster, "__init__", no_cluster)
    with pytest.raises(DevClusterError, match=r"^real Nodes need root$"):
        storydemo.run(say=lambda _: None)
