"""People's homes that follow them (issue #49 point 3): with a directory and a writable
shared volume at /home, the login Pods run the chart's `homes` service (files/homes.sh), which
makes each person's home once on that volume and keeps its root root's 0755, and every login
shell sources the notice (files/home-notice.sh) that tells a person whose home will not
follow them. The slurmd Pods mount the same volume and make nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sunk_dev.images import Built
from sunk_dev.platform import dev_values, merge_values
from tests.chart.test_slurm_chart import container, fails, named, pod_spec, render
from tests.chart.test_slurm_chart_people import DIRECTORY

FILES = Path(__file__).resolve().parents[2] / "charts" / "slurm" / "files"
HOME = {"name": "home", "mountPath": "/home", "size": "1Gi"}
DATA = {"name": "data", "mountPath": "/shared", "size": "1Gi"}
SERVICE = "exec /bin/sh /etc/sunk/homes/homes.sh /home /var/lib/extrausers/passwd /run/sunk-homes\n"


def values(*volumes: dict[str, Any], directory: bool = True) -> dict[str, Any]:
    return {**(DIRECTORY if directory else {}), "sharedVolumes": list(volumes)}


def login_services(objects: list[dict[str, Any]]) -> dict[str, str]:
    found = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "r1-login-services"]
    return found[0]["data"] if found else {}


def test_issue49_the_login_pods_make_homes_on_a_writable_shared_home(helm: Path, slurm_chart: Path) -> None:
    """Catches homes left to pam_mkhomedir alone (a person who never logged in has none on
    the members) and a script that drifted from the one the unit tests run."""
    objects = render(slurm_chart, helm, values=values(DATA, HOME))
    assert login_services(objects)["service.homes"] == SERVICE
    homes = named(objects, "ConfigMap", "r1-login-homes")["data"]
    assert homes["homes.sh"] == (FILES / "homes.sh").read_text()
    assert homes["home-notice.sh"] == (FILES / "home-notice.sh").read_text()
    assert homes["shared-root"] == "/home"
    login = named(objects, "Deployment", "r1-login")
    mounts = {m["mountPath"]: m for m in container(login, "sshd")["volumeMounts"]}
    assert mounts["/etc/sunk/homes"] == {"name": "homes", "mountPath": "/etc/sunk/homes", "readOnly": True}
    assert mounts["/etc/profile.d/sunk-home.sh"]["subPath"] == "home-notice.sh"
    assert mounts["/home"]["readOnly"] is False
    volumes = {v["name"]: v for v in pod_spec(login)["volumes"]}
    assert volumes["homes"]["configMap"]["name"] == "r1-login-homes"
    annotations = login["spec"]["template"]["metadata"]["annotations"]
    assert "sunk.coreweave.com/homes-digest" in annotations  # a changed script restarts the Pods


def test_issue49_a_changed_homes_script_rolls_the_login_pods(helm: Path, slurm_chart: Path) -> None:
    def digest(*volumes: dict[str, Any]) -> str:
        login = named(render(slurm_chart, helm, values=values(*volumes)), "Deployment", "r1-login")
        return str(login["spec"]["template"]["metadata"]["annotations"]["sunk.coreweave.com/homes-digest"])

    assert digest(HOME) != digest(DATA)  # shared-root differs: the notice reads it at login


@pytest.mark.parametrize(
    ("volumes", "root"),
    [([{**HOME, "readOnly": True}], "/home"), ([DATA], "")],
    ids=["read-only-home", "no-shared-home"],
)
def test_issue49_without_a_writable_shared_home_no_homes_are_made_and_the_notice_still_speaks(
    helm: Path, slurm_chart: Path, volumes: list[dict[str, Any]], root: str
) -> None:
    """A read-only /home is kept by someone else; with none, homes are each login Pod's own
    (pam_mkhomedir) and the notice tells people their jobs will not find them."""
    objects = render(slurm_chart, helm, values=values(*volumes))
    assert "service.homes" not in login_services(objects)
    assert named(objects, "ConfigMap", "r1-login-homes")["data"]["shared-root"] == root
    mounts = {
        m["mountPath"] for m in container(named(objects, "Deployment", "r1-login"), "sshd")["volumeMounts"]
    }
    assert "/etc/profile.d/sunk-home.sh" in mounts


def test_issue49_without_a_directory_there_are_no_people_and_nothing_of_homes(
    helm: Path, slurm_chart: Path
) -> None:
    objects = render(slurm_chart, helm, values=values(HOME, directory=False))
    assert [o for o in objects if o["metadata"]["name"] == "r1-login-homes"] == []
    assert "service.homes" not in login_services(objects)
    login = named(objects, "Deployment", "r1-login")
    assert "homes" not in {v["name"] for v in pod_spec(login)["volumes"]}


def test_issue49_the_slurmd_pods_mount_the_shared_home_and_make_nothing(
    helm: Path, slurm_chart: Path
) -> None:
    objects = render(slurm_chart, helm, values=values(HOME))
    args = container(named(objects, "Deployment", "r1-operator"), "operator")["args"]
    assert "--shared-volumes=r1-home:/home" in args
    slurmd = [
        o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "r1-slurmd-services"
    ]
    assert not [key for o in slurmd for key in o["data"] if "homes" in key]


def test_issue49_a_login_service_may_not_take_the_homes_services_name(helm: Path, slurm_chart: Path) -> None:
    said = fails(slurm_chart, helm, "login.services[0].name=homes", "login.services[0].run=sleep infinity")
    assert 'login.services[0].name is "homes", the name of one of the container\'s own services' in said


EXAMPLE_VALUES = Path(__file__).resolve().parents[2] / "examples" / "train-and-serve" / "values.yaml"


def dev_platform_values() -> dict[str, Any]:
    """What `sunk dev platform` and `sunk demo` install with (images stand-ins)."""
    names = ("slurmd", "slurmctld", "slurmrestd", "slurmdbd", "mariadb", "login", "sunk")
    images = {n: Built(n, f"localhost/sunk/{n}:dev-1", "dev-1", Path("/dev/null")) for n in names}
    return dev_values(images, scheduler=False)


@pytest.mark.parametrize("source", ["dev-platform", "example"])
def test_issue49_the_dev_platform_and_the_example_have_a_shared_home_by_default(
    helm: Path, slurm_chart: Path, source: str
) -> None:
    """Catches the demo's release without a shared /home: alice's job on a member found no
    /home/alice, started in /tmp, and a container step from her home failed outright."""
    if source == "example":
        chosen = merge_values(dev_platform_values(), yaml.safe_load(EXAMPLE_VALUES.read_text()))
    else:
        chosen = dev_platform_values()
    assert HOME in chosen["sharedVolumes"] or {**HOME, "size": "10Gi"} in chosen["sharedVolumes"]
    objects = render(slurm_chart, helm, values=merge_values(chosen, DIRECTORY))
    assert login_services(objects)["service.homes"] == SERVICE
    args = container(named(objects, "Deployment", "r1-operator"), "operator")["args"]
    assert [a for a in args if a.startswith("--shared-volumes=") and "r1-home:/home" in a]
