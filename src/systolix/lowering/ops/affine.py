"""BatchNormalization, and Add, Sub, Mul, Div: per-channel affine maps, tensor with tensor, and
constant tensors.

A per-channel ``x * scale + shift`` (a batch norm, an op with a scalar or per-channel constant)
becomes a 1x1 per-channel layer of its own; ``fold_batch_norms`` folds it into the weights of
the layer before it when that is exact. Two computed tensors of one shape, or one broadcast per
channel, become a post-op layer (``AddTensor``, ``MulTensor``, ``AddBroadcast``,
``MulBroadcast``) that ``fuse_post_ops`` joins to the layer computing either operand.
"""

from __future__ import annotations

import numpy as np

from systolix.ir.hir import ConvInput, ConvLayer
from systolix.ir.postops import AddBroadcast, AddConstant, AddTensor, MulBroadcast, MulTensor
from systolix.lowering.registry import OpHandler, handles
from systolix.lowering.ops.gates import gated_input
from systolix.lowering.state import refusal


def affine_reason(node, lw, x_index: int) -> str | None:
    reason = lw.activation_reason(node, x_index)
    if reason:
        return reason
    r = lw.ref(node, x_index)
    out_shape = lw.shape(node.outputs[0])
    if tuple(out_shape) != tuple(r.shape):
        return f"broadcasting the tensor from {list(r.shape)} to {list(out_shape)}"
    return None


def affine(node, lw, x_index: int, scale: np.ndarray, shift: np.ndarray, op: str,
           statistics: tuple[np.ndarray, np.ndarray] | None = None) -> None:
    """``y = x * scale + shift`` per channel: a 1x1 per-channel layer (``statistics``: its
    output's mean and standard deviation per channel, when the model states them)."""
    name = node.inputs[x_index]
    r = lw.ref(node, x_index)
    if not r.canonical:
        r = lw.bind(name, lw.act_of(node, x_index))
    act = r.act
    w = np.asarray(scale, np.float32).reshape(act.C, 1, 1)
    out = lw.new_act(node.outputs[0], act.C, act.H, act.W)
    lw.add(ConvLayer(node.name, [ConvInput(act, diagonal=w)], out, shift.astype(np.float32), (1, 1), ops=[op], nodes=[node.name],
                     foldable=True, statistics=statistics), node.outputs[0])


@handles("BatchNormalization")
class BatchNormalization(OpHandler):
    def check(self, node, lw):
        if len([o for o in node.outputs if o]) > 1 or node.attr("training_mode", 0):
            return ("training mode: it normalises by the batch's own mean and variance (before opset 14, naming its "
                    "statistics outputs asks for that); export the model in inference mode to run it on the accelerator")
        for index, what in ((1, "scale"), (2, "B"), (3, "mean"), (4, "var")):
            reason = lw.const_reason(node, index, what)
            if reason:
                return reason
        reason = lw.input_reason(node, 0)
        if reason:
            return reason
        if lw.ref(node, 0).act.C != lw.const(node, 1).size:
            return "normalises an axis that is not the channel axis"
        return affine_reason(node, lw, 0)

    def lower(self, node, lw):
        scale, bias, mean, var = (lw.const(node, i).astype(np.float64) for i in (1, 2, 3, 4))
        eps = float(node.attr("epsilon", 1e-5))
        s = scale / np.sqrt(var + eps)
        t = bias - mean * s
        # Over the data the statistics were taken on, the output has mean ``bias`` and standard
        # deviation ``|scale| sqrt(var / (var + eps))``.
        statistics = (bias.astype(np.float32), (np.abs(scale) * np.sqrt(var / (var + eps))).astype(np.float32))
        affine(node, lw, 0, s.astype(np.float32), t.astype(np.float32), "BatchNormalization", statistics)


def _tensors_plan(node, lw, kind: str):
    """Two computed operands: ``(post-op class, i, j, diagonal)`` or a reason: the operands are
    laid out in the order ``i``, ``j``; the layer reads ``i`` and the post-op ``j``, or, with a
    diagonal of -1 (``a - b = -b + a``), the layer reads ``j`` negated and the post-op adds ``i``."""
    reason = lw.input_reason(node, 0) or lw.input_reason(node, 1)
    if reason:
        return reason
    ra, rb = lw.ref(node, 0), lw.ref(node, 1)
    out_shape = tuple(lw.shape(node.outputs[0]))
    if kind in ("Add", "Mul") and tuple(ra.shape) != tuple(rb.shape):
        for big, small in ((0, 1), (1, 0)):
            rbig, rsmall = (ra, rb) if big == 0 else (rb, ra)
            if tuple(rbig.shape) == out_shape and len(out_shape) == 4 and tuple(rsmall.shape) == (1, out_shape[1], 1, 1):
                return (AddBroadcast if kind == "Add" else MulBroadcast), big, small, 1.0
        return f"broadcasting {list(ra.shape)} and {list(rb.shape)}"
    if kind in ("Add", "Sub"):
        if tuple(ra.shape) != out_shape or tuple(rb.shape) != out_shape:
            return f"broadcasting {list(ra.shape)} and {list(rb.shape)}"
        return AddTensor, 0, 1, 1.0 if kind == "Add" else -1.0
    if kind == "Mul" and tuple(ra.shape) == tuple(rb.shape) == out_shape:
        return MulTensor, 0, 1, 1.0
    if kind == "Div":
        if lw.tandem is not None and tuple(ra.shape) == tuple(rb.shape) == out_shape:
            from systolix.lowering.ops.tandem_functions import DivTensor  # noqa: PLC0415

            return DivTensor, 0, 1, 1.0
        return "a division by a computed tensor; the accelerator divides only by a constant (or the Tandem unit's, of one shape)"
    return f"{kind} of two computed tensors of shapes {list(ra.shape)} and {list(rb.shape)}"


def _constant_plan(node, lw, kind: str):
    """One constant operand: ``("affine", x index, scale, shift)``, ``("tensor", x index,
    values)`` or a reason."""
    ca, cb = lw.g.const(node.inputs[0]), lw.g.const(node.inputs[1])
    xi = 0 if ca is None else 1
    c = cb if ca is None else ca
    reason = lw.input_reason(node, xi)
    if reason:
        return reason
    r = lw.ref(node, xi)
    vec = lw.channel_vector(c, r)
    if vec is None and kind in ("Add", "Sub") and not (kind == "Sub" and xi == 1):
        out_shape = tuple(lw.shape(node.outputs[0]))
        if tuple(r.shape) != out_shape:
            return f"broadcasting the tensor from {list(r.shape)} to {list(out_shape)}"
        return lw.activation_reason(node, xi) or ("tensor", xi, np.asarray(c, np.float32) * (1.0 if kind == "Add" else -1.0))
    if vec is None:
        return f"constant of shape {list(np.shape(c))} is not per-channel or scalar"
    ones, zeros = np.ones_like(vec), np.zeros_like(vec)
    if kind == "Add":
        scale, shift = ones, vec
    elif kind == "Sub":
        scale, shift = (ones, -vec) if xi == 0 else (-ones, vec)
    elif kind == "Mul":
        scale, shift = vec, zeros
    else:
        if xi != 0:
            if lw.tandem is None:
                return "dividing a constant by a tensor (the Tandem unit's Div does, the stock TCU has none)"
            return affine_reason(node, lw, xi) or ("reciprocal", xi, vec)
        if np.any(vec == 0):
            return "division by zero"
        scale, shift = 1.0 / vec, zeros
    return affine_reason(node, lw, xi) or ("affine", xi, scale, shift)


@handles("Add", "Sub", "Mul", "Div")
class Arithmetic(OpHandler):
    @staticmethod
    def _plan(node, lw):
        ca, cb = lw.g.const(node.inputs[0]), lw.g.const(node.inputs[1])
        if ca is not None and cb is not None:
            return "both operands are constants"  # folded by the frontend normally
        if ca is None and cb is None:
            plan = _tensors_plan(node, lw, node.op_type)
            if isinstance(plan, str):
                return plan
            _, i, j, _ = plan
            return lw.activation_reason(node, i) or lw.activation_reason(node, j) or plan
        return _constant_plan(node, lw, node.op_type)

    def check(self, node, lw):
        from systolix.lowering.ops.gelu import erf_gelu, inside_erf_gelu

        if inside_erf_gelu(node, lw):
            return None
        if (gelu := erf_gelu(node, lw)) is not None:
            scale = gelu[1][0]  # x / sqrt 2 reads x
            return lw.activation_reason(scale, scale.inputs.index(gelu[0]))
        gated = gated_input(node, lw)
        if gated is not None:
            return lw.input_reason(node, gated[0]) or lw.activation_reason(node, gated[0])
        return refusal(self._plan(node, lw))

    def lower(self, node, lw):
        from systolix.lowering.ops.gelu import erf_gelu, inside_erf_gelu
        from systolix.lowering.ops.tandem_functions import gelu_op

        if inside_erf_gelu(node, lw):
            return
        if (gelu := erf_gelu(node, lw)) is not None:  # 0.5 x (1 + erf(x / sqrt 2)): one post-op on x
            scale = gelu[1][0]
            tanh_form = any(n.op_type == "Tanh" for n in gelu[1])
            lw.post_op_layer(node, lw.act_of(scale, scale.inputs.index(gelu[0])), gelu_op(node, lw, tanh_form))
            return
        gated = gated_input(node, lw)
        if gated is not None:  # x * Sigmoid(x), x * HardSigmoid(x): one post-op on x
            i, op = gated
            lw.post_op_layer(node, lw.act_of(node, i), op(node=node.name))
            return
        plan = self._plan(node, lw)
        if plan[0] == "reciprocal":  # constant / x on the Tandem unit
            from systolix.lowering.ops.tandem_functions import DivideConstant  # noqa: PLC0415

            _, xi, vec = plan
            lw.post_op_layer(node, lw.act_of(node, xi), DivideConstant(node=node.name, numerators=vec))
        elif plan[0] == "affine":
            _, xi, scale, shift = plan
            affine(node, lw, xi, scale, shift, node.op_type)
        elif plan[0] == "tensor":
            _, xi, c = plan
            r = lw.ref(node, xi)
            x = lw.act_of(node, xi)
            full = np.broadcast_to(c, r.shape).reshape(-1)
            values = np.empty(x.C * x.P, np.float32)
            values[lw.refs[node.inputs[xi]].elements.reshape(-1)] = full
            lw.post_op_layer(node, x, AddConstant(values.reshape(x.C, x.H, x.W), node=node.name))
        else:
            kind, i, j, diagonal = plan
            a = lw.act_of(node, i)
            b = lw.act_of(node, j)
            if diagonal < 0:
                a, b = b, a  # a - b = -b + a: the negated operand goes through the array
            lw.post_op_layer(node, a, kind(b, node=node.name), diagonal)
