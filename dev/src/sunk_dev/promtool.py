"""Debian's prometheus package, unpacked into the cache rather than installed: promtool,
and the Prometheus server the dev cluster runs (`sunk_dev.prometheus`).

The chart's alert rules are tested with `promtool test rules` and `promtool check rules`.
Installing the package would also install, and on most systems start, a Prometheus service
(its maintainer scripts make a user and enable the unit); the tests and the dev cluster need
only its binaries and web assets, so the package is downloaded and unpacked with `dpkg -x`
into $SUNK_CACHE/prometheus-<version>/, once per version, for both.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from sunk_dev.errors import DevClusterError
from sunk_dev.layout import cache_dir

PACKAGE = "prometheus"
BINARIES = ("promtool", "prometheus")


def apt_available() -> bool:
    """Whether this machine has apt (the only way this helper knows to fetch promtool)."""
    return shutil.which("apt-get") is not None and shutil.which("dpkg") is not None


def candidate_version(log: Path) -> str:
    """The version apt would install; after an `apt-get update` (as root) when it knows none,
    which is how a fresh machine's apt starts."""
    version = _policy_candidate()
    if version is None and os.geteuid() == 0:
        _run(["apt-get", "update", "-q"], log, "apt-get update")
        version = _policy_candidate()
    if version is None:
        raise DevClusterError(
            f"apt knows no {PACKAGE} package: run `apt-get update` as root (Debian's main "
            "archive has it) and try again"
        )
    return version


def ensure_promtool(log: Path) -> Path:
    """The path of promtool from Debian's prometheus package, downloaded and unpacked once."""
    return ensure_unpacked(log) / "usr" / "bin" / "promtool"


def ensure_unpacked(log: Path) -> Path:
    """The root of Debian's prometheus package unpacked into the cache (its usr/bin holds
    promtool and prometheus), downloaded and unpacked once per version. The tree is renamed
    into place only once whole, so a root that exists is complete."""
    if not apt_available():
        raise DevClusterError(
            f"promtool and the Prometheus server come from Debian's {PACKAGE} package, and this "
            "machine has no apt-get and dpkg: run the tests on Debian, or put promtool on PATH "
            "and test it by hand"
        )
    version = candidate_version(log)
    root = cache_dir() / f"{PACKAGE}-{version.replace(':', '_')}"
    if root.is_dir():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root.parent, prefix=f".{PACKAGE}-") as work:
        _run(
            ["apt-get", "download", "-q", f"{PACKAGE}={version}"],
            log,
            f"apt-get download {PACKAGE}",
            cwd=work,
        )
        [deb] = Path(work).glob(f"{PACKAGE}_*.deb")
        unpacked = Path(work) / "root"
        _run(["dpkg", "-x", str(deb), str(unpacked)], log, f"dpkg -x {deb.name}")
        for binary in BINARIES:
            if not os.access(unpacked / "usr" / "bin" / binary, os.X_OK):
                raise DevClusterError(f"{deb.name} holds no usr/bin/{binary}: see {log}")
        # Another run may have unpacked the same version meanwhile: either copy will do.
        if not root.exists():
            unpacked.rename(root)
    return root


def _policy_candidate() -> str | None:
    result = subprocess.run(["apt-cache", "policy", PACKAGE], capture_output=True, text=True)
    found = re.search(r"^\s*Candidate:\s*(\S+)", result.stdout, re.MULTILINE)
    if found is None or found.group(1) == "(none)":
        return None
    return found.group(1)


def _run(argv: list[str], log: Path, what: str, cwd: str | None = None) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    with open(log, "ab") as out:
        if subprocess.run(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode:
            raise DevClusterError(f"`{what}` failed while fetching Debian's {PACKAGE} package: see {log}")
