"""Relu, Clip (ReLU6), LeakyRelu, PRelu: post-ops that ``fuse_post_ops`` joins to the layer
computing their input."""

from __future__ import annotations

import numpy as np

from systolix.ir.postops import Clip as ClipOp
from systolix.ir.postops import Relu as ReluOp
from systolix.ir.postops import Slope
from systolix.lowering.registry import OpHandler, handles


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
    def check(self, node, lw):
        reason = lw.const_reason(node, 1, "slope") or lw.input_reason(node, 0)
        if reason:
            return reason
        slope = lw.const(node, 1)
        vec = lw.channel_vector(slope, lw.ref(node, 0))
        if vec is None:
            return (f"slope of shape {list(slope.shape)} varies within a channel of the input "
                    f"{list(lw.ref(node, 0).shape)}; the accelerator applies one slope per channel")
        # One SIMD max (slopes up to 1) or min (above 1) serves a group of N channels.
        for g0 in range(0, len(vec), lw.N):
            lanes = vec[g0:g0 + lw.N]
            if np.any(lanes > 1) and np.any(lanes < 1):
                return f"slopes above 1 and below 1 in one group of {lw.N} channels (channels {g0} to {g0 + len(lanes) - 1})"
        return lw.activation_reason(node, 0)

    def lower(self, node, lw):
        vec = lw.channel_vector(lw.const(node, 1), lw.ref(node, 0))
        lw.post_op_layer(node, lw.act_of(node, 0), Slope(vec, node=node.name))
