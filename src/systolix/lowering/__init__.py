"""Lowering: the graph IR of an accelerator segment to HIR, one handler per op.

Each ONNX node becomes layers of its own: a Conv, Gemm or MatMul a conv layer; an element-wise
op (Relu, Clip, an add of two tensors...) a post-op layer; a per-channel affine op (a batch
norm, an op with a constant) a 1x1 per-channel layer; a pool, resize, pad or relayout its layer
kind; Reshape, Transpose and friends relabel or view. Joining the element-wise layers to the
layer before them (``fuse_post_ops``), folding the affine ones into its weights
(``fold_batch_norms``) and dropping what nothing reads (``eliminate_dead_layers``) are passes of
their own. Which nodes the accelerator can run at all is the handlers' ``check``
(``unsupported_reason``), which host placement asks before anything is lowered.
"""

from __future__ import annotations

from systolix.ir import Graph, Node
from systolix.ir.hir import HirProgram
from systolix.lowering import ops as _ops  # noqa: F401 - registers every handler
from systolix.lowering.registry import HANDLERS, NO_IMPLEMENTATION, supported_ops, unsupported_reason
from systolix.lowering.state import Lowering, LoweringError, Ref
from systolix.numerics import DataType


def lower_node(node: Node, lw: Lowering) -> None:
    """Lower one node its handler accepted."""
    if node.outputs and node.outputs[0] in lw.claimed:
        return  # lowered with the node before it
    HANDLERS[node.op_type].lower(node, lw)


def lower_graph(graph: Graph, array_size: int, data_type: DataType = DataType.FP16BP8, probes: dict | None = None,
                tandem=None) -> HirProgram:
    """Every node of ``graph`` as layers (each its own; no fusion yet); a node the support table
    refuses is a ``LoweringError`` (host placement should have moved it)."""
    lw = Lowering(graph, array_size, data_type, probes, tandem)
    lw.begin()
    for node in graph.nodes:
        reason = unsupported_reason(node, lw)
        if reason:
            raise LoweringError(f"{node.describe()} cannot run on the accelerator: {reason}")
        lower_node(node, lw)
    return lw.finish()


def lower(graph: Graph, ctx) -> HirProgram:
    """The pass: ``lower_graph`` for the context's architecture."""
    return lower_graph(graph, ctx.arch.array_size, ctx.arch.data_type, ctx.probes, ctx.arch.tandem)


__all__ = ["HANDLERS", "NO_IMPLEMENTATION", "Lowering", "LoweringError", "Ref", "lower", "lower_graph", "lower_node",
           "supported_ops", "unsupported_reason"]
