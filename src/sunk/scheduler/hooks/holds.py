"""What the hooks API sees of each placeholder holding its node until its Pod is gone.

A placeholder that got SIGUSR1 (its Pod is being deleted) or SIGTERM (Slurm ends its job)
asks `terminating` until it is told the Pod is gone. Nothing else shows how long such a
hold lasts or why it does not end, and a hold that outlives KillWait drains a node. So,
per job, from its first `terminating` call:

- every answer is observed in `sunk_hook_terminating_wait_seconds{answer}` with how long
  the job had been asking when it got it (the count by answer is the histogram's count);
- a job still asking after half of KillWait is logged, at most once per LOG_EVERY_S, with
  its Pod and why the Pod is still there;
- a job that asks again after it was told twice that its Pod is gone is logged too: the
  script did not take those answers (an answer altered on the way, a key that does not
  match its Pod, a script broken off while checking it) and will drain its node at
  KillWait. Once is not enough: Slurm's SIGTERM often kills the call in flight just as its
  "gone" answer comes back, and the script then asks once more.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from sunk import metrics

log = logging.getLogger(__name__)
LOG_EVERY_S = 10.0
# A hold nobody has asked about for this long has ended (its job is gone): forgotten.
FORGET_AFTER_S = 600.0


@dataclass
class _Hold:
    first_call: float
    last_call: float
    told_gone_at: float | None = None
    times_told_gone: int = 0
    logged_at: float | None = None


class Holds:
    def __init__(self, kill_wait_s: float, clock: Callable[[], float]) -> None:
        """`clock`: the scheduler's monotonic clock (`Clock.monotonic`), which tests move on by hand."""
        self._kill_wait_s = kill_wait_s
        self._clock = clock
        self._holds: dict[int, _Hold] = {}
        self._pruned_at = clock()

    def answered(self, job_id: int, pod: str, answer: str, why: Callable[[], str]) -> None:
        """A `terminating` call of job `job_id` (for Pod `pod`) got `answer`: gone,
        terminating, not_its_pod, not_leader or error. `why` says why the Pod is still
        there; it is asked only when a line is logged."""
        now = self._clock()
        self._prune(now)
        hold = self._holds.get(job_id)
        if hold is None:
            hold = self._holds[job_id] = _Hold(first_call=now, last_call=now)
        hold.last_call = now
        waited = now - hold.first_call
        metrics.HOOK_TERMINATING_WAIT.labels(answer).observe(waited)
        if hold.told_gone_at is not None and hold.times_told_gone >= 2 and self._may_log(hold, now):
            log.warning(
                "the placeholder of Slurm job %s (Pod %s) asks again %.1f s after it was first told its "
                "Pod is gone (%d such answers): it does not take them (changed on the way, a key that "
                "does not match its Pod, or a script broken off while checking one); it will drain its "
                "node at KillWait",
                job_id,
                pod,
                now - hold.told_gone_at,
                hold.times_told_gone,
            )
        elif answer != "gone" and waited > self._kill_wait_s / 2 and self._may_log(hold, now):
            log.warning(
                "the placeholder of Slurm job %s has waited %.0f s (KillWait %.0f s) for Pod %s to go "
                "(answer: %s): %s",
                job_id,
                waited,
                self._kill_wait_s,
                pod,
                answer,
                why(),
            )
        if answer in ("gone", "not_its_pod"):
            hold.times_told_gone += 1
            if hold.told_gone_at is None:
                hold.told_gone_at = now

    def _may_log(self, hold: _Hold, now: float) -> bool:
        if hold.logged_at is not None and now - hold.logged_at < LOG_EVERY_S:
            return False
        hold.logged_at = now
        return True

    def _prune(self, now: float) -> None:
        if now - self._pruned_at < 60:
            return
        self._pruned_at = now
        for job_id in [j for j, h in self._holds.items() if now - h.last_call > FORGET_AFTER_S]:
            del self._holds[job_id]
