"""Shared test fixtures: where the conformance artifacts live; the fuzz suite's tally."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]
# ../shared beside the project: real Tensil artifacts, used by path and never copied.
SHARED = PROJECT.parent / "shared"
TENSIL = SHARED / "conformance" / "tensil"
RESNET20 = TENSIL / "resnet20_zcu104"
SPEECH = TENSIL / "speech_robot"


@pytest.fixture(scope="session")
def tensil_dir() -> Path:
    assert TENSIL.is_dir(), f"conformance artifacts missing: {TENSIL}"
    return TENSIL


#: Fuzz cases run, by kind (tests/fuzz counts them; reported at the end of the session). Under
#: pytest-xdist each worker counts its own and the controller adds them up.
FUZZ_CASES: Counter = Counter()


def pytest_sessionfinish(session):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["fuzz_cases"] = dict(FUZZ_CASES)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    FUZZ_CASES.update(getattr(node, "workeroutput", {}).get("fuzz_cases", {}))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if FUZZ_CASES:
        total = sum(FUZZ_CASES.values())
        terminalreporter.write_sep("-", f"fuzz: {total} bad inputs checked")
        for name, n in sorted(FUZZ_CASES.items()):
            terminalreporter.write_line(f"  {n:5d}  {name}")
