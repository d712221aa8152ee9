"""Shared test fixtures: where the conformance artifacts live."""

from __future__ import annotations

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
