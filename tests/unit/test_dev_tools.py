"""The Go-built tools of the dev cluster: which `up` builds, and what it says meanwhile."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sunk_dev import ClusterSpec, prereqs
from sunk_dev.cluster import go_tools

FAKE_BUILD = """#!/usr/bin/env bash
# Stands in for hack/build-tools.sh: names each tool as it starts, then waits until the
# caller has shown that line (the file `ack-<tool>`) before it "builds" it.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
touch "$here/running"
for tool in "$@"; do
  echo "building $tool from example.com/$tool (once per pinned version; minutes on a cold machine)" >&2
  for _ in $(seq 200); do [ -e "$here/ack-$tool" ] && break; sleep 0.05; done
  mkdir -p "$SUNK_CACHE/bin"
  printf '#!/bin/sh\\n' > "$SUNK_CACHE/bin/$tool"; chmod +x "$SUNK_CACHE/bin/$tool"
  echo "built $tool in 0 s" >&2
done
rm "$here/running"
"""


def test_up_with_real_nodes_builds_helm_into_the_cache_with_the_other_tools() -> None:
    """Issue #32: the README promised helm in ~/.cache/sunk/bin after `sunk dev up
    --real-nodes 3`, but only `sunk dev platform` built it."""
    assert "helm" in go_tools(ClusterSpec(real_nodes=3))
    assert {"kubelet", "kubectl", "etcd"} <= set(go_tools(ClusterSpec(real_nodes=3)))
    assert go_tools(ClusterSpec()) == prereqs.CLUSTER_TOOLS


def test_each_go_build_is_named_as_it_starts_with_the_time_so_far(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue #32: a cold `make demo` printed one line, then nothing for ten minutes."""
    (tmp_path / "hack").mkdir()
    script = tmp_path / "hack" / "build-tools.sh"
    script.write_text(FAKE_BUILD)
    script.chmod(0o755)
    gobin = tmp_path / "gobin"
    gobin.mkdir()
    (gobin / "go").write_text("#!/bin/sh\n")
    (gobin / "go").chmod(0o755)
    monkeypatch.setenv("PATH", f"{gobin}:{Path('/usr/bin')}:{Path('/bin')}")
    monkeypatch.setenv("SUNK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(prereqs, "repo_root", lambda: tmp_path)
    said: list[tuple[str, bool]] = []

    def say(line: str) -> None:
        said.append((line, (tmp_path / "running").exists()))
        if match := re.search(r"building (\S+)", line):
            (tmp_path / f"ack-{match.group(1)}").touch()

    log = tmp_path / "setup.log"
    paths = prereqs.ensure_go_tools(log, ("etcd", "kwok"), say=say)
    assert set(paths) == {"etcd", "kwok"}
    lines = [line for line, _ in said]
    assert re.fullmatch(
        r"\[ 0:\d\d\] building etcd \(1 of 2\) from example\.com/etcd .*\(log .*setup\.log\)", lines[0]
    )
    assert re.fullmatch(r"\[ 0:\d\d\] building kwok \(2 of 2\) from example\.com/kwok .*", lines[2])
    assert lines[1].endswith("built etcd (1 of 2) in 0 s")
    assert all(running for line, running in said if "building" in line)  # shown while it builds
    assert "building kwok" in log.read_text()  # the log keeps everything too


def test_progress_lines_count_minutes_past_the_first() -> None:
    line = prereqs._progress("building kubelet from k8s.io/x", ("etcd", "kubelet"), 754.2, Path("/l"))
    assert line == "[12:34] building kubelet (2 of 2) from k8s.io/x (log /l)"
