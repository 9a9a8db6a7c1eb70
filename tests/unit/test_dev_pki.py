"""The dev cluster's certificates pass strict verification: Pods running Python 3.13 (the
sunk image) refuse a chain without key identifiers, which OpenSSL alone accepted."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sunk_dev.pki import make_pki


def test_the_api_servers_certificate_verifies_strictly_against_the_dev_ca(tmp_path: Path) -> None:
    make_pki(tmp_path)
    result = subprocess.run(
        [
            "openssl",
            "verify",
            "-x509_strict",
            "-CAfile",
            str(tmp_path / "ca.crt"),
            str(tmp_path / "apiserver.crt"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
