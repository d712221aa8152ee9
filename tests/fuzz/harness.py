"""Running the CLI on bad input and checking what a user would see.

``cli(args)`` runs ``systolix.cli.main`` in this process with stdout and stderr captured, a time
limit (``SIGALRM``: a FIFO opened for reading blocks in ``open``; the alarm interrupts it) and a
record of every file Python opened meanwhile (an audit hook). ``subprocess_cli(args)`` runs the
installed ``systolix`` script for real, so that what onnxruntime's C++ code or the CLI framework
print on the process's own stderr is seen too. ``assert_clean_error`` is the contract: exit status
2, stderr exactly one line starting with ``error:``, nothing on stdout, no traceback, no partial
output file, no file opened outside the allowed folders.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "systolix"

#: Seconds one in-process case may take (a hang is a failure, not a stuck CI job).
CASE_SECONDS = 30
#: Seconds one subprocess case may take.
SUBPROCESS_SECONDS = 60


class CaseTimeout(BaseException):
    """A case ran past its time limit (BaseException: no ``except Exception`` swallows it)."""


_opened: list[str] | None = None
_hook_lock = threading.Lock()
_hook_installed = False


def _audit(event: str, args) -> None:
    if _opened is not None and event == "open" and args:
        path = args[0]
        if isinstance(path, (str, bytes, os.PathLike)):
            _opened.append(os.fsdecode(path))


def _install_hook() -> None:
    global _hook_installed
    with _hook_lock:
        if not _hook_installed:
            sys.addaudithook(_audit)
            _hook_installed = True


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str
    opened: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return f"systolix {' '.join(self.args)}\n-> exit {self.code}\nstdout: {self.stdout[-2000:]!r}\nstderr: {self.stderr[-3000:]!r}"


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise ``CaseTimeout`` in the main thread after ``seconds``."""
    def on_alarm(signum, frame):
        raise CaseTimeout(f"ran past {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _print_warning(message, category, filename, lineno, file=None, line=None):
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def cli(*args, seconds: float = CASE_SECONDS, cwd: Path | None = None) -> Result:
    """``systolix ARGS`` in this process: exit status, captured output, files opened."""
    global _opened
    from systolix.cli import main

    _install_hook()
    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    opened: list[str] = []
    code = 0
    old_cwd = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with time_limit(seconds), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                warnings.catch_warnings():
            # As in a real process (pytest would otherwise record warnings instead of printing them).
            warnings.resetwarnings()
            warnings.simplefilter("default")
            warnings.showwarning = _print_warning
            _opened = opened
            try:
                main(argv)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except CaseTimeout:
                code = -1
                err.write(f"\nTIMEOUT after {seconds} s\n")
            except BaseException:  # a traceback: what the user would see
                import traceback

                code = 1
                err.write(traceback.format_exc())
            finally:
                _opened = None
    finally:
        os.chdir(old_cwd)
    return Result(code, out.getvalue(), err.getvalue(), opened, argv)


def subprocess_cli(*args, seconds: float = SUBPROCESS_SECONDS, cwd: Path | None = None) -> Result:
    """``systolix ARGS`` as a real process (the installed script)."""
    argv = [str(a) for a in args]
    env = {**os.environ, "COLUMNS": "120"}
    try:
        proc = subprocess.run([str(SCRIPT), *argv], capture_output=True, text=True, timeout=seconds, cwd=cwd, env=env)
    except subprocess.TimeoutExpired as e:
        return Result(-1, (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""),
                      f"TIMEOUT after {seconds} s", [], argv)
    return Result(proc.returncode, proc.stdout, proc.stderr, [], argv)


def assert_clean_error(result: Result, *fragments: str, absent_outputs=(), outside: Path | None = None,
                       secret_markers=()) -> str:
    """The contract for bad input; returns the error line.

    ``absent_outputs``: paths that must not exist afterwards (no partial output). ``outside``: a
    folder no file may have been opened under. ``secret_markers``: strings (a refused file's
    size, its contents) that must not appear in anything the CLI printed.
    """
    assert result.code == 2, str(result)
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout, str(result)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), str(result)
    assert result.stdout == "", str(result)
    line = lines[0]
    for f in fragments:
        assert f in line, (f, str(result))
    for p in absent_outputs:
        p = Path(p)
        assert not p.exists() or (p.is_dir() and not any(p.iterdir())), f"partial output {p} left by:\n{result}"
        if p.parent.is_dir():
            leftovers = [q.name for q in p.parent.iterdir() if q.name.startswith(f".{p.name}.") and q.name.endswith(".tmp")]
            assert not leftovers, f"temporary files {leftovers} left by:\n{result}"
    if outside is not None:
        root = os.path.realpath(outside)
        escaped = [p for p in result.opened if os.path.realpath(p).startswith(root + os.sep) or os.path.realpath(p) == root]
        assert not escaped, f"opened {escaped} outside the model's folder:\n{result}"
    for marker in secret_markers:
        assert marker not in result.stderr and marker not in result.stdout, (marker, str(result))
    return line
