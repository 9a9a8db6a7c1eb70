"""The README steps a test runs (issue #49.5): which blocks are read, and that running them
one after another is like typing them into one terminal."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sunk_dev import readmesteps, story
from sunk_dev.readmesteps import ReadmeError, Shell, Step, steps

README = """\
# An example

```sh
echo not marked: a reader's aside
```

<!-- test: one -->
```sh
GREETING=hello
export SHOWN=yes
```

Some prose.

<!-- test: two -->

```bash
say() { echo "$GREETING $1"; }
cd sub
```

   <!-- test: indented -->
   ```shell
   say world
   ```
"""


def test_marked_blocks_are_read_in_order_and_only_they() -> None:
    found = steps(README)
    assert [s.name for s in found] == ["one", "two", "indented"]
    assert found[0] == Step("one", "GREETING=hello\nexport SHOWN=yes\n", 9)
    assert found[1].script == 'say() { echo "$GREETING $1"; }\ncd sub\n'
    assert found[2].script == "say world\n"  # the list item's indent is not the command's


def test_the_train_and_serve_readme_has_its_steps() -> None:
    """The example's README reads (the e2e runs these steps against the dev cluster)."""
    readme = Path(__file__).resolve().parents[2] / "examples" / "train-and-serve" / "README.md"
    names = [s.name for s in steps(readme.read_text(), str(readme))]
    assert names == ["shell", "image", "platform", "train", "serve", "preempt", "clean-up"]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("<!-- test: a -->\nprose\n", "no fenced block after its mark"),
        ("<!-- test: a -->\n", "no fenced block after its mark"),
        ("<!-- test: a -->\n```yaml\nx: 1\n```\n", "a yaml block, not a shell one"),
        ("<!-- test: a -->\n```sh\necho\n", "never closed"),
        (
            "<!-- test: a -->\n```sh\ntrue\n```\n<!-- test: a -->\n```sh\ntrue\n```\n",
            "a second step named 'a'",
        ),
    ],
)
def test_a_mark_that_cannot_be_followed_is_refused_with_its_line(text: str, said: str) -> None:
    with pytest.raises(ReadmeError, match=said):
        steps(text, "R.md")
    with pytest.raises(ReadmeError, match=r"^R\.md:\d+: "):
        steps(text, "R.md")


def test_a_missing_step_names_those_there_are() -> None:
    with pytest.raises(ReadmeError, match="one, two, indented"):
        readmesteps.step(steps(README), "three")


def test_variables_functions_exports_and_directory_carry_to_the_next_block(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    shell = Shell(tmp_path, env={"PATH": "/usr/bin:/bin"}, state=tmp_path / "state")
    first, second, third = steps(README)
    assert shell.run(first, timeout=30).returncode == 0
    assert shell.run(second, timeout=30).returncode == 0
    done = shell.run(third, timeout=30)
    assert (done.returncode, done.stdout) == (0, "hello world\n")
    shown = shell.run(Step("env", 'printenv SHOWN; pwd; echo "$PATH"\n', 1), timeout=30)
    assert shown.stdout.split("\n")[:2] == ["yes", str(tmp_path / "sub")]


def test_path_changes_carry_too(tmp_path: Path) -> None:
    shell = Shell(tmp_path, env={"PATH": "/usr/bin:/bin"}, state=tmp_path / "state")
    shell.run(Step("a", 'export PATH="/opt/x/bin:$PATH"\n', 1), timeout=30)
    assert shell.run(Step("b", 'echo "$PATH"\n', 1), timeout=30).stdout == "/opt/x/bin:/usr/bin:/bin\n"


def test_the_first_failing_command_ends_a_block_and_its_changes_are_not_kept(tmp_path: Path) -> None:
    shell = Shell(tmp_path, env={"PATH": "/usr/bin:/bin"}, state=tmp_path / "state")
    shell.run(Step("a", "X=1\n", 1), timeout=30)
    failed = shell.run(Step("b", "X=2\necho before\nfalse\necho after\n", 1), timeout=30)
    assert (failed.returncode, failed.stdout) == (1, "before\n")
    piped = shell.run(Step("c", "false | cat\necho after\n", 1), timeout=30)
    assert (piped.returncode, piped.stdout) == (1, "")  # pipefail
    assert shell.run(Step("d", 'echo "$X"\n', 1), timeout=30).stdout == "1\n"


def test_stderr_is_in_the_output_and_a_block_past_its_time_is_killed(tmp_path: Path) -> None:
    shell = Shell(tmp_path, env={"PATH": "/usr/bin:/bin"}, state=tmp_path / "state")
    assert shell.run(Step("a", "echo oops >&2\n", 1), timeout=30).stdout == "oops\n"
    slow = shell.run(Step("b", "echo started\nsleep 30 | cat\n", 1), timeout=1)
    assert (slow.returncode, slow.stdout) == (124, "started\n")


def test_readonly_and_bash_own_variables_do_not_break_the_next_block(tmp_path: Path) -> None:
    shell = Shell(tmp_path, env={"PATH": "/usr/bin:/bin"}, state=tmp_path / "state")
    assert shell.run(Step("a", "readonly FIXED=1\nLIST=(a 'b c')\n", 1), timeout=30).returncode == 0
    done = shell.run(Step("b", 'echo "${LIST[1]}" "${FIXED:-gone}"\n', 1), timeout=30)
    assert (done.returncode, done.stdout) == (0, "b c gone\n")


def test_the_demo_gets_the_examples_values_for_its_own_serving_namespace() -> None:
    """`sunk demo` installs the example in namespace demo: its scheduler must serve
    demo-apps, under the policy the README's tns-apps has (the service user, never root)."""
    values = story.example_values("demo")
    scheduler = values["scheduler"]["scheduler"]
    assert scheduler["scope"]["namespaces"] == "demo-apps"
    assert list(scheduler["policy"]["namespaces"]) == ["demo-apps"]
    rules = scheduler["policy"]["namespaces"]["demo-apps"]
    assert (rules["defaultUid"], rules["defaultGid"]) == (story.SERVICE_UID, story.SERVICE_GID)
    assert rules["accounts"] == [story.SERVICE_GROUP]
    assert story.example_values(story.README_NAMESPACE) == yaml.safe_load(
        (story.EXAMPLE / "values.yaml").read_text()
    )
