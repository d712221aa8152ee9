"""What the hardening keeps working: sparse DRAM, the memory limit, NaN on request, file names
inside the model's folder (subfolders and links that stay inside), the readers' good paths."""

from __future__ import annotations

import io
import json
import os
import shutil
import zipfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto

import systolix
from systolix.arch import Architecture
from systolix.artifacts.arrays import read_arrays
from systolix.artifacts.files import check_member_name, member_path
from systolix.emulator import Emulator
from systolix.errors import ArtifactError, SystolixError
from systolix.frontend import FrontendError
from systolix.isa import DataFlow, DataMove, InstructionLayout, encode_program
from systolix.limits import MemoryLimitError, parse_size
from systolix.numerics import DataType, to_fixed
from tests.onnx_builders import conv_bn_relu
from tests.unit.test_emulator_runtime import ARCH, X, build_model, reference

HUGE_DRAM = Architecture.from_tarch({**ARCH.to_tarch(), "dram0_depth": 2**32, "dram1_depth": 2**32})


def test_dram_holds_only_the_spans_in_use():
    """A 2^32-vector DRAM0 (2 TiB of int64 at N=4... as a dense array) costs the vectors the program
    and the driver touch: a copy from address 0 to the last vector runs within a 1 MiB limit."""
    top = 2**32 - 3
    prog = encode_program([DataMove(DataFlow.DRAM0_TO_LOCAL, 0, 0, 1), DataMove(DataFlow.LOCAL_TO_DRAM0, 0, top, 1)],
                          InstructionLayout.of(HUGE_DRAM))
    emu = Emulator(HUGE_DRAM, batch=3, memory_limit=1 << 20)
    data = np.arange(3 * 2 * 4).reshape(3, 2, 4)
    emu.write("dram0", 0, data)
    emu.run(prog)
    assert np.array_equal(emu.read("dram0", top, 2), data)
    assert emu.dram0.vectors <= 4 + 2 * 64 and emu.dram0[1, top + 1].tolist() == data[1, 1].tolist()
    assert emu.read("dram0", 1000, 2).tolist() == np.zeros((3, 2, 4)).tolist()  # never written: zeros
    assert emu.dram0.vectors <= 4 + 2 * 64  # ... and reading it allocated nothing


def test_span_memory_merges_and_keeps_data():
    emu = Emulator(HUGE_DRAM, memory_limit=1 << 20)
    emu.write("dram1", 500, np.full((2, 4), 7))
    emu.write("dram1", 10, np.full((1, 4), 3))
    emu.write("dram1", 502, np.full((1, 4), 9))  # adjacent: joins the first span
    assert emu.dram1.spans.tolist() == [[10, 11], [500, 503]]
    assert emu.dram1[0, [10, 500, 501, 502, 503], 0].tolist() == [3, 7, 7, 9, 0]
    emu.write("dram1", 40, np.full((1, 4), 5))  # within 64 of the span at 10: merged
    assert emu.dram1.spans.tolist() == [[10, 41], [500, 503]]
    assert emu.dram1[0, [10, 40, 500], 0].tolist() == [3, 5, 7]


def test_memory_limit_refuses_before_allocating_and_states_both_numbers():
    wide = Architecture.from_tarch({**ARCH.to_tarch(), "array_size": 256, "local_depth": 2**24})
    prog = encode_program([DataMove(DataFlow.DRAM0_TO_LOCAL, 2**24 - 1, 0, 0)], InstructionLayout.of(wide))
    emu = Emulator(wide, memory_limit=1 << 30)
    with pytest.raises(MemoryLimitError, match=r"would need 32\.0 GiB .*local 16,777,216 .*memory limit of 1\.0 GiB"):
        emu.run(prog)
    assert emu.local.shape[1] == 0  # nothing was allocated
    with pytest.raises(MemoryLimitError, match="run fewer inputs"):
        Emulator(ARCH, batch=10**9)


def test_memory_limit_setting(monkeypatch):
    assert parse_size("8G") == 8 << 30 and parse_size("512M") == 512 << 20 and parse_size("1000") == 1000
    assert parse_size("1.5GiB") == 3 << 29
    for bad in ("", "x", "-1", "0", "1e9", "8X"):
        with pytest.raises(SystolixError, match="SYSTOLIX_MEMORY_LIMIT"):
            parse_size(bad)
    monkeypatch.setenv("SYSTOLIX_MEMORY_LIMIT", "3M")
    assert Emulator(ARCH).memory_limit == 3 << 20


def test_nan_inputs_run_as_zero_when_allowed(tmp_path):
    model = systolix.load(build_model(tmp_path))
    x = X.copy()
    x[0, 1] = np.nan
    with pytest.raises(SystolixError, match=r"input 'x' holds 1 NaN value \(the first at index \[0, 1\]\)"):
        model.run({"x": x})
    zero = X.copy()
    zero[0, 1] = 0
    assert np.array_equal(model.run({"x": x}, allow_nonfinite=True)["y"], reference(zero))
    # FLOAT32 keeps NaN: it propagates.
    assert np.isnan(to_fixed(np.array([np.nan]), DataType.FLOAT32)).all()


def test_file_names_may_use_subfolders_and_links_that_stay_inside(tmp_path):
    path = build_model(tmp_path)
    (tmp_path / "data").mkdir()
    shutil.move(tmp_path / "m.tdata", tmp_path / "data" / "m.tdata")
    os.symlink("data/m.tdata", tmp_path / "link.tdata")
    d = json.loads(path.read_text())
    for name in ("data/m.tdata", "link.tdata", "./data/m.tdata"):
        d["consts"][0]["file_name"] = name
        path.write_text(json.dumps(d))
        assert np.array_equal(systolix.load(path).run({"x": X})["y"], reference(X))


@pytest.mark.parametrize("name, problem", [
    ("/etc/passwd", "absolute"), ("../x", "'..'"), ("a/../../x", "'..'"), ("", "empty"), ("a\x00b", "NUL"),
    (".", "folder itself"), ("x" * 256, "longer than 255"), ("y/" * 600, "characters long"), (3, "string"),
])
def test_member_names_refused(tmp_path, name, problem):
    assert problem in check_member_name(name)
    if isinstance(name, str):
        with pytest.raises(ArtifactError, match="m.tmodel"):
            member_path(tmp_path, name, "prog.file_name", "m.tmodel")


def test_arrays_read_back_as_numpy_writes_them(tmp_path):
    arrays = {"a": np.arange(12, dtype=">i4").reshape(3, 4), "b": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
              "c": np.array([True, False]), "d": np.float16(3.5) * np.ones((2, 0, 3), np.float16)}
    np.savez_compressed(tmp_path / "a.npz", **arrays)
    got = read_arrays(tmp_path / "a.npz")
    assert set(got) == set(arrays)
    for k, v in arrays.items():
        assert got[k].dtype == v.dtype and np.array_equal(got[k], v)
    np.save(tmp_path / "b.npy", arrays["b"])
    assert np.array_equal(read_arrays(tmp_path / "b.npy"), arrays["b"])
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("x.npy", b"\x93NUMPY\x01\x00" + b"{" * 20)
    (tmp_path / "c.npz").write_bytes(buffer.getvalue())
    with pytest.raises(ArtifactError, match=r"c.npz: array 'x': not a readable .npy array"):
        read_arrays(tmp_path / "c.npz")


def test_onnx_external_data_is_refused_without_reading_it(tmp_path):
    m, _ = conv_bn_relu()
    secret = tmp_path / "weights.bin"
    secret.write_bytes(np.zeros(10**4, np.float32).tobytes())
    w = next(t for t in m.graph.initializer if t.name == "w")
    w.ClearField("raw_data")
    w.ClearField("float_data")
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value=str(secret))
    onnx.save(m, tmp_path / "m.onnx")
    with pytest.raises(FrontendError, match=r"tensor 'w' is stored in an external data file"):
        systolix.compile(tmp_path / "m.onnx", "pynqz1")


def test_no_arguments_print_the_help(capsys):
    from systolix.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 0 and "Usage" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--classes", "0"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and err.startswith("error: ")
