"""Identity, Dropout, Reshape, Flatten, Squeeze, Unsqueeze and Transpose: no layers. The output
is the input's elements rearranged; where memory already holds them in the output's own layout
it is a relabelling (the same activation, or a child with its own ``H x W``), otherwise a view
that a consumer materialises if it needs the layout (``Lowering.materialise``)."""

from __future__ import annotations

import numpy as np

from systolix.ir.hir import Activation
from systolix.ir.layout import canonical_chw, canonical_elements
from systolix.lowering.registry import OpHandler, handles
from systolix.lowering.state import Ref


def view(node, lw, elements: np.ndarray) -> None:
    """The node's output is the input's elements rearranged: relabel if memory agrees."""
    src = lw.ref(node, 0)
    out_name = node.outputs[0]
    shape = tuple(lw.shape(out_name))
    elements = elements.reshape(shape)
    chw = canonical_chw(shape)
    if chw is not None:
        C, H, W, _ = chw
        if C == src.act.C and H * W == src.act.P and np.array_equal(elements, canonical_elements(shape)):
            if (H, W) == (src.act.H, src.act.W):
                act = src.act
            else:
                act = Activation(out_name, C, H, W, lw.N, parent=(src.act, 0))
            lw.refs[out_name] = Ref(act, shape, elements, True)
            return
    lw.refs[out_name] = Ref(src.act, shape, elements, False)


@handles("Identity")
class Identity(OpHandler):
    def check(self, node, lw):
        return lw.input_reason(node, 0)

    def lower(self, node, lw):
        lw.refs[node.outputs[0]] = lw.ref(node, 0)


@handles("Dropout")
class Dropout(OpHandler):
    def check(self, node, lw):
        if len(node.outputs) > 1 and node.outputs[1] and lw.consumers.get(node.outputs[1]):
            return "its mask output is read by another node; the accelerator runs Dropout only as the identity of inference"
        return lw.input_reason(node, 0)

    def lower(self, node, lw):
        lw.refs[node.outputs[0]] = lw.ref(node, 0)


@handles("Reshape", "Flatten", "Squeeze", "Unsqueeze")
class Reshape(OpHandler):
    def check(self, node, lw):
        return lw.input_reason(node, 0)

    def lower(self, node, lw):
        view(node, lw, lw.ref(node, 0).elements)


@handles("Transpose")
class Transpose(OpHandler):
    def check(self, node, lw):
        return lw.input_reason(node, 0)

    def lower(self, node, lw):
        r = lw.ref(node, 0)
        perm = node.attr("perm")
        perm = list(reversed(range(len(r.shape)))) if perm is None else [int(p) for p in perm]
        view(node, lw, np.transpose(r.elements, perm))
