"""Fuse element-wise layers into the layer computing their input: Tensil's layer is a matrix
multiplication and the accumulator operations after it, ending with one save.

A post-op layer (one input passed through, then post-ops: a ReLU, a clip, an add of another
tensor...) joins the open conv layer whose output it reads; an operation with another tensor
that gives the same result with the operands swapped (``a + b``, ``a * b``) may instead join
the layer computing the other operand. Refuses when the input is read elsewhere, is a model
output or a slice of a concatenation, when the layer before is closed, or when the other
operand is not complete before the layer it would join runs.
"""

from __future__ import annotations

import dataclasses

from systolix.hir_passes.uses import Uses, written_before
from systolix.ir.hir import ConvLayer, HirProgram


def fuse_post_ops(hir: HirProgram, ctx=None) -> HirProgram:
    uses = Uses(hir)
    layers: list = []
    for layer in hir.layers:
        if isinstance(layer, ConvLayer) and layer.post_ops and layer.is_post_op_layer():
            x = layer.inputs[0].act
            (post,) = layer.post_ops
            candidates = [(x, post)]
            other = post.tensor
            if other is not None and post.swappable:
                candidates.append((other, dataclasses.replace(post, operand=x)))
            for mine, op in candidates:
                target = uses.joinable(mine)
                if target is None or (op.tensor is not None and (op.tensor is mine or not written_before(layers, op.tensor, target))):
                    continue
                fused = dataclasses.replace(target, post_ops=target.post_ops + [op], output=layer.output,
                                            ops=target.ops + layer.ops, nodes=target.nodes + layer.nodes)
                layers[next(k for k, l in enumerate(layers) if l is target)] = fused
                uses.produced(fused)
                break
            else:
                layers.append(layer)
                uses.produced(layer)
            continue
        layers.append(layer)
        uses.produced(layer)
    return dataclasses.replace(hir, layers=layers)
