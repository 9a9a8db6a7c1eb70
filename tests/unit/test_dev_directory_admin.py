"""Adding and removing people and groups in the dev directory (issue #49 point 4): the LDIF
sent to slapd, the ids chosen, and what is refused before anything is sent."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from sunk.ldap.models import Directory, Group, User
from sunk_dev import directory_admin as admin
from sunk_dev.cli import dev_parser
from sunk_dev.errors import DevClusterError
from sunk_dev.layout import Layout

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample dave@laptop"
SEEDED = Directory(
    (
        User("alice", 20001, 30000, "/home/alice", "/bin/bash"),
        User("bob", 20002, 30000, "/home/bob", "/bin/bash"),
    ),
    (Group("people", 30000, ("alice", "bob")), Group("ml", 30001, ("alice",))),
)


def test_a_new_persons_entry_is_shaped_like_the_seeded_peoples() -> None:
    ldif = admin.person_ldif("dave", 20004, KEY, "{SSHA}hash", ["people"])
    entry = ldif.split("\n\n")[0]
    assert entry + "\n" == (
        "dn: uid=dave,ou=people,dc=sunk,dc=dev\nchangetype: add\n"
        "objectClass: inetOrgPerson\nobjectClass: posixAccount\nobjectClass: ldapPublicKey\n"
        "uid: dave\ncn: Dave\nsn: Dave\nuidNumber: 20004\ngidNumber: 30000\n"
        "homeDirectory: /home/dave\nloginShell: /bin/bash\n"
        f"sshPublicKey: {KEY}\nuserPassword: {{SSHA}}hash\n"
    )


def test_a_new_person_is_added_to_each_of_their_groups_by_name() -> None:
    ldif = admin.person_ldif("dave", 20004, KEY, None, ["people", "ml"])
    join = "changetype: modify\nadd: memberUid\nmemberUid: dave\n-\n"
    assert ldif.endswith(
        f"\ndn: cn=people,ou=groups,dc=sunk,dc=dev\n{join}\ndn: cn=ml,ou=groups,dc=sunk,dc=dev\n{join}"
    )


def test_a_person_without_a_password_gets_no_password_attribute() -> None:
    assert "userPassword" not in admin.person_ldif("dave", 20004, KEY, None, ["people"])


def test_a_value_ldif_cannot_hold_plainly_is_sent_in_base64() -> None:
    ldif = admin.person_ldif("dave", 20004, "ssh-ed25519 AAAA d\u00e9 ", None, [])
    encoded = base64.b64encode("ssh-ed25519 AAAA d\u00e9 ".encode()).decode()
    assert f"sshPublicKey:: {encoded}\n" in ldif


def test_a_removed_person_leaves_their_groups_before_their_entry_goes() -> None:
    leave = "changetype: modify\ndelete: memberUid\nmemberUid: alice\n-\n"
    assert admin.person_removal_ldif("alice", ["people", "ml"]) == (
        f"dn: cn=people,ou=groups,dc=sunk,dc=dev\n{leave}\n"
        f"dn: cn=ml,ou=groups,dc=sunk,dc=dev\n{leave}\n"
        "dn: uid=alice,ou=people,dc=sunk,dc=dev\nchangetype: delete\n"
    )


def test_a_group_is_added_with_its_members_and_removed_by_its_dn() -> None:
    assert admin.group_ldif("vision", 30003, ["alice", "bob"]) == (
        "dn: cn=vision,ou=groups,dc=sunk,dc=dev\nchangetype: add\nobjectClass: posixGroup\n"
        "cn: vision\ngidNumber: 30003\nmemberUid: alice\nmemberUid: bob\n"
    )
    assert (
        admin.group_removal_ldif("vision") == "dn: cn=vision,ou=groups,dc=sunk,dc=dev\nchangetype: delete\n"
    )


def test_a_new_uid_goes_above_the_seeded_people_even_in_an_emptier_directory() -> None:
    assert admin.next_id([20001], admin.FIRST_UID) == 20004


def test_a_new_uid_goes_above_the_highest_taken() -> None:
    assert admin.next_id([20001, 20009, 20004], admin.FIRST_UID) == 20010


def test_a_new_gid_goes_above_the_seeded_groups() -> None:
    assert admin.next_id([30000, 30001, 30002], admin.FIRST_GID) == 30003


def test_a_chosen_id_skips_the_images_system_accounts() -> None:
    assert admin.next_id([65533], admin.FIRST_UID) == 65535  # 65534 is nobody's


@pytest.mark.parametrize("name", ["root", "slurm", "munge", "nobody"])
def test_a_person_named_like_an_images_account_is_refused(name: str) -> None:
    assert "an account of the images" in (admin.person_refusal(name, 20010, SEEDED) or "")


@pytest.mark.parametrize("uid", [0, 999, 64030, 65534])
def test_a_person_with_a_system_uid_is_refused(uid: int) -> None:
    assert "belongs to the images' system accounts" in (admin.person_refusal("dave", uid, SEEDED) or "")


@pytest.mark.parametrize("name", ["Dave", "da,ve", "dave=x", "-dave", "", "d" * 33, "da ve"])
def test_a_name_the_name_service_or_a_dn_cannot_hold_is_refused(name: str) -> None:
    assert "is not a user name sunk takes" in (admin.person_refusal(name, 20010, SEEDED) or "")


def test_a_person_who_exists_is_refused_by_name() -> None:
    assert (admin.person_refusal("bob", 20010, SEEDED) or "").startswith("bob already exists")


def test_a_uid_someone_has_is_refused_with_its_owner() -> None:
    assert admin.person_refusal("dave", 20002, SEEDED) == "UID 20002 is already bob's"


def test_a_new_person_with_a_free_name_and_uid_is_accepted() -> None:
    assert admin.person_refusal("dave", 20004, SEEDED) is None


def test_a_group_named_like_an_images_group_is_refused() -> None:
    assert "an account of the images" in (admin.group_refusal("nogroup", 30010, [], SEEDED) or "")


def test_a_group_with_a_system_gid_is_refused() -> None:
    assert "GID 100 belongs" in (admin.group_refusal("vision", 100, [], SEEDED) or "")


def test_a_group_that_exists_or_whose_gid_is_taken_is_refused() -> None:
    assert admin.group_refusal("ml", 30010, [], SEEDED) == "the group ml already exists"
    assert admin.group_refusal("vision", 30000, [], SEEDED) == "GID 30000 is already the group people's"


def test_a_group_member_who_is_not_in_the_directory_is_refused() -> None:
    assert (admin.group_refusal("vision", 30010, ["alice", "zed"], SEEDED) or "").startswith(
        "no person zed in the directory"
    )


def test_a_private_key_given_as_the_public_one_is_refused_with_the_fix(tmp_path: Path) -> None:
    key = tmp_path / "id_ed25519"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----\n")
    with pytest.raises(DevClusterError, match=r"is a private key: give its public half .*id_ed25519\.pub"):
        admin.public_key_of(key)


def test_a_public_key_file_gives_its_one_line(tmp_path: Path) -> None:
    key = tmp_path / "id.pub"
    key.write_text(KEY + "\n")
    assert admin.public_key_of(key) == KEY


def test_without_a_running_directory_the_error_says_how_to_start_one(tmp_path: Path) -> None:
    with pytest.raises(DevClusterError, match=r"no dev cluster with a directory is running: `sunk dev up"):
        admin.add_person(Layout(tmp_path), "dave")


def test_people_add_takes_its_options_and_a_key_file_excludes_generating_one() -> None:
    args = dev_parser().parse_args(
        ["people", "add", "dave", "--uid", "20010", "--group", "ml", "--group", "hpc", "--key-file", "k.pub"]
    )
    assert (args.name, args.uid, args.group, args.key_file) == ("dave", 20010, ["ml", "hpc"], Path("k.pub"))
    with pytest.raises(SystemExit):
        dev_parser().parse_args(["people", "add", "dave", "--key-file", "k.pub", "--generate-key"])


def test_group_add_takes_its_members() -> None:
    args = dev_parser().parse_args(["group", "add", "vision", "--gid", "30010", "--member", "alice", "bob"])
    assert (args.group_command, args.name, args.gid, args.member) == (
        "add",
        "vision",
        30010,
        ["alice", "bob"],
    )


def test_the_list_names_each_persons_groups_and_each_groups_members() -> None:
    assert admin.describe(SEEDED).splitlines() == [
        "PERSON    UID  GROUPS",
        "alice   20001  people,ml",
        "bob     20002  people",
        "",
        "GROUP     GID  MEMBERS",
        "people  30000  alice,bob",
        "ml      30001  alice",
    ]
