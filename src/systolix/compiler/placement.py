"""Host placement: which nodes the accelerator runs, and why not the others.

Nodes are taken in graph order, each asked of the support table (``systolix.lowering``: every
op's handler checks the node against the lowering's state, which the accepted nodes before it
build up). A refused node goes to the host with the handler's reason and the accelerator nodes
after it start a new segment, whose inputs come back from the host. When a segment ends, every
tensor it hands on must be laid out in DRAM0: a view that cannot be (a rank-5 reshape feeding a
host node) sends the node that made it to the host too, and the segment is walked again.
"""

from __future__ import annotations

import dataclasses

from systolix.compiler.errors import UnsupportedOpError
from systolix.ir import Graph, Node
from systolix.lowering import Lowering, lower_node, unsupported_reason


def _segment_graph(graph: Graph, start: int, end: int, name: str = "") -> Graph:
    """Nodes ``start..end`` as a graph of their own: inputs the tensors they use and do not make
    (constants aside), outputs what they make that the model outputs or later nodes use."""
    nodes = graph.nodes[start:end]
    produced: list[str] = []
    inputs: list[str] = []
    for n in nodes:
        for t in n.inputs:
            if t and t not in produced and t not in inputs and graph.const(t) is None:
                inputs.append(t)
        produced.extend(o for o in n.outputs if o)
    later = {t for n in graph.nodes[end:] for t in n.inputs if t}
    outputs = [t for t in produced if t in graph.outputs or t in later]
    return Graph(name or graph.name, graph.tensors, nodes, inputs, outputs, graph.opset)


def _refuse(graph: Graph, host: dict[int, str], index: int, reason: str, ctx) -> None:
    node: Node = graph.nodes[index]
    if not ctx.host:
        raise UnsupportedOpError(f"node {node.name!r} (op {node.op_type}) cannot run on the accelerator: {reason}; "
                                 "host fallback is off (--no-host)")
    host[index] = reason


def place_on_host(graph: Graph, ctx) -> Graph:
    """The pass: ``graph.host``, every node the accelerator cannot run with the reason."""
    n = len(graph.nodes)
    host: dict[int, str] = {}
    producer = {o: i for i, node in enumerate(graph.nodes) for o in node.outputs if o}
    start = 0
    while start < n:
        end = next((i for i in range(start, n) if i in host), n)
        lw = Lowering(_segment_graph(graph, start, end), ctx.arch.array_size, ctx.arch.data_type, ctx.probes,
                      ctx.arch.tandem)
        lw.begin()
        stop = end
        for i in range(start, end):
            reason = unsupported_reason(graph.nodes[i], lw)
            if reason:
                _refuse(graph, host, i, reason, ctx)
                stop = i
                break
            lower_node(graph.nodes[i], lw)
        # Nodes start..stop are one segment: what it hands on must have a layout in DRAM0.
        handed_on = _segment_graph(graph, start, stop).outputs
        bad = next(((t, lw.output_reason(t)) for t in handed_on if lw.output_reason(t)), None)
        if bad is not None:
            _refuse(graph, host, producer[bad[0]], bad[1], ctx)
            continue  # walk the segment again, up to the node just refused
        start = stop + 1
    return dataclasses.replace(graph, host=dict(sorted(host.items())))
