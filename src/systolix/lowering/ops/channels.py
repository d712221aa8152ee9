"""Concat, Split and Slice on the channel axis.

Whole channel groups cost nothing: an aligned Concat makes its inputs slices of its output
(each producer writes its part in place) and an aligned Split or Slice is a slice of its input.
Otherwise a 1x1 layer selects the channels through the array. A Slice off the channel axis is a
view (``views.view``).
"""

from __future__ import annotations

import numpy as np

from systolix.ir.hir import Activation, ConvInput, ConvLayer
from systolix.lowering.ops.views import view
from systolix.lowering.registry import OpHandler, handles


def channel_axis(r, axis: int) -> bool:
    rank = len(r.shape)
    axis = axis % rank
    return (rank == 4 and axis == 1) or (rank in (1, 2, 3) and axis == rank - 1)


def channel_slice(node, lw, out_name: str, x: Activation, c0: int, c1: int) -> None:
    C = c1 - c0
    if c0 % lw.N == 0:
        lw.bind(out_name, Activation(out_name, C, x.H, x.W, lw.N, parent=(x, c0 // lw.N)))
        return
    w = np.zeros((C, x.C, 1, 1), np.float32)
    w[np.arange(C), c0 + np.arange(C)] = 1.0
    out = lw.new_act(out_name, C, x.H, x.W)
    lw.add(ConvLayer(f"{node.name}/{out_name}", [ConvInput(x, w)], out, np.zeros(C, np.float32), (1, 1), ops=[node.op_type],
                     nodes=[node.name], open=False), out_name)


@handles("Concat")
class Concat(OpHandler):
    def check(self, node, lw):
        for i in range(len(node.inputs)):
            reason = lw.input_reason(node, i)
            if reason:
                return reason
        axis = int(node.attr("axis"))
        if not all(channel_axis(lw.ref(node, i), axis) for i in range(len(node.inputs))):
            return f"concatenation on axis {axis} (only the channel axis runs on the accelerator)"
        for i in range(len(node.inputs)):
            reason = lw.activation_reason(node, i)
            if reason:
                return reason
        return None

    def lower(self, node, lw):
        acts = [lw.act_of(node, i) for i in range(len(node.inputs))]
        H, W = acts[0].H, acts[0].W
        C = sum(a.C for a in acts)
        out = lw.new_act(node.outputs[0], C, H, W)
        aligned = all(a.C % lw.N == 0 for a in acts[:-1])
        aliasable = aligned and len({id(a) for a in acts}) == len(acts) and all(
            a.parent is None and a.order == "planar" and a.name not in lw.g.inputs and lw.producer_layer(a) is not None
            and a.name not in lw.outputs for a in acts)
        if aliasable:
            g0 = 0
            for a in acts:
                # The producer writes its part in place, and takes no more ops in (fusion sees the parent).
                a.parent = (out, g0)
                g0 += a.G
            lw.bind(node.outputs[0], out)
            return
        inputs = []
        c0 = 0
        for a in acts:
            w = np.zeros((C, a.C, 1, 1), np.float32)
            w[c0 + np.arange(a.C), np.arange(a.C)] = 1.0
            inputs.append(ConvInput(a, w))
            c0 += a.C
        lw.add(ConvLayer(node.name, inputs, out, np.zeros(C, np.float32), (1, 1), ops=["Concat"], nodes=[node.name], open=False),
               node.outputs[0])


@handles("Split")
class Split(OpHandler):
    def check(self, node, lw):
        reason = lw.input_reason(node, 0)
        if reason:
            return reason
        axis = int(node.attr("axis", 0))
        if not channel_axis(lw.ref(node, 0), axis):
            return f"split on axis {axis} (only the channel axis runs on the accelerator)"
        return lw.activation_reason(node, 0)

    def lower(self, node, lw):
        r = lw.ref(node, 0)
        axis = int(node.attr("axis", 0))
        x = lw.act_of(node, 0)
        c0 = 0
        for out in node.outputs:
            size = lw.shape(out)[axis % len(r.shape)]
            if out:
                channel_slice(node, lw, out, x, c0, c0 + size)
            c0 += size


@handles("Slice")
class Slice(OpHandler):
    def check(self, node, lw):
        reason = lw.input_reason(node, 0)
        if reason is None and lw.g.opset >= 10:
            reason = lw.const_reason(node, 1, "starts") or lw.const_reason(node, 2, "ends")
        return reason

    def lower(self, node, lw):
        r = lw.ref(node, 0)
        if lw.g.opset < 10:
            starts, ends = node.attr("starts"), node.attr("ends")
            axes, steps = node.attr("axes"), None
        else:
            starts = lw.const(node, 1).tolist()
            ends = lw.const(node, 2).tolist()
            axes = lw.opt_const(node, 3)
            steps = lw.opt_const(node, 4)
            axes = None if axes is None else axes.tolist()
            steps = None if steps is None else steps.tolist()
        rank = len(r.shape)
        axes = list(range(len(starts))) if axes is None else [int(a) % rank for a in axes]
        steps = [1] * len(starts) if steps is None else [int(s) for s in steps]
        index = [slice(None)] * rank
        for a, s, e, st in zip(axes, starts, ends, steps):
            index[a] = slice(int(s), int(e), int(st))
        sliced = r.elements[tuple(index)]
        if r.canonical and len(axes) == 1 and channel_axis(r, axes[0]) and steps[0] == 1:
            chans = sliced.reshape(-1)
            c0 = int(chans.min() // r.act.P)
            c1 = int(chans.max() // r.act.P) + 1
            return channel_slice(node, lw, node.outputs[0], r.act, c0, c1)
        view(node, lw, sliced)
