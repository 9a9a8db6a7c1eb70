"""A README's shell steps, run as a reader would type them (issue #49.5).

A README marks the fenced shell blocks a test runs with an HTML comment on the line before
(blank lines between are allowed), which Markdown does not show:

    <!-- test: image -->
    ```sh
    IMAGE=$(sunk dev image examples/train-and-serve/image train-and-serve)
    ```

`steps` reads them in the document's order; `Shell` runs them one after another as if typed
into one terminal: the variables, shell functions and working directory a block leaves are
there for the next one, each block under `set -eo pipefail`, so that the first command that
fails ends it. The README and its test then cannot drift apart: the test runs the very
commands the reader is given, and asserts on what they did.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

MARK = re.compile(r"^\s*<!--\s*test:\s*(?P<name>[A-Za-z0-9_.-]+)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
SHELLS = frozenset({"sh", "bash", "shell", "console"})
# Names of the runner's own variables, never carried to the next block.
_OWN = "__readme_"


class ReadmeError(ValueError):
    """The README's marks cannot be read; the message names the line."""


@dataclass(frozen=True)
class Step:
    name: str
    script: str
    line: int  # of the block's first command, 1-based, for messages


def steps(markdown: str, source: str = "README") -> list[Step]:
    """Every marked block in the order it appears. A mark must be followed by a fenced
    shell block; names are unique; a fence must close."""
    lines = markdown.splitlines()
    found: list[Step] = []
    index = 0
    while index < len(lines):
        mark = MARK.match(lines[index])
        index += 1
        if not mark:
            continue
        name = mark["name"]
        if any(step.name == name for step in found):
            raise ReadmeError(f"{source}:{index}: a second step named {name!r}")
        while index < len(lines) and not lines[index].strip():
            index += 1
        fence = FENCE.match(lines[index]) if index < len(lines) else None
        if fence is None:
            raise ReadmeError(f"{source}:{index}: step {name!r}: no fenced block after its mark")
        if fence["lang"] not in SHELLS:
            raise ReadmeError(
                f"{source}:{index + 1}: step {name!r} is a {fence['lang'] or 'plain'} block, not a shell one "
                f"({', '.join(sorted(SHELLS))})"
            )
        closing, indent = fence["fence"], len(fence["indent"])
        start = index + 1
        index = start
        while index < len(lines) and lines[index].strip() != closing:
            index += 1
        if index == len(lines):
            raise ReadmeError(f"{source}:{start}: the block of step {name!r} is never closed")
        body = [line[indent:] if line[:indent].isspace() else line for line in lines[start:index]]
        found.append(Step(name, "\n".join(body) + "\n", start + 1))
        index += 1
    return found


def step(all_steps: list[Step], name: str) -> Step:
    for found in all_steps:
        if found.name == name:
            return found
    raise ReadmeError(f"no step named {name!r} (there are: {', '.join(s.name for s in all_steps)})")


def _bash_own_variables() -> frozenset[str]:
    """What bash defines by itself (BASH_VERSION, PIPESTATUS, ...): never carried over.
    PATH is the reader's to change, so it is carried."""
    listed = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", "compgen -v"],
        env={},
        capture_output=True,
        text=True,
        check=True,
    )
    return frozenset(listed.stdout.split()) - {"PATH"}


class Shell:
    """Marked blocks run one after another, as in one terminal started in `cwd` with `env`."""

    def __init__(self, cwd: Path, env: dict[str, str] | None = None, state: Path | None = None) -> None:
        self.env = dict(os.environ if env is None else env)
        self.state = state or Path(tempfile.mkdtemp(prefix="readme-steps-"))
        self.state.mkdir(parents=True, exist_ok=True)
        (self.state / "cwd").write_text(str(cwd))
        (self.state / "shell").write_text("")
        self.skip = " ".join(sorted(_bash_own_variables() | {"PWD", "OLDPWD"}))

    def script(self, body: str) -> str:
        """`body` between what restores the last block's shell and what keeps this one's."""
        shell, cwd = self.state / "shell", self.state / "cwd"
        return (
            f"source '{shell}'\ncd \"$(cat '{cwd}')\"\nset -eo pipefail\n{body}\n"
            "set +e\n"
            f"{_OWN}skip=' {self.skip} '\n"
            f"for {_OWN}n in $(compgen -v); do\n"
            f'  case "${_OWN}skip" in *" ${_OWN}n "*) continue;; esac\n'
            f'  case "${_OWN}n" in {_OWN}*) continue;; esac\n'
            f'  {_OWN}d=$(declare -p "${_OWN}n" 2>/dev/null) || continue\n'
            # readonly variables cannot be declared again when the next block starts
            f"  {_OWN}f=${{{_OWN}d#declare }}; [[ ${{{_OWN}f%% *}} == *r* ]] && continue\n"
            f'  printf "%s\\n" "${_OWN}d"\n'
            f"done > '{shell}.new'\n"
            f"declare -f >> '{shell}.new'\n"
            f"pwd > '{cwd}.new'\n"
            f"mv '{shell}.new' '{shell}' && mv '{cwd}.new' '{cwd}'\n"
        )

    def run(self, step: Step, timeout: float) -> subprocess.CompletedProcess[str]:
        """The block's output (stdout and stderr together) and exit status; on a timeout
        every process it started is killed and the status is 124."""
        with subprocess.Popen(
            ["bash", "--noprofile", "--norc", "-c", self.script(step.script)],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        ) as proc:
            try:
                output, _ = proc.communicate(timeout=timeout)
                code = proc.returncode
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                output, _ = proc.communicate()
                code = 124
        return subprocess.CompletedProcess([step.name], code, output, "")
