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
    """User mistakes become one line and exit status 2, never a traceback."""
    try:
        yield
    except SystolixError as e:
        sys.stderr.write(f"error: {e}\n")
        sys.exit(2)
    except FileNotFoundError as e:
        sys.stderr.write(f"error: {e.filename}: no such file\n")
        sys.exit(2)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)


def resolve_arch(value: str):
    """``--arch``: a preset name or a ``.tarch`` path."""
    from systolix.arch import get_architecture

    return get_architecture(value)


def require_file(path: Path, what: str) -> Path:
    if not path.exists():
        raise SystolixError(f"{path}: no such {what}")
    if path.is_dir():
        raise SystolixError(f"{path}: is a directory, expected a {what}")
    return path
