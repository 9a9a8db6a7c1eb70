"""People's homes on the shared /home (issue #49 point 3): the login Pod's homes service
(charts/slurm/files/homes.sh) run by sh as the chart runs it, with a temporary directory
for /home, a passwd file as the operator writes it and a skeleton directory; and the login
notice (charts/slurm/files/home-notice.sh) sourced by sh as a login shell would.

The service's rules: the volume's root becomes root's with mode 0755; a missing home is made
once, its person's (uid, primary gid) with mode 0700 and the skeleton's files; an existing
home and everything in it is left alone; a home that cannot be made or is not its person's
is named in the log and in a status file the notice shows at login. Making another user's
files needs root: those tests are skipped elsewhere."""

from __future__ import annotations

import os
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import wait_for

FILES = Path(__file__).resolve().parents[2] / "charts" / "slurm" / "files"
HOMES = FILES / "homes.sh"
NOTICE = FILES / "home-notice.sh"

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="handing a home to another uid needs root")


@dataclass
class World:
    root: Path  # stands for /home, the shared volume's mount point
    passwd: Path
    status: Path
    skel: Path

    def people(self, *lines: str) -> None:
        self.passwd.write_text("".join(f"{line}\n" for line in lines))

    def run(self) -> subprocess.CompletedProcess[str]:
        env = {"PATH": os.environ["PATH"], "SUNK_HOMES_SKEL": str(self.skel)}
        return subprocess.run(
            ["sh", str(HOMES), str(self.root), str(self.passwd), str(self.status), "--once"],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
            check=True,
        )

    def why(self, name: str) -> str | None:
        file = self.status / name
        return file.read_text().strip() if file.exists() else None


@pytest.fixture
def world(tmp_path: Path) -> World:
    root = tmp_path / "home"
    root.mkdir()
    root.chmod(0o777)  # as the dev provisioner makes a volume: writable by everyone
    skel = tmp_path / "skel"
    skel.mkdir()
    (skel / ".profile").write_text("# skel\n")
    return World(root, tmp_path / "passwd", tmp_path / "status", skel)


ALICE = "alice:*:20001:30000:Alice:{root}/alice:/bin/bash"
BOB = "bob:*:20002:30000:Bob:{root}/bob:/bin/bash"


def person(line: str, world: World) -> str:
    return line.format(root=world.root)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@as_root
def test_the_volume_root_becomes_roots_and_closed_to_people(world: World) -> None:
    """Catches a root left writable by all (anyone could make or rename another's home)."""
    os.chown(world.root, 20001, 30000)
    done = world.run()
    info = world.root.stat()
    assert (info.st_uid, info.st_gid, mode(world.root)) == (0, 0, 0o755)
    assert "now 0:0 755" in done.stderr
    assert "now 0:0 755" not in world.run().stderr  # said once, when it changed


@as_root
def test_each_persons_home_is_made_theirs_with_mode_0700_and_the_skeleton(world: World) -> None:
    world.people(person(ALICE, world), person(BOB, world))
    done = world.run()
    for name, uid in (("alice", 20001), ("bob", 20002)):
        home = world.root / name
        info = home.stat()
        assert (info.st_uid, info.st_gid, mode(home)) == (uid, 30000, 0o700)
        assert (home / ".profile").read_text() == "# skel\n"
        assert (home / ".profile").stat().st_uid == uid
        assert f"made {home} for {name} ({uid}:30000, mode 0700)" in done.stderr
    assert list(world.status.iterdir()) == []


@as_root
def test_a_last_line_without_its_newline_is_still_a_person(world: World) -> None:
    world.passwd.write_text(person(ALICE, world))
    world.run()
    assert (world.root / "alice").is_dir()


@as_root
def test_an_existing_home_and_its_contents_are_left_as_they_are(world: World) -> None:
    """Catches a pass that copies the skeleton again, or changes a home's mode or files."""
    world.people(person(ALICE, world))
    world.run()
    home = world.root / "alice"
    (home / ".profile").write_text("mine\n")
    (home / "data").write_text("results\n")
    os.chown(home / "data", 20001, 30001)
    home.chmod(0o750)  # her choice
    done = world.run()
    assert (home / ".profile").read_text() == "mine\n"
    assert (home / "data").stat().st_gid == 30001
    assert mode(home) == 0o750
    assert "made" not in done.stderr


@as_root
def test_a_home_someone_else_made_first_is_named_not_taken_over(world: World) -> None:
    """bob made /home/alice before the root was closed: it stays his, and it is said."""
    (world.root / "alice").mkdir()
    os.chown(world.root / "alice", 20002, 30000)
    world.people(person(ALICE, world))
    done = world.run()
    said = f"{world.root}/alice belongs to uid 20002, not to alice (uid 20001)"
    assert world.why("alice") == said
    assert f"alice: {said}" in done.stderr
    assert (world.root / "alice").stat().st_uid == 20002
    assert f"alice: {said}" not in world.run().stderr  # said once while it stays so


@as_root
def test_a_file_in_the_way_is_named_and_the_status_clears_once_fixed(world: World) -> None:
    (world.root / "alice").write_text("not a directory\n")
    world.people(person(ALICE, world))
    world.run()
    assert world.why("alice") == f"{world.root}/alice is in the way: it is not a directory"
    (world.root / "alice").unlink()
    done = world.run()
    assert world.why("alice") is None
    assert "alice: nothing is wrong with their home now" in done.stderr
    assert (world.root / "alice").is_dir()


@as_root
def test_a_home_that_cannot_be_made_says_why(world: World) -> None:
    """A home deeper than one directory under the root, and one whose parent is missing."""
    world.people(
        f"carol:*:20003:30000:Carol:{world.root}/team/carol:/bin/bash",
        person(ALICE, world),
    )
    world.run()
    said = f"{world.root}/team/carol is not one directory directly under {world.root}: it is not made"
    assert world.why("carol") == said
    assert not (world.root / "team").exists()
    assert (world.root / "alice").is_dir()


@as_root
def test_a_mkdir_that_fails_is_named_with_its_error(world: World) -> None:
    long = "a" * 300  # past the file system's 255 bytes a name may have
    world.people(f"erin:*:20005:30000:Erin:{world.root}/{long}:/bin/bash")
    world.run()
    why = world.why("erin") or ""
    assert why.startswith(f"{world.root}/{long} could not be made: cannot create directory"), why
    assert why.endswith("File name too long"), why


@as_root
def test_homes_off_the_volume_and_system_ids_are_not_touched(world: World, tmp_path: Path) -> None:
    elsewhere = tmp_path / "u"
    elsewhere.mkdir()
    world.people(
        f"dave:*:20004:30000:Dave:{elsewhere}/dave:/bin/bash",
        f"daemon2:*:5:5:sys:{world.root}/daemon2:/bin/sh",
        f"root2:*:0:0:root:{world.root}/root2:/bin/sh",
    )
    world.run()
    assert list(elsewhere.iterdir()) == []
    assert sorted(p.name for p in world.root.iterdir()) == []
    assert world.why("dave") is None  # the login notice tells dave his home is off the volume


def test_a_root_that_is_not_a_directory_makes_nothing_and_says_so(tmp_path: Path) -> None:
    world = World(tmp_path / "missing", tmp_path / "passwd", tmp_path / "status", tmp_path / "skel")
    world.people("alice:*:20001:30000:Alice:/x/alice:/bin/bash")
    done = world.run()
    assert f"{world.root} is not a directory: no homes are made" in done.stderr
    assert not world.root.exists()


def test_no_people_yet_is_no_error(world: World) -> None:
    """The chart makes the people ConfigMap empty: no passwd file until the operator writes."""
    done = world.run()
    assert done.returncode == 0
    assert not world.passwd.exists()
    assert "passwd" not in done.stderr  # no complaint about the file (it would repeat every 10 s)


# The login notice, sourced by a login shell (sh here) as the person, with HOME theirs.


def notice(tmp_path: Path, home: Path, shared_root: str, status: Path | None = None) -> str:
    conf = tmp_path / "conf"
    conf.mkdir(exist_ok=True)
    (conf / "shared-root").write_text(shared_root)
    # id stands in for the person: uid 20001 (alice), whoever runs the test.
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "id").write_text('#!/bin/sh\ncase "$1" in -u) echo 20001;; -un) echo alice;; esac\n')
    (fake / "id").chmod(0o755)
    env = {
        "PATH": f"{fake}:{os.environ['PATH']}",
        "HOME": str(home),
        "SUNK_HOMES_CONF": str(conf),
        "SUNK_HOMES_STATUS": str(status or tmp_path / "status"),
    }
    done = subprocess.run(
        ["sh", "-c", f". {NOTICE}; echo sourced; set | grep '^sunk_home' || true"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=True,
    )
    assert done.stdout.strip() == "sourced"  # it neither exits the shell nor leaves variables
    return done.stderr


def test_the_notice_says_a_missing_home_and_why_and_whom_to_ask(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.mkdir()
    (status / "alice").write_text("/home/alice could not be made: No space left on device\n")
    said = notice(tmp_path, tmp_path / "home" / "alice", str(tmp_path / "home"), status)
    assert f"your home {tmp_path}/home/alice does not exist: /home/alice could not be made: No space" in said
    assert "starts jobs submitted from such a home in /tmp" in said
    assert "Ask your cluster's administrators" in said


@as_root
def test_the_notice_says_a_home_that_is_not_theirs(tmp_path: Path) -> None:
    home = tmp_path / "home" / "alice"
    home.mkdir(parents=True)
    os.chown(home, 20002, 30000)
    said = notice(tmp_path, home, str(tmp_path / "home"))
    assert f"your home {home} is not yours: it belongs to uid 20002" in said


@as_root
def test_the_notice_is_silent_when_the_home_is_theirs_on_the_shared_volume(tmp_path: Path) -> None:
    home = tmp_path / "home" / "alice"
    home.mkdir(parents=True)
    os.chown(home, 20001, 30000)
    assert notice(tmp_path, home, str(tmp_path / "home")) == ""


@as_root
@pytest.mark.parametrize(
    ("shared_root", "says"),
    [("", "on this login Pod's own disk"), ("/elsewhere", "not on the shared volume mounted at /elsewhere")],
)
def test_the_notice_says_a_home_that_will_not_follow_its_person(
    tmp_path: Path, shared_root: str, says: str
) -> None:
    home = tmp_path / "home" / "alice"
    home.mkdir(parents=True)
    os.chown(home, 20001, 30000)
    said = notice(tmp_path, home, shared_root)
    assert says in said and "your jobs on the compute nodes will not find it" in said


@as_root
def test_the_service_makes_the_home_of_a_person_added_while_it_runs(world: World) -> None:
    """Catches a service that reads the people once: the kubelet brings the operator's new
    passwd while it runs, and the pass it triggers makes the new person's home."""
    world.people(person(ALICE, world))
    env = {**os.environ, "SUNK_HOMES_SKEL": str(world.skel), "SUNK_HOMES_TICK_S": "1"}
    service = subprocess.Popen(
        ["sh", str(HOMES), str(world.root), str(world.passwd), str(world.status)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )

    def owner(name: str) -> int | None:
        """The home's owner once it is handed over (it is made as root, then given away)."""
        home = world.root / name
        return home.stat().st_uid if home.is_dir() and home.stat().st_uid != 0 else None

    try:
        wait_for(lambda: owner("alice"), timeout=30, what="alice's home made at start")
        world.people(person(ALICE, world), person(BOB, world))
        assert wait_for(lambda: owner("bob"), timeout=30, what="bob's home made once he is added") == 20002
    finally:
        service.terminate()
        service.wait(timeout=10)
