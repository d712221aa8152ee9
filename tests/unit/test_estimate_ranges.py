"""Gains without calibration data: ranges estimated from the model (``estimate_ranges``), then
amplified weights (``amplify_weights``), as plain compiles run them."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from systolix.arch import get_architecture
from systolix.compiler.context import CompileContext
from systolix.hir_passes.amplify_weights import GAIN_NODE, amplify_weights
from systolix.hir_passes.estimate_ranges import SIGMAS, estimate_ranges
from systolix.ir import same
from systolix.ir.hir import Activation, ConvInput, ConvLayer, HirProgram
from systolix.ir.postops import Relu, Scale
from systolix.numerics import DataType
from tests.onnx_builders import conv_bn_relu, ir_of

ARCH = get_architecture("ultra96v2")  # FP16BP8: the largest value is 127.996
LSB = 2.0 ** -8


def _program(layer: ConvLayer, x: Activation, y: Activation) -> HirProgram:
    return HirProgram("m", 8, [layer], {"x": x}, {"y": y}, {"x": (1, x.C, x.H, x.W)}, {"y": (1, y.C, y.H, y.W)})


def test_batch_norm_statistics_set_the_gains_of_the_layer_they_fold_into():
    # A 1x1 layer over 3 channels (one block of the array: its partial sums are its sums), with
    # the statistics of a batch norm folded into it: channel c's sums have mean m_c, spread s_c.
    # Two pixels (a layer with one value a channel, a classifier head, keeps powers of two).
    x = Activation("x", 3, 1, 2, 8, order="pixel")
    y = Activation("y", 4, 1, 2, 8, order="pixel")
    w = np.array([[0.02, -0.01, 0.03], [0.5, 0.2, -0.1], [0.04, 0.02, 0.01], [3.0, -1.0, 0.5]], np.float32)
    mean = np.array([0.5, -1.0, 0.0, 2.0], np.float32)
    std = np.array([0.1, 0.5, 1.0, 0.05], np.float32)
    zero = np.zeros(4, np.float32)
    layer = ConvLayer("conv", [ConvInput(x, weights=w[:, :, None, None])], y, zero, (1, 1), post_ops=[Relu()],
                      statistics=(mean, std))
    ctx = CompileContext(ARCH, estimate_gains=True)
    after = amplify_weights(estimate_ranges(_program(layer, x, y), ctx), ctx)
    # The factor: the range |m| + SIGMAS s at most the largest value, the weights at most half of
    # it; then the largest 256 / m_c below that (its undo m_c / 256 exact).
    largest = [min(127.996 / (abs(m) + SIGMAS * s), 63.998 / np.max(np.abs(row))) for m, s, row in zip(mean, std, w)]
    m = [math.ceil(256 / g) for g in largest]
    assert m == [5, 19, 33, 13]  # the last limited by its weights, the others by their ranges
    factor = np.float32(256.0) / np.array(m, np.float32)
    expected = ConvLayer("conv", [ConvInput(x, weights=(w * factor[:, None])[:, :, None, None])], y, zero, (1, 1),
                         post_ops=[Scale(np.array(m, np.float32) / 256, node=GAIN_NODE), Relu()], statistics=(mean, std))
    want = _program(expected, x, y)
    want.gains = {"conv": np.log2(256.0 / np.array(m))}
    assert same(without_ranges(after), want)
    # The same layer on one pixel (a classifier's head: one value an image) keeps powers of two.
    x1, y1 = Activation("x", 3, 1, 1, 8, order="pixel"), Activation("y", 4, 1, 1, 8, order="pixel")
    head = dataclasses.replace(layer, inputs=[ConvInput(x1, weights=w[:, :, None, None])], output=y1)
    gains = amplify_weights(estimate_ranges(_program(head, x1, y1), ctx), ctx).gains["conv"]
    assert gains.tolist() == [math.floor(math.log2(g)) for g in largest]


def without_ranges(hir: HirProgram) -> HirProgram:
    return dataclasses.replace(hir, ranges={})


def test_calibrated_float_and_opted_out_compiles_estimate_nothing():
    x = Activation("x", 3, 1, 1, 8, order="pixel")
    y = Activation("y", 4, 1, 1, 8, order="pixel")
    layer = ConvLayer("conv", [ConvInput(x, weights=np.full((4, 3, 1, 1), 0.01, np.float32))], y, np.zeros(4, np.float32), (1, 1))
    hir = _program(layer, x, y)
    assert estimate_ranges(hir, CompileContext(ARCH, samples=[{"x": np.zeros((1, 3, 1, 1))}])).ranges == {}
    assert estimate_ranges(hir, CompileContext(_float_arch(), estimate_gains=True)).ranges == {}
    assert estimate_ranges(hir, CompileContext(ARCH, estimate_gains=False)).ranges == {}  # opted out
    assert set(estimate_ranges(hir, CompileContext(ARCH)).ranges) == {0}  # by default


def _float_arch():
    return ARCH.model_copy(update={"data_type": DataType.FLOAT32})


def test_a_batch_norm_keeps_its_statistics_when_it_folds():
    m, p = conv_bn_relu()
    (layer,) = ir_of(m).layers
    mean, std = layer.statistics
    np.testing.assert_allclose(mean, p["beta"])
    np.testing.assert_allclose(std, p["scale"] * np.sqrt(p["var"] / (p["var"] + 1e-3)), rtol=1e-6)


@pytest.mark.needs_onnxruntime
@pytest.mark.needs_emulator
def test_a_torch_model_compiled_plainly_comes_within_twice_the_limit():
    # tests/torch_models.py: random weights, batch norms fitted to random inputs and folded by
    # torch's exporter: no statistics left, the ranges come from running the weights. The limit
    # is onnxruntime with every tensor rounded to FP16BP8 (systolix.models.rounded).
    pytest.importorskip("torch")
    from systolix.compiler import compile_model
    from systolix.models.rounded import rounded_feeds, with_rounded_tensors
    from systolix.onnxrt import session
    from tests import torch_models

    model = torch_models.build("torch_cnn")
    items = [torch_models.normal_inputs(model, seed) for seed in range(16)]
    ref = np.array([session(model).run(None, f)[0] for f in items])
    rounded = session(with_rounded_tensors(model))
    limit = np.array([rounded.run(None, rounded_feeds(f))[0] for f in items])
    compiled = compile_model(model, ARCH, estimate_gains=True)
    assert compiled.summary.gains
    got, saturated = compiled.run_counting({"x": np.concatenate([f["x"] for f in items])[:, None]}, batch=True)
    got = got["y"].reshape(ref.shape)
    rms = float(np.sqrt(np.mean((got - ref) ** 2))) / LSB
    rms_limit = float(np.sqrt(np.mean((limit - ref) ** 2))) / LSB
    # Measured: 0.48 LSB RMS against a limit of 0.34 (before: 2.1 LSB).
    assert not np.any(saturated) and rms < 2.0 * rms_limit, (rms, rms_limit)


# Every kind of layer the estimate runs side by side: dense, depthwise, pools, Concat/Split
# aliases, per-pixel constants, remaps (resize, depth-to-space), pixel mixes (linear resize,
# transposed convolutions), element-wise post-ops reading other tensors.
SIDE_BY_SIDE = ["ops/conv_dilated_stride2", "ops/conv_depthwise_33ch_stride2", "ops/avgpool_3x3_pad_exclude",
                "ops/maxpool_3x3_s2_pad1", "ops/split_concat_swap", "ops/add_const_spatial", "ops/resize_linear_half_pixel",
                "ops/resize_nearest_scales_3x2", "ops/depth_to_space", "ops/conv_transpose_3x3_s3_output_padding",
                "ops/mul_broadcast_gate", "ops/prelu_per_channel", "cnn/odd_mixed"]


@pytest.mark.parametrize("name", SIDE_BY_SIDE)
def test_runs_side_by_side_compute_what_single_runs_do(name):
    # systolix.ir.evaluate.Runs (float32, several runs in one product) against the float64
    # evaluator run by run: every layer's output and every conv layer's accumulator range.
    import systolix.models as M
    from systolix.ir.evaluate import Runs, evaluate, input_chw, run_layer_runs

    model = M.build(name)
    hir = ir_of(model, arch="ultra96v2")
    feeds = [M.example_inputs(model, seed=s) for s in range(3)]
    singles = [evaluate(hir, f) for f in feeds]
    runs = Runs(len(feeds))
    for input_name, act in hir.inputs.items():
        runs.write(act, np.stack([input_chw(hir, input_name, f[input_name]) for f in feeds]))
    for index, layer in enumerate(hir.layers):
        got = run_layer_runs(runs, layer, index)
        runs.write(layer.output, got)
        want = np.stack([ev.read(layer.output) for ev in singles])
        scale = float(np.max(np.abs(want), initial=0.0)) + 1e-6
        assert np.max(np.abs(runs.read(layer.output) - want), initial=0.0) <= 1e-5 * scale, (index, layer.name)
        if isinstance(layer, ConvLayer):
            peak = np.max([ev.accumulator_max[index] for ev in singles], axis=0)
            np.testing.assert_allclose(runs.accumulator_max[index], peak, rtol=1e-5, atol=1e-5 * scale)


def test_a_later_batch_norm_narrower_than_its_inputs_through_the_weights_keeps_the_wider_range():
    # The first batch norm sets its layer's range (it corrects the synthetic inputs); the second
    # claims a spread of 0.1 where its inputs (spread 1 by the first's statistics) give about
    # 4 * sqrt(3) through its weights: statistics not fitted to these weights, not trusted.
    x = Activation("x", 3, 4, 4, 8)
    h = Activation("h", 3, 4, 4, 8)
    y = Activation("y", 2, 4, 4, 8)
    eye = np.eye(3, dtype=np.float32)[:, :, None, None]
    first = ConvLayer("first", [ConvInput(x, weights=eye)], h, np.zeros(3, np.float32), (1, 1), post_ops=[Relu()],
                      statistics=(np.zeros(3, np.float32), np.ones(3, np.float32)))
    narrow = (np.zeros(2, np.float32), np.full(2, 0.1, np.float32))
    second = ConvLayer("second", [ConvInput(h, weights=np.full((2, 3, 1, 1), 4.0, np.float32))], y, np.zeros(2, np.float32),
                       (1, 1), statistics=narrow)
    hir = HirProgram("m", 8, [first, second], {"x": x}, {"y": y}, {"x": (1, 3, 4, 4)}, {"y": (1, 2, 4, 4)})
    ranges = estimate_ranges(hir, CompileContext(ARCH)).ranges
    np.testing.assert_allclose(ranges[0].peak, SIGMAS * 1.0)  # the first batch norm's own statistics
    assert np.all(ranges[1].peak > 10 * SIGMAS * 0.1), ranges[1].peak  # not the second's


@pytest.mark.needs_emulator
def test_an_average_pool_of_large_values_takes_a_negative_estimated_gain_and_does_not_saturate():
    # Values near 40 (a conv's bias): the pool's sums hold several times the mean, past the
    # type's 128, unless its estimated range gives it a negative gain as a measured one would.
    from onnx import helper

    from systolix.compiler import compile_model
    from tests.onnx_builders import make_model

    inits = {"w": (np.eye(4, dtype=np.float32) * 0.5)[:, :, None, None], "b": np.full(4, 40.0, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["y"], name="pool")]
    model = make_model(nodes, [("x", [1, 4, 8, 8])], [("y", None)], inits)
    compiled = compile_model(model, ARCH)
    assert min(int(np.min(g)) for g in compiled.summary.gains.values()) < 0
    xs = np.random.default_rng(0).standard_normal((4, 1, 4, 8, 8)).astype(np.float32)
    got, saturated = compiled.run_counting({"x": xs}, batch=True)
    assert not np.any(saturated)
    np.testing.assert_allclose(got["y"].reshape(4, 4), 40.0 + 0.5 * xs.mean(axis=(3, 4)).reshape(4, 4), atol=0.05)


@pytest.mark.needs_emulator
@pytest.mark.parametrize("bounded", [True, False])
def test_a_global_average_does_not_saturate_while_its_inputs_stay_in_their_statistics_range(bounded, monkeypatch):
    # A batch norm says each channel is N(0, 1) before its ReLU; the input puts every pixel of a
    # channel at 10 standard deviations (inside the SIGMAS range), so the average is 10 too:
    # far past what the synthetic averages spread to. The pool's range is its input's
    # (``_average_bound``): no saturation, the average within a few LSB. Without it, the pool
    # saturates (ResNet-50 v2 on random normal inputs, its batch norms fitted to image-like ones).
    from onnx import helper

    import systolix.hir_passes.estimate_ranges as E
    from systolix.compiler import compile_model
    from tests.onnx_builders import make_model

    if not bounded:
        monkeypatch.setattr(E, "_average_bound", lambda layer, bounds: None)
    c = 4
    inits = {"w": np.eye(c, dtype=np.float32)[:, :, None, None], "gamma": np.ones(c, np.float32),
             "beta": np.zeros(c, np.float32), "mean": np.zeros(c, np.float32), "var": np.ones(c, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[1, 1]),
             helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["n"], name="bn", epsilon=0.0),
             helper.make_node("Relu", ["n"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["y"], name="pool")]
    model = make_model(nodes, [("x", [1, c, 7, 7])], [("y", None)], inits)
    compiled = compile_model(model, ARCH)
    levels = np.array([10.0, 6.0, 3.0, 0.5], np.float32)
    x = np.broadcast_to(levels[None, :, None, None], (1, c, 7, 7)).astype(np.float32)
    import warnings

    from systolix.runtime import SaturationWarning

    with warnings.catch_warnings():
        warnings.simplefilter("error" if bounded else "ignore", SaturationWarning)
        got, saturated = compiled.run_counting({"x": x})
    if bounded:
        assert not np.any(saturated)
        np.testing.assert_allclose(got["y"].reshape(c), levels, atol=4 * LSB)
    else:
        assert np.any(saturated) and abs(float(got["y"].reshape(c)[0]) - 10.0) > 1.0


def test_a_small_model_runs_more_synthetic_inputs_and_its_ranges_see_them():
    # A one-pixel layer's spread comes from one value a run: a small model runs as many as
    # ESTIMATE_MACS allows (up to MAX_RUNS), a large one RUNS; the range says how many it saw.
    from systolix.hir_passes.estimate_ranges import ESTIMATE_MACS, MAX_RUNS, RUNS, estimate, synthetic_runs

    def dense(inputs: int, outputs: int, pixels: int = 1) -> HirProgram:
        x = Activation("x", inputs, pixels, 1, 8)
        y = Activation("y", outputs, pixels, 1, 8)
        w = np.random.default_rng(0).standard_normal((outputs, inputs, 1, 1)).astype(np.float32) * 0.1
        layer = ConvLayer("fc", [ConvInput(x, weights=w)], y, np.zeros(outputs, np.float32), (1, 1),
                          macs=inputs * outputs * pixels)
        return _program(layer, x, y)

    small, middle = dense(16, 8), dense(64, 64, ESTIMATE_MACS // (64 * 64 * 20))
    large = dense(64, 64, ESTIMATE_MACS // (64 * 64 * 4))
    assert synthetic_runs(small) == MAX_RUNS and synthetic_runs(large) == RUNS
    assert RUNS < synthetic_runs(middle) == ESTIMATE_MACS // middle.layers[0].macs < MAX_RUNS
    assert estimate(small)[0].observations == MAX_RUNS


@pytest.mark.needs_emulator
def test_an_average_of_a_concat_through_a_max_pool_keeps_its_parts_statistics_range():
    # Two branches, each a batch norm saying N(-3, 1) before its ReLU (the synthetic runs' values
    # nearly all zero after it), concatenated (each part a slice of the Concat's tensor), max
    # pooled, then averaged: the pool's range comes from the parts' statistics through the slice
    # and the max pool (``ChannelBounds``), not from the synthetic averages. Inception v3's
    # 3x3 average pools read such tensors; found only by the convs' own names, their ranges came
    # from the synthetic runs alone and 2 to 32 channels a pool saturated on image-like inputs.
    from onnx import helper

    from systolix.compiler import compile_model
    from systolix.runtime import SaturationWarning
    from tests.onnx_builders import make_model

    import warnings

    c = 16  # one vector of ultra96v2: each part a whole channel group of the Concat
    inits = {"w": np.eye(c, dtype=np.float32)[:, :, None, None], "w2": -np.eye(c, dtype=np.float32)[:, :, None, None],
             "gamma": np.ones(c, np.float32), "beta": np.full(c, -3.0, np.float32), "mean": np.zeros(c, np.float32),
             "var": np.ones(c, np.float32)}
    nodes = []
    for k, w in (("a", "w"), ("b", "w2")):
        nodes += [helper.make_node("Conv", ["x", w], [f"c{k}"], name=f"conv{k}", kernel_shape=[1, 1]),
                  helper.make_node("BatchNormalization", [f"c{k}", "gamma", "beta", "mean", "var"], [f"n{k}"], name=f"bn{k}",
                                   epsilon=0.0),
                  helper.make_node("Relu", [f"n{k}"], [f"r{k}"], name=f"relu{k}")]
    nodes += [helper.make_node("Concat", ["ra", "rb"], ["cat"], name="cat", axis=1),
              helper.make_node("MaxPool", ["cat"], ["mp"], name="maxpool", kernel_shape=[2, 2], strides=[2, 2]),
              helper.make_node("GlobalAveragePool", ["mp"], ["y"], name="pool")]
    model = make_model(nodes, [("x", [1, c, 8, 8])], [("y", None)], inits)
    compiled = compile_model(model, ARCH)
    levels = np.linspace(-15.0, 15.0, c).astype(np.float32)  # within SIGMAS = 16 of either branch
    x = np.broadcast_to(levels[None, :, None, None], (1, c, 8, 8)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SaturationWarning)
        got, saturated = compiled.run_counting({"x": x})
    assert not np.any(saturated)
    np.testing.assert_allclose(got["y"].reshape(2 * c), np.concatenate([np.maximum(levels - 3, 0), np.maximum(-levels - 3, 0)]),
                               atol=4 * LSB)


@pytest.mark.needs_emulator
@pytest.mark.parametrize("path", ["silu", "residual"])
def test_a_global_average_keeps_its_input_range_through_silu_and_residual_adds(path):
    # As above, every pixel of a channel within SIGMAS standard deviations of its batch norms'
    # statistics (up to 15), the average reading a SiLU's output (|silu(x)| <= |x|: the conv's range is a
    # bound) or a residual sum (its operands' bounds added). Without those rules the pool's range
    # came from the synthetic averages alone: EfficientNet-B0's squeeze-and-excitation averages
    # and ResNet-50's last one saturated on image-like inputs.
    from onnx import helper

    from systolix.compiler import compile_model
    from systolix.runtime import SaturationWarning
    from tests.onnx_builders import make_model

    import warnings

    c = 4
    inits = {"w": np.eye(c, dtype=np.float32)[:, :, None, None], "gamma": np.ones(c, np.float32),
             "beta": np.zeros(c, np.float32), "mean": np.zeros(c, np.float32), "var": np.ones(c, np.float32)}

    def conv_bn(x, k):
        return [helper.make_node("Conv", [x, "w"], [f"c{k}"], name=f"conv{k}", kernel_shape=[1, 1]),
                helper.make_node("BatchNormalization", [f"c{k}", "gamma", "beta", "mean", "var"], [f"n{k}"], name=f"bn{k}",
                                 epsilon=0.0)]

    levels = np.array([10.0, 6.0, 3.0, 0.5], np.float32)
    if path == "residual":  # N(-3, 1) before each ReLU: the synthetic sums stay near zero after it
        inits["beta"] = np.full(c, -3.0, np.float32)
        levels = np.array([15.0, 10.0, 6.0, 3.5], np.float32)
    if path == "silu":
        nodes = conv_bn("x", 1) + [helper.make_node("Sigmoid", ["n1"], ["s"], name="sig"),
                                   helper.make_node("Mul", ["n1", "s"], ["r"], name="silu")]
        expected = levels / (1 + np.exp(-levels))
    else:
        nodes = conv_bn("x", 1) + [helper.make_node("Relu", ["n1"], ["a"], name="relu1")] + conv_bn("a", 2) + [
            helper.make_node("Add", ["n2", "a"], ["sum"], name="add"), helper.make_node("Relu", ["sum"], ["r"], name="relu2")]
        a = np.maximum(levels - 3, 0)
        expected = np.maximum(2 * a - 3, 0)
    nodes.append(helper.make_node("GlobalAveragePool", ["r"], ["y"], name="pool"))
    model = make_model(nodes, [("x", [1, c, 7, 7])], [("y", None)], inits)
    compiled = compile_model(model, ARCH)
    x = np.broadcast_to(levels[None, :, None, None], (1, c, 7, 7)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SaturationWarning)
        got, saturated = compiled.run_counting({"x": x})
    assert not np.any(saturated)
    np.testing.assert_allclose(got["y"].reshape(c), expected, atol=6 * LSB)
