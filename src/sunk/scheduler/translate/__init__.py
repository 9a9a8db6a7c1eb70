"""Pod → placeholder job translation and validation. Pure logic, no I/O."""

from sunk.scheduler.translate.annotations import DEFAULT_PREFIX, JobOptions
from sunk.scheduler.translate.job import (
    PlaceholderJob,
    PodRef,
    Settings,
    Translation,
    job_name,
    pod_of_job_name,
    translate,
)

__all__ = [
    "DEFAULT_PREFIX",
    "JobOptions",
    "PlaceholderJob",
    "PodRef",
    "Settings",
    "Translation",
    "job_name",
    "pod_of_job_name",
    "translate",
]
