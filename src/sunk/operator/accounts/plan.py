"""What slurmdbd should hold, from the directory's groups and the mapping, and the steps
from what it holds now: pure, so every decision is table-tested (test_account_plan.py).

sunk owns the accounts it made, and only those: they carry `organization = sunk-<release>`,
which no account made by hand does. Users are never marked in Slurm, so sunk removes only
associations inside its own accounts, and removes a user record only when the last of that
user's associations goes with it. Names of the images' own accounts (root, slurm...) are
never touched, whichever account they are in.

A mapping that cannot be honoured (a group missing from the directory, a QoS or parent
account slurmdbd does not have, an account made by hand) is told and skipped, and then
nothing at all is removed in that pass: removing on a half-understood mapping could take
every member's association away because of one typo.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sunk.operator.accounts import actions as a
from sunk.operator.accounts.mapping import GroupMapping
from sunk.operator.directory.people import FIRST_ID, RESERVED_IDS, SYSTEM_NAMES
from sunk.slurm.accounts import AccountsSnapshot

MAPPING_INVALID = "AccountMappingInvalid"
USER_REFUSED = "AccountUserRefused"


@dataclass(frozen=True)
class Roster:
    """The people ConfigMap's people (name -> UID) and groups (name -> members, primary
    members included)."""

    users: dict[str, int]
    groups: dict[str, tuple[str, ...]]


def roster(passwd: str, group: str) -> Roster:
    users: dict[str, int] = {}
    primary: dict[int, list[str]] = {}
    for line in passwd.splitlines():
        fields = line.split(":")
        if len(fields) >= 4 and fields[2].isdigit() and fields[3].isdigit():
            users[fields[0]] = int(fields[2])
            primary.setdefault(int(fields[3]), []).append(fields[0])
    groups: dict[str, tuple[str, ...]] = {}
    for line in group.splitlines():
        fields = line.split(":")
        if len(fields) >= 4 and fields[2].isdigit():
            listed = [m for m in fields[3].split(",") if m]
            members = dict.fromkeys([*primary.get(int(fields[2]), []), *listed])
            groups[fields[0]] = tuple(members)
    return Roster(users, groups)


@dataclass(frozen=True)
class Plan:
    actions: tuple[a.Action, ...]
    problems: tuple[a.Problem, ...]
    holding: bool  # removals held back because of a problem with the mapping


@dataclass
class _Wanted:
    qos: set[str] = field(default_factory=set)
    default_qos: str = ""


def marker(release: str) -> str:
    """The organization that marks an account as sunk's."""
    return f"sunk-{release}"


def plan(mappings: tuple[GroupMapping, ...], people: Roster, slurm: AccountsSnapshot, release: str) -> Plan:
    mine = marker(release)
    problems: list[a.Problem] = []
    usable: list[GroupMapping] = []
    for m in mappings:
        found = _mapping_problems(m, people, slurm, mine)
        problems += [
            a.Problem(MAPPING_INVALID, f"group {m.group} -> account {m.account}: {p}") for p in found
        ]
        if not found:
            usable.append(m)
    holding = bool(problems)

    accounts: dict[str, tuple[str, list[str]]] = {}  # account -> (parent, groups)
    wanted: dict[tuple[str, str], _Wanted] = {}
    for m in usable:
        accounts.setdefault(m.account, (m.parent, []))[1].append(m.group)
        for user in people.groups.get(m.group, ()):
            uid = people.users.get(user)
            if uid is None:
                continue  # listed in the group but not a person of the directory
            refusal = _user_refusal(user, uid)
            if refusal:
                problems.append(a.Problem(USER_REFUSED, f"user {user} of group {m.group}: {refusal}"))
                continue
            want = wanted.setdefault((user, m.account), _Wanted())
            want.qos |= set(m.qos)
            want.default_qos = want.default_qos or m.default_qos

    current = {(x.user, x.account): x for x in slurm.associations}
    steps: list[a.Action] = []
    for name, (parent, groups) in accounts.items():
        if name not in slurm.accounts:
            steps.append(a.AddAccount(name, parent, f"from directory group {', '.join(groups)}"))
    known_users = set(slurm.users) | {x.user for x in slurm.associations}
    for (user, account), want in wanted.items():
        qos = tuple(sorted(want.qos))
        have = current.get((user, account))
        if have is None:
            steps.append(a.AddAssociation(user, account, qos, want.default_qos, user not in known_users))
            known_users.add(user)
        elif qos and (have.qos, have.default_qos) != (qos, want.default_qos):
            steps.append(a.SetQos(user, account, qos, want.default_qos))
    if not holding:
        steps += _removals(slurm, mine, set(wanted), set(accounts))
    return Plan(tuple(steps), tuple(problems), holding)


def _mapping_problems(m: GroupMapping, people: Roster, slurm: AccountsSnapshot, mine: str) -> list[str]:
    found = []
    if m.group not in people.groups:
        found.append("the directory has no such group (nothing is removed until it does or the mapping goes)")
    unknown = [q for q in m.qos if q not in slurm.qos]
    if unknown:
        found.append(f"slurmdbd has no QoS {', '.join(unknown)} (add it with sacctmgr, or fix the mapping)")
    if m.parent not in slurm.accounts:
        found.append(f"slurmdbd has no parent account {m.parent}")
    account = slurm.accounts.get(m.account)
    if account is not None and account.organization != mine:
        found.append(
            f"account {m.account} was not made by sunk (organization {account.organization!r}); "
            "sunk leaves it alone: map the group to an account of its own"
        )
    return found


def _user_refusal(user: str, uid: int) -> str:
    if user in SYSTEM_NAMES:
        return f"{user} is an account of the images and is never given a Slurm association by sunk"
    if uid < FIRST_ID or uid in RESERVED_IDS:
        return f"UID {uid} belongs to the images' system accounts"
    return ""


def _removals(
    slurm: AccountsSnapshot, mine: str, wanted: set[tuple[str, str]], accounts: set[str]
) -> list[a.Action]:
    managed = {name for name, acc in slurm.accounts.items() if acc.organization == mine}
    going = [
        x
        for x in slurm.associations
        if x.account in managed and (x.user, x.account) not in wanted and x.user not in SYSTEM_NAMES
    ]
    gone = {(x.user, x.account) for x in going}
    defaults: list[a.Action] = []
    users: list[a.Action] = []
    for user in sorted({x.user for x in going}):
        theirs = [x for x in slurm.associations if x.user == user]
        staying = sorted(
            {x.account for x in theirs if (user, x.account) not in gone}
            | {acc for (u, acc) in wanted if u == user}
        )
        if not staying:
            if all(x.account in managed for x in theirs):
                users.append(a.RemoveUser(user))
        elif any(x.is_default and (user, x.account) in gone for x in theirs):
            defaults.append(a.SetDefaultAccount(user, staying[0]))
    removed: list[a.Action] = [a.RemoveAssociation(x.user, x.account) for x in going]
    unused: list[a.Action] = [a.RemoveAccount(name) for name in sorted(managed - accounts)]
    return [*defaults, *removed, *users, *unused]
