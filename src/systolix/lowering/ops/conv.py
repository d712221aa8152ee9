"""Conv: 2-D, any strides, pads, ``auto_pad``, dilations and groups; a depthwise conv keeps only
its per-channel weights (``ConvInput.diagonal``)."""

from __future__ import annotations

import numpy as np

from systolix.errors import SystolixError
from systolix.ir.hir import ConvInput, ConvLayer
from systolix.lowering.registry import OpHandler, handles
from systolix.lowering.state import refusal


def _geometry(node, lw, x):
    """``(weights, bias, group, stride, dilation, pads, OH, OW)``, or the reason it cannot run."""
    w = lw.const(node, 1)
    if w.ndim != 4:
        return f"only 2-D convolutions are supported (weights have {w.ndim} axes)"
    b = lw.opt_const(node, 2)
    if len(node.inputs) > 2 and node.inputs[2] and b is None:
        return "its bias is computed, not a constant; the accelerator needs weights and bias as constants"
    cout, cin_g, kh, kw = w.shape
    group = int(node.attr("group", 1))
    if cin_g * group != x.C:
        raise SystolixError(f"{node.describe()}: weights expect {cin_g * group} input channels, the input has {x.C}")
    stride, dil, pads, reason = lw.window(node, x, (kh, kw))
    if reason:
        return reason
    out_shape = lw.shape(node.outputs[0])
    oh = (x.H + pads[0] + pads[2] - ((kh - 1) * dil[0] + 1)) // stride[0] + 1
    ow = (x.W + pads[1] + pads[3] - ((kw - 1) * dil[1] + 1)) // stride[1] + 1
    if tuple(out_shape) != (1, cout, oh, ow):
        return f"output shape {list(out_shape)} differs from the expected {[1, cout, oh, ow]}"
    return w, b, group, stride, dil, pads, oh, ow


@handles("Conv")
class Conv(OpHandler):
    def check(self, node, lw):
        return (lw.activation_reason(node, 0) or lw.const_reason(node, 1, "weights")
                or refusal(_geometry(node, lw, lw.input_activation(node, 0))))

    def lower(self, node, lw):
        x = lw.act_of(node, 0)
        w, b, group, stride, dil, pads, oh, ow = _geometry(node, lw, x)
        cout, cin_g, kh, kw = w.shape
        if group == x.C == cout:
            conv_in = ConvInput(x, diagonal=w[:, 0].astype(np.float32))
        else:
            dense = np.zeros((cout, x.C, kh, kw), np.float32)
            co_g = cout // group
            for gidx in range(group):
                dense[gidx * co_g:(gidx + 1) * co_g, gidx * cin_g:(gidx + 1) * cin_g] = w[gidx * co_g:(gidx + 1) * co_g]
            conv_in = ConvInput(x, dense)
        bias = np.zeros(cout, np.float32) if b is None else b.astype(np.float32).reshape(cout)
        out = lw.new_act(node.outputs[0], cout, oh, ow)
        lw.add(ConvLayer(node.name, [conv_in], out, bias, (kh, kw), stride, dil, pads, ops=["Conv"], nodes=[node.name],
                         macs=int(cout * oh * ow * cin_g * kh * kw)), node.outputs[0])
