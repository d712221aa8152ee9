"""AveragePool, GlobalAveragePool and ReduceMean over H and W: a per-channel conv summing the
window with weights ``2^-shift``, then SIMD multiplies to the mean.

The weights keep the running sum in range (the accumulators then hold 4 to 8x the mean, so a
mean past about 16 saturates; calibration lowers the weights further for such data, negative
gains in ``systolix.hir_passes.amplify``). A window of 2,048 values or more would need weights
the type cannot hold: the mean is separable, counts included, so it averages along W, then along
H (``systolix.hir_passes.separate_averages`` does the same for precision in compiles with gains).
"""

from __future__ import annotations

import math

import numpy as np

from systolix.ir.hir import Activation, ConvInput, ConvLayer
from systolix.ir.postops import Scale, ScalePixels
from systolix.lowering.ops.maxpool import pool_geometry
from systolix.lowering.registry import OpHandler, handles


def pool_shift(taps: int) -> int:
    """The exponent of an average pool's weights ``2^-shift`` over ``taps`` values: the sum
    then holds 4 to 8x the mean."""
    return max(0, int(math.floor(math.log2(taps))) - 2)


def _size_reason(lw, k) -> str | None:
    top = lw.data_type.binary_point if lw.data_type.is_fixed else None
    if top is None or pool_shift(k[0] * k[1]) <= top:
        return None
    if max(pool_shift(k[0]), pool_shift(k[1])) > top:
        limit = 1 << (top + 3)
        return f"an average over {k[0]}x{k[1]} values: {lw.data_type.name} averages at most {limit - 1} along each axis"
    return None


def window_counts(H, W, k, stride, dil, pads, OH, OW, include_pad):
    def axis(size, kk, s, d, p0, p1, n_out):
        starts = np.arange(n_out) * s - p0
        taps = starts[:, None] + np.arange(kk)[None, :] * d
        lo, hi = (-p0, size + p1) if include_pad else (0, size)
        return ((taps >= lo) & (taps < hi)).sum(axis=1)

    ch = axis(H, k[0], stride[0], dil[0], pads[0], pads[2], OH)
    cw = axis(W, k[1], stride[1], dil[1], pads[1], pads[3], OW)
    return (ch[:, None] * cw[None, :]).astype(np.float64)


def average_conv(name: str, x, out, k, stride, dil, pads, include_pad: bool, op: str, node_name: str,
                 total: bool = False) -> ConvLayer:
    """One conv layer averaging ``x`` into ``out`` over windows ``k`` (``total``: summing)."""
    # Sum with weights 2^-shift (exact scaling), then multiply by 2^shift / count in two SIMD
    # steps so the multiplier keeps 9 significant bits (``pool_scales`` chooses the weight and the
    # first multiply together on the grid, once the gains are known).
    shift = pool_shift(k[0] * k[1])
    w = np.full((x.C, k[0], k[1]), 2.0 ** -shift, np.float32)
    counts = window_counts(x.H, x.W, k, stride, dil, pads, out.H, out.W, include_pad)
    factors = (2.0 ** shift) / (np.ones_like(counts) if total else counts)
    post = []
    uniform = np.all(factors == factors.flat[0])
    m = int(np.clip(-np.floor(np.log2(factors.min())), 0, 6))
    if uniform:
        post.append(Scale(np.full(x.C, factors.flat[0] * 2 ** m, np.float32), node=node_name))
    else:
        post.append(ScalePixels((factors * 2 ** m).astype(np.float32), node=node_name))
    if m:
        post.append(Scale(np.full(x.C, 2.0 ** -m, np.float32), node=node_name))
    return ConvLayer(name, [ConvInput(x, diagonal=w)], out, np.zeros(x.C, np.float32), k, stride, dil, pads,
                     post_ops=post, ops=[op], nodes=[node_name], scaling_ops=len(post), open=False)


def average_layer(lw, name: str, node, x, out, k, stride, dil, pads, include_pad: bool, op: str, total: bool = False) -> None:
    lw.add(average_conv(name, x, out, k, stride, dil, pads, include_pad, op, node.name, total))


def rows_then_columns(name: str, x, out, k, stride, dil, pads, include_pad: bool, op: str, node_name: str,
                      total: bool = False) -> list[ConvLayer]:
    """The average of ``x`` over windows ``k`` as two layers: along W into ``name/rows``, then
    along H into ``out`` (the mean is separable, counts included)."""
    rows = Activation(f"{name}/rows", x.C, x.H, out.W, x.N)
    return [average_conv(f"{name}/rows", x, rows, (1, k[1]), (1, stride[1]), (1, dil[1]), (0, pads[1], 0, pads[3]),
                         include_pad, op, node_name, total),
            average_conv(name, rows, out, (k[0], 1), (stride[0], 1), (dil[0], 1), (pads[0], 0, pads[2], 0),
                         include_pad, op, node_name, total)]


def average(node, lw, x, k, stride, dil, pads, OH, OW, include_pad: bool, op: str, total: bool = False,
            name: str | None = None):
    """Average (``total``: sum) ``x`` over windows ``k`` into the tensor ``name`` (the node's output by default)."""
    name = name or node.outputs[0]
    layer = node.name if name == node.outputs[0] else name
    top = lw.data_type.binary_point if lw.data_type.is_fixed else None
    if top is None or pool_shift(k[0] * k[1]) <= top:
        out = lw.new_act(name, x.C, OH, OW)
        average_layer(lw, layer, node, x, out, k, stride, dil, pads, include_pad, op, total)
    else:
        out = lw.new_act(name, x.C, OH, OW)
        for part in rows_then_columns(layer, x, out, k, stride, dil, pads, include_pad, op, node.name, total):
            lw.add(part)
    if name == node.outputs[0]:
        lw.bind(node.outputs[0], out)
    return out


@handles("AveragePool")
class AveragePool(OpHandler):
    def check(self, node, lw):
        reason = lw.activation_reason(node, 0)
        if reason:
            return reason
        geometry = pool_geometry(node, lw, lw.input_activation(node, 0))
        return geometry if isinstance(geometry, str) else _size_reason(lw, geometry[0])

    def lower(self, node, lw):
        x = lw.act_of(node, 0)
        k, stride, dil, pads, out_shape = pool_geometry(node, lw, x)
        include = bool(int(node.attr("count_include_pad", 0)))
        average(node, lw, x, k, stride, dil, pads, out_shape[2], out_shape[3], include, "AveragePool")


@handles("GlobalAveragePool")
class GlobalAveragePool(OpHandler):
    def check(self, node, lw):
        reason = lw.activation_reason(node, 0)
        if reason:
            return reason
        x = lw.input_activation(node, 0)
        return _size_reason(lw, (x.H, x.W))

    def lower(self, node, lw):
        x = lw.act_of(node, 0)
        average(node, lw, x, (x.H, x.W), (1, 1), (1, 1), (0, 0, 0, 0), 1, 1, True, "GlobalAveragePool")


@handles("ReduceMean")
class ReduceMean(OpHandler):
    """Over pixel axes, channels or both: ``reduce.py`` (which lowers ReduceSum and ReduceMax too)."""

    def check(self, node, lw):
        from systolix.lowering.ops.reduce import reduce_plan  # noqa: PLC0415 (reduce imports this module)

        reason = lw.activation_reason(node, 0)
        if reason:
            return reason
        plan = reduce_plan(node, lw, "ReduceMean")
        return plan if isinstance(plan, str) else None

    def lower(self, node, lw):
        from systolix.lowering.ops.reduce import lower_reduction  # noqa: PLC0415

        lower_reduction(node, lw, "ReduceMean")
