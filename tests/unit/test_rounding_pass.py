"""The calibrated weight rounding pass (GPTQ's error feedback): the IR before and the IR expected
after, weights on the fixed-point grid, and a smaller output error than rounding each weight to
nearest (NumPy's float products as the reference)."""

from __future__ import annotations

import numpy as np

import dataclasses

from systolix.arch import get_architecture
from systolix.compiler.context import CompileContext
from systolix.hir_passes.measure_ranges import measure
from systolix.hir_passes import measure_ranges as measure_module
from systolix.hir_passes.round_weights import (OBSERVATIONS_FOR_MEANS, GramSums, accumulate_gram, gptq, gptq_diagonal, on_grid,
                                               round_weights, shrinkage)
from systolix.ir import same
from systolix.ir.evaluate import run_reference
from systolix.ir.hir import Activation, ConvInput, ConvLayer, HirProgram
from tests.onnx_builders import conv_bn_relu, ir_of

ARCH = get_architecture("pynqz1")  # FP16BP8: one step is 2^-8
LSB = 2.0 ** -8
nearest = on_grid(ARCH.data_type)


def rounded(hir: HirProgram, samples) -> HirProgram:
    """The pass on ``hir`` after ``measure_ranges`` on ``samples``."""
    return round_weights(dataclasses.replace(hir, ranges=measure(hir, samples, ARCH.data_type)), CompileContext(ARCH))


def pixels_layer(c_in: int, c_out: int, side: int, weights, bias) -> HirProgram:
    """One 1x1 conv over a ``side`` x ``side`` image (enough pixels for a Gram matrix)."""
    x = Activation("x", c_in, side, side, 8)
    y = Activation("y", c_out, side, side, 8)
    layer = ConvLayer("conv", [ConvInput(x, weights=np.asarray(weights, np.float32)[:, :, None, None])], y,
                      np.asarray(bias, np.float32), (1, 1))
    return HirProgram("m", 8, [layer], {"x": x}, {"y": y}, {"x": (1, c_in, side, side)}, {"y": (1, c_out, side, side)})


def test_an_error_is_carried_to_the_weight_that_reads_the_same_input():
    # Channels 0 and 1 always carry the same value: rounding 0.4 LSB and 0.4 LSB to nearest
    # drops 0.8 LSB of every output; GPTQ rounds the first down and the second (now 0.8) up.
    before = pixels_layer(2, 1, 6, [[0.4 * LSB, 0.4 * LSB]], [0.0])
    rng = np.random.default_rng(0)
    samples = []
    for _ in range(8):  # 8 x 36 observations: OBSERVATIONS_FOR_MEANS
        v = rng.normal(size=(1, 1, 6, 6)).astype(np.float32)
        samples.append({"x": np.concatenate([v, v], axis=1)})
    after = rounded(before, samples)
    expected = pixels_layer(2, 1, 6, [[0.0, LSB]], [0.0])
    expected.rounded = ["conv"]
    assert same(after, expected)
    # The IR before is untouched (passes are functions), and so is everything but the numbers.
    assert before.layers[0].inputs[0].weights[0, 1, 0, 0] == np.float32(0.4 * LSB)
    assert after.layers[0].output is before.layers[0].output and after.inputs == before.inputs


def test_uncorrelated_inputs_round_to_nearest():
    # A diagonal Gram matrix gives every weight nothing to compensate: plain rounding.
    w = np.array([[0.3, -0.7, 1.2], [2.6, 0.5, -0.4]]) * LSB
    np.testing.assert_array_equal(gptq(w, np.diag([1.0, 2.0, 3.0]), nearest), nearest(w))


def test_gptq_beats_round_to_nearest_on_correlated_inputs():
    # 200 random rows reading smooth (strongly correlated) inputs: GPTQ's output error over the
    # inputs it was fitted on and over fresh ones, against rounding each weight to nearest.
    rng = np.random.default_rng(1)
    K, n = 9, 2000

    def smooth(count):
        base = rng.normal(size=(count, 1))
        return base + 0.2 * rng.normal(size=(count, K))  # every input near the same value

    fit, fresh = smooth(n), smooth(n)
    w = rng.normal(0, 4 * LSB, size=(200, K))
    q = gptq(w, fit.T @ fit, nearest)
    assert np.array_equal(q, nearest(q)), "every weight on the grid"
    assert np.max(np.abs(q - w)) < 2 * LSB
    for x in (fit, fresh):
        ours = np.mean(((w - q) @ x.T) ** 2)
        plain = np.mean(((w - nearest(w)) @ x.T) ** 2)
        assert ours < 0.3 * plain, (ours, plain)


def test_per_channel_layers_use_each_channel_s_own_inputs():
    # Two channels, three taps: channel 0's taps see one shared value, channel 1's independent
    # ones. Channel 0's errors cancel, channel 1 is rounded plainly.
    rng = np.random.default_rng(2)
    shared = rng.normal(size=(1, 500))
    x0 = np.repeat(shared, 3, axis=0)
    x1 = rng.normal(size=(3, 500))
    gram = np.stack([x0 @ x0.T, x1 @ x1.T])
    w = np.array([[0.4, 0.4, 0.4], [0.4, 0.4, 0.4]]) * LSB
    q = gptq_diagonal(w, gram, nearest)
    assert abs(np.sum(q[0] - w[0])) <= 0.5 * LSB  # sum 1.2 LSB kept to the nearest step
    np.testing.assert_array_equal(q[1], np.zeros(3))


def test_a_gemm_with_few_samples_is_left_to_plain_rounding():
    # One input vector per sample: 4 samples do not even tell the inputs' means.
    layer = pixels_layer(3, 2, 1, np.ones((2, 3)) * 0.3 * LSB, [0.0, 0.0])
    samples = [{"x": np.ones((1, 3, 1, 1), np.float32)} for _ in range(4)]
    assert 4 < OBSERVATIONS_FOR_MEANS
    assert measure(layer, samples, ARCH.data_type)[0].gram is None


def test_rounded_conv_layer_errs_less_than_plain_rounding_on_other_inputs():
    # A 3x3 conv + batch norm + ReLU on smooth, image-like inputs: the rounded IR in float
    # against the float IR, on inputs that were not the calibration samples.
    m, _ = conv_bn_relu(cin=5, cout=17, h=12, w=12)
    hir = ir_of(m)
    rng = np.random.default_rng(3)

    def image():
        coarse = rng.normal(size=(1, 5, 4, 4))
        return {"x": np.kron(coarse, np.ones((1, 1, 3, 3))).astype(np.float32) + 0.1 * rng.normal(size=(1, 5, 12, 12)).astype(np.float32)}

    ranges = measure(hir, [image() for _ in range(8)], ARCH.data_type)
    assert any(r.gram is not None for r in ranges.values()), "the conv layer has enough pixels for a Gram matrix"
    after = round_weights(dataclasses.replace(hir, ranges=ranges), CompileContext(ARCH))
    plain_layers = []
    for layer in hir.layers:
        if isinstance(layer, ConvLayer):
            inputs = [ConvInput(i.act, weights=nearest(i.weights).astype(np.float32)) for i in layer.inputs]
            layer = dataclasses.replace(layer, inputs=inputs, bias=nearest(layer.bias).astype(np.float32))
        plain_layers.append(layer)
    plain = dataclasses.replace(hir, layers=plain_layers)
    for layer in after.layers:
        for inp in layer.inputs:
            assert np.array_equal(inp.weights, nearest(inp.weights))
    ours = plain_err = 0.0
    for _ in range(10):
        x = image()
        ref = run_reference(hir, x)["y"]
        ours += float(np.mean((run_reference(after, x)["y"] - ref) ** 2))
        plain_err += float(np.mean((run_reference(plain, x)["y"] - ref) ** 2))
    assert ours < 0.7 * plain_err, (ours, plain_err)


def test_an_average_pool_keeps_one_weight_for_every_tap():
    # Every tap of a 3x3 average pool has the weight 1/9, one block the schedule loads once:
    # rounding the taps differently would load the array nine times.
    x = Activation("x", 4, 6, 6, 8)
    y = Activation("y", 4, 4, 4, 8)
    pool = ConvLayer("pool", [ConvInput(x, diagonal=np.full((4, 3, 3), 1 / 9, np.float32))], y, np.zeros(4, np.float32), (3, 3))
    hir = HirProgram("m", 8, [pool], {"x": x}, {"y": y}, {"x": (1, 4, 6, 6)}, {"y": (1, 4, 4, 4)})
    rng = np.random.default_rng(4)
    samples = [{"x": rng.normal(size=(1, 4, 6, 6)).astype(np.float32)} for _ in range(16)]
    assert measure(hir, samples, ARCH.data_type)[0].gram is None


class _Evaluated:
    """What ``accumulate_gram`` reads of a float run: the values of one tensor, ``[C, H, W]``."""

    def __init__(self, values: np.ndarray):
        self.values = values

    def read(self, act):
        return self.values


def _gram_sums(hir: HirProgram, samples) -> GramSums:
    sums = None
    for x in samples:
        sums = accumulate_gram(hir.layers[0], _Evaluated(x), sums)
    return sums


def test_the_shrinkage_is_the_correlations_spread_over_their_size():
    # Schaefer and Strimmer's estimate, written out from its definition on the samples' own Gram
    # matrices (NumPy's variance over samples), against the pass's running sums.
    rng = np.random.default_rng(5)
    hir = pixels_layer(6, 2, 5, np.zeros((2, 6)), [0.0, 0.0])
    factor = rng.normal(size=(6, 1))
    samples = [(factor * rng.normal(size=(1, 25)) + rng.normal(size=(6, 25)) + 0.5).reshape(6, 5, 5) for _ in range(12)]
    per_sample = []
    for x in samples:
        v = np.concatenate([x.reshape(6, 25), np.ones((1, 25))])
        per_sample.append(v @ v.T / 25)
    per_sample = np.stack(per_sample)
    mean = per_sample.mean(axis=0)
    mu = mean[:-1, -1]
    cov = mean[:-1, :-1] - np.outer(mu, mu)
    d = np.diag(cov)
    off = ~np.eye(6, dtype=bool)
    spread = (np.var(per_sample[:, :-1, :-1], axis=0, ddof=1) / 12 / np.outer(d, d))[off].sum()
    size = (cov ** 2 / np.outer(d, d))[off].sum()
    np.testing.assert_allclose(shrinkage(_gram_sums(hir, samples)), spread / size, rtol=1e-9)
    # Independent inputs, few samples: their correlations are noise, pulled (on average nearly)
    # all the way (the estimate is noisy too: over 50 draws of 8 samples, median 1, tenth percentile 0.65).
    draws = [float(shrinkage(_gram_sums(hir, [rng.normal(size=(6, 5, 5)) for _ in range(8)]))) for _ in range(20)]
    assert np.mean(draws) > 0.75, draws
    # Inputs that follow one factor, many samples: their correlations are real and kept.
    shared = [factor.reshape(6, 1, 1) * rng.normal(size=(1, 5, 5)) + 0.1 * rng.normal(size=(6, 5, 5))
              for _ in range(64)]
    assert shrinkage(_gram_sums(hir, shared)) < 0.05


def test_a_layer_with_fewer_observations_than_weights_is_rounded_on_its_shrunk_gram_matrix(monkeypatch):
    # A 3x3 conv over 32 channels on a 4x4 map: 289 weights a row, 16 samples x 16 pixels = 256
    # observations. The channels follow four smooth factors (correlated channels and taps) above
    # positive levels (what a ReLU leaves). On inputs that were not the samples, GPTQ on the
    # shrunk Gram matrix errs less than on the raw one, which it fits too closely, and far less
    # than rounding to nearest, whose error every output carries times the inputs' means
    # (seeds 0 to 3: 2.9-3.0, 3.7-3.9 and 8.7-10.4 LSB RMS).
    rng = np.random.default_rng(0)
    c_in, c_out = 32, 8
    x = Activation("x", c_in, 4, 4, 8)
    y = Activation("y", c_out, 4, 4, 8)
    w = (rng.normal(size=(c_out, c_in, 3, 3)) * 0.02).astype(np.float32)
    layer = ConvLayer("conv", [ConvInput(x, weights=w)], y, np.zeros(c_out, np.float32), (3, 3), pads=(1, 1, 1, 1))
    hir = HirProgram("m", 8, [layer], {"x": x}, {"y": y}, {"x": (1, c_in, 4, 4)}, {"y": (1, c_out, 4, 4)})
    level = rng.uniform(0.5, 3.0, size=(c_in, 1, 1))
    mix = rng.normal(size=(c_in, 4))

    def sample():
        factors = np.kron(rng.normal(size=(4, 2, 2)), np.ones((2, 2)))
        v = level + 0.5 * np.einsum("ck,khw->chw", mix, factors) + 0.5 * rng.normal(size=(c_in, 4, 4))
        return {"x": np.maximum(v, 0)[None].astype(np.float32)}

    calibration = [sample() for _ in range(16)]
    ranges = measure(hir, calibration, ARCH.data_type)
    assert ranges[0].gram is not None and 16 * 16 == OBSERVATIONS_FOR_MEANS < 289
    after = round_weights(dataclasses.replace(hir, ranges=ranges), CompileContext(ARCH))
    monkeypatch.setattr(measure_module, "shrunk", lambda sums: np.array(sums.total, np.float64))
    raw = round_weights(dataclasses.replace(hir, ranges=measure(hir, calibration, ARCH.data_type)), CompileContext(ARCH))
    plain = dataclasses.replace(hir, layers=[dataclasses.replace(layer, inputs=[ConvInput(x, weights=nearest(w).astype(np.float32))])])
    for program in (after, raw):
        assert program.rounded == ["conv"]
        assert np.array_equal(program.layers[0].inputs[0].weights, nearest(program.layers[0].inputs[0].weights))
    errors = dict.fromkeys(("shrunk", "raw", "nearest"), 0.0)
    for _ in range(64):
        inputs = sample()
        reference = run_reference(hir, inputs)["y"]
        for name, program in (("shrunk", after), ("raw", raw), ("nearest", plain)):
            errors[name] += float(np.mean((run_reference(program, inputs)["y"] - reference) ** 2))
    assert errors["shrunk"] < 0.8 * errors["raw"] and errors["shrunk"] < 0.25 * errors["nearest"], errors
