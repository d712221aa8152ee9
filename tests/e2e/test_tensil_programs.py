"""Tensil's real programs: disasm then asm gives them back byte for byte; info reports their mix."""

from __future__ import annotations

import re

import pytest

from tests.cli_helpers import run_cli
from tests.conftest import RESNET20, SPEECH

PROGRAMS = [
    (RESNET20 / "baseline" / "resnet20v2_cifar_onnx_zcu104.tprog", "zcu104", 9),
    (SPEECH / "speech_commands_onnx_speech_robot.tprog", str(SPEECH / "speech_robot.tarch"), 8),
] + [
    (p, "zcu104_uram", 9)
    for p in sorted(RESNET20.glob("ultra_ram*/*.tprog"))
]


@pytest.mark.parametrize("program, arch, width", PROGRAMS, ids=lambda v: getattr(v, "parent", v).name if hasattr(v, "parent") else str(v))
def test_disasm_then_asm_is_byte_identical(tmp_path, program, arch, width):
    listing = tmp_path / "prog.s"
    run_cli("disasm", program, "--arch", arch, "-o", listing, check=True)
    text = listing.read_text()
    assert text.count("\n") > 1000
    run_cli("asm", listing, "--arch", arch, "-o", tmp_path / "back.tprog", check=True)
    original = program.read_bytes()
    assert len(original) % width == 0
    assert (tmp_path / "back.tprog").read_bytes() == original


def mix(stdout: str) -> dict[str, int]:
    out = {}
    for name in ("MatMul", "DataMove", "LoadWeights", "SIMD", "total"):
        m = re.search(rf"│ {name}\s+│\s+([\d,]+)", stdout)
        if m:
            out[name] = int(m.group(1).replace(",", ""))
    return out


def test_info_reports_resnet20_mix():
    proc = run_cli("info", RESNET20 / "baseline" / "resnet20v2_cifar_onnx_zcu104.tmodel", check=True)
    assert mix(proc.stdout) == {"MatMul": 3552, "DataMove": 883, "LoadWeights": 1160, "SIMD": 44576, "total": 50171}
    assert "dram0 -> local" in proc.stdout and "451,539 bytes" in proc.stdout


def test_info_reports_speech_mix():
    proc = run_cli("info", SPEECH / "speech_commands_onnx_speech_robot.tmodel", check=True)
    assert mix(proc.stdout) == {"MatMul": 27480, "DataMove": 2278, "LoadWeights": 22916, "SIMD": 27634, "total": 80308}


def test_archs_lists_presets_and_boards():
    out = run_cli("archs", check=True).stdout
    for name in ("pynqz1", "ultra96v2", "zcu104_uram", "artya7100t", "cmoda7", "arty-a7-35", "pynq-z1", "ultra96-v2", "zcu104-512"):
        assert name in out
