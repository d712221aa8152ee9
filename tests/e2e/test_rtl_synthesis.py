"""Synthesis of the generated hardware with Yosys (and nextpnr for ECP5), through ``systolix rtl``.

Slow (a minute or two each on two cores, cached afterwards under ``$SYSTOLIX_CACHE``).
"""

from __future__ import annotations

import json

import pytest

from systolix.rtl.synth import BUDGETS
from tests.cli_helpers import run_cli

pytestmark = pytest.mark.slow


@pytest.mark.slow(seconds=110)
def test_pynqz1_for_xilinx7_fits_the_xc7z020_with_a_dsp_per_multiplier(tmp_path):
    proc = run_cli("rtl", "--arch", "pynqz1", "-o", tmp_path, "--synth", "xilinx7", check=True, timeout=3600)
    data = json.loads((tmp_path / "resources.json").read_text())
    assert {"lut", "ff", "dsp", "bram36", "uram"} <= set(data)
    assert data["board"] == "pynq-z1" and data["part"] == "XC7Z020" and data["fits"] is True
    assert data["dsp"] >= 64  # the 8x8 array's multipliers, each a DSP48E1 (plus the SIMD ALUs')
    budget = BUDGETS["pynq-z1"]
    assert 0 < data["lut"] <= budget.lut and 0 < data["ff"] <= budget.ff and 0 < data["bram36"] <= budget.bram36
    assert "dsp" in proc.stdout and "XC7Z020" in proc.stdout  # the table on stdout


@pytest.mark.slow(seconds=250)
def test_ecp5_places_routes_and_reports_fmax(tmp_path):
    run_cli("rtl", "--arch", "cmoda7", "-o", tmp_path, "--synth", "ecp5", check=True, timeout=3600)
    data = json.loads((tmp_path / "resources.json").read_text())
    assert data["family"] == "ecp5" and data["fits"] is True
    assert data["dsp"] >= 16  # the 4x4 array's multipliers on MULT18X18D blocks
    assert data["fmax_mhz"] is not None and 10 < data["fmax_mhz"] < 500
