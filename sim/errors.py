"""The simulated host's one exception family, so a caller catches `SimHostError` for all of it
and a fixture tells "cannot run here" (`SimHostUnavailable`: skip) from a real failure."""

from __future__ import annotations


class SimHostError(RuntimeError):
    """The simulated host could not be set up or a container misbehaved."""


class SimHostUnavailable(SimHostError):
    """This machine cannot run the simulated host (not root, a tool is missing...)."""


class ContainerFailed(SimHostError):
    """A container exited or turned unhealthy; the message carries its logs."""
