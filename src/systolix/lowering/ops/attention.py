"""MatMul of two computed tensors: attention's scores ``Q x K^T`` and context ``P x V``
(``TensorMatMulLayer``), and the scale and Softmax after the scores, on the Tandem unit.

The array's LoadWeights reads its weight rows from local memory, so a computed tensor moved
there loads into the array as the constant weights do. Token tensors ``[1, T, D]`` hold ``D``
across the lanes and ``T`` as pixels; with ``Dh`` a multiple of the lanes, the heads of
``Reshape [1, T, H, Dh] + Transpose`` are views (head ``h`` is channel groups ``h Dh / N ..``),
no data moves. Per head:

* ``P x V``: ``W[in=s, out=d] = V[s, d]``: V's token vectors are the weight rows as they are.
* ``Q x K^T``: ``W[in=d, out=s] = K[s, d]``: each ``N x N`` tile of K's vectors transposed by the
  Tandem unit's permute engine (``TPermute Transpose``, local memory to local memory), then
  loaded; Q's vectors stream through. The scores of query token ``t`` are the channels of pixel
  ``t`` (head ``h`` at channels ``h Tp ..``, ``T`` rounded up to whole vectors), so a
  ``Div``/``Mul`` by a positive scalar and ``Softmax`` over the last axis after it are the
  channel softmax of ``systolix.codegen.tandem_softmax`` per head, the scale folded into its
  ``log2 e`` factor: this module lowers the three nodes as one layer (``Lowering.claimed``).
* The context ``[1, H, T, Dh]`` is head ``h`` at channels ``h Dh ..``: its
  ``Transpose + Reshape`` back to ``[1, T, D]`` is the identity view, so the out-projection is an
  ordinary MatMul on it.

Refused (the host runs the node): a head size that is not a multiple of the lanes (heads would
not start at vector boundaries), operands that are not such head views of token tensors, and
``Q x K^T`` without the Tandem unit (no transpose on the stock TCU).
"""

from __future__ import annotations

import math

import numpy as np

from systolix.codegen.tandem_softmax import interim_vectors
from systolix.ir.hir import TensorMatMulLayer
from systolix.ir.layout import canonical_chw, canonical_elements
from systolix.lowering.state import Ref

PROB_SHIFT = 2
"""Attention's probabilities are saved times ``2^PROB_SHIFT`` (two more fraction bits: a probability
near ``1/T`` has few) and the context MatMul divides its sums by it; its partial sums stay in
range while the probability-weighted mean of ``|V|`` is below ``128 / 2^PROB_SHIFT`` = 32."""

HEADS = ("its heads must be channel-group slices of a token tensor [1, T, D] (Reshape [1, T, H, Dh] and Transpose, "
         "Dh a multiple of the array's {N} lanes)")


def _split(r: Ref, N: int, what: str):
    """``(batch, rows, cols, channel[h, i, j], pixel[h, i, j])`` of a ``[..., rows, cols]`` view."""
    shape = tuple(r.shape)
    if len(shape) < 2:
        return f"the {what} operand has {len(shape)} axes"
    batch = int(np.prod(shape[:-2], dtype=np.int64))
    e = r.elements.reshape(batch, shape[-2], shape[-1])
    c, p = np.divmod(e, r.act.P)
    return batch, shape[-2], shape[-1], c, p


def _heads(c: np.ndarray, lanes_axis: int, N: int) -> tuple[int, int] | None:
    """``(offset, stride)`` when channel ``c[h, ...]`` is ``offset + h stride + index`` along
    ``lanes_axis`` (1 or 2) and constant along the other; offset and stride whole vectors."""
    B = c.shape[0]
    idx = np.arange(c.shape[lanes_axis])
    off = int(c.flat[0])
    stride = int(c[1].flat[0] - c[0].flat[0]) if B > 1 else -(-c.shape[lanes_axis] // N) * N
    expect = off + stride * np.arange(B)[:, None, None] + (idx[None, :, None] if lanes_axis == 1 else idx[None, None, :])
    if not np.array_equal(c, np.broadcast_to(expect, c.shape)) or off % N or stride % N or stride < c.shape[lanes_axis]:
        return None
    return off, stride


def _pixels_along(p: np.ndarray, axis: int) -> bool:
    idx = np.arange(p.shape[axis])
    expect = idx[None, :, None] if axis == 1 else idx[None, None, :]
    return bool(np.array_equal(p, np.broadcast_to(expect, p.shape)))


def operands(node, lw):
    """The layer's geometry from the two views, or the reason they do not fit it."""
    N = lw.N
    ra, rb = lw.ref(node, 0), lw.ref(node, 1)
    sa = _split(ra, N, "left")
    if isinstance(sa, str):
        return sa
    sb = _split(rb, N, "right")
    if isinstance(sb, str):
        return sb
    Ba, M, K, ca, pa = sa
    Bb, Kb, O, cb, pb = sb
    if tuple(ra.shape[:-2]) != tuple(rb.shape[:-2]) or Kb != K:
        return f"a batched product of shapes {list(ra.shape)} and {list(rb.shape)} (broadcasting)"
    a_heads = _heads(ca, 2, N) if _pixels_along(pa, 1) else None
    if a_heads is None:
        return "left operand: " + HEADS.format(N=N)
    if _pixels_along(pb, 1) and (b_heads := _heads(cb, 2, N)) is not None:
        transposed = False  # b's pixels are the contraction: its vectors are weight rows (P x V)
    elif _pixels_along(pb, 2) and (b_heads := _heads(cb, 1, N)) is not None:
        transposed = True  # b's channels are the contraction: its tiles transposed (Q x K^T)
    else:
        return "right operand: " + HEADS.format(N=N)
    if transposed and lw.tandem is None:
        return ("the right operand is transposed (Q x K^T): its tiles are transposed by the Tandem unit's permute engine, "
                "which this architecture has not")
    if ra.act.H != 1 or rb.act.H != 1:
        return "its operands are not token tensors [1, T, D]"
    return dict(heads=Ba, M=M, K=K, O=O, a_offset=a_heads[0], a_stride=a_heads[1], b_offset=b_heads[0],
                b_stride=b_heads[1], transposed=transposed)


def _rows_operand(node, lw, index: int) -> bool:
    """Input ``index`` is a head view whose pixels are the contraction (``P x V``'s V)."""
    if node.inputs[index] not in lw.refs:
        return False
    _, _, _, c, p = _split(lw.refs[node.inputs[index]], lw.N, "right")
    return _pixels_along(p, 1) and _heads(c, 2, lw.N) is not None


def probability_shift(softmax, lw) -> int:
    """``PROB_SHIFT`` when the Softmax's only reader is the next node, a MatMul taking it as the
    left operand and a head view as the right (the context, which divides the shift out), else 0."""
    nodes = lw.g.nodes
    at = next(k for k, n in enumerate(nodes) if n is softmax)
    users = lw.consumers.get(softmax.outputs[0], [])
    if (softmax.outputs[0] in lw.outputs or len(users) != 1 or at + 1 >= len(nodes) or nodes[at + 1] is not users[0]
            or lw.tandem.immediates < 10):
        return 0
    u = users[0]
    ok = (u.op_type == "MatMul" and u.inputs[0] == softmax.outputs[0] and lw.g.const(u.inputs[1]) is None
          and u.inputs[1] in lw.refs and tuple(lw.refs[u.inputs[1]].shape[:-2]) == tuple(lw.shape(softmax.outputs[0])[:-2])
          and lw.refs[u.inputs[1]].shape[-2] == lw.shape(softmax.outputs[0])[-1])
    # ... so that the MatMul's own check accepts it (else the host would read scaled probabilities)
    return PROB_SHIFT if ok and _rows_operand(u, lw, 1) else 0


def softmax_chain(node, lw):
    """``(nodes, scale)``: an optional Div/Mul of the product by a positive scalar and a
    Softmax over its last axis, the product's only readers, right after it in the graph; or None."""
    nodes = lw.g.nodes
    at = next(k for k, n in enumerate(nodes) if n is node)
    out, chain, scale = node.outputs[0], [], 1.0
    while True:
        users = lw.consumers.get(out, [])
        if out in lw.outputs or len(users) != 1 or at + len(chain) + 1 >= len(nodes) or nodes[at + len(chain) + 1] is not users[0]:
            return None
        u = users[0]
        if u.op_type in ("Div", "Mul") and not chain and u.inputs[0] == out:
            c = lw.g.const(u.inputs[1])
            if c is None or np.size(c) != 1:
                return None
            v = float(np.asarray(c, np.float64).reshape(-1)[0])
            scale = 1.0 / v if u.op_type == "Div" and v != 0 else v if u.op_type == "Mul" else -1.0
            if not (math.isfinite(scale) and scale > 0):
                return None
            chain.append(u)
            out = u.outputs[0]
            continue
        if u.op_type != "Softmax":
            return None
        rank = len(lw.shape(out))
        axis = int(u.attr("axis", 1 if lw.g.opset < 13 else -1))
        if (axis + rank if axis < 0 else axis) != rank - 1:
            return None
        return chain + [u], scale


def check(node, lw) -> str | None:
    """``MatMul.check`` for two computed operands."""
    reason = lw.input_reason(node, 0) or lw.input_reason(node, 1)
    if reason:
        return reason
    geo = operands(node, lw)
    if isinstance(geo, str):
        return geo
    chain = softmax_chain(node, lw) if lw.tandem is not None else None
    if chain is not None:
        O, N = geo["O"], lw.N
        groups = -(-O // N)
        wide_max = 2 ** (2 * lw.data_type.width - 1 - 2 * lw.data_type.binary_point)
        if O >= wide_max or interim_vectors(groups) > lw.tandem.interim_depth:
            return f"the softmax after it over {O} keys does not fit the Tandem unit (wide type, interim buffer)"
    return None


def lower(node, lw) -> None:
    geo = operands(node, lw)
    N = lw.N
    chain = softmax_chain(node, lw) if lw.tandem is not None else None
    B, M, O = geo["heads"], geo["M"], geo["O"]
    Op = -(-O // N) * N
    last = chain[0][-1] if chain else node
    name = last.outputs[0]
    out = lw.new_act(name, (B - 1) * Op + O, 1, M)  # the last head's padding is the vectors' own
    out_shift = probability_shift(last, lw) if chain else 0
    if out_shift:
        lw.scaled[name] = out_shift
    layer = TensorMatMulLayer(node.name, lw.ref(node, 0).act, lw.ref(node, 1).act, out, B, geo["K"], O, geo["a_offset"],
                              geo["a_stride"], geo["b_offset"], geo["b_stride"], geo["transposed"], Op,
                              softmax=chain is not None, scale=chain[1] if chain else 1.0, out_shift=out_shift,
                              a_shift=lw.scaled.get(node.inputs[0], 0),
                              ops=["MatMul"] + [n.op_type for n in (chain[0] if chain else [])],
                              nodes=[node.name] + [n.name for n in (chain[0] if chain else [])], macs=B * M * geo["K"] * O)
    lw.layers.append(layer)
    # out_h[m, o] is channel h Op + o of pixel m.
    shape = tuple(lw.shape(node.outputs[0]))
    h, m, o = np.meshgrid(np.arange(B), np.arange(M), np.arange(O), indexing="ij")
    elements = ((h * Op + o) * M + m).reshape(shape)
    chw = canonical_chw(shape)
    canonical = (chw is not None and chw[0] == out.C and chw[1] * chw[2] == M
                 and np.array_equal(elements, canonical_elements(shape)))
    for n in [node] + (chain[0] if chain else []):
        lw.refs[n.outputs[0]] = Ref(out, shape, elements, canonical)
        if n is not node:
            lw.claimed.add(n.outputs[0])
