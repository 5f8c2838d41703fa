"""Errors of the schedule model: a malformed schedule names the operation and its position."""

from pingpong.errors import PingpongError


class ScheduleError(PingpongError):
    """A malformed schedule (unknown buffer, negative count, wait on a counter nobody
    increments, ...). The message names the schedule, the group, the operation and its index."""
