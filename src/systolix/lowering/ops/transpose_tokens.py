"""A token tensor with its token and channel axes swapped, laid out by the Tandem unit.

A ``Transpose`` of ``[1, T, D]`` to ``[1, D, T]`` (or ``[T, D]`` to ``[D, T]``, or a ``Reshape``
of a feature map ``[1, C, H, W]`` to ``[1, C, HW]``) is a view (``views.py``): the elements stay
where they are, ``D`` across the lanes and ``T`` as pixels, while the new shape wants ``T`` across
the lanes. Most readers materialise such a view through the array, one element at a time
(``ShuffleLayer``); a matrix product with a constant (MLP-Mixer's token mixing) refuses it. On an
architecture with the Tandem unit that product takes it: a ``TokenTransposeLayer`` lays it out,
each ``N x N`` tile transposed by the permute engine (``TPermute Transpose``, as attention's
``Q x K^T`` does for K), and the product reads the result as any token tensor. The other
readers keep their layouts (this only changes what went to the host).
"""

from __future__ import annotations

import numpy as np

from systolix.ir.hir import Activation, TokenTransposeLayer
from systolix.ir.layout import canonical_chw, canonical_elements
from systolix.lowering.state import Ref


def swapped(r: Ref) -> bool:
    """The view ``r`` (shape ``[1, M, K]`` or ``[M, K]``) is its activation with channels and
    pixels swapped: element ``(m, k)`` is channel ``m`` of pixel ``k``."""
    if r.canonical or len(r.shape) not in (2, 3):
        return False
    chw = canonical_chw(tuple(r.shape))
    if chw is None:
        return False
    C, H, W, _ = chw
    P = H * W
    if C != r.act.P or P != r.act.C:
        return False
    target = np.arange(C * P, dtype=np.int64)
    mapping = np.empty(C * P, dtype=np.int64)
    mapping[canonical_elements(tuple(r.shape)).reshape(-1)] = r.elements.reshape(-1)
    return bool(np.array_equal(mapping, (target % P) * r.act.P + target // P))


def materialise(node, lw, index: int) -> Activation:
    """Input ``index`` of ``node`` (a ``swapped`` view) laid out as its shape says, by the Tandem
    unit; later readers of the tensor read the result."""
    name = node.inputs[index]
    r = lw.refs[name]
    C, H, W, _ = canonical_chw(tuple(r.shape))
    out = lw.new_act(f"{name}:transposed", C, H, W)
    source = np.arange(C * H * W, dtype=np.int64)
    source = ((source % out.P) * r.act.P + source // out.P).reshape(C, H * W)
    producer = lw.g.producers().get(name, node)  # the Transpose or Reshape that made the view
    lw.layers.append(TokenTransposeLayer(f"{producer.name}/transpose", r.act, out, source, ops=[producer.op_type],
                                         nodes=[producer.name]))
    lw.refs[name] = Ref(out, tuple(r.shape), canonical_elements(tuple(r.shape)), True)
    return out
