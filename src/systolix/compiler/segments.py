"""Partition the placed graph into segments, and cut accelerator segments whose constants do
not fit.

Consecutive nodes with the same placement make a segment, the way Xilinx's compiler partitions
a graph into DPU and CPU subgraphs; a model with no host node is one accelerator program. A
program whose constants exceed DRAM1 (or local memory, local-consts) is cut between layers into
programs run one after another (a layer whose constants alone exceed it is first split by output
channels, ``systolix.compiler.split_layer``), each keeping its own constants in its own DRAM buffer (the
driver points the DRAM1 offset register at it); the tensors crossing a cut go through DRAM0 as
the model's own inputs and outputs do.
"""

from __future__ import annotations

import onnx

from systolix.compiler import split_layer
from systolix.compiler.calibration import tensor_values
from systolix.compiler.program import Program, Segment
from systolix.ir import Graph
from systolix.planning.errors import ConstantsDoNotFit, SchedulingError


def split(graph: Graph, host, cuts=frozenset()) -> list[Segment]:
    """Consecutive nodes with the same placement, with each segment's boundary tensors; a node
    in ``cuts`` starts a new segment (an accelerator program whose constants fit)."""
    runs: list[Segment] = []
    for i, _ in enumerate(graph.nodes):
        kind = "host" if i in host else "accelerator"
        if runs and runs[-1].kind == kind and i not in cuts:
            runs[-1].nodes.append(i)
        else:
            runs.append(Segment(kind, [i], [], []))
    later_use: dict[str, int] = {}
    for k, seg in enumerate(runs):
        for i in seg.nodes:
            for t in graph.nodes[i].inputs:
                if t:
                    later_use[t] = max(later_use.get(t, -1), k)
    outputs = set(graph.outputs)
    for k, seg in enumerate(runs):
        produced: list[str] = []
        for i in seg.nodes:
            n = graph.nodes[i]
            for t in n.inputs:
                if t and t not in produced and t not in seg.inputs and graph.const(t) is None:
                    seg.inputs.append(t)
            produced.extend(o for o in n.outputs if o)
        seg.outputs = [t for t in produced if t in outputs or later_use.get(t, -1) > k]
    return runs


def host_onnx(model: onnx.ModelProto, graph: Graph, seg: Segment) -> bytes:
    """A standalone ONNX model of a host segment (batch 1), runnable by onnxruntime."""
    import numpy as np

    nodes = [model.graph.node[i] for i in seg.nodes]
    used = {t for n in nodes for t in n.input if t}
    inits = [t for t in model.graph.initializer if t.name in used]
    init_names = {t.name for t in inits}

    def info(name: str) -> onnx.ValueInfoProto:
        t = graph.tensor(name)
        elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype))
        return onnx.helper.make_tensor_value_info(name, elem, list(t.shape))

    inputs = [info(t) for t in seg.inputs if t not in init_names]
    outputs = [info(t) for t in seg.outputs]
    g = onnx.helper.make_graph(nodes, seg.name, inputs, outputs, inits)
    m = onnx.helper.make_model(g, opset_imports=list(model.opset_import))
    m.ir_version = model.ir_version
    return m.SerializeToString()


def partition(graph: Graph, ctx, cuts=frozenset(), previous: Program | None = None) -> Program:
    """The pass (and, with ``cuts``, the re-partition ``split_constants`` asks for): segments of
    the placed graph. A segment of ``previous`` with the same name, nodes and outputs is kept
    with its IR; calibration samples become each new accelerator segment's own inputs, computed
    by onnxruntime where a segment starts inside the model."""
    segments = split(graph, graph.host, cuts)
    multi = len(segments) > 1 or segments[0].kind == "host"
    kept = {s.key: s for s in previous.segments} if previous is not None else {}
    known_samples = {tuple(s.inputs): s.samples for s in kept.values() if s.samples is not None}
    result = []
    for k, seg in enumerate(segments):
        seg.name = f"{ctx.name}.seg{k}" if multi else ctx.name
        if seg.kind == "host":
            seg.onnx_bytes = host_onnx(ctx.onnx_model, graph, seg)
            result.append(seg)
            continue
        if seg.key in kept:
            result.append(kept[seg.key])
            continue
        if ctx.samples:
            inputs = tuple(seg.inputs)
            if inputs not in known_samples:
                inner = [t for t in seg.inputs if t not in ctx.samples[0]]
                known_samples[inputs] = tensor_values(ctx.onnx_model, graph, ctx.samples, seg.inputs) if inner else ctx.samples
            seg.samples = known_samples[inputs]
        seg.ir = Graph(seg.name, graph.tensors, [graph.nodes[i] for i in seg.nodes], list(seg.inputs), list(seg.outputs),
                       graph.opset)
        result.append(seg)
    return Program(ctx.name, graph, result, frozenset(cuts))


def partition_graph(graph: Graph, ctx) -> Program:
    """The pass: ``partition`` with no cuts."""
    return partition(graph, ctx)


def overflow(plan, ctx) -> ConstantsDoNotFit | None:
    """The error for a plan whose constants exceed their memory, with each layer's share; None if
    they fit."""
    consts_local = ctx.strategy in ("local-consts", "local-vars-and-consts")
    where, depth = ("local memory", ctx.arch.local_depth) if consts_local else ("DRAM1", ctx.arch.dram1_depth)
    size = int(plan.constants.vectors.shape[0])
    if size <= depth:
        return None
    prefix = f"strategy {ctx.strategy}: " if consts_local else ""
    layers = [(layer.name, list(layer.nodes), c.vectors) for layer, c in zip(plan.hir.layers, plan.constants.layers)]
    name, _, most = max(layers, key=lambda entry: entry[2])
    message = (f"{prefix}the constants need {size} vectors of {where} but the architecture has {depth} "
               f"(the largest share: layer {name!r}, {most})")
    return ConstantsDoNotFit(message, size, depth, where, layers, prefix)


def constant_cuts(graph: Graph, seg: Segment, error: ConstantsDoNotFit) -> list[int]:
    """Nodes (graph indices) at which to start new programs so that each one's constants fit:
    greedily, in node order (a layer counted at its first node: a relayout can come after the
    layer that reads its input directly), from each layer's share in ``error`` (every layer's
    share fits: ``split_large_layer`` saw to it)."""
    position = {n.name: i for i, n in enumerate(graph.nodes)}
    first = seg.nodes[0]
    at_node: dict[int, int] = {}
    for layer, nodes, vectors in error.layers:
        at = min((position[n] for n in nodes if n in position), default=first)
        at_node[at] = at_node.get(at, 0) + vectors
    cuts, used = [], 0
    for at, vectors in sorted(at_node.items()):
        if used + vectors > error.depth and at > first:
            cuts.append(at)
            used = 0
        used += vectors
    return cuts


def _splittable_node(graph: Graph, nodes: list[str]) -> list[int]:
    position = {n.name: i for i, n in enumerate(graph.nodes)}
    return [position[n] for n in nodes if n in position and graph.nodes[position[n]].op_type in split_layer.SPLITTABLE]


def halve_a_layer(program: Program, ctx, error: ConstantsDoNotFit) -> Program | None:
    """The program with the largest layer of ``error`` that splits by output channels split in
    two, re-partitioned; None if none does."""
    graph, N = program.graph, ctx.arch.array_size
    for layer, nodes, vectors in sorted(error.layers, key=lambda entry: -entry[2]):
        at = _splittable_node(graph, nodes)
        if at and split_layer.why_not(graph, graph.nodes[at[0]]) is None and split_layer.output_channels(graph, graph.nodes[at[0]]) > N:
            return split_large_layer(program, ctx, error, layer, nodes, vectors, depth=-(-vectors // 2))
    return None


def split_large_layer(program: Program, ctx, error: ConstantsDoNotFit, layer: str, nodes: list[str], vectors: int,
                      depth: int | None = None) -> Program:
    """The program with the layer whose constants alone exceed their memory split by output
    channels into slices of at most ``depth`` vectors (the memory's, by default;
    ``systolix.compiler.split_layer``), re-partitioned; an error naming the layer when it cannot
    be split."""
    graph = program.graph
    at = _splittable_node(graph, nodes)
    head = (f"{error.context}layer {layer!r} (node {', '.join(nodes) or '?'}): its constants need {vectors} vectors "
            f"of {error.where} but the architecture has {error.depth}")
    if not at:
        raise SchedulingError(f"{head}; only Gemm, MatMul and Conv layers are split by output channels") from None
    index = at[0]
    reason = split_layer.why_not(graph, graph.nodes[index])
    if reason:
        raise SchedulingError(f"{head}; it cannot be split by output channels: {reason}") from None
    N = ctx.arch.array_size
    bounds = split_layer.channel_bounds(split_layer.output_channels(graph, graph.nodes[index]), N, vectors, depth or error.depth)
    if bounds is None or len(bounds) < 2:
        raise SchedulingError(f"{head}; even one group of {N} output channels needs more (a layer is split only by output channels)") from None
    ctx.split_layers[graph.nodes[index].name] = len(bounds)
    graph, ctx.onnx_model, where = split_layer.split_by_output_channels(graph, ctx.onnx_model, index, bounds)
    return ctx.catch_up(partition(graph, ctx, {where[c] for c in program.cuts}, program))


def split_constants(program: Program, ctx) -> Program:
    """The pass: while an accelerator program's constants do not fit, split a layer whose
    constants alone exceed the memory by output channels, or else cut the program between layers
    (``ctx.split``; else the overflow is an error), and bring the new segments as far as the
    passes before this one (``ctx.catch_up``)."""
    while True:
        for seg in program.segments:
            if seg.kind != "accelerator":
                continue
            error = overflow(seg.ir, ctx)
            if error is None:
                continue
            if not ctx.split:
                raise SchedulingError(f"{error}; splitting the model into programs is off (--no-split)") from None
            large = [entry for entry in error.layers if entry[2] > error.depth]
            if large and error.where != "DRAM1":
                # Constants in local memory leave the rest of it to the layer's activations: a
                # slice that fills it would not run either.
                layer, nodes, vectors = large[0]
                raise SchedulingError(f"{error.context}layer {layer!r} (node {', '.join(nodes) or '?'}): its constants need "
                                      f"{vectors} vectors of {error.where} but the architecture has {error.depth}; a layer "
                                      "is split by output channels only for DRAM1") from None
            if large:
                program = split_large_layer(program, ctx, error, *large[0])
                break
            more = constant_cuts(program.graph, seg, error)
            if not more or program.cuts.issuperset(more):
                # Layers that cannot be cut apart (a layer and the relayout its input needs):
                # halve the largest one that splits, else the overflow is the error.
                halved = halve_a_layer(program, ctx, error) if error.where == "DRAM1" else None
                if halved is None:
                    raise error
                program = halved
                break
            program = ctx.catch_up(partition(program.graph, ctx, program.cuts | set(more), program))
            break
        else:
            return program
