#!/usr/bin/env bash
# Creates .venv with the sunk package and its development tools. Re-runs pip only when
# pyproject.toml changed. Everything else (Debian packages, Go-built tools) is installed on
# demand by `sunk dev up`.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
if ! command -v "$python" >/dev/null 2>&1; then
  echo "python3 is not installed: install Python 3.11 or newer (apt-get install python3) and run this again." >&2
  exit 1
fi
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "sunk needs Python 3.11 or newer; $("$python" --version) was found: install a newer python3 or set PYTHON=/path/to/python3.11." >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  if ! "$python" -m venv .venv 2>/dev/null; then
    # Debian ships venv separately.
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
      apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv
      rm -rf .venv && "$python" -m venv .venv
    else
      echo "python3 cannot create a virtual environment: install python3-venv (apt-get install python3-venv) and run this again." >&2
      exit 1
    fi
  fi
fi
stamp=.venv/.sunk-installed
want=$(cat pyproject.toml dev/pyproject.toml | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  # sunk, its development tools, and the dev package (dev/: `sunk dev`, `sunk demo`).
  .venv/bin/python -m pip install -q -e '.[dev]' -e ./dev
  echo "$want" > "$stamp"
fi
