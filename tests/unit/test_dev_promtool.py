"""promtool for the alert-rule tests: Debian's package unpacked into the cache, never installed."""

from __future__ import annotations

from pathlib import Path

import pytest

from sunk_dev import promtool
from sunk_dev.errors import DevClusterError


def test_issue50_a_cached_promtool_of_apts_version_is_used_without_downloading(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SUNK_CACHE", str(tmp_path))
    monkeypatch.setattr(promtool, "apt_available", lambda: True)
    monkeypatch.setattr(promtool, "candidate_version", lambda _log: "1:2.42.0+ds-5")
    cached = tmp_path / "prometheus-1_2.42.0+ds-5" / "usr" / "bin" / "promtool"
    cached.parent.mkdir(parents=True)
    cached.write_text("#!/bin/sh\n")
    cached.chmod(0o755)
    monkeypatch.setattr(promtool, "_run", lambda *_a, **_k: pytest.fail("downloaded although cached"))
    assert promtool.ensure_promtool(tmp_path / "log") == cached


def test_issue50_without_apt_the_error_says_where_promtool_is_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(promtool, "apt_available", lambda: False)
    with pytest.raises(DevClusterError, match="Debian's prometheus package"):
        promtool.ensure_promtool(Path("/nonexistent/log"))
