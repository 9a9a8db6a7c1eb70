"""What the dev cluster's network storage costs against a Node's own disk (issue #37).

    python -m bench.shared_storage [--runs 5] [--mib 256] [--files 500]

Needs the dev cluster with real Nodes (`sunk dev up --real-nodes 3`). Mounts the cluster's
GlusterFS volume with a client of its own (`fileclient-bench`, in a private mount namespace,
as each Node's client does) and times, in that namespace, the same work in a directory of
the volume and in a directory of the run directory's own disk:

- writing `--mib` MiB in 1 MiB blocks and flushing it to storage (`dd conv=fsync`);
- reading it back (the FUSE client's cache dropped by a fresh mount is not attempted: the
  read is what a second reader on the same Node sees);
- creating `--files` small files one by one (what a checkpoint directory or a home sees).

It prints the median of each over `--runs` runs and the ratio of the network storage to
the local disk. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
from pathlib import Path

from sunk_dev import fileserver
from sunk_dev.layout import Layout

OWNER = "bench"
WORK = r"""
set -e
dir=$1; mib=$2; files=$3
now() { date +%s.%N; }
s=$(now); dd if=/dev/zero of="$dir/big" bs=1M count="$mib" conv=fsync 2>/dev/null; e=$(now)
echo "write $(awk "BEGIN { print $e - $s }")"
s=$(now); dd if="$dir/big" of=/dev/null bs=1M 2>/dev/null; e=$(now)
echo "read $(awk "BEGIN { print $e - $s }")"
mkdir "$dir/small"
s=$(now); i=0; while [ $i -lt "$files" ]; do echo $i > "$dir/small/f$i"; i=$((i+1)); done; e=$(now)
echo "create $(awk "BEGIN { print $e - $s }")"
rm -rf "$dir/big" "$dir/small"
"""


def timed(client_pid: int, directory: Path, mib: int, files: int) -> dict[str, float]:
    """One run of WORK in `directory`, seen from the client's mount namespace."""
    argv = ["sh", "-c", WORK, "sh", str(directory), str(mib), str(files)]
    done = subprocess.run(
        ["nsenter", f"--mount=/proc/{client_pid}/ns/mnt", "--", *argv],
        capture_output=True,
        text=True,
        check=True,
    )
    return {label: float(value) for label, value in (line.split() for line in done.stdout.splitlines())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--files", type=int, default=500)
    args = parser.parse_args()
    layout = Layout.default()
    client = fileserver.start_client(layout, OWNER)
    try:
        shared = layout.volumes / "bench-shared-storage"
        local = Path(tempfile.mkdtemp(prefix="bench-local-", dir=layout.root))
        results: dict[str, dict[str, list[float]]] = {"network": {}, "local": {}}
        for _ in range(args.runs):
            for where, directory in (("network", shared), ("local", local)):
                subprocess.run(
                    ["nsenter", f"--mount=/proc/{client.pid}/ns/mnt", "--", "mkdir", "-p", str(directory)],
                    check=True,
                )
                for label, seconds in timed(client.pid, directory, args.mib, args.files).items():
                    results[where].setdefault(label, []).append(seconds)
        subprocess.run(
            ["nsenter", f"--mount=/proc/{client.pid}/ns/mnt", "--", "rmdir", str(shared)], check=True
        )
        local.rmdir()
    finally:
        fileserver.stop_client(layout, OWNER)
    print(f"{args.runs} runs; {args.mib} MiB written and read, {args.files} small files created")
    for label in ("write", "read", "create"):
        net = statistics.median(results["network"][label])
        disk = statistics.median(results["local"][label])
        print(f"{label:7} GlusterFS {net:8.3f} s   local disk {disk:8.3f} s   ratio {net / disk:6.2f}x")


if __name__ == "__main__":
    main()
