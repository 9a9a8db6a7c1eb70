"""slurmrestd's error shapes become exceptions that say what to do; the token stays secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from sunk.slurm.errors import (
    SlurmAuthError,
    SlurmJobGone,
    SlurmRejected,
    SlurmUnavailable,
    raise_for,
)
from sunk.slurm.tokens import TokenSource


def test_200_without_errors_is_success() -> None:
    raise_for(200, {"errors": [], "jobs": []}, "", "list jobs")


def test_200_with_an_errors_list_is_still_a_failure() -> None:
    with pytest.raises(SlurmRejected, match="Invalid job id"):
        raise_for(200, {"errors": [{"error": "Invalid job id", "error_number": 2000}]}, "", "read job")


def test_400_parse_errors_are_rejections_with_the_description() -> None:
    body = {"errors": [{"description": 'Unable to process key "exclusive"', "error_number": -1}]}
    with pytest.raises(SlurmRejected, match='Unable to process key "exclusive"'):
        raise_for(400, body, "", "submit a job")


def test_500_with_a_slurm_error_code_names_the_code() -> None:
    body = {"errors": [{"error_code": 2000, "error": "Invalid partition name specified"}]}
    with pytest.raises(SlurmRejected, match=r"Invalid partition name specified \(Slurm error 2000\)") as err:
        raise_for(500, body, "", "submit a job")
    assert err.value.code == 2000 and not err.value.retryable


def test_unknown_job_is_its_own_type() -> None:
    with pytest.raises(SlurmJobGone):
        raise_for(500, {"errors": [{"errno": 2017, "error": "Invalid job id specified"}]}, "", "cancel")


def test_missing_headers_401_is_an_auth_error() -> None:
    with pytest.raises(SlurmAuthError, match="check the token"):
        raise_for(401, None, "Authentication failure", "list jobs")


def test_a_misleading_500_about_authentication_is_an_auth_error() -> None:
    body = {"errors": [{"error": "Unable to authenticate with slurmctld: auth/jwt token expired"}]}
    with pytest.raises(SlurmAuthError, match="refused the token"):
        raise_for(500, body, "", "list jobs")


@pytest.mark.parametrize(
    "error",
    [
        {"description": "Unable to find JobId=1", "error_number": -1, "error": "Unspecified error"},
        {"error_code": 5005, "error": "Zero Bytes were transmitted or received"},
    ],
)
def test_slurmrestd_2205s_disguised_token_refusals_are_auth_errors(error: dict[str, object]) -> None:
    with pytest.raises(SlurmAuthError, match="refused the token"):
        raise_for(500, {"errors": [error]}, "", "read job 1")


def test_bare_5xx_is_retryable_unavailability() -> None:
    with pytest.raises(SlurmUnavailable) as err:
        raise_for(503, None, "Service Unavailable", "ping")
    assert err.value.retryable


def test_token_file_is_reread_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("SLURM_JWT=first\n")
    source = TokenSource(path=path)
    assert source.get() == "first"
    path.write_text("second\n")
    import os

    os.utime(path, (1, 1))  # make sure the change is visible even within one mtime tick
    assert source.get() == "second"


def test_the_token_never_shows_in_a_repr() -> None:
    assert "s3cret" not in repr(TokenSource(token="s3cret"))


def test_no_token_at_all_says_how_to_give_one() -> None:
    with pytest.raises(ValueError, match="--slurm-auth-token-file"):
        TokenSource()
