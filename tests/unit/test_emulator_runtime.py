"""The driver (``systolix.load(...).run``) and the tensor <-> vector layout, on tiny hand-made models.

The model computes ``relu(x @ W + b)`` for a 3-vector; its numbers are multiples of 1/4, so the
fixed-point result is exact and NumPy's float result is the reference.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import systolix
from systolix.arch import Architecture
from systolix.artifacts import write_tdata
from systolix.errors import ArtifactError, SystolixError
from systolix.isa import SIMD, DataFlow, DataMove, InstructionLayout, LoadWeights, MatMul, SimdOp, encode_program
from systolix.numerics import DataType, to_fixed
from systolix.runtime import tensor_to_vectors, vectors_to_tensor
from systolix.runtime.model import RuntimeInputError

pytestmark = pytest.mark.needs_emulator

N = 4
ARCH = Architecture.from_tarch({
    "data_type": "FP16BP8", "array_size": N, "dram0_depth": 1 << 20, "dram1_depth": 1 << 20, "local_depth": 64,
    "accumulator_depth": 32, "simd_registers_depth": 1, "stride0_depth": 8, "stride1_depth": 8,
})
BIAS = np.array([0.5, -1.0], dtype=np.float32)
W = np.array([[1.0, -0.5], [0.25, 2.0], [-1.5, 0.75]], dtype=np.float32)  # [in 3, out 2]


def reference(x: np.ndarray) -> np.ndarray:
    return np.maximum(x @ W + BIAS, 0)


def build_model(directory: Path, *, shapes: bool = True, consts_local: bool = False, tdata_vectors: int | None = None) -> Path:
    """Write a .tprog/.tdata/.tmodel computing relu(x @ W + b): x [1, 3] at DRAM0 0, y [1, 2] at DRAM0 5."""
    consts = np.zeros((N + 1, N), dtype=np.float32)
    consts[0, :2] = BIAS  # the bias row first, then one row per (padded) input channel
    consts[1:4, :2] = W
    raw = to_fixed(consts, DataType.FP16BP8)
    write_tdata(directory / "m.tdata", raw[: tdata_vectors if tdata_vectors is not None else N + 1], DataType.FP16BP8)
    prog = [] if consts_local else [DataMove(DataFlow.DRAM1_TO_LOCAL, 10, 0, N)]
    prog += [
        DataMove(DataFlow.DRAM0_TO_LOCAL, 0, 0, 0),
        LoadWeights(10, N),
        MatMul(0, 3, 0),
        SIMD(SimdOp.ZERO, dest=1),
        SIMD(SimdOp.MAX, left=0, right=1, read_address=3, write_address=3, read=True, write=True),
        DataMove(DataFlow.ACC_TO_LOCAL, 1, 3, 0),
        DataMove(DataFlow.LOCAL_TO_DRAM0, 1, 5, 0),
    ]
    data = encode_program(prog, InstructionLayout.of(ARCH))
    (directory / "m.tprog").write_bytes(data)
    manifest = {
        "name": "tiny", "prog": {"file_name": "m.tprog", "size": len(data)},
        "consts": [{"file_name": "m.tdata", "base": 10 if consts_local else 0, "size": N + 1}],
        "inputs": [{"name": "x", "base": 0, "size": 1}], "outputs": [{"name": "y", "base": 5, "size": 1}],
        "arch": ARCH.to_tarch(), "load_consts_to_local": consts_local,
    }
    if shapes:
        manifest["systolix"] = {
            "version": 1,
            "inputs": [{"name": "x", "shape": [1, 3], "layout": {"perm": [0, 1], "padded_channels": N}}],
            "outputs": [{"name": "y", "shape": [1, 2], "layout": {"perm": [0, 1], "padded_channels": N}}],
            "layers": [], "segments": None,
        }
    path = directory / "m.tmodel"
    path.write_text(json.dumps(manifest))
    return path


X = np.array([[1.0, 2.0, 0.5]], dtype=np.float32)


@pytest.mark.parametrize("consts_local", [False, True])
def test_model_with_shapes_runs_float_tensors(tmp_path, consts_local):
    model = systolix.load(build_model(tmp_path, consts_local=consts_local))
    out = model.run({"x": X})
    assert out["y"].shape == (1, 2) and out["y"].dtype == np.float32
    assert np.array_equal(out["y"], reference(X))
    assert np.array_equal(model.run(X)["y"], reference(X))  # one input: a bare array works


def test_batch_axis_runs_in_one_pass(tmp_path):
    model = systolix.load(build_model(tmp_path))
    xs = np.array([[[1.0, 2.0, 0.5]], [[-1.0, 0.25, 1.0]], [[0.0, 0.0, 0.0]]], dtype=np.float32)
    detailed = model.run_detailed({"x": xs})
    assert detailed.batch == 3 and detailed.result.instructions == len(model.program)
    assert detailed.outputs["y"].shape == (3, 1, 2)
    for b in range(3):
        assert np.array_equal(detailed.outputs["y"][b], reference(xs[b]))


def test_tensil_style_model_takes_raw_vectors(tmp_path):
    model = systolix.load(build_model(tmp_path, shapes=False))
    vec = np.zeros((1, N), dtype=np.float32)
    vec[0, :3] = X[0]
    out = model.run({"x": vec})["y"]
    assert out.shape == (1, N)
    assert np.array_equal(out[0, :2], reference(X)[0]) and not out[0, 2:].any()
    batch = model.run({"x": np.stack([vec, vec * 0])})["y"]
    assert batch.shape == (2, 1, N) and np.array_equal(batch[0], out)
    assert np.array_equal(batch[1, 0, :2], reference(np.zeros((1, 3)))[0])  # relu(bias)


def test_input_saturation_is_counted(tmp_path):
    model = systolix.load(build_model(tmp_path))
    run = model.run_detailed({"x": np.array([[1000.0, 0.0, 0.0]], dtype=np.float32)})
    assert run.input_saturations == 1
    assert run.outputs["y"][0, 0] == pytest.approx(127.99609375 + 0.5, abs=1)  # saturated input, then array math


def test_a_run_that_saturates_warns_and_one_that_does_not_is_silent(tmp_path):
    import warnings

    from systolix.runtime import SaturationWarning

    model = systolix.load(build_model(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.run({"x": X})
    # 100 * 1.0 + 30 * 0.25 + 0.5: exact inputs, but the sum goes past 128 in the accumulators.
    with pytest.warns(SaturationWarning, match=r"m.tmodel: 1 results in 1 of 2 inputs saturated at the FP16BP8 range"):
        out = model.run({"x": np.array([[[120.0, 40.0, 0.0]], X], np.float32)})["y"]
    assert out[0, 0, 0] == pytest.approx(127.99609375) and np.array_equal(out[1], reference(X))
    with pytest.warns(SaturationWarning, match=r"1 input values saturated"):
        model.run({"x": np.array([[1000.0, 0.0, 0.0]], np.float32)})


@pytest.mark.parametrize("inputs, fragment", [
    ({"x": np.zeros((1, 4))}, "expected shape [1, 3]"),
    ({"z": X}, "unknown input 'z'"),
    ({}, "missing input 'x'"),
    ({"x": np.array([["a", "b", "c"]])}, "expected numbers"),
])
def test_bad_inputs_are_clear_errors(tmp_path, inputs, fragment):
    model = systolix.load(build_model(tmp_path))
    with pytest.raises(RuntimeInputError) as e:
        model.run(inputs)
    assert fragment in str(e.value)


def test_short_tdata_is_a_clear_error(tmp_path):
    path = build_model(tmp_path, tdata_vectors=3)
    with pytest.raises(ArtifactError, match=r"consts\[0\].*5 vectors"):
        systolix.load(path)
    # Past TModel.load's own check (which only sees the manifest), the driver checks again.
    from systolix.artifacts import TModel
    from systolix.runtime.model import Model

    manifest = TModel.load(build_model(tmp_path))
    write_tdata(tmp_path / "m.tdata", np.zeros((2, N), dtype=np.int64), DataType.FP16BP8)
    with pytest.raises(ArtifactError, match=r"consts\[0\] says 5 vectors but .*m.tdata holds only 2"):
        Model(manifest, tmp_path, "m.tmodel")


def test_partitioned_models_go_to_their_own_loader(tmp_path, monkeypatch):
    path = build_model(tmp_path)
    data = json.loads(path.read_text())
    data["systolix"]["segments"] = [{"kind": "accelerator", "tmodel": "m.tmodel", "inputs": ["x"], "outputs": ["y"]}]
    path.write_text(json.dumps(data))
    fake = types.ModuleType("systolix.runtime.partitioned")
    fake.load_partitioned = lambda p: ("partitioned", Path(p).name)
    monkeypatch.setitem(sys.modules, "systolix.runtime.partitioned", fake)
    assert systolix.load(path) == ("partitioned", "m.tmodel")


# --- layout ----------------------------------------------------------------------
def test_nchw_layout_one_pixel_per_vector():
    rng = np.random.default_rng(0)
    t = rng.standard_normal((1, 3, 2, 5)).astype(np.float32)  # N, C, H, W
    layout = {"perm": [0, 2, 3, 1], "padded_channels": 4}
    v = tensor_to_vectors(t, layout, 4)
    assert v.shape == (10, 4)
    for h in range(2):
        for w in range(5):
            assert np.array_equal(v[h * 5 + w], np.append(t[0, :, h, w], 0))
    assert np.array_equal(vectors_to_tensor(v, t.shape, layout), t)


def test_layout_with_several_vectors_per_pixel_and_batch():
    rng = np.random.default_rng(1)
    t = rng.standard_normal((3, 1, 6, 2, 2)).astype(np.float32)  # batch of 3 NCHW tensors, 6 channels
    layout = {"perm": [0, 2, 3, 1], "padded_channels": 8}
    v = tensor_to_vectors(t, layout, 4)
    assert v.shape == (3, 8, 4)  # 4 pixels x 2 vectors each
    for b in range(3):
        pixel = np.append(t[b, 0, :, 1, 0], [0, 0])  # h=1, w=0 -> pixel 2
        assert np.array_equal(v[b, 4:6].reshape(-1), pixel)
    assert np.array_equal(vectors_to_tensor(v, t.shape[1:], layout), t)


def test_layout_errors():
    with pytest.raises(SystolixError, match="not a permutation"):
        tensor_to_vectors(np.zeros((2, 3)), {"perm": [0, 0], "padded_channels": 4}, 4)
    with pytest.raises(SystolixError, match="smaller than the channel axis"):
        tensor_to_vectors(np.zeros((2, 5)), {"perm": [0, 1], "padded_channels": 4}, 4)
    with pytest.raises(SystolixError, match="multiple of the array size"):
        tensor_to_vectors(np.zeros((2, 3)), {"perm": [0, 1], "padded_channels": 6}, 4)
    with pytest.raises(SystolixError, match="needs 8"):
        vectors_to_tensor(np.zeros((3, 4)), (2, 3), {"perm": [0, 1], "padded_channels": 4})


def test_nchw_model_one_pixel_per_vector(tmp_path):
    """A 1x1 convolution on a [1, 3, 2, 2] NCHW tensor: four pixels, one vector each, batched."""
    consts = np.zeros((N + 1, N), dtype=np.float32)
    consts[0, :2] = BIAS
    consts[1:4, :2] = W  # W[c_in, c_out]
    write_tdata(tmp_path / "c.tdata", to_fixed(consts, DataType.FP16BP8), DataType.FP16BP8)
    prog = encode_program([
        DataMove(DataFlow.DRAM1_TO_LOCAL, 10, 0, N),
        DataMove(DataFlow.DRAM0_TO_LOCAL, 0, 0, 3),
        LoadWeights(10, N),
        MatMul(0, 0, 3),
        DataMove(DataFlow.ACC_TO_LOCAL, 20, 0, 3),
        DataMove(DataFlow.LOCAL_TO_DRAM0, 20, 8, 3),
    ], InstructionLayout.of(ARCH))
    (tmp_path / "c.tprog").write_bytes(prog)
    nchw = {"perm": [0, 2, 3, 1], "padded_channels": N}
    (tmp_path / "c.tmodel").write_text(json.dumps({
        "name": "conv1x1", "prog": {"file_name": "c.tprog", "size": len(prog)},
        "consts": [{"file_name": "c.tdata", "base": 0, "size": N + 1}],
        "inputs": [{"name": "x", "base": 0, "size": 4}], "outputs": [{"name": "y", "base": 8, "size": 4}],
        "arch": ARCH.to_tarch(),
        "systolix": {"version": 1, "inputs": [{"name": "x", "shape": [1, 3, 2, 2], "layout": nchw}],
                     "outputs": [{"name": "y", "shape": [1, 2, 2, 2], "layout": nchw}], "segments": None},
    }))
    xs = (np.arange(2 * 12, dtype=np.float32).reshape(2, 1, 3, 2, 2) - 10) / 4  # multiples of 1/4: exact
    got = systolix.load(tmp_path / "c.tmodel").run({"x": xs})["y"]
    want = np.einsum("bnchw,co->bnohw", xs, W) + BIAS[None, None, :, None, None]
    assert got.shape == (2, 1, 2, 2, 2)
    assert np.array_equal(got, want)
