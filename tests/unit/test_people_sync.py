"""The people ConfigMap follows the directory (R10.6): written when the directory changes,
left alone when it does not, kept as it was while the directory cannot be read, and every
refused entry told by an Event that names it."""

from __future__ import annotations

from typing import Any

from sunk.kube.client import KubeError
from sunk.ldap.models import Directory, DirectoryError, Group, User
from sunk.operator.directory.people_sync import CURRENT, HOME_OFF_VOLUME, READ_FAILED, REFUSED, PeopleSync

Json = dict[str, Any]
PATH = "/api/v1/namespaces/slurm/configmaps/slurm-people"


class FakeConfigMaps:
    def __init__(self) -> None:
        self.objects: dict[str, Json] = {}
        self.writes: list[str] = []

    async def request(self, method: str, path: str, *, body: Any = None, content_type: str = "") -> Json:
        if method == "GET":
            if path not in self.objects:
                raise KubeError(404, "not found")
            return self.objects[path]
        self.writes.append(method)
        target = path if method == "PUT" else f"{path}/{body['metadata']['name']}"
        self.objects[target] = body
        return body


class FakeRecorder:
    def __init__(self) -> None:
        self.events: dict[str, tuple[str, str]] = {}  # name (or a counter) -> (reason, note)

    async def event_on(
        self, regarding: Json, reason: str, note: str, *, warning: bool = False, name: str | None = None
    ) -> bool:
        self.events.setdefault(name or str(len(self.events)), (reason, note))
        return True


def alice() -> User:
    return User("alice", 20001, 30000, "/home/alice", "/bin/bash", "Alice", ("ssh-ed25519 AAA alice",))


class ChangingDirectory:
    """A directory whose answer the test changes between syncs."""

    def __init__(self, users: tuple[User, ...]) -> None:
        self.answer: Directory | DirectoryError = Directory(users, (Group("ml", 30001, ("alice",)),))

    def read(self) -> Directory:
        if isinstance(self.answer, DirectoryError):
            raise self.answer
        return self.answer


def sync_for(directory: ChangingDirectory) -> tuple[PeopleSync, FakeConfigMaps, FakeRecorder]:
    kube, recorder = FakeConfigMaps(), FakeRecorder()
    return PeopleSync(kube, recorder, directory.read, "slurm", "slurm-people", 60), kube, recorder


async def test_r10_6_the_first_sync_makes_the_people_configmap() -> None:
    sync, kube, _ = sync_for(ChangingDirectory((alice(),)))
    assert await sync.sync_once()
    data = kube.objects[PATH]["data"]
    assert data["passwd"] == "alice:*:20001:30000:Alice:/home/alice:/bin/bash\n"
    assert data["group"] == "ml:x:30001:alice\n"
    assert data["keys.alice"] == "ssh-ed25519 AAA alice\n"


async def test_r10_6_an_unchanged_directory_writes_nothing() -> None:
    sync, kube, _ = sync_for(ChangingDirectory((alice(),)))
    await sync.sync_once()
    assert not await sync.sync_once()
    assert kube.writes == ["POST"]


async def test_r10_6_a_person_removed_from_the_directory_leaves_the_configmap() -> None:
    directory = ChangingDirectory((alice(),))
    sync, kube, _ = sync_for(directory)
    await sync.sync_once()
    directory.answer = Directory((), ())
    assert await sync.sync_once()
    assert kube.objects[PATH]["data"] == {"passwd": "", "group": "", "status": CURRENT}


async def test_r10_6_an_unreadable_directory_keeps_the_people_and_says_why_once() -> None:
    directory = ChangingDirectory((alice(),))
    sync, kube, recorder = sync_for(directory)
    await sync.sync_once()
    directory.answer = DirectoryError("cannot reach the directory at ldap://ldap:389: refused")
    assert not await sync.sync_once()
    assert not await sync.sync_once()
    assert "alice" in kube.objects[PATH]["data"]["passwd"]
    failures = [note for reason, note in recorder.events.values() if reason == READ_FAILED]
    assert failures == ["cannot reach the directory at ldap://ldap:389: refused; people stay as last written"]


async def test_r10_6_a_refused_entry_is_told_by_an_event_naming_it() -> None:
    mallory = User("root", 20666, 30000, "/root", "/bin/bash")
    sync, kube, recorder = sync_for(ChangingDirectory((alice(), mallory)))
    await sync.sync_once()
    refused = [note for reason, note in recorder.events.values() if reason == REFUSED]
    assert refused == [
        "user root: root is an account of the images; rename it in the directory; "
        "left out of the cluster's people"
    ]
    assert "root" not in kube.objects[PATH]["data"]["passwd"]


async def test_issue35_an_unreadable_directory_is_told_in_the_configmaps_status_once() -> None:
    directory = ChangingDirectory((alice(),))
    sync, kube, _ = sync_for(directory)
    await sync.sync_once()
    directory.answer = DirectoryError("the directory refused the bind as cn=reader: invalid credentials")
    await sync.sync_once()
    await sync.sync_once()
    status = kube.objects[PATH]["data"]["status"]
    assert status.startswith("unreadable since ")
    assert status.endswith("invalid credentials; people stay as last written")
    assert kube.writes == ["POST", "PUT"]  # the second failure, the same, writes nothing
    assert "alice" in kube.objects[PATH]["data"]["passwd"]


async def test_issue35_a_wrong_bind_password_at_install_writes_the_status_alone() -> None:
    directory = ChangingDirectory(())
    directory.answer = DirectoryError("invalid credentials")
    sync, kube, _ = sync_for(directory)
    await sync.sync_once()
    assert list(kube.objects[PATH]["data"]) == ["status"]
    assert sync.problem == "invalid credentials"


async def test_issue35_a_directory_read_again_makes_the_status_current_and_tells_the_nodesets() -> None:
    directory = ChangingDirectory((alice(),))
    sync, kube, _ = sync_for(directory)
    changes: list[str | None] = []
    sync.on_change = lambda: changes.append(sync.problem)
    directory.answer = DirectoryError("refused")
    await sync.sync_once()
    directory.answer = Directory((alice(),), ())
    await sync.sync_once()
    assert kube.objects[PATH]["data"]["status"] == CURRENT
    assert changes == ["refused", None]


async def test_issue49_a_home_off_the_shared_home_volume_is_told_by_an_event() -> None:
    """Catches a person whose home the login Pods will never make on the shared /home (their
    jobs on the members would start in /tmp) going unsaid; people whose homes are there,
    and releases without a shared /home, get no such Event."""
    dave = User("dave", 20004, 30000, "/u/dave", "/bin/bash")
    erin = User("erin", 20005, 30000, "/home/team/erin", "/bin/bash")
    kube, recorder = FakeConfigMaps(), FakeRecorder()
    directory = ChangingDirectory((alice(), dave, erin))
    sync = PeopleSync(kube, recorder, directory.read, "slurm", "slurm-people", 60, homes_root="/home")
    await sync.sync_once()
    await sync.sync_once()
    told = [(reason, note) for reason, note in recorder.events.values() if reason == HOME_OFF_VOLUME]
    assert told == [
        (
            HOME_OFF_VOLUME,
            f"user {name}: home {home} is not directly under /home, the shared volume: no home is made "
            "for them there, and their jobs on the compute nodes will not find it",
        )
        for name, home in (("dave", "/u/dave"), ("erin", "/home/team/erin"))
    ]
    assert "dave:*:20004" in kube.objects[PATH]["data"]["passwd"]  # still a person, with a warning
    without, _, plain = sync_for(ChangingDirectory((dave,)))
    await without.sync_once()
    assert [r for r, _ in plain.events.values() if r == HOME_OFF_VOLUME] == []
