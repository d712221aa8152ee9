"""The ``systolix`` command line.

Each area registers its commands from its own module (``cli/foundation.py``, ``cli/run.py``,
...) so that the CLI grows without one file everyone edits. A ``SystolixError`` becomes one
line on stderr and exit status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys

import typer

from systolix.cli.common import console, err_console, handle_errors  # noqa: F401

app = typer.Typer(
    name="systolix",
    help="Compile ONNX models for Tensil-compatible systolic-array accelerators, run them bit-exactly, "
    "and predict their latency.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Command modules, in the order their commands appear in --help.
from systolix.cli import foundation  # noqa: E402,F401
from systolix.cli import demo  # noqa: E402,F401

for _optional in ("run", "compile", "perf", "rtl"):
    try:
        __import__(f"systolix.cli.{_optional}")
    except ModuleNotFoundError as e:  # an area not built yet has no module
        if e.name != f"systolix.cli.{_optional}":
            raise


def main() -> None:
    """Entry point of the ``systolix`` script."""
    with handle_errors():
        app()


if __name__ == "__main__":
    sys.exit(main())
