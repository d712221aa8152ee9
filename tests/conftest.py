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
# Long tests are marked ``slow(seconds=...)`` with about what they take in the suite on CI's two
# cores (``--durations``): a number, or for a parametrized test a dict from the case's id to its
# seconds (cases not in it: ``DEFAULT_SLOW_SECONDS``, as for unmarked slow tests).
# ``slow(heavy=True)`` marks the ResNet-50 v2 compiles and runs (up to 11 GB each): they run one
# after another.
DEFAULT_SLOW_SECONDS = 60


def _expected_seconds(item) -> float:
    mark = item.get_closest_marker("slow")
    if mark is None:
        return 0.0
    seconds = mark.kwargs.get("seconds", DEFAULT_SLOW_SECONDS)
    if isinstance(seconds, dict):
        callspec = getattr(item, "callspec", None)
        seconds = seconds.get(callspec.id if callspec else "", DEFAULT_SLOW_SECONDS)
    return float(seconds)


def _heavy(item) -> bool:
    mark = item.get_closest_marker("slow")
    return mark is not None and bool(mark.kwargs.get("heavy", False))


def _share_sizes(count: int, workers: int) -> list[int]:
    """How many tests pytest-xdist's ``worksteal`` first hands each worker: contiguous shares of
    the collection, ``len(pending) // workers_left`` each in turn."""
    sizes, left = [], count
    for k in range(workers):
        sizes.append(left // (workers - k))
        left -= sizes[-1]
    return sizes


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist, the long tests start first, so that none is left to run alone at the
    end: collected in file order, the three ResNet-50 v2 tests (3 to 6 minutes each) ran last
    while the other worker idled (31 min; 28 is the CPU time over two cores). The heavy ones go
    one after another at the head of the first worker's share: two at once need 18 of this
    machine's 23 GB, and with every long test at the head of both shares (the threaded emulator
    runs side by side) the suite took 63 CPU-minutes instead of 56. The other long tests follow,
    longest first to the share with the fewest expected seconds; short tests fill the rest, in
    file order, and are what a worker that runs dry steals (from a queue's back)."""
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    if workers < 2 or len(items) < workers:
        return
    slow = sorted((item for item in items if item.get_closest_marker("slow")), key=lambda item: (_heavy(item), _expected_seconds(item)),
                  reverse=True)
    sizes = _share_sizes(len(items), workers)
    shares: list[list] = [[] for _ in range(workers)]
    load = [0.0] * workers
    for item in slow:
        seconds = _expected_seconds(item)
        open_shares = [k for k in range(workers) if len(shares[k]) < sizes[k]]
        k = open_shares[0] if _heavy(item) else min(open_shares, key=lambda k: load[k])
        shares[k].append(item)
        load[k] += seconds
    chosen = {id(item) for item in slow}
    fast = iter(item for item in items if id(item) not in chosen)
    for k in range(workers):
        shares[k].extend(next(fast) for _ in range(sizes[k] - len(shares[k])))
    items[:] = [item for share in shares for item in share]
