"""Resize and Upsample on H and W, with every coordinate mode as onnxruntime computes it.

Nearest is a pixel remap whose source pixels are read off onnxruntime itself (the node run on a
tensor holding each pixel's row and column). Linear and cubic are separable: two pixel mixes
(columns, then rows) whose weights are read off onnxruntime by resizing one-hot rows and
columns, checked on a random tensor.
"""

from __future__ import annotations

import numpy as np

from systolix.ir.hir import PixelMixLayer, RemapLayer
from systolix.lowering.registry import OpHandler, handles


def _session(node, lw, shape):
    import onnx

    from systolix.onnxrt import session

    inputs = [onnx.helper.make_tensor_value_info(node.inputs[0], onnx.TensorProto.FLOAT, list(shape))]
    inits = [onnx.numpy_helper.from_array(np.asarray(lw.g.const(n)), n) for n in node.inputs[1:] if n]
    proto = onnx.helper.make_node(node.op_type, node.inputs, node.outputs[:1], **dict(node.attrs))
    graph = onnx.helper.make_graph([proto], "probe", inputs,
                                   [onnx.helper.make_tensor_value_info(node.outputs[0], onnx.TensorProto.FLOAT, None)], inits)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", lw.g.opset)])
    model.ir_version = min(model.ir_version, 8)
    # (onnxruntime's logging is off: the probe's declared shape may be onnx's, not onnxruntime's)
    return session(model, source=f"node {node.name!r} ({node.op_type})")


def nearest_source(node, lw, x) -> np.ndarray:
    """Which input pixel each output pixel copies: ``[OH, OW, 2]`` (row, column)."""
    key = ("nearest", node.name, x.C, x.H, x.W)
    if key not in lw.probes:
        C = x.C
        sess = _session(node, lw, [1, C, x.H, x.W])
        probe = np.zeros((1, C, x.H, x.W), np.float32)
        rows, cols = np.meshgrid(np.arange(x.H), np.arange(x.W), indexing="ij")
        probe[0, 0] = rows
        if C > 1:
            probe[0, 1] = cols
        res = sess.run(None, {node.inputs[0]: probe})[0]
        src_rows = res[0, 0].astype(np.int64)
        if C > 1:
            src_cols = res[0, 1].astype(np.int64)
        else:
            probe[0, 0] = cols
            src_cols = sess.run(None, {node.inputs[0]: probe})[0][0, 0].astype(np.int64)
        lw.probes[key] = np.stack([src_rows, src_cols], axis=-1)
    return lw.probes[key]


def separable_weights(node, lw, x, OH: int, OW: int):
    """``(Rh, Rw)``: each output row's and column's weights over the input's, or None when the
    resize is not a separable linear map."""
    key = ("separable", node.name, x.C, x.H, x.W)
    if key not in lw.probes:
        H, W = x.H, x.W
        sess = _session(node, lw, [1, x.C, H, W])

        def run(t):
            return sess.run(None, {node.inputs[0]: t.astype(np.float32)})[0]

        probe = np.zeros((1, x.C, H, W), np.float32)
        Rw = np.zeros((OW, W))
        for iw in range(W):
            probe[:] = 0
            probe[0, :, :, iw] = 1
            Rw[:, iw] = run(probe)[0, 0, 0, :]
        Rh = np.zeros((OH, H))
        for ih in range(H):
            probe[:] = 0
            probe[0, :, ih, :] = 1
            Rh[:, ih] = run(probe)[0, 0, :, 0]
        # The weights above assume the map is separable (rows' weights sum to one): check it.
        test = np.random.default_rng(0).normal(size=(1, x.C, H, W)).astype(np.float32)
        expect = run(test)
        mine = np.einsum("qh,chw,pw->cqp", Rh, test[0].astype(np.float64), Rw)
        lw.probes[key] = (Rh, Rw) if np.allclose(mine, expect[0], atol=1e-4) else None
    return lw.probes[key]


@handles("Resize", "Upsample")
class Resize(OpHandler):
    def check(self, node, lw):
        reason = lw.input_reason(node, 0)
        if reason:
            return reason
        if len(lw.ref(node, 0).shape) != 4:
            return "resizing a tensor that is not NCHW"
        reason = lw.activation_reason(node, 0)
        if reason:
            return reason
        x = lw.input_activation(node, 0)
        out_shape = lw.shape(node.outputs[0])
        if node.attr("mode", "nearest") == "nearest":
            return "resizing the channel axis" if out_shape[1] != x.C else None
        if out_shape[1] != x.C or out_shape[0] != 1:
            return "resizing the batch or channel axis"
        if separable_weights(node, lw, x, out_shape[2], out_shape[3]) is None:
            return "this resize does not act on rows and columns separately, as the accelerator's two pixel mixes need"
        return None

    def lower(self, node, lw):
        x = lw.act_of(node, 0)
        out_shape = lw.shape(node.outputs[0])
        OH, OW = out_shape[2], out_shape[3]
        if node.attr("mode", "nearest") == "nearest":
            out = lw.new_act(node.outputs[0], x.C, OH, OW)
            lw.add(RemapLayer(node.name, x, out, nearest_source(node, lw, x), ops=[node.op_type], nodes=[node.name]),
                   node.outputs[0])
            return
        Rh, Rw = separable_weights(node, lw, x, OH, OW)
        H, W = x.H, x.W
        mid = lw.new_act(f"{node.outputs[0]}:columns", x.C, H, OW)
        q, p = np.nonzero(Rw)
        rows = np.arange(H)
        out_pix = (rows[:, None] * OW + q[None, :]).reshape(-1)
        in_pix = (rows[:, None] * W + p[None, :]).reshape(-1)
        coef = np.tile(Rw[q, p], H)
        lw.add(PixelMixLayer(f"{node.name}/columns", x, mid, out_pix, in_pix, coef.astype(np.float32), ops=[node.op_type],
                             nodes=[node.name]))
        out = lw.new_act(node.outputs[0], x.C, OH, OW)
        q, p = np.nonzero(Rh)
        cols = np.arange(OW)
        out_pix = (q[:, None] * OW + cols[None, :]).reshape(-1)
        in_pix = (p[:, None] * OW + cols[None, :]).reshape(-1)
        coef = np.repeat(Rh[q, p], OW)
        lw.add(PixelMixLayer(node.name + "/rows", mid, out, out_pix, in_pix, coef.astype(np.float32), ops=[node.op_type],
                             nodes=[node.name]), node.outputs[0])
