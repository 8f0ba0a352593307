"""Durations written the way Go's `time.Duration.String()` writes them.

terraform-provider-docker (which pulumi-docker wraps) reads a container's
health-check durations back from Docker and stores them with Go's
`time.Duration.String()`: `30s`, `2m0s`, `30m0s`, `1h0m0s`. An input written
any other way (`1800s`) differs from the stored value on every refresh, so
every preview shows a change. Giving the provider its own spelling keeps a
preview of an unchanged stack empty.
"""

from __future__ import annotations


def go_duration(seconds: int) -> str:
    """Whole seconds as Go prints them: `0s`, `45s`, `2m0s`, `1h30m0s`."""
    if seconds < 0:
        raise ValueError(f"a duration of {seconds} s is negative")
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"
