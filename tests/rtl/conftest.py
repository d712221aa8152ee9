"""Tests that need Verilator (``./dev`` installs it from Debian); skipped with the reason where absent.

Every test here is marked ``rtl``. Models are built once per design and cached under
``$SYSTOLIX_CACHE`` (default ``~/.cache/systolix``), so a second run of the suite starts at once.
"""

from __future__ import annotations

import shutil

import pytest


def pytest_collection_modifyitems(config, items):
    missing = [tool for tool in ("verilator", "make") if shutil.which(tool) is None]
    for item in items:
        if "tests/rtl/" not in str(item.fspath).replace("\\", "/"):
            continue
        item.add_marker(pytest.mark.rtl)
        if missing:
            item.add_marker(pytest.mark.skip(reason=f"{', '.join(missing)} not installed (./dev setup installs it)"))
