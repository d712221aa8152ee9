"""What every command shares: consoles, error handling, argument parsing."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from rich.console import Console

from systolix.errors import SystolixError

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


@contextlib.contextmanager
def handle_errors():
    """User mistakes become one line and exit status 2, never a traceback.

    ``SystolixError`` is a user mistake by definition; so is an ``OSError`` (a path that does
    not exist, a permission, a full disk: the environment, not a bug) and running out of memory.
    Anything else is a bug and keeps its traceback.
    """
    try:
        yield
    except SystolixError as e:
        sys.stderr.write(f"error: {_one_line(str(e))}\n")
        sys.exit(2)
    except FileNotFoundError as e:
        sys.stderr.write(f"error: {_one_line(str(e.filename))}: no such file\n")
        sys.exit(2)
    except OSError as e:
        where = f"{_one_line(str(e.filename))}: " if e.filename else ""
        sys.stderr.write(f"error: {where}{e.strerror or type(e).__name__}\n")
        sys.exit(2)
    except MemoryError:
        sys.stderr.write("error: out of memory (the input or model is too large for this machine)\n")
        sys.exit(2)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)


def _one_line(text: str, limit: int = 2000) -> str:
    """A message on one line, cut to ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def resolve_arch(value: str):
    """``--arch``: a preset name or a ``.tarch`` path."""
    from systolix.arch import get_architecture

    return get_architecture(value)


def require_file(path: Path, what: str) -> Path:
    """``path`` if it names a regular file; else a ``SystolixError`` (nothing is opened or read)."""
    import os
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise SystolixError(f"{path}: no such {what}") from None
    except OSError as e:
        raise SystolixError(f"{path}: cannot open the {what}: {e.strerror}") from None
    if stat.S_ISDIR(mode):
        raise SystolixError(f"{path}: is a directory, expected a {what}")
    if not stat.S_ISREG(mode):
        raise SystolixError(f"{path}: not a regular file (a FIFO, socket or device), expected a {what}")
    return path


def check_output_file(path: Path, what: str) -> Path:
    """An ``--output`` file: not a directory, and its folder is not a file."""
    if path.is_dir():
        raise SystolixError(f"{path}: is a directory, expected a {what} to write")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise SystolixError(f"{path}: cannot write the {what}: {parent} is a file, not a folder")
            break
    return path


def check_output_dir(path: Path, what: str) -> Path:
    """An ``--output`` folder: a folder or nothing yet, and not under a file."""
    if path.exists() and not path.is_dir():
        raise SystolixError(f"{path}: exists and is not a directory (a folder for the {what})")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise SystolixError(f"{path}: cannot create the {what} folder: {parent} is a file, not a folder")
            break
    return path
