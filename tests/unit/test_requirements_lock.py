"""requirements.lock, which the sunk image installs from with `pip --require-hashes`, keeps up
with pyproject.toml: a dependency added or raised there without re-running
hack/lock-requirements.sh would make the image build fail (or ship an older version)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^\s;\\]+)")


def pinned() -> dict[str, tuple[str, int]]:
    """name -> (version, number of hashes) from the lock."""
    found: dict[str, tuple[str, int]] = {}
    current = ""
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        match = PIN.match(line)
        if match:
            current = canonicalize_name(match.group(1))
            found[current] = (match.group(2), 0)
        elif line.strip().startswith("--hash=sha256:") and current:
            version, hashes = found[current]
            found[current] = (version, hashes + 1)
    return found


def test_every_dependency_of_sunk_is_pinned_in_the_lock_within_its_range() -> None:
    wanted = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    locked = pinned()
    for text in wanted:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{name} is not in requirements.lock: run hack/lock-requirements.sh"
        version = locked[name][0]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"requirements.lock pins {name} {version}, outside {requirement.specifier}: "
            "run hack/lock-requirements.sh"
        )


def test_every_pinned_package_carries_the_hashes_pip_checks() -> None:
    assert {name: hashes for name, (_, hashes) in pinned().items() if hashes == 0} == {}
