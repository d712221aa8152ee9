"""Errors that reach a user.

Every error caused by user input (a file, a flag, a model) is a ``SystolixError``: the
CLI prints its message on one line and exits with status 2. Anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations


class SystolixError(Exception):
    """A user-facing error: the message names the file, field or node at fault."""


class ArchitectureError(SystolixError):
    """An architecture or board description is missing a key or holds a bad value."""


class EncodingError(SystolixError):
    """An instruction field does not fit the instruction layout."""


class DecodingError(SystolixError):
    """A program's bytes are not a valid sequence of instructions."""


class AssemblyError(SystolixError):
    """An assembly listing cannot be parsed."""


class ArtifactError(SystolixError):
    """A .tmodel, .tdata or vector file is malformed or inconsistent."""
