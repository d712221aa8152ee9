"""Gains that pay (``gain_payoff``, in ``amplify_weights``): an estimated gain is kept only where
it removes enough of its layer's output error for its SIMD multiply."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import systolix.hir_passes.gain_payoff as gain_payoff
from systolix.arch import get_architecture
from systolix.compiler.context import CompileContext
from systolix.hir_passes.amplify_weights import GAIN_NODE, amplify_weights, channel_gains
from systolix.hir_passes.estimate_ranges import estimate_ranges
from systolix.hir_passes.gain_payoff import ErrorVariances
from systolix.ir import same
from systolix.ir.hir import Activation, ConvInput, ConvLayer, HirProgram
from systolix.ir.postops import Relu, Scale

ARCH = get_architecture("ultra96v2")  # FP16BP8
LSB = 2.0 ** -8
VR = LSB * LSB / 12


def _conv_then_per_channel() -> HirProgram:
    """A 3x3 conv over 32 channels (288 products a sum) whose batch-norm statistics say a spread
    of 0.05, then a standalone per-channel layer (a batch norm and ReLU no conv absorbs) with
    weights of 8 to 15: one product a sum, on an input that carries the conv's error. Its
    statistics are what its input gives through its weights (a ReLU of N(0, s^2) has mean
    0.399 s and spread 0.584 s), so the estimate trusts them."""
    rng = np.random.default_rng(0)
    x = Activation("x", 32, 6, 6, 16, order="pixel")
    h = Activation("h", 16, 6, 6, 16)
    y = Activation("y", 16, 6, 6, 16, order="pixel")
    w = (rng.standard_normal((16, 32, 3, 3)) / np.sqrt(288)).astype(np.float32)
    conv = ConvLayer("conv", [ConvInput(x, weights=w)], h, np.zeros(16, np.float32), (3, 3), pads=(1, 1, 1, 1),
                     post_ops=[Relu()], statistics=(np.zeros(16, np.float32), np.full(16, 0.05, np.float32)))
    scale = rng.uniform(8, 15, 16).astype(np.float32)
    bn = ConvLayer("bn", [ConvInput(h, diagonal=scale[:, None, None])], y, np.full(16, -1.0, np.float32), (1, 1),
                   post_ops=[Relu()], statistics=(scale * 0.05 * 0.399 - 1.0, scale * 0.05 * 0.584))
    return HirProgram("m", 16, [conv, bn], {"x": x}, {"y": y}, {"x": (1, 32, 6, 6)}, {"y": (1, 16, 6, 6)})


def test_a_standalone_per_channel_layer_gets_no_gain_and_the_conv_before_it_does():
    hir = _conv_then_per_channel()
    ctx = CompileContext(ARCH, estimate_gains=True)
    ranged = estimate_ranges(hir, ctx)
    after = amplify_weights(ranged, ctx)
    conv, bn = hir.layers
    k = channel_gains(conv, ranged.ranges[0], ARCH.data_type)
    assert np.all(k >= 2) and np.any(channel_gains(bn, ranged.ranges[1], ARCH.data_type) >= 1)  # both could have one
    factor = (2.0 ** k).astype(np.float32)
    amplified = dataclasses.replace(conv, inputs=[conv.inputs[0].scaled(factor)], bias=conv.bias * factor,
                                    post_ops=[Scale(1 / factor, node=GAIN_NODE), Relu()])
    want = dataclasses.replace(hir, layers=[amplified, bn], gains={"conv": k})
    assert same(dataclasses.replace(after, ranges={}), want)


def test_without_the_payoff_rule_the_per_channel_layer_would_take_its_gain(monkeypatch):
    # The rule, not the ranges, leaves the per-channel layer plain: at PAYOFF 0 every gain stays.
    monkeypatch.setattr(gain_payoff, "PAYOFF", 0.0)
    ctx = CompileContext(ARCH, estimate_gains=True)
    after = amplify_weights(estimate_ranges(_conv_then_per_channel(), ctx), ctx)
    assert set(after.gains) == {"conv", "bn"}


def _fixed(v: np.ndarray) -> np.ndarray:
    return np.round(v / LSB) * LSB  # round half to even, as the array's products round


@pytest.mark.parametrize("gain", [0, 3])
def test_a_layers_own_error_variance_is_what_fixed_point_rounding_gives(gain):
    # Monte Carlo in NumPy against the formula ErrorVariances.own uses: a 1x1 layer over 64
    # inputs (on the grid, mean square about 0.6), weights and bias times 2^gain rounded, each
    # product rounded, the sum exact, then times 2^-gain rounded; the error against the exact
    # sum, over 4,000 inputs and 64 outputs (each with its own rounded weights).
    rng = np.random.default_rng(1)
    cin, cout, count = 64, 64, 4000
    w = rng.standard_normal((cout, cin)) * 0.05
    b = rng.standard_normal(cout) * 0.1
    x = _fixed(np.abs(rng.standard_normal((count, cin))) * 0.8)
    exact = x @ w.T + b
    g = 2.0 ** gain
    wq, bq = _fixed(w * g), _fixed(b * g)
    sums = _fixed(x[:, None, :] * wq[None]).sum(axis=2) + bq
    got = _fixed(sums / g) if gain else sums
    measured = float(np.mean((got - exact) ** 2))
    act = Activation("x", cin, 1, 1, 16)
    layer = ConvLayer("l", [ConvInput(act, weights=w[:, :, None, None].astype(np.float32))],
                      Activation("y", cout, 1, 1, 16), b.astype(np.float32), (1, 1))
    hir = HirProgram("m", 16, [layer], {"x": act}, {}, {}, {})
    model = ErrorVariances(hir, ARCH.data_type).own(layer, [np.mean(x * x, axis=0)], np.full(cout, gain))
    assert 0.85 < measured / float(np.mean(model)) < 1.15, (measured / VR, float(np.mean(model)) / VR)


def test_inherited_error_follows_the_weights_and_a_relu_passes_only_its_positive_values():
    # The conv's output error: its sums' error through the ReLU (estimate_ranges measures the
    # share of its values above zero, about half with these statistics), read by the
    # per-channel layer through its weights squared.
    hir = _conv_then_per_channel()
    ctx = CompileContext(ARCH, estimate_gains=True)
    ranged = estimate_ranges(hir, ctx)
    slope = ranged.ranges[0].post_slope
    assert np.all((slope > 0.35) & (slope < 0.65))  # a ReLU of sums of mean 0
    errors = ErrorVariances(ranged, ARCH.data_type)
    conv, bn = hir.layers
    sums = np.full(16, 7.0 * VR)
    errors.conv(conv, sums, slope)
    np.testing.assert_allclose(errors.inherited(bn), bn.inputs[0].diagonal[:, 0, 0] ** 2 * 7.0 * VR * slope, rtol=1e-6)


def _preactivation_block():
    """A ResNet v2 block: conv, batch norm, ReLU, conv, the residual add, then the next block's
    batch norm and ReLU, which no conv absorbs (its input is the add), and a 1x1 conv."""
    from tests.onnx_builders import make_model
    from onnx import helper

    rng = np.random.default_rng(3)
    c = 16
    p = {"w1": rng.normal(0, 1 / 12, (c, c, 3, 3)), "w2": rng.normal(0, 1 / 24, (c, c, 3, 3)),
         "w3": rng.normal(0, 1 / 4, (10, c, 1, 1)),
         "s1": rng.uniform(0.5, 1.5, c), "b1": rng.normal(0, 0.2, c), "m1": rng.normal(0, 0.2, c), "v1": rng.uniform(0.5, 2, c),
         # the standalone batch norm: a tensor of small spread scaled back up (weights 8 to 15)
         "s2": rng.uniform(1, 1.5, c), "b2": rng.normal(0, 0.2, c), "m2": rng.normal(0, 0.1, c), "v2": rng.uniform(0.005, 0.015, c)}
    p = {k: v.astype(np.float32) for k, v in p.items()}
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("BatchNormalization", ["c1", "s1", "b1", "m1", "v1"], ["n1"], epsilon=1e-3),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Add", ["c2", "x"], ["a"]),
        helper.make_node("BatchNormalization", ["a", "s2", "b2", "m2", "v2"], ["n2"], epsilon=1e-3, name="next_bn"),
        helper.make_node("Relu", ["n2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3"], ["y"], kernel_shape=[1, 1]),
    ]
    return make_model(nodes, [("x", [1, c, 8, 8])], [("y", None)], p)


@pytest.mark.needs_emulator
@pytest.mark.needs_onnxruntime
def test_a_preactivation_block_without_the_batch_norms_gain_stays_within_the_error_bound():
    # The standalone batch norm's weights are 8 to 15: its gain would shrink one product's
    # rounding while its input's error, times those weights, passes on. Numbers against
    # onnxruntime, within the error model's bound (tests/error_model.py), on 4 inputs.
    from systolix.compiler import compile_model
    from systolix.onnxrt import session
    from tests.error_model import output_bounds

    model = _preactivation_block()
    compiled = compile_model(model, ARCH)
    # The two convs keep theirs; the batch norm and the 1x1 conv reading it (its inherited error
    # is the batch norm's output error, times its weights) do not.
    assert set(compiled.summary.gains) == {"Conv_0", "Conv_3"}
    rng = np.random.default_rng(5)
    for _ in range(4):
        feeds = {"x": rng.standard_normal((1, 16, 8, 8)).astype(np.float32)}
        want = session(model).run(None, feeds)[0]
        got = compiled.run(feeds)["y"]
        assert np.abs(got - want).max() <= output_bounds(model, feeds)["y"]


def test_the_other_parts_of_a_split_sum_pass_through_the_post_ops_with_it():
    """A map reduction in parts (``split_long_reductions``): the last part adds the others' partial
    sums before its ReLU, so their error goes through the ReLU's slope with its own; a residual
    added after the ReLU does not."""
    from systolix.hir_passes.gain_payoff import PART_NODE
    from systolix.ir.postops import AddTensor

    x, part, res = (Activation(n, 16, 6, 6, 16) for n in ("x", "y part 1", "res"))
    y = Activation("y", 16, 6, 6, 16)
    w = np.ones((16, 16, 3, 3), np.float32)
    last = ConvLayer("conv [16:32]", [ConvInput(x, weights=w)], y, np.zeros(16, np.float32), (3, 3), pads=(1, 1, 1, 1),
                     post_ops=[AddTensor(part, node=PART_NODE), Relu(), AddTensor(res)])
    hir = HirProgram("m", 16, [last], {"x": x}, {"y": y}, {"x": (1, 16, 6, 6)}, {"y": (1, 16, 6, 6)})
    errors = ErrorVariances(hir, ARCH.data_type)
    errors.tensors[id(part)] = np.full(16, 3.0 * VR)
    errors.tensors[id(res)] = np.full(16, 5.0 * VR)
    errors.conv(last, np.full(16, 2.0 * VR), np.full(16, 0.5))
    np.testing.assert_allclose(errors.of(y), np.full(16, ((2.0 + 3.0) * 0.5 + 5.0) * VR))


def test_a_one_pixel_sum_of_parts_rounds_at_its_parts_exponent():
    """The last part of a one-pixel reduction in parts computes its sum at its parts' exponent
    (``tensor_exponents``): its own rounding (products, the gain's undo) is ``2^-2e`` of the
    output's, and the multiply to the output's exponent rounds once at the output's. A map's
    last part sums at its output's exponent."""
    from systolix.hir_passes.gain_payoff import PART_NODE
    from systolix.hir_passes.tensor_exponents import SUM_NODE
    from systolix.ir.postops import AddTensor

    def last_part(P):
        x, part, y = Activation("x", 32, 1, P, 16), Activation("y part 1", 8, 1, P, 16), Activation("y", 8, 1, P, 16)
        w = np.full((8, 32, 1, 1), 0.25, np.float32)
        layer = ConvLayer("head [32:64]", [ConvInput(x, weights=w)], y, np.zeros(8, np.float32), (1, 1),
                          post_ops=[AddTensor(part, node=PART_NODE), Scale(np.full(8, 0.25, np.float32), node=SUM_NODE)])
        hir = HirProgram("m", 16, [layer], {"x": x}, {"y": y}, {}, {}, exponents={"y part 1": 2})
        return layer, ErrorVariances(hir, ARCH.data_type)

    layer, errors = last_part(1)
    assert errors.sum_exponent(layer) == 2
    squares = [np.full(32, 0.5)]
    at_zero = VR * (1 + 32 + 32 * 0.5)  # the bias, the products, the weights times their inputs
    np.testing.assert_allclose(errors.own(layer, squares, np.zeros(8)), np.full(8, at_zero / 16))
    np.testing.assert_allclose(errors.own(layer, squares, np.full(8, 1.0)), np.full(8, (at_zero / 4 + VR) / 16))
    errors.tensors[id(layer.post_ops[0].operand)] = np.full(8, VR / 16)  # a partial stored at 2^2
    errors.conv(layer, np.full(8, VR / 16), None)
    np.testing.assert_allclose(errors.of(layer.output), np.full(8, VR / 16 + VR / 16 + VR))  # + the multiply's
    layer, errors = last_part(4)
    assert errors.sum_exponent(layer) == 0
