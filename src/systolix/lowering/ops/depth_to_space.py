"""DepthToSpace and SpaceToDepth: views, like Reshape and Transpose (they are a reshape, a
transpose and a reshape). Channels move between vectors, so a consumer that needs the result
laid out materialises it with a shuffle through the array."""

from __future__ import annotations

from systolix.lowering.ops.views import view
from systolix.lowering.registry import OpHandler, handles


def depth_to_space(e, b: int, mode: str):
    n, c, h, w = e.shape
    if mode == "CRD":
        t = e.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    else:  # DCR, the only mode before opset 11
        t = e.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    return t.reshape(n, c // (b * b), h * b, w * b)


def space_to_depth(e, b: int):
    n, c, h, w = e.shape
    return e.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4).reshape(n, c * b * b, h // b, w // b)


@handles("DepthToSpace", "SpaceToDepth")
class DepthToSpace(OpHandler):
    def check(self, node, lw):
        reason = lw.input_reason(node, 0)
        if reason is None and len(lw.ref(node, 0).shape) != 4:
            return "the input is not NCHW"
        return reason

    def lower(self, node, lw):
        e = lw.ref(node, 0).elements
        b = int(node.attr("blocksize"))
        if node.op_type == "DepthToSpace":
            view(node, lw, depth_to_space(e, b, node.attr("mode", "DCR")))
        else:
            view(node, lw, space_to_depth(e, b))
