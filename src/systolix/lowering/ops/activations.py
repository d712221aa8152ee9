"""Relu, Clip (ReLU6), LeakyRelu, PRelu: post-ops that ``fuse_post_ops`` joins to the layer
computing their input. A PRelu slope varying within a channel (Keras' PReLU has one per element)
is a ``SlopeMap``: the slopes in the constant image, beside the tile in the accumulators."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from systolix.ir.postops import AddConstant, PostOp, Slope
from systolix.ir.postops import Clip as ClipOp
from systolix.ir.postops import Relu as ReluOp
from systolix.isa import SimdOp
from systolix.lowering.registry import OpHandler, handles


def _simd_op(lanes: np.ndarray) -> SimdOp:
    """``max(x, x s)`` for slopes up to 1, ``min`` for slopes above 1 (one per group)."""
    return SimdOp.MIN if np.all(lanes >= 1) and np.any(lanes > 1) else SimdOp.MAX


@dataclass(eq=False)
class SlopeMap(PostOp):
    """``x if x >= 0 else x * slope`` with a slope per element (``values`` ``[C, H, W]``): the
    slopes stored in the constant image as ``AddConstant``'s tensor is, moved beside the tile,
    then per vector ``max(x, x * s)`` (``min`` in a group of slopes above 1)."""

    values: np.ndarray = None
    kind: ClassVar[str] = "slope_map"
    tile_copies: ClassVar[int] = 2

    def evaluate(self, acc, read):
        return np.where(acc >= 0, acc, acc * np.asarray(self.values, np.float64).reshape(acc.shape))

    def constants(self, c):
        return AddConstant.constants(self, c)  # the same planar image of a [C, H, W] tensor

    def emit(self, t, slot) -> None:
        e = t.e
        offset, P = slot
        n = t.per_group
        for go in t.groups():
            source = t.consts + offset + go * P + t.oh0 * t.OW
            e.move(source, (t.acc_scratch if t.consts_local else t.stage) + (go - t.go0) * n, n)
        if not t.consts_local:
            e.move(t.stage, t.acc_scratch, t.n_vec)
        for go in t.groups():
            op = _simd_op(self.values[go * t.N:(go + 1) * t.N])
            for v in t.group_vectors(go):
                e.simd(SimdOp.MOVE, 0, 0, 1, read=t.acc_scratch + (v - t.acc))
                e.simd(SimdOp.MULTIPLY, 0, 1, 1, read=v)
                e.simd(op, 0, 1, 0, read=v, write=v)

    def text(self) -> str:
        return f"slope per element {self.values.shape}"


@handles("Relu")
class Relu(OpHandler):
    def check(self, node, lw):
        return lw.activation_reason(node, 0)

    def lower(self, node, lw):
        lw.post_op_layer(node, lw.act_of(node, 0), ReluOp(node=node.name))


@handles("Clip")
class Clip(OpHandler):
    @staticmethod
    def _bounds(node, lw):
        if lw.g.opset < 11:
            return node.attr("min", -np.inf), node.attr("max", np.inf)
        vlo, vhi = lw.opt_const(node, 1), lw.opt_const(node, 2)
        return -np.inf if vlo is None else float(vlo), np.inf if vhi is None else float(vhi)

    def check(self, node, lw):
        if lw.g.opset >= 11 and (lw.optional_const_reason(node, 1, "min") or lw.optional_const_reason(node, 2, "max")):
            return "its min/max are computed tensors; the accelerator needs them as constants when compiling"
        return lw.activation_reason(node, 0)

    def lower(self, node, lw):
        x = lw.act_of(node, 0)
        lo, hi = self._bounds(node, lw)
        post = ReluOp(node=node.name) if lo == 0 and hi == np.inf else ClipOp(float(lo), float(hi), node=node.name)
        lw.post_op_layer(node, x, post)


@handles("LeakyRelu")
class LeakyRelu(OpHandler):
    def check(self, node, lw):
        return lw.input_reason(node, 0) or lw.activation_reason(node, 0)

    def lower(self, node, lw):
        alpha = float(node.attr("alpha", 0.01))
        C = lw.ref(node, 0).act.C
        lw.post_op_layer(node, lw.act_of(node, 0), Slope(np.full(C, alpha, np.float32), node=node.name))


@handles("PRelu")
class PRelu(OpHandler):
    """One slope per channel in any broadcast form (a ``Slope``), or a slope varying over pixels
    (a ``SlopeMap``); either way each group of N channels has slopes all at most 1 or all at least 1."""

    def check(self, node, lw):
        reason = lw.const_reason(node, 1, "slope") or lw.input_reason(node, 0)
        if reason:
            return reason
        slope = lw.const(node, 1)
        r = lw.ref(node, 0)
        vec = lw.channel_vector(slope, r)
        if vec is None:
            if not r.canonical or len(r.shape) != 4:
                return (f"slope of shape {list(slope.shape)} varies within a channel, and the input {list(r.shape)} is not "
                        "an NCHW tensor laid out as its shape (where the accelerator takes a slope per element)")
            vec = np.broadcast_to(np.asarray(slope, np.float32), r.shape)[0]
        # One SIMD max (slopes up to 1) or min (above 1) serves a group of N channels.
        for g0 in range(0, len(vec), lw.N):
            lanes = vec[g0:g0 + lw.N]
            if np.any(lanes > 1) and np.any(lanes < 1):
                return f"slopes above 1 and below 1 in one group of {lw.N} channels (channels {g0} to {g0 + len(lanes) - 1})"
        return lw.activation_reason(node, 0)

    def lower(self, node, lw):
        r = lw.ref(node, 0)
        vec = lw.channel_vector(lw.const(node, 1), r)
        x = lw.act_of(node, 0)
        if vec is not None:
            lw.post_op_layer(node, x, Slope(vec, node=node.name))
            return
        full = np.broadcast_to(np.asarray(lw.const(node, 1), np.float32), r.shape).reshape(-1)
        values = np.empty(x.C * x.P, np.float32)
        values[lw.refs[node.inputs[0]].elements.reshape(-1)] = full
        lw.post_op_layer(node, x, SlopeMap(values=values.reshape(x.C, x.H, x.W), node=node.name))
