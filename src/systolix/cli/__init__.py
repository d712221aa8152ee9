"""The ``systolix`` command line.

Each area registers its commands from its own module (``cli/foundation.py``, ``cli/run.py``,
...) so that the CLI grows without one file everyone edits. A ``SystolixError`` becomes one
line on stderr and exit status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys
import warnings

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

for _optional in ("run", "compile", "perf", "rtl", "accuracy"):
    try:
        __import__(f"systolix.cli.{_optional}")
    except ModuleNotFoundError as e:  # an area not built yet has no module
        if e.name != f"systolix.cli.{_optional}":
            raise


def _usage_message(error) -> str:
    """A CLI framework usage error as our one line: its message, and where to get help."""
    message = " ".join(str(error.format_message()).split())
    ctx = getattr(error, "ctx", None)
    command = ctx.command_path if ctx is not None else "systolix"
    return f"{message} (see '{command} --help')"


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning as one line on stderr: ``warning: <message>``."""
    text = " ".join(str(message).split())
    sys.stderr.write(f"warning: {text}\n")


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``systolix`` script (``argv``: the arguments, default ``sys.argv[1:]``).

    Exits with status 0 on success, 2 on a user mistake (a ``SystolixError`` or a usage error:
    one line on stderr starting with ``error:``), 130 when interrupted.
    """
    from typer._click.exceptions import UsageError
    from typer.exceptions import Abort, Exit
    from typer.main import get_command

    args = list(sys.argv[1:] if argv is None else argv)
    if not args:  # no command: the help text, as `systolix --help` prints it
        args = ["--help"]
    command = get_command(app)
    with handle_errors(), warnings.catch_warnings():
        warnings.showwarning = _show_warning
        # NumPy's notes on arithmetic (a constant folded to NaN, an overflow in a statistic) are
        # not the user's business; where they matter, our own checks say so in words.
        warnings.filterwarnings("ignore", category=RuntimeWarning)
        try:
            code = command.main(args=args, prog_name="systolix", standalone_mode=False)
        except UsageError as e:
            sys.stderr.write(f"error: {_usage_message(e)}\n")
            sys.exit(2)
        except Exit as e:
            code = e.exit_code
        except Abort as e:
            # The framework turns an EOFError (stdin closed at a prompt, or a reader's bug) into
            # Abort; a bug keeps its traceback.
            if isinstance(e.__cause__, EOFError):
                raise e.__cause__ from None
            sys.stderr.write("interrupted\n")
            sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
