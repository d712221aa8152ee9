"""ONNX surgery for the accuracy report: intermediate tensors as graph outputs, one layer's subgraph."""

from __future__ import annotations

import onnx
from onnx import helper


def float_output(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, list(shape))


def with_outputs(model: onnx.ModelProto, names: list[str], shapes: dict) -> onnx.ModelProto:
    """A copy of ``model`` whose graph also outputs the tensors ``names`` (after its own outputs;
    a name that is already an output is not repeated)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    present = {o.name for o in copy.graph.output}
    for name in names:
        if name not in present:
            copy.graph.output.append(float_output(name, shapes[name][0]))
            present.add(name)
    return copy


def layer_subgraph(model: onnx.ModelProto, reads: list[str], output: str, shapes: dict) -> onnx.ModelProto | None:
    """The nodes that compute ``output`` from the tensors ``reads`` (and constants), as a model
    whose inputs are ``reads`` (batch 1); ``None`` when ``output`` also depends on another
    graph input (the layer does not correspond to a closed ONNX subgraph)."""
    graph = model.graph
    producer = {o: k for k, node in enumerate(graph.node) for o in node.output}
    initializers = {t.name: t for t in graph.initializer}
    graph_inputs = {i.name for i in graph.input}
    wanted: set[int] = set()
    used_constants: set[str] = set()
    stack, seen = [output], set()
    while stack:
        name = stack.pop()
        if name in seen or name in reads or name == "":
            continue
        seen.add(name)
        if name in initializers:
            used_constants.add(name)
            continue
        if name not in producer:
            if name in graph_inputs:
                return None
            continue
        k = producer[name]
        if k not in wanted:
            wanted.add(k)
            stack.extend(graph.node[k].input)
    if not wanted:
        return None
    nodes = [graph.node[k] for k in sorted(wanted)]
    sub = helper.make_graph(
        nodes, f"{graph.name or 'model'}_{output}",
        [float_output(name, (1, *shapes[name][0][1:])) for name in reads],
        [float_output(output, (1, *shapes[output][0][1:]))],
        [initializers[name] for name in sorted(used_constants)])
    result = helper.make_model(sub, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    return result
