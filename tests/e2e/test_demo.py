"""The README's main job: compile the bundled digits CNN, run it, compare with onnxruntime."""

from __future__ import annotations

import pytest

import re

from tests.cli_helpers import run_cli

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]


def test_demo_runs_and_agrees_with_onnxruntime(tmp_path):
    proc = run_cli("demo", "--workdir", tmp_path / "demo", check=True)
    out = proc.stdout
    accuracies = re.search(r"accuracy\s+│\s+([\d.]+)%\s+│\s+([\d.]+)%", out)
    agree = re.search(r"same class as onnxruntime\s+│\s+│\s+([\d.]+)%", out)
    assert accuracies and agree, out
    ref, ours = map(float, accuracies.groups())
    # The digits CNN's accuracy through our compile is within 1 point of onnxruntime's.
    assert ref > 90 and abs(ref - ours) <= 1.0
    assert float(agree.group(1)) >= 99.0
    for board in ("arty-a7-35", "pynq-z1", "ultra96-v2", "zcu104"):
        assert board in out
    assert list((tmp_path / "demo").glob("*.tprog")) and list((tmp_path / "demo").glob("*.tmodel"))
