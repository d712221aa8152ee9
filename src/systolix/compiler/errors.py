"""Errors of the compile as a whole (the stages' own are ``SchedulingError`` and friends)."""

from systolix.errors import SystolixError


class UnsupportedOpError(SystolixError):
    """With host fallback off, a node the accelerator cannot run."""
