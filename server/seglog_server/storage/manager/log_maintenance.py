"""When the log manager's periodic jobs run (Kafka's LogManager scheduler tasks).

The service calls ``LogManager.run_maintenance`` about once a second; each job runs when its
interval has passed on the injected clock (monotonic time, so wall-clock jumps neither skip nor
repeat a job). Job bodies live in ``maintenance_jobs.py``; this module only keeps time.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from ..base.errors import InvalidConfigError

__all__ = ["MaintenanceIntervals", "MaintenanceSchedule"]

RETENTION = "retention"
FLUSH = "flush"
RECOVERY_POINTS = "recovery_points"
LOG_START_OFFSETS = "log_start_offsets"
PRODUCER_EXPIRY = "producer_expiry"


@dataclass(frozen=True)
class MaintenanceIntervals:
    """How often each job runs; Kafka's broker settings and defaults."""

    # log.initial.task.delay.ms: let start-up traffic settle before the first periodic job.
    initial_delay_ms: int = 30_000
    # log.retention.check.interval.ms: retention deletes whole segments, so checking every
    # 5 minutes costs little precision against retention.ms measured in hours or days.
    retention_check_ms: int = 300_000
    # Kafka's log.flush.scheduler.interval.ms defaults to "never", which silently disables the
    # flush.ms topic setting; seglog honours flush.ms at a one-second resolution instead.
    flush_check_ms: int = 1_000
    # log.flush.offset.checkpoint.interval.ms: a stale recovery point only lengthens recovery.
    recovery_point_checkpoint_ms: int = 60_000
    # log.flush.start.offset.checkpoint.interval.ms.
    log_start_offset_checkpoint_ms: int = 60_000
    # producer.id.expiration.check.interval.ms (Kafka: 10 minutes): expiry is a memory bound,
    # not a promise; a producer lives at most this long past producer.id.expiration.ms.
    producer_expiry_check_ms: int = 600_000

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidConfigError(f"{item.name} must be an integer >= 0, found {value!r}")


class _PeriodicJob:
    def __init__(self, interval_ms: int, first_due_ms: int) -> None:
        self._interval_ms = interval_ms
        self._next_due_ms = first_due_ms

    def is_due(self, now_ms: int) -> bool:
        """True (and re-armed) when the job should run at ``now_ms``."""
        if now_ms < self._next_due_ms:
            return False
        self._next_due_ms = now_ms + self._interval_ms
        return True


class MaintenanceSchedule:
    def __init__(self, intervals: MaintenanceIntervals, start_ms: int) -> None:
        first_ms = start_ms + intervals.initial_delay_ms
        self._jobs = {
            RETENTION: _PeriodicJob(intervals.retention_check_ms, first_ms),
            # flush.ms is a promise to the topic's owner; no reason to wait for the first check.
            FLUSH: _PeriodicJob(intervals.flush_check_ms, start_ms),
            RECOVERY_POINTS: _PeriodicJob(intervals.recovery_point_checkpoint_ms, first_ms),
            LOG_START_OFFSETS: _PeriodicJob(intervals.log_start_offset_checkpoint_ms, first_ms),
            PRODUCER_EXPIRY: _PeriodicJob(intervals.producer_expiry_check_ms, first_ms),
        }

    def due(self, now_ms: int) -> frozenset[str]:
        """The jobs to run now (each is re-armed for its next interval)."""
        return frozenset(name for name, job in self._jobs.items() if job.is_due(now_ms))
