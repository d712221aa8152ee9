"""Run the CLI as a user would, in a subprocess."""

from __future__ import annotations

import subprocess
import sys


def run_cli(*args, check: bool = False, timeout: float = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "systolix", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**__import__("os").environ, "COLUMNS": "160"},
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"systolix {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def assert_user_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    """Exit status 2, one line on stderr starting with 'error:', no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for f in fragments:
        assert f in lines[0], (f, lines[0])
