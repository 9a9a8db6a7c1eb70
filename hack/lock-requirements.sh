#!/usr/bin/env bash
# Rewrites requirements.lock: every dependency of sunk (pyproject.toml), pinned, with the
# sha256 of each of its files on PyPI, for every Python sunk supports and every platform.
# The sunk image installs from it with `pip --require-hashes`, so a build gets exactly the
# files reviewed here or fails. Run it after changing pyproject.toml's dependencies, and
# commit the result (tests/unit/test_requirements_lock.py fails until then).
set -euo pipefail
cd "$(dirname "$0")/.."
UV_VERSION=0.13.9
tools=${SUNK_CACHE:-$HOME/.cache/sunk}/uv-$UV_VERSION
if [ ! -x "$tools/bin/uv" ]; then
  python3 -m venv "$tools"
  "$tools/bin/pip" install -q "uv==$UV_VERSION"
fi
"$tools/bin/uv" pip compile pyproject.toml --universal --generate-hashes --quiet \
  --custom-compile-command hack/lock-requirements.sh -o requirements.lock
echo "wrote requirements.lock"
