"""``merge_post_ops``: a gain's undo followed by a LeakyReLU becomes one ``ScaledSlope``. The pass
tests build the HIR before and the HIR expected after; the emulator tests compile a conv and
LeakyReLU and check the merged tail against onnxruntime and its clocks against the two ops apart."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

import systolix
from systolix.hir_passes import merge_post_ops as M
from systolix.ir import same
from systolix.ir.hir import ConvInput, ConvLayer
from systolix.ir.postops import AddTensor, Clip, Relu, Scale, ScaledClip, ScaledSlope, Slope
from systolix.arch import get_board
from systolix.perf.estimate import estimate
from systolix.perf.rtl_timing import simulate_rtl
from tests.error_model import output_bounds
from tests.onnx_builders import ir_of, make_model
from tests.unit.test_hir_passes import B, W, acts, program

GAIN_UNDO = np.array([0.25, 0.125, 0.5, 0.0625], np.float32)
LEAK = np.full(4, 0.1, np.float32)


def conv_with(post, scaling_ops=0):
    x, c, _, y = acts()
    layer = ConvLayer("conv", [ConvInput(x, weights=W)], y, B, (3, 3), pads=(1, 1, 1, 1), post_ops=list(post),
                      ops=["Conv", "LeakyRelu"], nodes=["conv", "leaky"], macs=1, scaling_ops=scaling_ops)
    return program([layer], x, y)


def test_a_gain_undo_then_a_leaky_relu_become_one_scaled_slope():
    before = conv_with([Scale(GAIN_UNDO), Slope(LEAK, node="leaky")])
    after = conv_with([ScaledSlope(scale=GAIN_UNDO, slope=LEAK, node="leaky")])
    assert same(M.merge_post_ops(before), after)
    # The same function in float: max(x, 0.1 x) * u == (u x if u x >= 0 else 0.1 u x) for u > 0.
    acc = np.random.default_rng(0).normal(0, 10, (4, 3, 3))
    apart = before.layers[0].post_ops[1].evaluate(before.layers[0].post_ops[0].evaluate(acc, None), None)
    assert np.allclose(after.layers[0].post_ops[0].evaluate(acc, None), apart)


@pytest.mark.parametrize("post", [
    [Scale(-GAIN_UNDO), Slope(LEAK)],                           # a negative scale does not commute with the slope
    [Scale(GAIN_UNDO), Slope(np.full(4, 2.0, np.float32))],     # a slope above 1 takes min, not max
    [Scale(GAIN_UNDO), Relu()],                                 # nothing to merge with
    [Slope(LEAK), Scale(GAIN_UNDO)],                            # the other order
], ids=["negative-scale", "steep-slope", "relu", "slope-first"])
def test_what_does_not_merge_stays(post):
    before = conv_with(post)
    assert same(M.merge_post_ops(before), before)


def test_an_add_between_the_two_keeps_them_apart_and_scaling_ops_are_left_alone():
    x, c, _, y = acts()
    between = conv_with([Scale(GAIN_UNDO), AddTensor(c), Slope(LEAK)])
    assert same(M.merge_post_ops(between), between)
    # An average pool's own 1/count (a scaling op) stays the layer's first op; a gain's undo and a
    # slope after it still merge.
    pooled = conv_with([Scale(GAIN_UNDO), Slope(LEAK)], scaling_ops=1)
    assert same(M.merge_post_ops(pooled), pooled)
    both = conv_with([Scale(GAIN_UNDO), Scale(GAIN_UNDO), Slope(LEAK)], scaling_ops=1)
    assert same(M.merge_post_ops(both), conv_with([Scale(GAIN_UNDO), ScaledSlope(scale=GAIN_UNDO, slope=LEAK)], scaling_ops=1))


def conv_leaky(cin=16, cout=24, h=8, w=8, k=3, seed=0):
    rng = np.random.default_rng(seed)
    inits = {"w": rng.normal(0, 0.15, (cout, cin, k, k)).astype(np.float32),
             "b": rng.normal(0, 0.1, cout).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[k // 2] * 4, kernel_shape=[k, k]),
             helper.make_node("LeakyRelu", ["c"], ["y"], name="leaky", alpha=0.1)]
    return make_model(nodes, [("x", [1, cin, h, w])], [("y", None)], inits)


def conv_add_leaky(c=16, h=12, w=12, seed=0):
    """A 1x1 conv, a residual add, then LeakyReLU: the add between keeps the slope a post-op of its own."""
    rng = np.random.default_rng(seed)
    inits = {"w": rng.normal(0, 0.15, (c, c, 1, 1)).astype(np.float32), "b": rng.normal(0, 0.1, c).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[1, 1]),
             helper.make_node("Add", ["c", "x"], ["s"], name="add"),
             helper.make_node("LeakyRelu", ["s"], ["y"], name="leaky", alpha=0.1)]
    return make_model(nodes, [("x", [1, c, h, w])], [("y", None)], inits)


def test_a_compiled_conv_and_leaky_relu_merge_their_tail():
    hir = ir_of(conv_leaky(), "ultra96v2", until="merge post-ops")
    (layer,) = hir.layers
    assert [p.kind for p in layer.post_ops] == ["scaled_slope"]
    assert np.all(layer.post_ops[0].scale < 1)  # an estimated gain above 1, undone


def test_the_merged_tail_matches_onnxruntime_in_one_accumulator_clock_less_a_vector(monkeypatch):
    # A 1x1 conv: one MatMul vector per output vector, so its accumulators bound it.
    model = conv_leaky(k=1, h=12, w=12)
    x = np.random.default_rng(1).normal(0, 1, (1, 16, 12, 12)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    merged = systolix.compile(model, "ultra96v2", host=False)
    monkeypatch.setattr(M, "_mergeable", lambda first, second: False)
    apart = systolix.compile(model, "ultra96v2", host=False)
    lsb = 2.0 ** -8
    bound = output_bounds(model, {"x": x})["y"]  # the format's error model, without gains
    for compiled in (merged, apart):
        assert float(np.max(np.abs(compiled.run({"x": x})["y"] - ref))) <= bound
    got_merged, got_apart = merged.run({"x": x})["y"], apart.run({"x": x})["y"]
    # Where the output is not negative the two round the same product (the slope keeps it).
    assert np.array_equal(got_merged[ref > lsb], got_apart[ref > lsb])
    # On Tensil's hardware (its SIMD reads, then writes: two clocks) the tail of each of 12 x 12
    # pixels x 2 channel groups takes one accumulator clock less (this small layer's DRAM moves
    # bound it, so its frame gains less); the generated RTL reads and writes in one slot, so
    # there both tails take four slots a vector and neither is slower.
    vectors = 12 * 12 * 2
    board = get_board("ultra96-v2")
    fused, unfused = estimate(merged.program, board), estimate(apart.program, board)
    assert vectors <= unfused.unit_busy["acc"] - fused.unit_busy["acc"] <= vectors + 4
    assert fused.cycles < unfused.cycles
    assert simulate_rtl(merged.program, merged.arch).cycles <= simulate_rtl(apart.program, apart.arch).cycles


def test_a_slope_off_the_grid_takes_two_factors_given_the_data_type():
    from types import SimpleNamespace

    from systolix.arch import get_architecture

    ctx = SimpleNamespace(arch=get_architecture("ultra96v2"))
    # 0.1 rounds to 26/256 (1.6% off); 226/256 * 29/256 is 0.006% off.
    factors = (np.full(4, 226 / 256, np.float32), np.full(4, 29 / 256, np.float32))
    before = conv_with([Scale(GAIN_UNDO), Slope(LEAK, node="leaky")])
    after = conv_with([ScaledSlope(scale=GAIN_UNDO, slope=LEAK, factors=factors, node="leaky")])
    assert same(M.merge_post_ops(before, ctx), after)
    # A slope without a gain before it too; the float function is the slope's own.
    assert same(M.merge_post_ops(conv_with([Slope(LEAK)]), ctx), conv_with([Slope(LEAK, factors=factors)]))
    acc = np.random.default_rng(0).normal(0, 10, (4, 3, 3))
    assert np.array_equal(Slope(LEAK, factors=factors).evaluate(acc, None), Slope(LEAK).evaluate(acc, None))
    # A slope on the grid (0.125), above 1 or negative keeps one multiply.
    for values in (0.125, 2.0, -0.1):
        slope = np.full(4, values, np.float32)
        assert M.slope_factors(slope, ctx.arch.data_type) is None
    on_grid = conv_with([Scale(GAIN_UNDO), Slope(np.full(4, 0.125, np.float32))])
    assert same(M.merge_post_ops(on_grid, ctx),
                conv_with([ScaledSlope(scale=GAIN_UNDO, slope=np.full(4, 0.125, np.float32))]))


@pytest.mark.parametrize("slope", [0.1, 0.01, 0.2, 0.3])
def test_two_factors_follow_the_slope_on_every_negative_raw_value(slope):
    """Every negative raw value of FP16BP8 through the two rounded multiplies, against the exact
    product and against one multiply by the slope rounded (NumPy: products rounded half to even)."""
    from systolix.numerics import DataType

    dtype = DataType.FP16BP8
    first, second = M.slope_factors(np.array([slope]), dtype)
    a, b = int(round(first[0] * 256)), int(round(second[0] * 256))
    assert 128 <= a <= 256 and 1 <= b <= 256 and a / 256 == first[0] and b / 256 == second[0]
    x = np.arange(-32768, 0, dtype=np.int64)
    exact = x * slope
    two = M._scaled(np.int64(b), M._scaled(np.int64(a), x, dtype), dtype)
    one = M._scaled(M._raw(slope, dtype), x, dtype)
    # Each multiply rounds by at most half a step, the first's times the second factor.
    assert np.max(np.abs(two - exact)) <= 0.5 + 0.5 * b / 256 + 32768 * abs(a * b / 65536 - slope)
    assert np.max(np.abs(two - exact)) < 1.5  # (one rounded slope: up to 52 steps for 0.1)
    rms = lambda d: float(np.sqrt(np.mean(np.square(d))))  # noqa: E731
    assert rms(two - exact) < rms(one - exact) / 4


@pytest.mark.parametrize("kind", ["scaled_slope", "slope"])
def test_two_factor_slopes_bring_negative_outputs_nearer_onnxruntime_for_a_clock_a_vector(monkeypatch, kind):
    model = conv_leaky(k=1, h=12, w=12) if kind == "scaled_slope" else conv_add_leaky()
    x = np.random.default_rng(2).normal(0, 1, (1, 16, 12, 12)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    (layer,) = ir_of(model, "ultra96v2", until="merge post-ops").layers
    assert layer.post_ops[-1].kind == kind and layer.post_ops[-1].factors is not None
    precise = systolix.compile(model, "ultra96v2", host=False)
    monkeypatch.setattr(M, "slope_factors", lambda values, dtype: None)
    rounded = systolix.compile(model, "ultra96v2", host=False)
    bound = output_bounds(model, {"x": x})["y"]
    negative = ref < -0.1  # pre-activations below -1: the rounded slope errs by 0.4 LSB and more there
    errors = {}
    for name, compiled in (("precise", precise), ("rounded", rounded)):
        got = compiled.run({"x": x})["y"]
        assert float(np.max(np.abs(got - ref))) <= bound
        errors[name] = float(np.sqrt(np.mean(np.square(got - ref)[negative]))) / 2.0 ** -8
    # The rounded slope errs by 1.6% of a pre-activation; the two factors leave about the output's
    # own rounding (1 / sqrt(12) = 0.29 LSB RMS).
    assert errors["precise"] < 0.35 and errors["precise"] < 0.6 * errors["rounded"], errors
    # One more SIMD multiply a vector: one accumulator clock (12 x 12 pixels x the channel groups).
    vectors = 12 * 12 * layer.output.G
    board = get_board("ultra96-v2")
    extra = estimate(precise.program, board).unit_busy["acc"] - estimate(rounded.program, board).unit_busy["acc"]
    assert vectors <= extra <= vectors + 4


def test_a_gain_undo_then_a_clip_becomes_one_scaled_clip_with_bounds_on_the_sums_grid():
    from types import SimpleNamespace

    from systolix.arch import get_architecture

    ctx = SimpleNamespace(arch=get_architecture("ultra96v2"))
    before = conv_with([Scale(GAIN_UNDO), Clip(0.0, 6.0, node="relu6")])
    (op,) = M.merge_post_ops(before, ctx).layers[0].post_ops
    assert isinstance(op, ScaledClip) and (op.lo, op.hi) == (0.0, 6.0)
    # Grid points of the amplified sum whose scaled products round onto 0 and 6 (the gains here are
    # powers of two: products exact before rounding).
    assert np.array_equal(np.round(op.low * GAIN_UNDO * 256), np.zeros(4))
    assert np.array_equal(np.round(op.high * GAIN_UNDO * 256), np.full(4, 6 * 256))
    # Without the data type (no ctx) a clip is left apart.
    assert same(M.merge_post_ops(before), before)


@pytest.mark.parametrize("lo, hi", [(0.0, 6.0), (-1.0, 1.0), (0.0, 0.5), (-128.0, 127.99609375)])
def test_clip_bounds_give_what_the_two_ops_apart_give_for_every_sum(lo, hi):
    """Every raw sum of FP16BP8, against a NumPy reference of the two ops apart (the product
    rounded half to even, then saturated, then clipped to the stored bounds)."""
    from systolix.numerics import DataType

    dtype = DataType.FP16BP8
    scales = np.array([1.0, 0.5, 0.3, 0.0898438, 0.01171875, 1 / 256, 0.999], np.float64)
    bounds = M.clip_bounds(scales, lo, hi, dtype)
    assert bounds is not None
    low, high = bounds
    u = np.floor(scales * 256 + 0.5)[:, None]
    x = np.arange(-32768, 32768, dtype=np.float64)[None, :]
    lo_r, hi_r = np.floor(lo * 256 + 0.5), np.floor(hi * 256 + 0.5)

    def scaled(v):
        return np.clip(np.round(u * v / 256), -32768, 32767)

    apart = np.clip(scaled(x), lo_r, hi_r)
    merged = scaled(np.clip(x, low[:, None], high[:, None]))
    assert np.array_equal(merged, apart)


def test_a_clip_no_grid_point_rounds_onto_stays_apart():
    from systolix.numerics import DataType

    # A scale of 3 steps over the upper bound 6 + 1/256 (raw 1,537; its products are multiples of 3).
    assert M.clip_bounds(np.array([3.0]), 0.0, 6.00390625, DataType.FP16BP8) is None


def conv_clip(k=1, cin=16, cout=24, size=12, seed=0):
    rng = np.random.default_rng(seed)
    inits = {"w": rng.normal(0, 0.15, (cout, cin, k, k)).astype(np.float32), "b": rng.normal(0, 0.1, cout).astype(np.float32),
             "lo": np.array(0, np.float32), "hi": np.array(6, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[k // 2] * 4, kernel_shape=[k, k]),
             helper.make_node("Clip", ["c", "lo", "hi"], ["y"], name="relu6")]
    return make_model(nodes, [("x", [1, cin, size, size])], [("y", None)], inits)


def test_the_merged_clip_gives_the_same_raw_outputs_in_one_accumulator_clock_less_a_vector(monkeypatch):
    model = conv_clip()
    (layer,) = ir_of(model, "ultra96v2", until="merge post-ops").layers
    assert [p.kind for p in layer.post_ops] == ["scaled_clip"]
    x = np.random.default_rng(3).normal(0, 6, (1, 16, 12, 12)).astype(np.float32)  # many sums past 6
    merged = systolix.compile(model, "ultra96v2", host=False)
    monkeypatch.setattr(M, "clip_bounds", lambda *a, **k: None)
    apart = systolix.compile(model, "ultra96v2", host=False)
    got = merged.run_detailed({"x": x}).raw_outputs["y"]
    assert np.array_equal(got, apart.run_detailed({"x": x}).raw_outputs["y"])
    assert np.count_nonzero(got == 6 * 256) > 100 and np.count_nonzero(got == 0) > 100
    # (Inputs this large pass the ranges a plain compile expects, so against onnxruntime: normal ones.)
    x1 = np.random.default_rng(4).normal(0, 1, (1, 16, 12, 12)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x1})[0]
    assert float(np.max(np.abs(merged.run({"x": x1})["y"] - ref))) <= output_bounds(model, {"x": x1})["y"]
    board = get_board("ultra96-v2")
    vectors = 12 * 12 * 2
    saved = estimate(apart.program, board).unit_busy["acc"] - estimate(merged.program, board).unit_busy["acc"]
    assert vectors <= saved <= vectors + 8
