"""A global average in two passes (``separate_averages``) and an average pool's
weight and first multiply chosen together on the grid (``pool_scales``): the IR before and after,
and the same function in float."""

from __future__ import annotations

import dataclasses

import numpy as np
from onnx import helper

from systolix.arch import get_architecture
from systolix.compiler.context import CompileContext
from systolix.hir_passes.pool_scales import paired_scales
from systolix.hir_passes.separate_averages import separate_averages
from systolix.ir import same
from systolix.ir.evaluate import run_reference
from systolix.ir.hir import Activation, ConvInput, ConvLayer
from systolix.ir.postops import Scale
from tests.onnx_builders import ir_of, make_model

ARCH = get_architecture("ultra96v2")


def _pool(h: int, w: int, c: int = 8):
    return ir_of(make_model([helper.make_node("GlobalAveragePool", ["x"], ["y"], name="gap")],
                            [("x", [1, c, h, w])], [("y", None)]))


def test_a_global_average_of_49_values_becomes_rows_then_columns():
    before = _pool(7, 7)
    (pool,) = before.layers
    after = separate_averages(before, CompileContext(ARCH, estimate_gains=True))
    x, y = pool.inputs[0].act, pool.output
    rows = Activation("gap/rows", 8, 7, 1, x.N)
    # 7 values: weights 2^-0, then x 8/7 and x 2^-3 (``pool_shift``), along W, then along H.
    post = [Scale(np.full(8, 8 / 7, np.float32), node="gap"), Scale(np.full(8, 0.125, np.float32), node="gap")]
    first = ConvLayer("gap/rows", [ConvInput(x, diagonal=np.ones((8, 1, 7), np.float32))], rows, np.zeros(8, np.float32),
                      (1, 7), post_ops=post, ops=pool.ops, nodes=["gap"], scaling_ops=2, open=False)
    second = ConvLayer("gap", [ConvInput(rows, diagonal=np.ones((8, 7, 1), np.float32))], y, np.zeros(8, np.float32),
                       (7, 1), post_ops=list(post), ops=pool.ops, nodes=["gap"], scaling_ops=2, open=False)
    assert same(after, dataclasses.replace(before, layers=[first, second]))
    x_value = np.random.default_rng(0).normal(size=(1, 8, 7, 7)).astype(np.float32)
    np.testing.assert_allclose(run_reference(after, {"x": x_value})["y"], run_reference(before, {"x": x_value})["y"],
                               rtol=1e-6, atol=1e-7)
    # Calibrated compiles too; compiles with neither samples nor estimated gains, and windows of 16
    # values or fewer: one pass.
    calibrated = separate_averages(before, CompileContext(ARCH, samples=[{"x": x_value}], estimate_gains=False))
    assert same(calibrated, after)
    assert separate_averages(before, CompileContext(ARCH, estimate_gains=False)) is before
    small = _pool(4, 4)
    assert separate_averages(small, CompileContext(ARCH, estimate_gains=True)) is small


def test_an_average_pool_s_weight_and_multiply_are_paired_on_the_grid_after_its_gain():
    # ResNet-50 v2's rows pass after a gain of 2^-2: 7 values of weight 1/4, x 8/7, x 2^-1. The
    # multiply rounded alone (293/256) is 0.15% above 8/7; paired with a weight on the grid, the
    # product is within 2^-14 of 1/7, the weight never above the one its sums were sized for.
    before = separate_averages(_pool(7, 7), CompileContext(ARCH, estimate_gains=True))
    rows = before.layers[0]
    scaled = dataclasses.replace(rows, inputs=[ConvInput(rows.inputs[0].act, diagonal=rows.inputs[0].diagonal / 4)],
                                 post_ops=[rows.post_ops[0], Scale(rows.post_ops[1].values * 4, node="gap")])
    paired = paired_scales(scaled, ARCH.data_type)
    w = paired.inputs[0].diagonal
    c1 = np.asarray(paired.post_ops[0].values, np.float64)
    assert np.all(w == w.flat[0]) and w.flat[0] * 256 == round(w.flat[0] * 256) and np.all(c1 * 256 == np.round(c1 * 256))
    assert 0.75 / 4 <= w.flat[0] <= 1 / 4
    product = float(w.flat[0]) * c1 * float(paired.post_ops[1].values.flat[0]) * 7
    assert np.all(np.abs(product - 1) <= 2.0 ** -14), product
    assert abs(round(8 / 7 * 256) / 256 * 7 / 8 - 1) > 1e-3  # rounded alone
    assert paired.post_ops[1:] == scaled.post_ops[1:] and paired.output is scaled.output
