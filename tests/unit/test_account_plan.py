"""Slurm accounts follow the directory's groups (issue #35): what the plan decides from the
mapping, the people ConfigMap and slurmdbd's listing, called directly as a table."""

from __future__ import annotations

import pytest

from sunk.operator.accounts import actions as a
from sunk.operator.accounts.mapping import GroupMapping, parse
from sunk.operator.accounts.plan import MAPPING_INVALID, USER_REFUSED, plan, roster
from sunk.slurm.accounts import Account, AccountsSnapshot, Association

MINE = "sunk-slurm"  # the organization of release "slurm"'s accounts
ML = GroupMapping("ml-team", "ml", ("normal",), "normal", "root")
PASSWD = "alice:*:20001:30000::/home/alice:/bin/bash\nbob:*:20002:30000::/home/bob:/bin/bash\n"
GROUPS = "ml-team:x:30001:alice\nvisitors:x:30002:bob\n"


def slurm(
    *associations: Association, accounts: tuple[Account, ...] = (), users: tuple[str, ...] = ()
) -> AccountsSnapshot:
    base = (Account("root", "default root account", "root"),)
    return AccountsSnapshot(
        {x.name: x for x in (*base, *accounts)},
        associations,
        frozenset(users) | {x.user for x in associations},
        frozenset({"normal", "low", "high"}),
    )


def assoc(user: str, account: str, qos: tuple[str, ...] = ("normal",), default: bool = True) -> Association:
    return Association(user, account, qos, "normal" if qos == ("normal",) else "", default)


ML_ACCOUNT = Account("ml", "from directory group ml-team", MINE)
HAND_MADE = Account("physics", "physics", "physics")


def decide(
    snapshot: AccountsSnapshot, mappings: tuple[GroupMapping, ...] = (ML,), groups: str = GROUPS
) -> tuple[list[a.Action], list[str]]:
    result = plan(mappings, roster(PASSWD, groups), snapshot, "slurm")
    return list(result.actions), [p.reason for p in result.problems]


CASES = [
    (
        "a mapped group's account and its member are made; a user of no mapped group gets nothing",
        slurm(),
        [
            a.AddAccount("ml", "root", "from directory group ml-team"),
            a.AddAssociation("alice", "ml", ("normal",), "normal", new_user=True),
        ],
    ),
    (
        "a user Slurm knows already keeps her default account",
        slurm(assoc("alice", "physics"), accounts=(HAND_MADE,)),
        [
            a.AddAccount("ml", "root", "from directory group ml-team"),
            a.AddAssociation("alice", "ml", ("normal",), "normal", new_user=False),
        ],
    ),
    ("nothing to do when Slurm already agrees", slurm(assoc("alice", "ml"), accounts=(ML_ACCOUNT,)), []),
    (
        "a QoS that differs is set again",
        slurm(assoc("alice", "ml", ("low",)), accounts=(ML_ACCOUNT,)),
        [a.SetQos("alice", "ml", ("normal",), "normal")],
    ),
    (
        "a user who left the group loses the association and, having no other, the Slurm user",
        slurm(assoc("alice", "ml"), assoc("bob", "ml"), accounts=(ML_ACCOUNT,)),
        [a.RemoveAssociation("bob", "ml"), a.RemoveUser("bob")],
    ),
    (
        "a user who left keeps the Slurm user and hand-made associations; her default moves first",
        slurm(
            assoc("alice", "ml"),
            assoc("bob", "ml"),
            assoc("bob", "physics", default=False),
            accounts=(ML_ACCOUNT, HAND_MADE),
        ),
        [a.SetDefaultAccount("bob", "physics"), a.RemoveAssociation("bob", "ml")],
    ),
    (
        "associations in accounts made by hand are never touched, nor the images' users in sunk's",
        slurm(
            assoc("alice", "ml"),
            assoc("bob", "physics"),
            assoc("root", "ml", default=False),
            accounts=(ML_ACCOUNT, HAND_MADE),
        ),
        [],
    ),
    (
        "an account of sunk no group maps to any more goes, after its members",
        slurm(
            assoc("alice", "ml"),
            assoc("alice", "old", default=False),
            accounts=(ML_ACCOUNT, Account("old", "from directory group gone", MINE)),
        ),
        [a.RemoveAssociation("alice", "old"), a.RemoveAccount("old")],
    ),
    (
        "another release's accounts are not this one's",
        slurm(
            assoc("alice", "ml"),
            assoc("bob", "theirs"),
            accounts=(ML_ACCOUNT, Account("theirs", "", "sunk-other")),
        ),
        [],
    ),
]


@pytest.mark.parametrize(("why", "snapshot", "expected"), CASES, ids=[c[0] for c in CASES])
def test_plan(why: str, snapshot: AccountsSnapshot, expected: list[a.Action]) -> None:
    actions, problems = decide(snapshot)
    assert actions == expected
    assert problems == []


def test_a_primary_group_counts_as_membership() -> None:
    people = roster(PASSWD, "staff:x:30000:\n")
    assert people.groups["staff"] == ("alice", "bob")


BAD_MAPPINGS = [
    ("an unknown QoS", GroupMapping("ml-team", "ml", ("gold",), "", "root")),
    ("an unknown parent account", GroupMapping("ml-team", "ml", (), "", "nope")),
    ("an account made by hand", GroupMapping("ml-team", "physics", (), "", "root")),
    ("a group the directory lacks", GroupMapping("ml-tea", "ml", (), "", "root")),
]


@pytest.mark.parametrize(("why", "bad"), BAD_MAPPINGS, ids=[c[0] for c in BAD_MAPPINGS])
def test_a_bad_mapping_is_told_and_nothing_is_removed(why: str, bad: GroupMapping) -> None:
    visitors = GroupMapping("visitors", "guests", (), "", "root")
    snapshot = slurm(
        assoc("alice", "ml"),
        assoc("bob", "stale"),
        accounts=(ML_ACCOUNT, HAND_MADE, Account("stale", "", MINE)),
    )
    actions, problems = decide(snapshot, (bad, visitors))
    assert problems == [MAPPING_INVALID]
    # The good mapping still adds; nothing anywhere is removed (not alice from ml, not stale).
    assert actions == [
        a.AddAccount("guests", "root", "from directory group visitors"),
        a.AddAssociation("bob", "guests", (), "", new_user=False),
    ]


def test_a_directory_user_named_or_numbered_like_a_system_user_is_refused_by_name() -> None:
    passwd = PASSWD + "slurm:*:20003:30000::/:/bin/sh\nmallory:*:990:30000::/:/bin/sh\n"
    result = plan((ML,), roster(passwd, "ml-team:x:30001:alice,slurm,mallory\n"), slurm(), "slurm")
    assert [(p.reason, p.note.split(":")[0]) for p in result.problems] == [
        (USER_REFUSED, "user slurm of group ml-team"),
        (USER_REFUSED, "user mallory of group ml-team"),
    ]
    assert [x.user for x in result.actions if isinstance(x, a.AddAssociation)] == ["alice"]


def test_two_groups_on_one_account_merge_their_qos() -> None:
    both = (
        GroupMapping("ml-team", "ml", ("low",), "", "root"),
        GroupMapping("staff", "ml", ("high",), "high", "root"),
    )
    result = plan(both, roster(PASSWD, "ml-team:x:30001:alice\nstaff:x:30000:\n"), slurm(), "slurm")
    assert a.AddAssociation("alice", "ml", ("high", "low"), "high", new_user=True) in result.actions
    assert a.AddAccount("ml", "root", "from directory group ml-team, staff") in result.actions


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{}", "JSON list"),
        ('[{"group": "g"}]', "needs both group and account"),
        ('[{"group": "g", "account": "ML"}]', "lower-case"),
        ('[{"group": "g", "account": "a"}, {"group": "g", "account": "b"}]', "mapped twice"),
        ('[{"group": "g", "account": "a", "qos": ["x"], "defaultQos": "y"}]', "defaultQos y"),
    ],
)
def test_a_bad_mapping_flag_is_a_start_up_error(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse(text)


def test_the_mapping_flag_reads_the_charts_json() -> None:
    found = parse('[{"group": "ml-team", "account": "ml", "qos": ["normal", "low"], "defaultQos": "normal"}]')
    assert found == (GroupMapping("ml-team", "ml", ("low", "normal"), "normal", "root"),)
