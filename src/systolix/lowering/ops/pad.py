"""Pad on H and W: constant padding is the conv's own padding (a 1x1 copy with pads, the border
value added from the constant image when it is not zero); edge and reflect are pixel remaps."""

from __future__ import annotations

import numpy as np

from systolix.ir.hir import ConvInput, ConvLayer, RemapLayer
from systolix.ir.postops import AddConstant
from systolix.lowering.registry import OpHandler, handles


def _arguments(node, lw):
    """``(mode, pads, value)`` with pads as ``[begin..., end...]`` over every axis."""
    r = lw.ref(node, 0)
    mode = node.attr("mode", "constant")
    if lw.g.opset < 11:
        return mode, [int(p) for p in node.attr("pads")], float(node.attr("value", 0.0))
    pads = lw.const(node, 1).astype(int).tolist()
    v = lw.opt_const(node, 2)
    value = 0.0 if v is None or np.size(v) == 0 else float(np.asarray(v).reshape(-1)[0])
    axes = lw.opt_const(node, 3)
    if axes is not None:
        full = [0] * (2 * len(r.shape))
        for i, a in enumerate(np.asarray(axes).tolist()):
            full[int(a) % len(r.shape)] = pads[i]
            full[int(a) % len(r.shape) + len(r.shape)] = pads[i + len(axes)]
        pads = full
    return mode, pads, value


def pad_index(size: int, before: int, n_out: int, mode: str) -> np.ndarray:
    i = np.arange(n_out) - before
    if mode == "edge":
        return np.clip(i, 0, size - 1)
    period = 2 * (size - 1) if size > 1 else 1
    i = np.abs(i) % period if size > 1 else np.zeros_like(i)
    return np.where(i >= size, period - i, i)


@handles("Pad")
class Pad(OpHandler):
    def check(self, node, lw):
        reason = lw.input_reason(node, 0)
        if reason is None and lw.g.opset >= 11:
            reason = lw.const_reason(node, 1, "pads")
        if reason:
            return reason
        mode, pads, _ = _arguments(node, lw)
        if len(lw.ref(node, 0).shape) != 4:
            return "padding a tensor that is not NCHW"
        begin, end = pads[:4], pads[4:]
        if begin[0] or begin[1] or end[0] or end[1]:
            return "padding the batch or channel axis"
        reason = lw.activation_reason(node, 0)
        if reason:
            return reason
        if mode == "constant" and min(begin[2], begin[3], end[2], end[3]) >= 0:
            return None
        if mode not in ("edge", "reflect", "constant"):
            return f"pad mode {mode!r}; the accelerator pads in modes constant, edge and reflect"
        if mode == "constant":
            return "mixing negative (cropping) and positive constant pads"
        return None

    def lower(self, node, lw):
        mode, pads, value = _arguments(node, lw)
        begin, end = pads[:4], pads[4:]
        x = lw.act_of(node, 0)
        top, left, bottom, right = begin[2], begin[3], end[2], end[3]
        out_shape = lw.shape(node.outputs[0])
        OH, OW = out_shape[2], out_shape[3]
        out = lw.new_act(node.outputs[0], x.C, OH, OW)
        if mode == "constant":
            w = np.ones((x.C, 1, 1), np.float32)
            post = []
            if value != 0.0:
                border = np.full((x.C, OH, OW), value, np.float32)
                border[:, top:top + x.H, left:left + x.W] = 0.0
                post.append(AddConstant(border, node=node.name))
            lw.add(ConvLayer(node.name, [ConvInput(x, diagonal=w)], out, np.zeros(x.C, np.float32), (1, 1),
                             pads=(top, left, bottom, right), post_ops=post, ops=["Pad"], nodes=[node.name], open=False),
                   node.outputs[0])
            return
        rows = pad_index(x.H, top, OH, mode)
        cols = pad_index(x.W, left, OW, mode)
        source = np.stack(np.meshgrid(rows, cols, indexing="ij"), axis=-1)
        lw.add(RemapLayer(node.name, x, out, source, ops=["Pad"], nodes=[node.name]), node.outputs[0])
