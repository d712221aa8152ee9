"""The pass that splits long reductions into parts (one-pixel heads, and maps within what their
passes may cost): the IR before, the IR expected after, that the parts compute the same function
(float evaluation), and that on the emulator a head or a map loses less to rounding in parts than
whole (against onnxruntime)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

import systolix.hir_passes.estimate_ranges as estimate_ranges_module
import systolix.hir_passes.split_long_reductions as reductions
from systolix.arch import get_architecture
from systolix.compiler import compile_model
from systolix.compiler.context import CompileContext
from systolix.hir_passes.estimate_ranges import estimate, estimate_ranges
from systolix.hir_passes.measure_ranges import LayerRange
from systolix.hir_passes.split_long_reductions import (PART_NODE, plain_part_channels, reduction_parts,
                                                      split_long_reductions)
from systolix.ir import same
from systolix.ir.evaluate import run_reference
from systolix.ir.hir import Activation, ConvInput, ConvLayer, HirProgram
from systolix.ir.postops import AddConstant, AddTensor, Clip, Relu
from systolix.numerics import DataType
from tests.onnx_builders import make_model

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]

ARCH = get_architecture("ultra96v2")  # 16x16
CALIBRATED = CompileContext(ARCH, samples=[{}])  # the pass runs in calibrated compiles


def dense(C_in: int, C_out: int, N: int = 16, post=(), seed: int = 0, pixels: int = 1) -> HirProgram:
    rng = np.random.default_rng(seed)
    x = Activation("x", C_in, 1, pixels, N, order="pixel")
    y = Activation("y", C_out, 1, pixels, N, order="pixel")
    w = rng.normal(0, 0.05, (C_out, C_in, 1, 1)).astype(np.float32)
    bias = rng.normal(0, 1, C_out).astype(np.float32)
    layer = ConvLayer("head", [ConvInput(x, weights=w)], y, bias, (1, 1), post_ops=list(post), ops=["Gemm"],
                      nodes=["head_node"], macs=C_in * C_out * pixels)
    return HirProgram("m", N, [layer], {"x": x}, {"y": y}, {"x": (pixels, C_in)}, {"y": (pixels, C_out)})


def flatten_dense(C_in: int, C_out: int, side: int = 5, N: int = 16, seed: int = 0) -> HirProgram:
    """A dense layer after a flatten: a ``side x side`` kernel over a ``side x side`` input."""
    rng = np.random.default_rng(seed)
    x = Activation("x", C_in, side, side, N)
    y = Activation("y", C_out, 1, 1, N, order="pixel")
    w = rng.normal(0, 0.02, (C_out, C_in, side, side)).astype(np.float32)
    layer = ConvLayer("fc", [ConvInput(x, weights=w)], y, rng.normal(0, 1, C_out).astype(np.float32), (side, side),
                      ops=["Gemm"], nodes=["fc_node"], macs=C_in * side * side * C_out)
    return HirProgram("m", N, [layer], {"x": x}, {"y": y}, {"x": (side * side, C_in)}, {"y": (1, C_out)})


def test_a_long_one_pixel_reduction_becomes_parts_summed_by_the_last():
    before = dense(300, 10, post=[Relu(node="r")])
    whole = before.layers[0]
    x, y = whole.inputs[0].act, whole.output
    w = whole.inputs[0].weights
    # Parts of sqrt(300) = 17 products, at least MIN_PART_PRODUCTS (128): 128, 128 and 44
    # channels. Each part reads its own channel groups of the input, in place; the first two save
    # partial results, the last adds them, then the bias, then the relu.
    partials = [Activation(f"y part {j}", 10, 1, 1, 16) for j in (1, 2)]
    parts = []
    for j, (c0, c1) in enumerate([(0, 128), (128, 256), (256, 300)]):
        last = j == 2
        post = [AddTensor(p, node=PART_NODE) for p in partials] + [AddConstant(whole.bias.reshape(10, 1, 1), node=PART_NODE),
                                                                  Relu(node="r")] if last else []
        parts.append(ConvLayer(f"head [{c0}:{c1}]", [ConvInput(Activation(f"x[{c0}:{c1}]", c1 - c0, 1, 1, 16, parent=(x, c0 // 16)),
                                                               weights=w[:, c0:c1])],
                               y if last else partials[j], np.zeros(10, np.float32), (1, 1), post_ops=post, ops=["Gemm"],
                               nodes=["head_node"], macs=[1280, 1280, 440][j]))
    expected = HirProgram("m", 16, parts, {"x": x}, {"y": y}, {"x": (1, 300)}, {"y": (1, 10)})
    after = split_long_reductions(before, CALIBRATED)
    assert same(after, expected), after.text()
    assert after.layers[2].output is whole.output and sum(p.macs for p in after.layers) == whole.macs == 3000
    # The IR before is untouched.
    assert before.layers == [whole] and whole.post_ops[0].kind == "relu" and whole.inputs[0].weights.shape[1] == 300


@pytest.mark.parametrize("N", [8, 16, 32])
def test_parts_compute_the_same_function_in_float(N):
    before = dense(1100, 21, N=N, post=[Clip(-1.0, 2.0)])
    after = split_long_reductions(before, CALIBRATED)
    assert len(after.layers) == 9  # sqrt(1,100) = 33 channels a part, at least 128
    float_arch = ARCH.model_copy(update={"data_type": DataType.FLOAT32})
    assert split_long_reductions(before, CompileContext(float_arch, samples=[{}])).layers == before.layers  # nothing to gain
    assert split_long_reductions(before, CompileContext(ARCH, estimate_gains=False)) is before  # no gains: nothing to gain
    plain = split_long_reductions(before, CompileContext(ARCH, estimate_gains=True))  # estimated gains: G sqrt(C) a part
    assert len(plain.layers) > 1
    np.testing.assert_allclose(run_reference(plain, x := {"x": np.random.default_rng(1).normal(size=(1, 1100)).astype(np.float32)})["y"],
                               run_reference(before, x)["y"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(run_reference(after, x)["y"], run_reference(before, x)["y"], rtol=1e-12, atol=1e-12)


def test_a_flattened_dense_layer_in_parts_computes_the_same_function_in_float():
    before = flatten_dense(72, 88)
    after = split_long_reductions(before, CALIBRATED)
    assert [layer.name for layer in after.layers] == [f"fc [{c0}:{c1}]" for c0, c1 in reduction_parts(before.layers[0], 16)]
    # Each part reads its channel groups of the 5x5 input in place, with all 25 taps.
    first = after.layers[0].inputs[0]
    assert first.act.parent == (before.inputs["x"], 0) and (first.act.H, first.act.W) == (5, 5)
    assert first.weights.shape == (88, 16, 5, 5) and after.layers[0].kernel == (5, 5)
    assert sum(layer.macs for layer in after.layers) == before.layers[0].macs
    x = {"x": np.random.default_rng(1).normal(size=(25, 72)).astype(np.float32)}
    np.testing.assert_allclose(run_reference(after, x)["y"], run_reference(before, x)["y"], rtol=1e-5, atol=1e-5)


def test_a_plain_split_leaves_the_ranges_a_fresh_estimate_of_its_parts_gives(monkeypatch):
    """One estimate sizes the parts and gives every layer's range: the same ranges as estimating
    the program after the split, which ``estimate_ranges`` then keeps instead of estimating again."""
    rng = np.random.default_rng(3)
    x, h, y = Activation("x", 24, 1, 1, 16), Activation("h", 1100, 1, 1, 16), Activation("y", 21, 1, 1, 16)
    body = ConvLayer("body", [ConvInput(x, weights=rng.normal(0, 0.3, (1100, 24, 1, 1)).astype(np.float32))], h,
                     rng.normal(0, 0.5, 1100).astype(np.float32), (1, 1), post_ops=[Relu(node="r")], ops=["Gemm"],
                     nodes=["body_node"], macs=24 * 1100)
    head = ConvLayer("head", [ConvInput(h, weights=rng.normal(0, 0.05, (21, 1100, 1, 1)).astype(np.float32))], y,
                     rng.normal(0, 1, 21).astype(np.float32), (1, 1), ops=["Gemm"], nodes=["head_node"], macs=1100 * 21)
    before = HirProgram("m", 16, [body, head], {"x": x}, {"y": y}, {"x": (1, 24)}, {"y": (1, 21)})
    ctx = CompileContext(ARCH, estimate_gains=True)
    after = split_long_reductions(before, ctx)
    assert len(after.layers) > 3 and after.layers[0] is body
    with estimate_ranges_module.one_blas_thread():  # as both passes run it: the same sums in the same order
        fresh = estimate(after)
    assert sorted(after.ranges) == sorted(fresh) == list(range(len(after.layers)))
    for index, seen in fresh.items():
        kept = after.ranges[index]
        np.testing.assert_array_equal(kept.peak, seen.peak)
        np.testing.assert_array_equal(kept.post_slope, seen.post_slope)
        for a, b in zip(kept.input_mean_square + kept.input_mean, seen.input_mean_square + seen.input_mean, strict=True):
            np.testing.assert_array_equal(a, b)
    monkeypatch.setattr(estimate_ranges_module, "estimate", lambda *args: pytest.fail("estimated twice"))
    assert estimate_ranges(after, ctx) is after


def test_short_and_multi_input_reductions_stay_whole():
    assert reduction_parts(dense(255, 4).layers[0], 16) is None  # under two parts' worth (128 products each)
    assert reduction_parts(dense(256, 4).layers[0], 16) == [(0, 128), (128, 256)]
    # sqrt(102,400) = 320 channels a part, in whole vectors.
    assert reduction_parts(dense(102_400, 4).layers[0], 16) == [(c0, c0 + 320) for c0 in range(0, 102_400, 320)]
    assert reduction_parts(dense(100, 4).layers[0], 16, 40) == [(0, 32), (32, 64), (64, 96), (96, 100)]  # whole vectors
    assert reduction_parts(dense(31, 4).layers[0], 16, 8) is None  # a part is at least a vector
    # Several pixels of a pixel-major input: a part's channel groups are not contiguous.
    assert reduction_parts(dense(1024, 4, pixels=3).layers[0], 16) is None
    # A 3x3 conv over 1,024 channels: sqrt(9,216) = 96 products, at least 128: 14 channels a
    # part (16 in whole vectors), but on a 12x12 map its passes may cost no more than
    # 1 + 0.06 x 9,216 x (576 + 48) / 576 / 32 = 19 parts (4 images' 576 vectors a weight block):
    # 64 channels each. On a 3x3 map the weight loads are most of the array's time (36 vectors a
    # block against 48 clocks), so 41: 32 each.
    for side, channels in ((12, 64), (3, 32)):
        x, y = Activation("x", 1024, side, side, 16), Activation("y", 4, side, side, 16)
        conv = ConvLayer("conv", [ConvInput(x, weights=np.ones((4, 1024, 3, 3), np.float32))], y, np.zeros(4, np.float32),
                         (3, 3), pads=(1, 1, 1, 1))
        assert reduction_parts(conv, 16) == [(c0, min(1024, c0 + channels)) for c0 in range(0, 1024, channels)]
    # A dense layer after a flatten (a kernel as large as its input): sqrt(1,800) = 42 products a
    # part, at least 128, are 5 of its 25-tap channels, at least a vector of 16; a pixel-major
    # input's channel groups are not contiguous.
    flat = flatten_dense(72, 88).layers[0]
    assert reduction_parts(flat, 16) == [(0, 16), (16, 32), (32, 48), (48, 64), (64, 72)]
    assert reduction_parts(flat, 8) == [(0, 8), (8, 16), (16, 24), (24, 32), (32, 40), (40, 48), (48, 56), (56, 64), (64, 72)]
    flat.inputs[0].act.order = "pixel"
    assert reduction_parts(flat, 16) is None
    two = dense(1024, 4).layers[0]
    two.inputs = two.inputs * 2
    assert reduction_parts(two, 16) is None


def layers(compiled) -> list[str]:
    """The names of a one-program compile's layers."""
    (segment,) = compiled.summary.segments
    return [layer.name for layer in segment.hir.layers]


def _head(seed: int = 5):
    """A classifier head like ResNet-50's: 2,048 non-negative features (a pooled ReLU), ten
    logits of a few units: the whole sum leaves its accumulators little room for gain."""
    rng = np.random.default_rng(seed)
    w = rng.normal(0, 0.08, (10, 2048)).astype(np.float32)
    b = rng.normal(0, 0.5, 10).astype(np.float32)
    m = make_model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)], [("x", [1, 2048])], [("y", None)],
                   {"w": w, "b": b})

    def features(n):
        # On FP16BP8's grid, so that the reference has no input rounding in it either.
        return np.round(np.maximum(rng.normal(0.3, 0.5, (n, 1, 2048)), 0) * 256).astype(np.float32) / 256

    return m, features(32), features(64)


def _error_against_onnxruntime(m, inputs):
    """A function of a compile of ``m``: its RMS error on ``inputs`` against onnxruntime's."""
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = np.stack([session.run(None, {"x": x})[0] for x in inputs])

    def rms_error(compiled):
        got = compiled.run({"x": inputs}, batch=True)["y"]
        return float(np.sqrt(np.mean((got.reshape(ref.shape) - ref) ** 2)))

    return rms_error


def test_a_calibrated_head_in_parts_has_less_error_on_the_emulator(monkeypatch):
    m, calibration, inputs = _head()
    rms_error = _error_against_onnxruntime(m, inputs)
    parts = compile_model(m, ARCH, calibration={"x": calibration}, merge_parts=False)
    assert len(layers(parts)) == 16 and layers(parts)[-1].endswith(" [1920:2048]")  # sqrt(2,048) = 45: 128 a part
    # Summed beside the head's tile (``merge_reduction_parts``, the default): one layer, the same outputs.
    merged = compile_model(m, ARCH, calibration={"x": calibration})
    assert len(layers(merged)) == 1
    assert np.array_equal(merged.run({"x": inputs}, batch=True)["y"], parts.run({"x": inputs}, batch=True)["y"])
    monkeypatch.setattr(reductions, "reduction_parts", lambda layer, N, part_channels=0, maps=True: None)
    whole = compile_model(m, ARCH, calibration={"x": calibration})
    assert len(layers(whole)) == 1
    err_parts, err_whole = rms_error(parts), rms_error(whole)
    print(f"\nhead error RMS: {err_whole / 2 ** -8:.2f} LSB whole, {err_parts / 2 ** -8:.2f} LSB in 16 parts")
    # Measured with seeds 0 to 3 and 5: 1.7-2.3 LSB whole; 0.55-0.59 in 16 parts summed at the
    # whole sum's exponent (1.0-1.05 in 8 parts summed at the output's, before
    # ``tensor_exponents`` gave the parts their own); at least 2x less.
    assert err_parts * 2 < err_whole, (err_parts, err_whole)


def test_a_plain_part_is_as_long_as_its_gain_times_the_root_of_the_reduction():
    layer = dense(256, 4).layers[0]
    dtype = ARCH.data_type
    # Estimated sums of 20: room for a gain of 4 (2^2, FP16BP8's largest value is ~128), so
    # 4 x sqrt(256) = 64 channels a part; sums of 100 leave no gain: 16 = one vector.
    seen = LayerRange(peak=np.full(4, 20.0), bound=np.full(4, 1e3), observations=8, estimated=True)
    assert plain_part_channels(layer, seen, dtype, 16) == 64
    seen = LayerRange(peak=np.full(4, 100.0), bound=np.full(4, 1e3), observations=8, estimated=True)
    assert plain_part_channels(layer, seen, dtype, 16) == 16
    assert plain_part_channels(layer, seen, dtype, 32) == 32  # at least a whole vector


def test_plain_compiles_split_long_reductions_by_their_estimated_gains(monkeypatch):
    # Their gains come from estimated ranges (estimate_ranges): the parts' are larger as well,
    # and the parts shorter than a calibrated compile's. Without gains the parts would only cost.
    m, _, inputs = _head()
    rms_error = _error_against_onnxruntime(m, inputs)
    parts = compile_model(m, ARCH, merge_parts=False)  # estimated gains are the default; parts as layers
    assert len(layers(parts)) > 8 and layers(parts)[-1].endswith(":2048]"), layers(parts)
    assert len(layers(compile_model(m, ARCH, estimate_gains=False))) == 1
    monkeypatch.setattr(reductions, "reduction_parts", lambda layer, N, part_channels=0, maps=True: None)
    whole = compile_model(m, ARCH)
    err_parts, err_whole = rms_error(parts), rms_error(whole)
    print(f"\nplain head error RMS: {err_whole / 2 ** -8:.2f} LSB whole, {err_parts / 2 ** -8:.2f} LSB in parts")
    # Measured with seeds 0, 1 and 5: 14.0, 8.1 and 9.9 LSB whole, 3.2, 2.5 and 2.1 in parts.
    assert err_parts * 1.5 < err_whole, (err_parts, err_whole)


def _flatten_head(seed: int):
    """Conv, ReLU, max pool, then a dense layer over the flattened 72 x 5 x 5 (a VGG's head): a
    5x5 kernel over its whole input, 1,800 products a sum. He-initialised, like torch's layers."""
    rng = np.random.default_rng(seed)
    inits = {"w1": rng.normal(0, np.sqrt(2 / 144), (72, 16, 3, 3)).astype(np.float32),
             "b1": rng.normal(0, 0.1, 72).astype(np.float32),
             "w2": rng.normal(0, np.sqrt(1 / 1800), (88, 1800)).astype(np.float32),
             "b2": rng.normal(0, 0.1, 88).astype(np.float32)}
    m = make_model([helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
                    helper.make_node("Relu", ["c"], ["r"]),
                    helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
                    helper.make_node("Flatten", ["p"], ["f"]),
                    helper.make_node("Gemm", ["f", "w2", "b2"], ["y"], transB=1)],
                   [("x", [1, 16, 10, 10])], [("y", None)], inits)
    return m, rng.normal(size=(32, 1, 16, 10, 10)).astype(np.float32)


def test_a_plain_dense_layer_after_a_flatten_in_parts_has_less_error_on_the_emulator(monkeypatch):
    m, inputs = _flatten_head(seed=0)
    rms_error = _error_against_onnxruntime(m, inputs)
    parts = compile_model(m, ARCH, merge_parts=False)
    assert len(layers(parts)) == 6 and layers(parts)[-1].endswith(" [64:72]"), layers(parts)
    monkeypatch.setattr(reductions, "reduction_parts", lambda layer, N, part_channels=None, maps=True: None)
    whole = compile_model(m, ARCH)
    err_parts, err_whole = rms_error(parts), rms_error(whole)
    print(f"\nflattened dense error RMS: {err_whole / 2 ** -8:.2f} LSB whole, {err_parts / 2 ** -8:.2f} LSB in parts")
    # Measured with seeds 0 and 1: 3.57 and 3.38 LSB whole, 1.86 and 1.95 in 5 parts (pynqz1:
    # 3.58 and 3.38, 1.64 and 1.69 in 9).
    assert err_parts * 1.5 < err_whole, (err_parts, err_whole)


def conv_map(C_in: int, C_out: int, side: int = 6, N: int = 16, seed: int = 0, post=()) -> HirProgram:
    """A 3x3 conv (pads 1) over a planar ``side x side`` map of ``C_in`` channels."""
    rng = np.random.default_rng(seed)
    x, y = Activation("x", C_in, side, side, N), Activation("y", C_out, side, side, N)
    w = rng.normal(0, np.sqrt(2 / (9 * C_in)), (C_out, C_in, 3, 3)).astype(np.float32)
    layer = ConvLayer("conv", [ConvInput(x, weights=w)], y, rng.normal(0, 0.2, C_out).astype(np.float32), (3, 3),
                      pads=(1, 1, 1, 1), post_ops=list(post), ops=["Conv", "Relu"], nodes=["conv_node", "relu_node"],
                      macs=C_in * 9 * C_out * side * side)
    return HirProgram("m", N, [layer], {"x": x}, {"y": y}, {"x": (side * side, C_in)}, {"y": (side * side, C_out)})


def test_a_long_map_reduction_becomes_as_many_parts_as_their_passes_may_cost():
    before = conv_map(256, 16, side=24, post=[Relu(node="relu_node")])
    whole = before.layers[0]
    x, y, w = whole.inputs[0].act, whole.output, whole.inputs[0].weights
    # 2,304 products an output: a part saves and adds back about 2 vectors an output vector
    # against 2,304 / 16 = 144 MatMul vectors and, per weight block, 3 x 16 clocks of loading
    # besides 4 images' 576 pixels' vectors (1.02 clocks a MatMul vector), so 6% of that allows 1 + 4
    # parts more; in whole vectors, 4 parts of 64 channels. The bias stays in the last part's bias
    # row (a map's bias added apart would be one more pass over the map); the parts' sums come
    # before its ReLU.
    assert reductions.map_parts(whole, 16) == 5 and reductions.map_parts(whole, 32) == 3
    # On a 6x6 map the weight loads are much of the array's time (4 images' 144 vectors a block
    # against 48 clocks of load): parts cost less of it, so more are allowed.
    assert reductions.map_parts(conv_map(256, 16, side=6).layers[0], 16) == 6
    partials = [Activation(f"y part {j}", 16, 24, 24, 16) for j in (1, 2, 3)]
    parts = []
    for j in range(4):
        c0, c1 = 64 * j, 64 * (j + 1)
        last = j == 3
        post = [AddTensor(p, node=PART_NODE) for p in partials] + [Relu(node="relu_node")] if last else []
        parts.append(ConvLayer(f"conv [{c0}:{c1}]", [ConvInput(Activation(f"x[{c0}:{c1}]", 64, 24, 24, 16, parent=(x, c0 // 16)),
                                                               weights=w[:, c0:c1])],
                               y if last else partials[j], whole.bias if last else np.zeros(16, np.float32), (3, 3),
                               pads=(1, 1, 1, 1), post_ops=post, ops=["Conv", "Relu"], nodes=["conv_node", "relu_node"],
                               macs=whole.macs // 4))
    expected = HirProgram("m", 16, parts, {"x": x}, {"y": y}, {"x": (576, 256)}, {"y": (576, 16)})
    after = split_long_reductions(before, CALIBRATED)
    assert same(after, expected), after.text()
    xs = {"x": np.random.default_rng(1).normal(size=(576, 256)).astype(np.float32)}
    np.testing.assert_allclose(run_reference(after, xs)["y"], run_reference(before, xs)["y"], rtol=1e-5, atol=1e-5)
    # Plain: parts from the estimated gain, no more than the cost allows either; same function.
    plain = split_long_reductions(before, CompileContext(ARCH, estimate_gains=True))
    assert 2 <= len(plain.layers) <= 5 and plain.layers[-1].output is y
    np.testing.assert_allclose(run_reference(plain, xs)["y"], run_reference(before, xs)["y"], rtol=1e-5, atol=1e-5)
    # A short map reduction's passes would cost more than they may: whole.
    assert reduction_parts(conv_map(32, 16, side=24).layers[0], 16) is None  # 288 products: 1 part
    assert reduction_parts(conv_map(72, 16, side=24).layers[0], 16) == [(0, 48), (48, 72)]  # 648: 2, in whole vectors
    # A grouped conv (groups of 16 channels): each output sums its own group whole in any part.
    grouped = conv_map(256, 32).layers[0]
    mask = np.kron(np.eye(16, dtype=np.float32), np.ones((2, 16), np.float32))  # 32 outputs x 256 inputs
    grouped.inputs[0].weights = grouped.inputs[0].weights * mask[:, :, None, None]
    assert reduction_parts(grouped, 16) is None


def test_the_layers_after_a_split_map_see_the_whole_layers_statistics():
    """A batch norm's statistics describe the whole sum, not a part's: the estimate runs the last
    part for its own range, then the whole layer for the output the next layers read, so their
    ranges are those of the program without the split."""
    prog = conv_map(256, 32, post=[Relu(node="relu_node")], seed=2)
    conv = prog.layers[0]
    rng = np.random.default_rng(4)
    # Statistics far from what the synthetic inputs give through the weights (std about 1).
    conv.statistics = (np.full(32, 0.5, np.float32), np.full(32, 0.25, np.float32))
    z = Activation("z", 16, 6, 6, 16)
    nxt = ConvLayer("next", [ConvInput(conv.output, weights=rng.normal(0, 0.1, (16, 32, 1, 1)).astype(np.float32))], z,
                    np.zeros(16, np.float32), (1, 1), ops=["Conv"], nodes=["next_node"], macs=32 * 16 * 36)
    before = HirProgram("m", 16, [conv, nxt], prog.inputs, {"z": z}, prog.input_shapes, {"z": (36, 16)})
    after = split_long_reductions(before, CompileContext(ARCH, estimate_gains=True))
    assert len(after.layers) > 2 and after.layers[-1] is nxt
    whole = estimate(before)
    np.testing.assert_allclose(after.ranges[len(after.layers) - 1].peak, whole[1].peak, rtol=1e-6)
    # The last part's own range is its own sum's, not the statistics'.
    assert not np.allclose(after.ranges[len(after.layers) - 2].peak, whole[0].peak)


def test_a_plain_map_in_parts_has_less_error_on_the_emulator():
    """A 1x1 conv to 256 channels and ReLU (the program's input is pixel-major: a map in parts is
    read planar), then a 3x3 conv over them, plain (estimated gains): 2,304 products an output."""
    rng = np.random.default_rng(0)
    inits = {"w1": rng.normal(0, np.sqrt(2 / 16), (256, 16, 1, 1)).astype(np.float32),
             "b1": rng.normal(0, 0.1, 256).astype(np.float32),
             "w": rng.normal(0, np.sqrt(2 / 2304), (32, 256, 3, 3)).astype(np.float32),
             "b": rng.normal(0, 0.1, 32).astype(np.float32)}
    m = make_model([helper.make_node("Conv", ["x", "w1", "b1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
                    helper.make_node("Conv", ["r", "w", "b"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
                    helper.make_node("Relu", ["c"], ["y"])], [("x", [1, 16, 6, 6])], [("y", None)], inits)
    inputs = rng.normal(size=(16, 1, 16, 6, 6)).astype(np.float32)
    rms_error = _error_against_onnxruntime(m, inputs)
    parts = compile_model(m, ARCH, merge_parts=False)  # the parts as layers (merged: the same outputs)
    assert len(layers(parts)) == 7, layers(parts)  # 1 + 6 parts of 48 channels (a 6x6 map: 6 allowed)
    whole = compile_model(m, ARCH, split_maps=False)
    assert len(layers(whole)) == 2
    err_parts, err_whole = rms_error(parts), rms_error(whole)
    print(f"\nplain 3x3 map error RMS: {err_whole / 2 ** -8:.2f} LSB whole, {err_parts / 2 ** -8:.2f} LSB in "
          f"{len(layers(parts)) - 1} parts")
    # Measured with seeds 0 to 3: 1.48 to 1.59 LSB whole, 0.84 to 0.90 in 6 parts (0.87 to 0.95 in
    # the 4 parts of 64 the MatMuls alone allowed).
    assert err_parts * 1.3 < err_whole, (err_parts, err_whole)
