"""``systolix rtl``: the Verilog files and their ports, and every refusal as one ``error:`` line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from systolix.rtl.synth import BUDGETS, Resources
from tests.cli_helpers import assert_user_error, run_cli

TENSIL_TOP_PORTS = ["clock", "reset", "instruction_tdata", "instruction_tvalid", "instruction_tready",
                    "instruction_tlast", "sample_tdata", "sample_tvalid", "sample_tready", "sample_tlast"]
AXI_SIGNALS = ["awvalid", "awready", "awaddr", "awlen", "awsize", "awburst", "awcache", "wvalid", "wready", "wdata",
               "wstrb", "wlast", "bvalid", "bready", "arvalid", "arready", "araddr", "arlen", "arsize", "arburst",
               "arcache", "rvalid", "rready", "rdata", "rlast"]


def test_rtl_writes_the_top_level_with_tensils_ports_and_the_tcu(tmp_path):
    run_cli("rtl", "--arch", "cmoda7", "-o", tmp_path / "out", check=True)
    top = (tmp_path / "out" / "top_cmoda7.v").read_text()
    inner = (tmp_path / "out" / "tcu_cmoda7.v").read_text()
    header = re.search(r"module top_cmoda7\((.*?)\);", top, re.S).group(1)
    ports = {p.strip() for p in header.split(",")}
    expected = set(TENSIL_TOP_PORTS) | {f"m_axi_dram{d}_{s}" for d in (0, 1) for s in AXI_SIGNALS}
    assert expected <= ports, sorted(expected - ports)
    assert re.search(r"input \[63:0\] m_axi_dram0_rdata;", top)  # cmoda7: 4 x 16-bit vectors on a 64-bit bus
    assert "module top_cmoda7" not in inner and "compute_lane" in inner and "dram_lane" in inner
    design = json.loads((tmp_path / "out" / "design.json").read_text())
    assert design["architecture"]["array_size"] == 4 and design["axi_data_bits"] == 64


@pytest.mark.parametrize("tarch,fragment", [
    ({"number_of_threads": 2}, "number_of_threads = 2"),
    ({"array_size": 200}, "array_size = 200"),
    ({"local_depth": 1}, "local_depth = 1"),
])
def test_an_architecture_the_generator_cannot_build_is_one_error_naming_the_parameter(tmp_path, tarch, fragment):
    from systolix.arch import ARCHITECTURES

    path = tmp_path / "bad.tarch"
    path.write_text(json.dumps(ARCHITECTURES["cmoda7"].to_tarch() | tarch))
    assert_user_error(run_cli("rtl", "--arch", path, "-o", tmp_path / "out"), fragment)
    assert not (tmp_path / "out").exists()


def test_bad_options_are_one_error(tmp_path):
    assert_user_error(run_cli("rtl", "--arch", "cmoda7", "-o", tmp_path, "--synth", "virtex2"), "--synth 'virtex2'")
    assert_user_error(run_cli("rtl", "--arch", "cmoda7", "-o", tmp_path, "--board", "zedboard"), "--board 'zedboard'")
    assert_user_error(run_cli("rtl", "--arch", "cmoda7", "-o", tmp_path, "--bus-bits", "96"), "AXI data width 96")
    (tmp_path / "file").write_text("x")
    assert_user_error(run_cli("rtl", "--arch", "cmoda7", "-o", tmp_path / "file"), "not a folder")


def test_a_synthesis_that_does_not_fit_names_the_resource_and_exits_2(tmp_path, monkeypatch, capsys):
    """The fit check on what Yosys reported (Yosys itself stubbed: a real run takes minutes)."""
    import systolix.rtl.synth as synth
    from systolix.cli import main

    too_big = Resources("xilinx7", lut=25_000, ff=9_000, dsp=72, bram36=37.5, uram=0)
    monkeypatch.setattr(synth, "synthesize", lambda *a, **k: too_big)
    monkeypatch.setattr(sys, "argv", ["systolix", "rtl", "--arch", "pynqz1", "-o", str(tmp_path), "--synth", "xilinx7",
                                      "--board", "arty-a7-35"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "lut: 25,000 of 20,800" in err[0]
    saved = json.loads((tmp_path / "resources.json").read_text())
    assert saved["fits"] is False and saved["budget"]["lut"] == BUDGETS["arty-a7-35"].lut


def test_missing_verilator_says_how_to_install_it(tmp_path):
    from systolix.arch import ARCHITECTURES
    from systolix.isa import InstructionLayout, NoOp, encode_program
    from systolix.artifacts import TModel  # noqa: F401  (the manifest format the CLI reads)

    arch = ARCHITECTURES["cmoda7"]
    (tmp_path / "p.tprog").write_bytes(encode_program([NoOp()], InstructionLayout.of(arch)))
    manifest = {"name": "p", "prog": {"file_name": "p.tprog", "size": InstructionLayout.of(arch).instruction_bytes},
                "consts": [], "inputs": [{"name": "x", "base": 0, "size": 1}],
                "outputs": [{"name": "y", "base": 1, "size": 1}], "arch": arch.to_tarch()}
    (tmp_path / "p.tmodel").write_text(json.dumps(manifest))
    import numpy as np

    np.save(tmp_path / "x.npy", np.zeros((1, 4), dtype=np.float32))
    env = {**os.environ, "PATH": "/nonexistent"}
    proc = subprocess.run([sys.executable, "-m", "systolix", "run", str(tmp_path / "p.tmodel"), "--input",
                           str(tmp_path / "x.npy"), "--engine", "rtl"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert_user_error(proc, "verilator is not installed", "apt-get install verilator")
