"""Architectures: presets equal Tensil's files, .tarch round trip, validation errors."""

from __future__ import annotations

import json

import pytest

from systolix.arch import ARCHITECTURES, BOARDS, TARCH_KEYS, Architecture, get_architecture
from systolix.errors import ArchitectureError
from systolix.isa import InstructionLayout
from tests.conftest import TENSIL


@pytest.mark.parametrize("name", sorted(n for n, a in ARCHITECTURES.items() if a.tandem is None))
def test_presets_equal_tensil_files(name):
    shipped = json.loads((TENSIL / "arch" / f"{name}.tarch").read_text())
    assert ARCHITECTURES[name].to_tarch() == shipped


def test_every_shipped_tarch_loads_and_has_8_or_9_byte_instructions():
    files = sorted((TENSIL / "arch").glob("*.tarch")) + [TENSIL / "speech_robot" / "speech_robot.tarch"]
    sizes = {p.stem: InstructionLayout.of(Architecture.load(p)).instruction_bytes for p in files}
    # The notes: 8 bytes for the 8x8 and smaller designs, 9 for ultra96v2 and zcu104.
    assert sizes == {
        "artya7100t": 8, "cmoda7": 8, "pynqz1": 8, "ultra96v2": 9, "zcu104": 9, "zcu104_uram": 9, "speech_robot": 8,
    }


def test_tarch_round_trip(tmp_path):
    a = ARCHITECTURES["ultra96v2"]
    a.save(tmp_path / "a.tarch")
    assert Architecture.load(tmp_path / "a.tarch") == a
    assert list(json.loads((tmp_path / "a.tarch").read_text())) == list(TARCH_KEYS)


def test_boards_reference_valid_architectures():
    assert BOARDS["arty-a7-35"].architecture.array_size == 8
    assert BOARDS["pynq-z1"].architecture.array_size == 12
    assert BOARDS["ultra96-v2"].clock_mhz == 300
    assert BOARDS["zcu104"].dram_bus_bits == 128 and BOARDS["zcu104-512"].dram_bus_bits == 512
    assert BOARDS["zcu104"].architecture == ARCHITECTURES["zcu104"]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"local_depth": None}, "missing key 'local_depth'"),
        ({"array_size": "8"}, "field 'array_size'"),
        ({"array_size": 1}, "greater than or equal to 2"),
        ({"data_type": "FP12BP6"}, "unknown data type"),
        ({"array_size": 8.0}, "field 'array_size'"),
        ({"bogus": 1}, "unknown key 'bogus'"),
    ],
)
def test_bad_tarch_is_a_clear_error(tmp_path, change, message):
    d = ARCHITECTURES["pynqz1"].to_tarch()
    for k, v in change.items():
        if v is None:
            del d[k]
        else:
            d[k] = v
    p = tmp_path / "bad.tarch"
    p.write_text(json.dumps(d))
    with pytest.raises(ArchitectureError) as e:
        Architecture.load(p)
    assert str(p) in str(e.value) and message in str(e.value)


def test_get_architecture_by_name_and_path():
    assert get_architecture("zcu104") is ARCHITECTURES["zcu104"]
    assert get_architecture(str(TENSIL / "speech_robot" / "speech_robot.tarch")).dram0_depth == 131072
    with pytest.raises(ArchitectureError, match="unknown architecture"):
        get_architecture("nope")
