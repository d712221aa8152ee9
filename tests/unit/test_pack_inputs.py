"""Packed inputs (``systolix.hir_passes.pack_inputs``): a few-channel stem's input packed by the
driver (space-to-depth, im2col or row windows), its conv's weights rearranged to match.

The packing function is checked against its definition written as loops; packed compiles of
stem convs against onnxruntime within the FP16BP8 bound of ``tests/error_model.py`` and against
the plain compile (the same products, so the same raw outputs while nothing saturates); the
``.tmodel`` field round-trips and bad values are refused; ``estimate``'s host scalars are what
the driver writes."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

import systolix
from systolix.arch import get_board
from systolix.artifacts import TModel
from systolix.compiler import compile_model
from systolix.errors import ArtifactError
from systolix.hir_passes.pack_inputs import packable
from systolix.ir.evaluate import run_reference
from systolix.perf.estimate import estimate
from systolix.runtime.layout import pack_input, tensor_to_vectors
from tests.error_model import output_bounds
from tests.onnx_builders import ir_of, make_model


def pack_by_definition(x: np.ndarray, pack: dict) -> np.ndarray:
    """``docs/tmodel-extension.md``'s formula, one value at a time."""
    _, C, H, W = x.shape
    (BH, BW), (SH, SW), (PT, PL), (GH, GW) = pack["window"], pack["stride"], pack["pads"], pack["grid"]
    out = np.zeros((1, C * BH * BW, GH, GW), x.dtype)
    for c in range(C):
        for i in range(BH):
            for j in range(BW):
                for y in range(GH):
                    for xx in range(GW):
                        h, w = y * SH + i - PT, xx * SW + j - PL
                        if 0 <= h < H and 0 <= w < W:
                            out[0, (c * BH + i) * BW + j, y, xx] = x[0, c, h, w]
    return out


@pytest.mark.parametrize("pack", [
    {"kind": "im2col", "window": [3, 3], "stride": [2, 2], "pads": [1, 1], "grid": [4, 3]},
    {"kind": "im2col", "window": [7, 5], "stride": [2, 1], "pads": [3, 2], "grid": [4, 5]},
    {"kind": "space_to_depth", "window": [2, 2], "stride": [2, 2], "pads": [0, 0], "grid": [4, 3]},
    {"kind": "space_to_depth", "window": [3, 2], "stride": [3, 2], "pads": [0, 0], "grid": [3, 2]},
    {"kind": "row_window", "window": [1, 10], "stride": [1, 8], "pads": [0, 1], "grid": [7, 1]},
    {"kind": "row_window", "window": [1, 4], "stride": [1, 2], "pads": [0, 1], "grid": [7, 3]},
])
def test_pack_input_is_its_definition(pack):
    x = np.random.default_rng(0).normal(size=(1, 3, 7, 5)).astype(np.float32)
    np.testing.assert_array_equal(pack_input(x, pack), pack_by_definition(x, pack))
    batch = np.stack([x, 2 * x])
    np.testing.assert_array_equal(pack_input(batch, pack)[1], pack_by_definition(2 * x, pack))


def stem(k, s, p, cout=20, h=13, w=11, seed=0, second_reader=False):
    """A 3-channel stem conv with ReLU (and, with ``second_reader``, a second conv of the input)."""
    rng = np.random.default_rng(seed)
    inits = {"w": rng.normal(0, 0.3, (cout, 3, k, k)).astype(np.float32), "b": rng.normal(0, 0.1, cout).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="stem", kernel_shape=[k, k], strides=[s, s], pads=[p] * 4),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    outputs = [("y", None)]
    if second_reader:
        inits["w2"] = rng.normal(0, 0.3, (4, 3, 1, 1)).astype(np.float32)
        nodes.append(helper.make_node("Conv", ["x", "w2"], ["z"], name="side", kernel_shape=[1, 1]))
        outputs.append(("z", None))
    m = make_model(nodes, [("x", [1, 3, h, w])], outputs, inits)
    return m, {"x": rng.normal(0, 1, (1, 3, h, w)).astype(np.float32)}


# (kernel, stride, pad, architecture, the packing the cost model picks)
CASES = {
    "3x3_s1_pynqz1": (3, 1, 1, "pynqz1", None),  # 8 lanes: no row window fits, im2col writes more
    "3x3_s1_ultra96v2": (3, 1, 1, "ultra96v2", "row_window"),  # 2 pixels a vector (12 of 16 lanes)
    "3x3_s1_zcu104": (3, 1, 1, "zcu104", "row_window"),  # 8 pixels a vector (30 of 32 lanes)
    "5x5_s1_p2_zcu104": (5, 1, 2, "zcu104", "row_window"),  # 4 pixels a vector, 11 not a multiple
    "3x3_s2_ultra96v2": (3, 2, 1, "ultra96v2", "row_window"),
    "3x3_s3_p1_zcu104": (3, 3, 1, "zcu104", "im2col"),  # one vector a 3x3 block, one MatMul
    "7x7_s2_p3_ultra96v2": (7, 2, 3, "ultra96v2", "space_to_depth"),  # ResNet-50's stem
    "6x6_s2_p2_pynqz1": (6, 2, 2, "pynqz1", "space_to_depth"),  # YOLOv5's stem, 12 lanes
}


@pytest.mark.needs_emulator
@pytest.mark.needs_onnxruntime
@pytest.mark.parametrize("case", list(CASES))
def test_packed_stem_matches_onnxruntime_and_the_plain_compile(case):
    k, s, p, arch, kind = CASES[case]
    model, feeds = stem(k, s, p)
    packed = compile_model(model, arch, host=False)
    plain = compile_model(model, arch, host=False, pack_inputs=False)
    entry = packed.manifest.extension.inputs[0]
    assert (entry.pack.kind if entry.pack else None) == kind
    assert plain.manifest.extension.inputs[0].pack is None
    if kind is not None:
        assert packed.manifest.inputs[0].size < plain.manifest.inputs[0].size  # fewer vectors for the host to write
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    run, base = packed.run_detailed(feeds), plain.run_detailed(feeds)
    got = run.outputs["y"]
    err, bound = float(np.max(np.abs(got - expected))), output_bounds(model, feeds)["y"]
    assert err <= bound, f"max error {err:.4f} > bound {bound:.4f}"
    # The same rounded products in another order: the same sums when nothing saturates.
    assert run.result.saturation_total == base.result.saturation_total == 0
    np.testing.assert_array_equal(run.raw_outputs["y"], base.raw_outputs["y"])


@pytest.mark.needs_emulator
def test_a_packed_input_runs_batched_and_fewer_matmuls_run():
    model, feeds = stem(3, 2, 1)
    packed = compile_model(model, "ultra96v2", host=False)
    plain = compile_model(model, "ultra96v2", host=False, pack_inputs=False)
    batch = np.concatenate([feeds["x"], -feeds["x"]])[:, None]
    got = packed.run({"x": batch})["y"]
    assert got.shape[0] == 2
    np.testing.assert_array_equal(got[1], plain.run({"x": -feeds["x"]})["y"])
    matmuls = lambda m: int(((m.program.opcode == 1) * (m.program.size + 1)).sum())  # noqa: E731
    assert matmuls(packed) < matmuls(plain)


@pytest.mark.needs_onnxruntime
@pytest.mark.parametrize("k, s, p, arch", [(7, 2, 3, "ultra96v2"), (3, 1, 1, "zcu104"), (6, 2, 2, "pynqz1"),
                                         (3, 3, 1, "zcu104"), (3, 2, 1, "ultra96v2")])
def test_the_packed_hir_is_exact_in_float(k, s, p, arch):
    """The packed input and the rearranged weights, evaluated in float, are onnxruntime's result."""
    model, feeds = stem(k, s, p)
    hir = ir_of(model, arch, until="pack inputs", estimate_gains=False)  # the plain weights: no bias correction
    assert list(hir.packs) == ["x"]
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(run_reference(hir, feeds)["y"], expected, atol=1e-4)


def test_only_an_input_read_by_one_dense_conv_is_packed():
    model, _ = stem(3, 2, 1, second_reader=True)
    assert packable(ir_of(model, "ultra96v2"), "x") is None
    model, _ = stem(3, 2, 1)
    assert packable(ir_of(model, "ultra96v2"), "x") is not None


@pytest.mark.needs_emulator
def test_the_pack_field_round_trips_and_bad_values_are_refused(tmp_path):
    model, feeds = stem(7, 2, 3)
    path = compile_model(model, "ultra96v2", host=False).save(tmp_path)
    data = json.loads(path.read_text())
    pack = data["systolix"]["inputs"][0]["pack"]
    assert pack == {"kind": "space_to_depth", "window": [2, 2], "stride": [2, 2], "pads": [0, 0], "grid": [7, 6]}
    assert TModel.load(path).to_json_dict()["systolix"]["inputs"][0]["pack"] == pack
    loaded = systolix.load(path)
    assert loaded.inputs[0].pack == pack
    bad = {
        "kind": ({**pack, "kind": "pixel_shuffle"}, "kind"),
        "zero window": ({**pack, "window": [0, 2]}, "window"),
        "string stride": ({**pack, "stride": ["2", 2]}, "stride"),
        "three pads": ({**pack, "pads": [0, 0, 0]}, "pads"),
        "unknown key": ({**pack, "offset": [1, 1]}, "offset"),
        "only padding": ({**pack, "pads": [9, 0], "window": [2, 2], "grid": [1, 1]}, "pads"),
    }
    for what, (value, field) in bad.items():
        broken = json.loads(json.dumps(data))
        broken["systolix"]["inputs"][0]["pack"] = value
        target = tmp_path / "broken.tmodel"
        target.write_text(json.dumps(broken))
        with pytest.raises(ArtifactError, match=field):
            TModel.load(target)
    # A pack on an output, and a grid that does not take the span's vectors.
    broken = json.loads(json.dumps(data))
    broken["systolix"]["outputs"][0]["pack"] = pack
    (tmp_path / "broken.tmodel").write_text(json.dumps(broken))
    with pytest.raises(ArtifactError, match="only inputs are packed"):
        TModel.load(tmp_path / "broken.tmodel")
    broken = json.loads(json.dumps(data))
    broken["systolix"]["inputs"][0]["pack"]["grid"] = [8, 6]
    (tmp_path / "broken.tmodel").write_text(json.dumps(broken))
    with pytest.raises(ArtifactError, match=r"packed to \[1, 12, 8, 6\].*DRAM0 span"):
        systolix.load(tmp_path / "broken.tmodel")


@pytest.mark.needs_emulator
@pytest.mark.parametrize("k, s, p, arch, board, vectors", [
    (7, 2, 3, "ultra96v2", "ultra96-v2", 7 * 6),  # 12 packed channels: one 16-lane vector per 2x2 block
    (3, 1, 1, "zcu104", "zcu104", 13 * 2),  # row windows: 8 pixels of 11 a vector, 13 rows
])
def test_the_estimates_host_scalars_are_what_the_driver_writes(tmp_path, k, s, p, arch, board, vectors):
    model, feeds = stem(k, s, p)
    path = compile_model(model, arch, host=False).save(tmp_path)
    loaded = systolix.load(path)
    spec = loaded.inputs[0]
    n = loaded.arch.array_size
    written = tensor_to_vectors(pack_input(feeds["x"], spec.pack), spec.layout, n).size
    read = loaded.run_detailed(feeds).raw_outputs["y"].size
    assert written == vectors * n
    assert estimate(path, get_board(board)).io_scalars == written + read


@pytest.mark.needs_emulator
def test_a_row_window_stem_writes_every_kth_accumulator_and_runs_as_a_batch_program():
    """ResNet-20's stem shape on 32 lanes, 3x16x16: 8 output pixels a vector, so the host writes
    16 x 2 vectors instead of 256; phase i's MatMuls write accumulators i, i + 8, ... (stride 8);
    a batch-2 program gives each image the single-image program's raw outputs."""
    model, feeds = stem(3, 1, 1, cout=16, h=16, w=16)
    packed = compile_model(model, "zcu104", host=False)
    assert packed.manifest.extension.inputs[0].pack.model_dump() == {
        "kind": "row_window", "window": [1, 10], "stride": [1, 8], "pads": [0, 1], "grid": [16, 2]}
    assert packed.manifest.inputs[0].size == 16 * 2
    program = packed.program
    strided = (program.opcode == 1) & (program.stride1 == 3)  # MatMul, accumulator stride 2**3
    assert strided.any()
    hir = ir_of(model, "zcu104", until="pack inputs")
    assert "8 output phases" in hir.text()
    other = {"x": -feeds["x"]}
    batch = compile_model(model, "zcu104", host=False, batch=2)
    got = batch.run_detailed({"x": np.concatenate([feeds["x"], other["x"]])[:, None]}).raw_outputs["y"]
    np.testing.assert_array_equal(got[0], packed.run_detailed(feeds).raw_outputs["y"][0])
    np.testing.assert_array_equal(got[1], packed.run_detailed(other).raw_outputs["y"][0])


def test_no_pack_input_keeps_the_plain_layout_for_a_row_window_stem():
    model, _ = stem(3, 1, 1)
    assert list(ir_of(model, "zcu104", until="pack inputs").packs) == ["x"]
    hir = ir_of(model, "zcu104", until="pack inputs", pack_inputs=False)
    assert not hir.packs and all(getattr(layer, "phases", 1) == 1 for layer in hir.layers)
