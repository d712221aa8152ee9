"""The calibrated weight amplification pass: the IR before, the IR expected after, and that the
amplified IR computes the same function (float evaluation) and less error (emulator)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import dataclasses

from systolix.arch import get_architecture
from systolix.compiler.calibration import CalibrationError, calibration_samples
from systolix.compiler.context import CompileContext
from systolix.frontend import to_graph
from systolix.hir_passes.amplify_weights import (CHANNEL_HEADROOM, FEW_OBSERVATIONS, GAIN_NODE, LAYER_HEADROOM,
                                                 amplify_weights, channel_gains, planned_sums, undoable_gain)
from systolix.hir_passes.measure_ranges import TAIL_SAMPLES, LayerRange, extreme_peak, measure, whole_line_average
from systolix.hir_passes.separate_averages import separate_averages
from systolix.ir import same
from systolix.ir.evaluate import run_reference
from systolix.ir.hir import Activation, ConvInput, ConvLayer, HirProgram
from systolix.ir.postops import Relu, Scale
from tests.onnx_builders import conv_bn_relu, ir_of, make_model

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]

ARCH = get_architecture("pynqz1")  # FP16BP8: the largest value is 127.996, the binary point 8
LSB = 2.0 ** -8
CTX = CompileContext(ARCH)


def amplified(hir: HirProgram, ranges: dict) -> HirProgram:
    """The pass on ``hir`` with the ranges ``measure_ranges`` would have found."""
    return amplify_weights(dataclasses.replace(hir, ranges=ranges), CTX)


def one_layer(weights, bias, post=(), size: int = 1) -> HirProgram:
    C_out, C_in = np.shape(weights)
    x = Activation("x", C_in, size, size, 8, order="pixel")
    y = Activation("y", C_out, size, size, 8, order="pixel")
    layer = ConvLayer("dense", [ConvInput(x, weights=np.asarray(weights, np.float32)[:, :, None, None])], y,
                      np.asarray(bias, np.float32), (1, 1), post_ops=list(post))
    shape = (1, C_in) if size == 1 else (1, C_in, size, size)
    return HirProgram("m", 8, [layer], {"x": x}, {"y": y}, {"x": shape}, {"y": shape[:1] + (C_out,) + shape[2:]})


def test_gains_follow_the_calibrated_sums_with_headroom():
    hir = one_layer([[0.1, -0.3], [0.02, 0.01]], [0.05, 0.0], [Relu()])
    seen = LayerRange(peak=np.array([1.5, 0.2]), bound=np.array([9.0, 9.0]), observations=5000)
    gains = channel_gains(hir.layers[0], seen, ARCH.data_type)
    # channel 0: 1.5 * 2.5 = 3.75 -> 128 / 3.75 = 34 -> 2^5; channel 1: its layer's 1.5 * 1.5
    # = 2.25 counts more than its own 0.2 * 2.5 -> 128 / 2.25 = 57 -> 2^5.
    assert gains.tolist() == [5, 5]
    # A weight of 40 can only double before it nears the limit (64).
    big = one_layer([[40.0, 0.0], [0.01, 0.0]], [0.0, 0.0])
    assert channel_gains(big.layers[0], seen, ARCH.data_type).tolist() == [0, 5]


def test_gains_plan_for_the_extreme_value_tail_where_the_samples_give_one():
    hir = one_layer([[0.1, -0.3], [0.02, 0.01]], [0.05, 0.0], [Relu()], size=4)
    seen = LayerRange(peak=np.array([1.5, 0.2]), bound=np.array([9.0, 9.0]), observations=5000,
                      largest=np.array([1.6, 0.2]), tail=np.array([2.2, 0.3]))
    gains = 2.0 ** channel_gains(hir.layers[0], seen, ARCH.data_type)
    # channel 0: 128 / 2.2 = 58.2 allows 256 / 5 (a factor with an exact undo); channel 1: its own
    # tail, no floor from its layer's: 128 / 0.3 = 427, at most 2^8.
    np.testing.assert_allclose(gains, [256 / 5, 256])
    # A sample's own sums are never planned past: a tail below the largest seen counts as that.
    low = dataclasses.replace(seen, tail=np.array([1.0, 0.3]))
    np.testing.assert_allclose(2.0 ** channel_gains(hir.layers[0], low, ARCH.data_type), [256 / 4, 256])
    # Without a tail (fewer samples), powers of two under the fixed headrooms.
    fixed = dataclasses.replace(seen, tail=None)
    np.testing.assert_allclose(2.0 ** channel_gains(hir.layers[0], fixed, ARCH.data_type), [32, 32])


def test_the_extreme_peak_of_normal_maxima_is_near_the_normal_law_s_own_and_past_the_samples():
    from statistics import NormalDist

    # Each sample's peak: the largest |x| of 1,000 standard normal values. Over 10^6 inputs the
    # largest is the largest of 10^9 values, about the point where 2 (1 - Phi(x)) = 10^-9.
    exact = NormalDist().inv_cdf(1 - 0.5e-9)  # 6.11
    for seed in range(4):
        peaks = np.abs(np.random.default_rng(seed).standard_normal((64, 1000, 3))).max(axis=1)
        tail = extreme_peak(peaks, 10**6)
        # Fitted by moments to 64 peaks; the Gumbel law errs high for normal maxima (the safe side).
        assert np.all(tail > 0.97 * exact) and np.all(tail < 1.3 * exact), (seed, tail)
        assert np.all(tail > 1.3 * peaks.max(axis=0))


def test_measured_ranges_carry_a_tail_from_enough_samples_and_none_where_the_law_does_not_hold():
    # Output 0 copies input 0 (normal values); output 1 is a bias of 3 (every sample's peak is 3,
    # which says nothing of how far its sums may go); output 2 copies input 1, silent on every
    # other sample (an on-off channel, its peaks far from the law).
    hir = one_layer([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]], [0.0, 3.0, 0.0], size=2)
    rng = np.random.default_rng(0)
    samples = [{"x": np.stack([rng.normal(size=(2, 2)), rng.normal(size=(2, 2)) * (k % 2)]).astype(np.float32)[None]}
               for k in range(TAIL_SAMPLES)]
    seen = measure(hir, samples)[0]
    peaks = np.array([[float(np.max(np.abs(s["x"][0, 0])))] for s in samples])
    np.testing.assert_allclose(seen.tail[0], extreme_peak(peaks)[0])
    assert np.isnan(seen.tail[1]) and seen.largest[1] == 3.0 and np.isnan(seen.tail[2])
    # There the fixed headrooms: 2.5x its own peak, at least 1.5x its layer's, never below the largest.
    layer_floor = 1.5 * float(seen.peak.max())
    np.testing.assert_allclose(planned_sums(seen, hir.layers[0]), [
        max(seen.tail[0], seen.largest[0]), max(7.5, layer_floor), max(2.5 * seen.peak[2], layer_floor)])
    assert measure(hir, samples[:TAIL_SAMPLES - 1])[0].tail is None  # too few: fixed headrooms
    # One value a channel per sample (a classifier's logits) is no maximum of many: no tail.
    dense = one_layer([[1.0, 0.0]], [0.0])
    assert measure(dense, [{"x": np.float32([[rng.normal(), 1.0]])} for _ in range(TAIL_SAMPLES)])[0].tail is None


def test_the_rows_of_a_separated_global_average_get_no_tail_as_the_global_average_gets_none():
    # Each row's mean follows the image's brightness as the global mean does: the heavy tail the
    # law misses. A 2x2 average (its window short of the rows) keeps its tail.
    rng = np.random.default_rng(1)
    samples = [{"x": (rng.normal(size=(1, 4, 8, 8)) + rng.normal()).astype(np.float32)} for _ in range(TAIL_SAMPLES)]
    pool = ir_of(make_model([helper.make_node("GlobalAveragePool", ["x"], ["y"], name="gap")],
                            [("x", [1, 4, 8, 8])], [("y", None)]))
    rows, columns = separate_averages(pool, CompileContext(ARCH, samples=samples)).layers
    assert whole_line_average(rows) and whole_line_average(columns)
    # The same window of weights (a depthwise conv: no scaling of its own) is no average.
    assert not whole_line_average(dataclasses.replace(rows, scaling_ops=0, post_ops=[]))
    seen = measure(HirProgram(pool.name, pool.N, [rows], pool.inputs, {"r": rows.output}, pool.input_shapes,
                              {"r": (1, 4, 8, 1)}), samples)[0]
    assert seen.tail is None and seen.observations < FEW_OBSERVATIONS
    # So the global pool's rule: 4x the fixed headrooms, as far as the bound allows.
    fixed = np.maximum(seen.peak * CHANNEL_HEADROOM, float(seen.peak.max()) * LAYER_HEADROOM)
    np.testing.assert_allclose(planned_sums(seen, rows), np.maximum(np.minimum(4 * fixed, seen.bound), fixed))
    # The second pass is bounded as the whole average is: by the map's largest value, which a
    # row's mean may reach, not by the samples' largest row mean.
    separated = separate_averages(pool, CompileContext(ARCH, samples=samples))
    ranges = measure(separated, samples)
    pixel = max(float(np.max(np.abs(s["x"]))) for s in samples)
    row_mean = max(float(np.max(np.abs(s["x"].mean(axis=3)))) for s in samples)
    taps = np.abs(columns.inputs[0].coefficients).reshape(4, -1).sum(axis=1)
    np.testing.assert_allclose(ranges[1].bound, taps * pixel, rtol=1e-6)
    assert np.all(ranges[1].bound > taps * row_mean * 1.5)
    # Rows whose sums pass the type's range take a negative gain sized by that headroom too, not
    # by 1.5x the samples' largest as a pool over a few values of a map is.
    bright = [{"x": s["x"] + np.float32(30)} for s in samples]
    rows_seen = measure(dataclasses.replace(separated, layers=[separated.layers[0]], outputs={"r": rows.output},
                                            output_shapes={"r": (1, 4, 8, 1)}), bright)[0]
    planned = planned_sums(rows_seen, rows)
    assert np.all(planned > 1.5 * rows_seen.largest) and np.all(1.5 * rows_seen.largest > 128)
    gains = channel_gains(rows, rows_seen, ARCH.data_type)
    np.testing.assert_array_equal(gains, np.floor(np.log2(ARCH.data_type.max_value / planned)))
    assert np.all(gains < np.floor(np.log2(ARCH.data_type.max_value / (1.5 * rows_seen.largest)))), gains
    local = ir_of(make_model([helper.make_node("AveragePool", ["x"], ["y"], name="avg", kernel_shape=[2, 2], strides=[2, 2])],
                             [("x", [1, 4, 8, 8])], [("y", None)]))
    assert not whole_line_average(local.layers[0]) and measure(local, samples)[0].tail is not None


def test_an_estimated_gain_is_the_largest_factor_with_an_exact_undo():
    # 2^8 / m for a whole m: 34.1 allows 256 / 8 = 32, 56.9 allows 256 / 5 = 51.2 (a power of
    # two would give 32), 1.7 allows 256 / 151; at most 2^8, and none below 1.
    for largest, m in [(34.13, 8), (56.9, 5), (1.7, 151), (1.0, 256), (256.0, 1), (1000.0, 1), (32.0, 8)]:
        gain = 2.0 ** undoable_gain(largest, 8)
        assert gain <= largest and 256 / gain == pytest.approx(m, abs=1e-9), (largest, gain)
    assert undoable_gain(0.4, 8) == 0.0


def test_the_pass_amplifies_weights_and_bias_and_undoes_it_first():
    before = one_layer([[0.1, -0.3], [0.02, 0.01]], [0.05, 0.0], [Relu()])
    after = amplified(before, {0: LayerRange(np.array([1.5, 0.2]), np.array([9.0, 9.0]), 5000)})
    expected = one_layer(np.float32([[3.2, -9.6], [0.64, 0.32]]), [1.6, 0.0],
                         [Scale(np.float32([1 / 32, 1 / 32]), node=GAIN_NODE), Relu()])
    expected.gains = {"dense": np.array([5, 5])}
    assert same(after, expected)
    # The IR before is untouched (passes are functions).
    assert [p.kind for p in before.layers[0].post_ops] == ["relu"] and before.layers[0].bias[0] == np.float32(0.05)


def test_exact_layers_and_uncalibrated_layers_are_left_alone():
    copy = one_layer([[1.0, 0.0], [0.0, -1.0]], [0.5, 0.0])
    assert amplified(copy, {0: LayerRange(np.ones(2), np.ones(2), 5000)}).layers[0] is copy.layers[0]
    plain = one_layer([[0.1, 0.2], [0.3, 0.4]], [0.0, 0.0])
    assert amplified(plain, {}).layers[0] is plain.layers[0]


def test_amplified_ir_computes_the_same_function_in_float():
    m, _ = conv_bn_relu()
    hir = ir_of(m)
    rng = np.random.default_rng(0)
    samples = [{"x": rng.normal(size=(1, 5, 7, 6)).astype(np.float32)} for _ in range(4)]
    after = amplified(hir, measure(hir, samples))
    assert after.gains and min(int(g.min()) for g in after.gains.values()) >= 1
    x = {"x": rng.normal(size=(1, 5, 7, 6)).astype(np.float32)}
    np.testing.assert_allclose(run_reference(after, x)["y"], run_reference(hir, x)["y"], rtol=1e-5, atol=1e-6)


def test_calibration_samples_are_checked_against_the_model():
    m, _ = conv_bn_relu()
    g = to_graph(m)
    x = np.zeros((1, 5, 7, 6), np.float32)
    assert len(calibration_samples({"x": x}, g)) == 1
    assert len(calibration_samples({"x": np.zeros((3, 1, 5, 7, 6), np.float32)}, g)) == 3
    assert len(calibration_samples({"x": np.zeros((4, 5, 7, 6), np.float32)}, g)) == 4
    assert len(calibration_samples([{"x": x}, {"x": x}], g)) == 2
    with pytest.raises(CalibrationError, match=r"no values for the model's input 'x'"):
        calibration_samples({"y": x}, g)
    with pytest.raises(CalibrationError, match=r"input 'x' has shape \[2, 7, 6\]; the model's is \[1, 5, 7, 6\]"):
        calibration_samples({"x": np.zeros((2, 7, 6))}, g)
    with pytest.raises(CalibrationError, match="NaN"):
        calibration_samples({"x": np.full((1, 5, 7, 6), np.nan)}, g)
    with pytest.raises(CalibrationError, match="expected a dict"):
        calibration_samples(42, g)


def test_a_bad_npz_file_is_named(tmp_path):
    m, _ = conv_bn_relu()
    bad = tmp_path / "cal.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(CalibrationError, match=r"cal\.npz: not a NumPy \.npz file"):
        calibration_samples(bad, to_graph(m))
    with pytest.raises(CalibrationError, match="no such file"):
        calibration_samples(tmp_path / "missing.npz", to_graph(m))


def test_calibrated_compile_has_smaller_error_on_the_emulator():
    """A 3x3 conv over 64 channels: folded weights of about 0.04 lose most of their bits."""
    from systolix.compiler import compile_model

    rng = np.random.default_rng(3)
    w = rng.normal(0, 1 / 24, (32, 64, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c"], ["y"])]
    m = make_model(nodes, [("x", [1, 64, 8, 8])], [("y", None)], {"w": w})
    cal = rng.normal(size=(8, 1, 64, 8, 8)).astype(np.float32)
    test = {"x": rng.normal(size=(1, 64, 8, 8)).astype(np.float32)}
    import onnxruntime as ort

    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, test)[0]
    plain = compile_model(m, ARCH)  # estimated gains by default
    calibrated = compile_model(m, ARCH, calibration={"x": cal})
    assert calibrated.summary.gains and calibrated.summary.calibration_samples == 8
    assert plain.summary.gains  # from estimated ranges (estimate_ranges)
    assert not compile_model(m, ARCH, estimate_gains=False).summary.gains  # opted out
    ours = calibrated.run(test)["y"]
    err_plain = float(np.sqrt(np.mean((plain.run(test)["y"] - ref) ** 2))) / LSB
    err_cal = float(np.sqrt(np.mean((ours - ref) ** 2))) / LSB
    # Unamplified, the weights' and products' rounding leave about 6 LSB RMS here. Gains of 2^3 to 2^4 from the samples shrink it 8-16x,
    # leaving the one rounding of the result (measured: 0.6 LSB); the estimated ones a little
    # less (1.2 LSB).
    assert err_cal < 1.0 and err_plain < 2.0 and err_cal < err_plain, (err_cal, err_plain)


def test_many_samples_set_the_peak_that_32_typically_reach_and_none_saturates():
    # One dense layer y = 1 * x: each sample's accumulator peak is its own |x|.
    hir = one_layer([[1.0, 0.0]], [0.0], [Scale(np.float32([0.5]))])
    xs = np.arange(1.0, 65.0) / 16  # 64 samples, peaks 1/16 .. 4
    samples = [{"x": np.float32([[x, 0.0]])} for x in xs]
    seen = measure(hir, samples)[0]
    # 64 samples = 2 x 32: the second largest of the samples' peaks, not the largest.
    np.testing.assert_allclose(seen.peak, [63 / 16])
    np.testing.assert_allclose(seen.largest, [4.0])
    assert seen.observations == 32
    assert measure(hir, samples[:32])[0].peak.tolist() == [2.0]  # up to 32: the largest
    # Every sample keeps its sums in range even when the headroom on the typical peak would not.
    spread = [{"x": np.float32([[x, 0.0]])} for x in [0.5] * 63 + [100.0]]
    outlier = measure(hir, spread)[0]
    assert outlier.peak.tolist() == [0.5] and outlier.largest.tolist() == [100.0]
    assert channel_gains(hir.layers[0], outlier, ARCH.data_type).tolist() == [0]


def pool_model(kind: str = "GlobalAveragePool", channels: int = 2, h: int = 7, w: int = 9, **attrs):
    """One average pool of ``kind`` over an NCHW input ``x``; its output is ``y``."""
    return make_model([helper.make_node(kind, ["x"], ["y"], **attrs)], [("x", [1, channels, h, w])], [("y", None)])


def test_a_pool_whose_samples_would_saturate_gets_a_negative_gain_undone_in_its_last_multiply():
    before = ir_of(pool_model(h=4, w=4))
    pool = before.layers[0]
    # 16 taps (one pass): weights 2^-2 (the sum holds 4x the mean), then x 1 and x 2^-2.
    np.testing.assert_array_equal(pool.inputs[0].diagonal, np.full((2, 4, 4), 0.25, np.float32))
    assert [(p.kind, float(p.values[0])) for p in pool.post_ops] == [("mul", 1.0), ("mul", 0.25)]
    assert pool.scaling_ops == 2
    # Channel 0 is 40 everywhere (its sum would reach 160), channel 1 is 1.
    x = np.concatenate([np.full((1, 1, 4, 4), 40.0), np.ones((1, 1, 4, 4))], axis=1).astype(np.float32)
    seen = measure(before, [{"x": x}])[0]
    np.testing.assert_allclose(seen.largest, [160.0, 4.0])
    after = amplified(before, {0: seen})
    # Channel 0: 160 with 1.5x headroom is 240 -> 2^-1 (its sums now peak at 80); channel 1 fits.
    assert after.gains["GlobalAveragePool_0"].tolist() == [-1, 0]
    layer = after.layers[0]
    np.testing.assert_array_equal(layer.inputs[0].diagonal[:, 0, 0], np.float32([2 ** -3, 2 ** -2]))
    # The undo (x 2) joins the pool's own x 2^-2: one rounding, and no extra SIMD multiply.
    assert [p.kind for p in layer.post_ops] == ["mul", "mul"] and GAIN_NODE not in [p.node for p in layer.post_ops]
    np.testing.assert_array_equal(layer.post_ops[1].values, np.float32([0.5, 0.25]))
    np.testing.assert_allclose(run_reference(after, {"x": x})["y"].reshape(-1), [40.0, 1.0], rtol=1e-6)


def test_a_positive_pool_gain_is_undone_after_the_pools_own_multiplies():
    before = ir_of(pool_model(h=4, w=4))
    x = np.full((1, 2, 4, 4), 0.04, np.float32)
    after = amplified(before, {0: measure(before, [{"x": x}])[0]})
    gains = after.gains["GlobalAveragePool_0"]
    # Sums of 0.16 (with a global pool's headrooms, under 1) leave room for 2^7; a merged
    # 2^-(2+7) would be below FP16BP8's step, so the undo is a multiply of its own, after the pool's.
    assert gains.tolist() == [7, 7]
    layer = after.layers[0]
    assert [p.node for p in layer.post_ops] == ["GlobalAveragePool_0", "GlobalAveragePool_0", GAIN_NODE]
    np.testing.assert_array_equal(layer.post_ops[2].values, (2.0 ** -gains).astype(np.float32))
    np.testing.assert_allclose(run_reference(after, {"x": x})["y"], run_reference(before, {"x": x})["y"], rtol=1e-6)


def _pool_error_bound(layer, mean: np.ndarray) -> np.ndarray:
    """Worst case |error| of a compiled average pool layer's output ``mean`` [C, P], in FP16BP8:
    its inputs' rounding, each product's (0.5 LSB at the sum's scale, times every multiply after),
    each multiply's result rounding, and the error of its scale: each multiplier stored to 2^-8
    (relative error), or, where weight and first multiply were chosen together (one multiplier
    a channel), their product's distance from 1 / taps (a power of two apart: gains)."""
    lsb = 2.0 ** -8
    ops = [np.broadcast_to(np.asarray(p.values, np.float64).reshape((-1, 1) if p.kind == "mul" else (1, -1)), mean.shape)
           for p in layer.post_ops]
    after = [np.prod(ops[j + 1:], axis=0) if j + 1 < len(ops) else np.ones(mean.shape) for j in range(len(ops))]
    weight = np.asarray(layer.inputs[0].diagonal, np.float64).reshape(mean.shape[0], -1)[:, :1]
    # count products of 0.5 LSB each, times the multiplies' product 1 / (count * weight)
    bound = 0.5 * lsb + 0.5 * lsb / weight
    for v, rest in zip(ops, after):
        bound = bound + 0.5 * lsb * rest + np.abs(np.round(v / lsb) * lsb / v - 1) * np.abs(mean)
    if layer.post_ops[0].kind == "mul":
        scale = weight * np.prod(ops, axis=0) * np.prod(layer.kernel)
        bound = bound + np.abs(scale / 2.0 ** np.round(np.log2(scale)) - 1) * np.abs(mean)
    return bound


@pytest.mark.parametrize("kind", ["GlobalAveragePool", "AveragePool"])
def test_calibrated_pools_of_large_values_do_not_saturate_on_the_emulator(kind, capsys):
    import warnings

    import onnxruntime as ort

    from systolix.compiler import compile_model
    from systolix.runtime import SaturationWarning

    attrs = {} if kind == "GlobalAveragePool" else {"kernel_shape": [5, 5], "pads": [2, 2, 2, 2], "count_include_pad": 0}
    m = pool_model(kind, 5, **attrs)
    rng = np.random.default_rng(4)

    def sample():  # means of 40 and more: the plain pool's sums hold 4 to 8x that, past 128
        return (40 + 3 * np.arange(5)[None, :, None, None] + rng.normal(0, 3, (1, 5, 7, 9))).astype(np.float32)

    test = {"x": sample()}
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, test)[0]
    with pytest.warns(SaturationWarning):
        plain = compile_model(m, ARCH).run(test)["y"]
    calibrated = compile_model(m, ARCH, calibration=[{"x": sample()} for _ in range(16)])
    assert calibrated.summary.gains[f"{kind}_0"].max() < 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", SaturationWarning)
        ours = calibrated.run(test)["y"]
    layers = calibrated.summary.segments[0].hir.layers
    bound = _pool_error_bound(layers[-1], ref.reshape(5, -1).astype(np.float64))
    if kind == "GlobalAveragePool":
        # Two passes (``separate_averages``): the rows' error reaches the mean of them at most as it is.
        rows, _ = layers
        row_means = np.abs(test["x"].astype(np.float64).mean(axis=3)).reshape(5, -1).max(axis=1, keepdims=True)
        bound = bound + _pool_error_bound(rows, row_means)
    else:
        assert len(layers) == 1
    err = np.abs(ours - ref).reshape(5, -1)
    with capsys.disabled():
        print(f"\n{kind} of means 40-55 on pynqz1: largest error {np.max(np.abs(plain - ref)) * 256:,.0f} LSB plain "
              f"(saturated), {err.max() * 256:.1f} LSB calibrated (derived bound {bound.min() * 256:.1f} LSB or more)")
    assert np.all(err <= bound), f"largest error {err.max() * 256:.1f} LSB, bound there {bound.flat[np.argmax(err)] * 256:.1f}"


def test_compile_reports_calibration_and_scheduling_progress():
    from systolix.compiler import compile_model

    m, _ = conv_bn_relu()
    rng = np.random.default_rng(5)
    seen: dict[str, list[tuple[int, int]]] = {}
    compile_model(m, ARCH, name="cbr", calibration={"x": rng.normal(size=(3, 1, 5, 7, 6)).astype(np.float32)},
                  progress=lambda what, done, total: seen.setdefault(what, []).append((done, total)))
    assert list(seen) == ["calibrating cbr", "scheduling cbr", "correcting output offsets"]
    # One float run per sample: the second run (the outputs' offsets taken out) takes the first's ranges.
    assert seen["calibrating cbr"] == [(1, 3), (2, 3), (3, 3)]
    assert seen["correcting output offsets"] == [(0, 1), (1, 1)]
    assert seen["scheduling cbr"][-1][0] == seen["scheduling cbr"][-1][1]
