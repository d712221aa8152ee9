"""The calibrated weight amplification pass: the IR before, the IR expected after, and that the
amplified IR computes the same function (float evaluation) and less error (emulator)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from systolix.arch import get_architecture
from systolix.calibration import CalibrationError, calibration_samples
from systolix.frontend import to_graph
from systolix.scheduler import ConvLayer, lower
from systolix.scheduler.hir import Activation, ConvInput, HirProgram, PostOp
from systolix.scheduler.precision import GAIN_NODE, LayerRange, amplify_weights, calibrate, channel_gains
from systolix.scheduler.reference import run_reference
from tests.onnx_builders import conv_bn_relu, make_model

ARCH = get_architecture("pynqz1")  # FP16BP8: the largest value is 127.996, the binary point 8


def one_layer(weights, bias, post=()) -> HirProgram:
    C_out, C_in = np.shape(weights)
    x = Activation("x", C_in, 1, 1, 8, order="pixel")
    y = Activation("y", C_out, 1, 1, 8, order="pixel")
    layer = ConvLayer("dense", [ConvInput(x, weights=np.asarray(weights, np.float32)[:, :, None, None])], y,
                      np.asarray(bias, np.float32), (1, 1), post_ops=list(post))
    return HirProgram("m", 8, [layer], {"x": x}, {"y": y}, {"x": (1, C_in)}, {"y": (1, C_out)})


def test_gains_follow_the_calibrated_sums_with_headroom():
    hir = one_layer([[0.1, -0.3], [0.02, 0.01]], [0.05, 0.0], [PostOp("relu")])
    seen = LayerRange(peak=np.array([1.5, 0.2]), bound=np.array([9.0, 9.0]), observations=5000)
    gains = channel_gains(hir.layers[0], seen, ARCH.data_type)
    # channel 0: 1.5 * 2.5 = 3.75 -> 128 / 3.75 = 34 -> 2^5; channel 1: its layer's 1.5 * 1.5
    # = 2.25 counts more than its own 0.2 * 2.5 -> 128 / 2.25 = 57 -> 2^5.
    assert gains.tolist() == [5, 5]
    # A weight of 40 can only double before it nears the limit (64).
    big = one_layer([[40.0, 0.0], [0.01, 0.0]], [0.0, 0.0])
    assert channel_gains(big.layers[0], seen, ARCH.data_type).tolist() == [0, 5]


def test_the_pass_amplifies_weights_and_bias_and_undoes_it_first():
    before = one_layer([[0.1, -0.3], [0.02, 0.01]], [0.05, 0.0], [PostOp("relu")])
    after = amplify_weights(before, ARCH, {0: LayerRange(np.array([1.5, 0.2]), np.array([9.0, 9.0]), 5000)})
    layer = after.layers[0]
    np.testing.assert_array_equal(layer.inputs[0].weights[:, :, 0, 0], np.float32([[3.2, -9.6], [0.64, 0.32]]))
    np.testing.assert_array_equal(layer.bias, np.float32([1.6, 0.0]))
    assert [p.kind for p in layer.post_ops] == ["mul", "relu"]
    assert layer.post_ops[0].node == GAIN_NODE
    np.testing.assert_array_equal(layer.post_ops[0].values, np.float32([1 / 32, 1 / 32]))
    assert after.gains["dense"].tolist() == [5, 5]
    # The IR before is untouched (passes are functions).
    assert [p.kind for p in before.layers[0].post_ops] == ["relu"] and before.layers[0].bias[0] == np.float32(0.05)


def test_exact_layers_and_uncalibrated_layers_are_left_alone():
    copy = one_layer([[1.0, 0.0], [0.0, -1.0]], [0.5, 0.0])
    assert amplify_weights(copy, ARCH, {0: LayerRange(np.ones(2), np.ones(2), 5000)}).layers[0] is copy.layers[0]
    plain = one_layer([[0.1, 0.2], [0.3, 0.4]], [0.0, 0.0])
    assert amplify_weights(plain, ARCH, {}).layers[0] is plain.layers[0]


def test_amplified_ir_computes_the_same_function_in_float():
    m, _ = conv_bn_relu()
    hir = lower(to_graph(m), 8)
    rng = np.random.default_rng(0)
    samples = [{"x": rng.normal(size=(1, 5, 7, 6)).astype(np.float32)} for _ in range(4)]
    after = amplify_weights(hir, ARCH, calibrate(hir, samples))
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
    plain = compile_model(m, ARCH).run(test)["y"]
    calibrated = compile_model(m, ARCH, calibration={"x": cal})
    assert calibrated.summary.gains and calibrated.summary.calibration_samples == 8
    ours = calibrated.run(test)["y"]
    err_plain = float(np.sqrt(np.mean((plain - ref) ** 2)))
    err_cal = float(np.sqrt(np.mean((ours - ref) ** 2)))
    # Gains of 2^3 to 2^4 here: the weights' and products' rounding shrinks 8-16x, leaving the
    # one rounding of the result (measured: 10x less error); at least 3x less.
    assert err_cal * 3 < err_plain, (err_cal, err_plain)


def test_many_samples_set_the_peak_that_32_typically_reach_and_none_saturates():
    # One dense layer y = 1 * x: each sample's accumulator peak is its own |x|.
    hir = one_layer([[1.0, 0.0]], [0.0], [PostOp("mul", values=np.float32([0.5]))])
    xs = np.arange(1.0, 65.0) / 16  # 64 samples, peaks 1/16 .. 4
    samples = [{"x": np.float32([[x, 0.0]])} for x in xs]
    seen = calibrate(hir, samples)[0]
    # 64 samples = 2 x 32: the second largest of the samples' peaks, not the largest.
    np.testing.assert_allclose(seen.peak, [63 / 16])
    np.testing.assert_allclose(seen.largest, [4.0])
    assert seen.observations == 32
    assert calibrate(hir, samples[:32])[0].peak.tolist() == [2.0]  # up to 32: the largest
    # Every sample keeps its sums in range even when the headroom on the typical peak would not.
    spread = [{"x": np.float32([[x, 0.0]])} for x in [0.5] * 63 + [100.0]]
    outlier = calibrate(hir, spread)[0]
    assert outlier.peak.tolist() == [0.5] and outlier.largest.tolist() == [100.0]
    assert channel_gains(hir.layers[0], outlier, ARCH.data_type).tolist() == [0]
