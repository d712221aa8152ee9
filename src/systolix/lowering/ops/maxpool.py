"""MaxPool and GlobalMaxPool: SIMD Max over each window (``MaxPoolLayer``)."""

from __future__ import annotations

from systolix.ir.hir import MaxPoolLayer
from systolix.lowering.registry import OpHandler, handles
from systolix.lowering.state import pair, refusal


def pool_geometry(node, lw, x):
    """``(kernel, stride, dilation, pads, output shape)`` of a 2-D pool, or the reason it cannot run."""
    k = pair(node.attr("kernel_shape"), None)
    if k is None or len(node.attr("kernel_shape")) != 2:
        return "only 2-D pooling is supported"
    stride, dil, pads, reason = lw.window(node, x, k)
    if reason:
        return reason
    return k, stride, dil, pads, lw.shape(node.outputs[0])


@handles("MaxPool")
class MaxPool(OpHandler):
    def check(self, node, lw):
        if len(node.outputs) > 1 and node.outputs[1] and lw.consumers.get(node.outputs[1]):
            # (storage_order only orders the Indices: without them it changes nothing)
            return "its Indices output is read by another node; the accelerator computes only the maxima"
        return lw.activation_reason(node, 0) or refusal(pool_geometry(node, lw, lw.input_activation(node, 0)))

    def lower(self, node, lw):
        x = lw.act_of(node, 0)
        k, stride, dil, pads, out_shape = pool_geometry(node, lw, x)
        out = lw.new_act(node.outputs[0], x.C, out_shape[2], out_shape[3])
        lw.add(MaxPoolLayer(node.name, x, out, k, stride, dil, pads, ops=["MaxPool"], nodes=[node.name]), node.outputs[0])


@handles("GlobalMaxPool")
class GlobalMaxPool(OpHandler):
    def check(self, node, lw):
        return lw.activation_reason(node, 0)

    def lower(self, node, lw):
        x = lw.act_of(node, 0)
        out = lw.new_act(node.outputs[0], x.C, 1, 1)
        lw.add(MaxPoolLayer(node.name, x, out, (x.H, x.W), (1, 1), ops=["GlobalMaxPool"], nodes=[node.name]), node.outputs[0])
