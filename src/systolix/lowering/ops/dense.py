"""Gemm and MatMul with a constant operand: a matrix product on the array.

One output vector (``[1, K] x [K, O]``) is a convolution whose kernel covers the whole input,
each weight row placed where its input element sits in memory (so a Flatten or Transpose before
it costs nothing); rows of pixels (``[M, K]``) are a 1x1 convolution. A constant on the left
(``const [M, K] x x [K, J]``) mixes pixels: a ``PixelMixLayer``.
"""

from __future__ import annotations

import numpy as np

from systolix.errors import SystolixError
from systolix.ir.hir import ConvInput, ConvLayer, PixelMixLayer
from systolix.ir.layout import canonical_chw
from systolix.ir.postops import AddConstant
from systolix.lowering.ops import attention, transpose_tokens
from systolix.lowering.registry import OpHandler, handles


def _dense_reason(node, lw, a_index: int, K: int) -> str | None:
    reason = lw.input_reason(node, a_index)
    if reason:
        return reason
    r = lw.ref(node, a_index)
    if r.shape[-1] != K:
        raise SystolixError(f"{node.describe()}: input has {r.shape[-1]} features, the weights {K}")
    rows = int(np.prod(r.shape[:-1], dtype=np.int64))
    if rows == 1:
        return None
    if not r.canonical and not (lw.tandem is not None and transpose_tokens.swapped(r)):
        if transpose_tokens.swapped(r):
            return ("a batched matrix product over a reshaped input (its token and channel axes swapped: the Tandem unit's "
                    "permute engine lays it out, which this architecture has not)")
        return "a batched matrix product over a reshaped input"
    chw = canonical_chw(tuple(lw.shape(node.outputs[0])))
    if chw is None or chw[1] * chw[2] != lw.input_activation(node, a_index).P:
        return f"output shape {list(lw.shape(node.outputs[0]))} cannot be laid out on the accelerator"
    return None


def dense_layer(node, lw, a_index: int, bmat: np.ndarray, bias: np.ndarray, op: str) -> ConvLayer:
    """``y = x @ bmat + bias`` where x is input ``a_index`` (a vector, or rows of pixels)."""
    r = lw.ref(node, a_index)
    K, O = bmat.shape
    rows = int(np.prod(r.shape[:-1], dtype=np.int64))
    act = r.act
    if rows == 1:
        inv = np.full(act.C * act.P, -1, np.int64)
        inv[r.elements.reshape(-1)] = np.arange(K)
        dense = np.zeros((O, act.C, act.H, act.W), np.float32)
        rows_of = inv.reshape(act.C, act.H, act.W)
        valid = rows_of >= 0
        dense[:, valid] = bmat[rows_of[valid]].T
        out = lw.new_act(node.outputs[0], O, 1, 1)
        layer = ConvLayer(node.name, [ConvInput(act, dense)], out, bias.astype(np.float32), (act.H, act.W), ops=[op], nodes=[node.name],
                          macs=int(K * O))
    else:
        if not r.canonical:
            act = transpose_tokens.materialise(node, lw, a_index)  # a token tensor transposed (checked)
        dense = bmat.T.astype(np.float32).reshape(O, K, 1, 1)
        out = lw.new_act(node.outputs[0], O, act.H, act.W)
        layer = ConvLayer(node.name, [ConvInput(act, dense)], out, bias.astype(np.float32), (1, 1), ops=[op], nodes=[node.name],
                          macs=int(rows * K * O))
    lw.add(layer, node.outputs[0])
    return layer


@handles("Gemm")
class Gemm(OpHandler):
    def check(self, node, lw):
        if int(node.attr("transA", 0)):
            return "transA=1: the accelerator multiplies a computed A by a constant B; export the Gemm with transA=0"
        reason = lw.const_reason(node, 1, "B") or lw.optional_const_reason(node, 2, "C is computed, not a constant; the accelerator needs it as a constant when compiling")
        if reason:
            return reason
        b = lw.const(node, 1)
        return _dense_reason(node, lw, 0, b.shape[0] if not int(node.attr("transB", 0)) else b.shape[1])

    def lower(self, node, lw):
        b = lw.const(node, 1).astype(np.float32)
        if int(node.attr("transB", 0)):
            b = b.T
        alpha = float(node.attr("alpha", 1.0))
        beta = float(node.attr("beta", 1.0))
        O = b.shape[1]
        c = lw.opt_const(node, 2)
        full_c = None
        if c is None:
            bias = np.zeros(O, np.float32)
        elif np.asarray(c).size in (1, O):
            bias = beta * np.broadcast_to(np.asarray(c, np.float32), (1, O)).reshape(O)
        else:
            # A C matrix with a row per input row: added from the constant image after the product.
            bias = np.zeros(O, np.float32)
            full_c = beta * np.broadcast_to(np.asarray(c, np.float32), tuple(lw.shape(node.outputs[0])))
        layer = dense_layer(node, lw, 0, alpha * b, bias, "Gemm")
        if full_c is not None:
            out = layer.output
            layer.post_ops.append(AddConstant(full_c.T.reshape(out.C, out.H, out.W).astype(np.float32), node=node.name))


@handles("MatMul")
class MatMul(OpHandler):
    @staticmethod
    def _mixes_pixels(node, lw) -> bool:
        a, b = lw.opt_const(node, 0), lw.opt_const(node, 1)
        return (b is None and a is not None and np.ndim(a) == 2 and node.inputs[1] in lw.refs
                and len(lw.refs[node.inputs[1]].shape) == 2)

    def check(self, node, lw):
        if self._mixes_pixels(node, lw):
            return lw.activation_reason(node, 1)
        a = lw.opt_const(node, 0)
        if a is not None and np.ndim(a) == 2 and lw.opt_const(node, 1) is None and node.inputs[1] not in lw.refs:
            return lw.input_reason(node, 1)
        b = lw.opt_const(node, 1)
        if b is None and a is None:
            return attention.check(node, lw)  # two computed tensors: attention's products
        if b is None:
            return "only a MatMul with a constant operand runs on the accelerator"
        if np.ndim(b) != 2:
            return f"constant operand has {np.ndim(b)} axes (2 supported)"
        return _dense_reason(node, lw, 0, np.shape(b)[0])

    def lower(self, node, lw):
        if self._mixes_pixels(node, lw):
            # const (M, K) @ x (K, J): rows of x are pixels, so this mixes pixels: y[m] = sum_k a[m, k] x[k].
            a = lw.opt_const(node, 0)
            x = lw.act_of(node, 1)
            M_, K = a.shape
            out = lw.new_act(node.outputs[0], x.C, 1, M_)
            mm, kk = np.nonzero(a)
            lw.add(PixelMixLayer(node.name, x, out, mm, kk, a[mm, kk].astype(np.float32), ops=["MatMul"], nodes=[node.name],
                                 macs=int(M_ * K * x.C)), node.outputs[0])
            return
        if lw.opt_const(node, 0) is None and lw.opt_const(node, 1) is None:
            attention.lower(node, lw)
            return
        b = np.asarray(lw.const(node, 1), np.float32)
        dense_layer(node, lw, 0, b, np.zeros(b.shape[1], np.float32), "MatMul")
