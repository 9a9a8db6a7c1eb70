"""Pod → placeholder job translation and validation. Pure logic, no I/O."""

from sunk.translate.annotations import DEFAULT_PREFIX, Exclusive, JobOptions
from sunk.translate.job import (
    PlaceholderJob,
    PodRef,
    Settings,
    Translation,
    gres_text,
    job_name,
    owner_tag,
    pod_of_job_name,
    pod_of_owner_tag,
    translate,
)

__all__ = [
    "DEFAULT_PREFIX",
    "Exclusive",
    "JobOptions",
    "PlaceholderJob",
    "PodRef",
    "Settings",
    "Translation",
    "gres_text",
    "job_name",
    "owner_tag",
    "pod_of_job_name",
    "pod_of_owner_tag",
    "translate",
]
