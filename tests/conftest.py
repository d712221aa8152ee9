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


# ------------------------------------------------------------------------------ order under xdist
# Long tests are marked ``slow(seconds=...)`` with about what they take on one of CI's two cores
# (``--durations``); unmarked slow tests count as ``DEFAULT_SLOW_SECONDS``.
DEFAULT_SLOW_SECONDS = 60


def _expected_seconds(item) -> float:
    mark = item.get_closest_marker("slow")
    return 0.0 if mark is None else float(mark.kwargs.get("seconds", DEFAULT_SLOW_SECONDS))


def _share_sizes(count: int, workers: int) -> list[int]:
    """How many tests pytest-xdist's ``worksteal`` first hands each worker: contiguous shares of
    the collection, ``len(pending) // workers_left`` each in turn."""
    sizes, left = [], count
    for k in range(workers):
        sizes.append(left // (workers - k))
        left -= sizes[-1]
    return sizes


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist, every worker's first share starts with long tests: the longest first,
    each to the share with the fewest expected seconds so far. Collected in file order, the
    ResNet-50 tests (6 to 8 minutes each) fell at the end of one share and ran alone while the
    other worker idled: 31 min instead of about 28. Short tests fill the shares after them, so
    the ones stolen at the end (from the back of a queue) are short."""
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    if workers < 2 or len(items) < workers:
        return
    slow = sorted((item for item in items if item.get_closest_marker("slow")), key=_expected_seconds, reverse=True)
    sizes = _share_sizes(len(items), workers)
    shares: list[list] = [[] for _ in range(workers)]
    load = [0.0] * workers
    for item in slow:
        k = min((k for k in range(workers) if len(shares[k]) < sizes[k]), key=lambda k: load[k])
        shares[k].append(item)
        load[k] += _expected_seconds(item)
    chosen = {id(item) for item in slow}
    fast = iter(item for item in items if id(item) not in chosen)
    for k in range(workers):
        shares[k].extend(next(fast) for _ in range(sizes[k] - len(shares[k])))
    items[:] = [item for share in shares for item in share]
