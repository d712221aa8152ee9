"""Split one layer whose constants alone exceed DRAM1 by output channels.

A Gemm, MatMul (constant right operand) or Conv (one group) node becomes several nodes of the
same kind, each with the weights and bias of a slice of whole output channel groups, and a
Concat on the channel axis gathers their results into the original output tensor. Output
channel ``c`` of a slice is computed from exactly the weights, bias and inputs it had, so every
value is the one the whole layer computes; ``split_constants`` then cuts the programs between
the slices. A BatchNormalization reading the layer's output alone is sliced with it, so that it
still folds into each slice's weights as it folds into the whole layer's.

The graph and the ONNX model are rewritten alike (``graph.nodes[i]`` stays
``model.graph.node[i]``: host segments and calibration read the ONNX model by node index).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from systolix.ir import Graph, Node, Tensor

SPLITTABLE = ("Gemm", "MatMul", "Conv")


def output_channels(graph: Graph, node: Node) -> int:
    return int(graph.tensor(node.outputs[0]).shape[_channel_axis(graph, node)])


def _channel_axis(graph: Graph, node: Node) -> int:
    return 1 if node.op_type == "Conv" else len(graph.tensor(node.outputs[0]).shape) - 1


def why_not(graph: Graph, node: Node) -> str | None:
    """Why ``node`` cannot be split by output channels, or None if it can."""
    if node.op_type not in SPLITTABLE:
        return f"a {node.op_type} node is not split by output channels (Gemm, MatMul and Conv are)"
    if node.op_type == "Conv":
        if int(node.attr("group", 1)) != 1:
            return "a grouped convolution is not split by output channels"
        if graph.const(node.inputs[1]) is None:
            return "its weights are computed"
    elif node.op_type == "Gemm":
        if graph.const(node.inputs[1]) is None or int(node.attr("transA", 0)):
            return "its B is computed or transposed (transA)"
    elif graph.const(node.inputs[1]) is None or np.ndim(graph.const(node.inputs[1])) != 2:
        return "its right operand is not a constant matrix"
    return None


def _bn_follower(graph: Graph, index: int) -> int | None:
    """The index of an inference-mode BatchNormalization that alone reads node ``index``'s
    output (it is sliced with the layer), or None."""
    out = graph.nodes[index].outputs[0]
    if out in graph.outputs:
        return None
    readers = [i for i, n in enumerate(graph.nodes) if out in n.inputs]
    if len(readers) != 1:
        return None
    m = readers[0]
    bn = graph.nodes[m]
    if (bn.op_type != "BatchNormalization" or m in graph.host or bn.inputs[0] != out
            or len([o for o in bn.outputs if o]) != 1 or any(graph.const(t) is None for t in bn.inputs[1:5])):
        return None
    return m


def _slices(graph: Graph, node: Node, c0: int, c1: int) -> list[np.ndarray | None]:
    """The node's constant inputs (after the first) restricted to output channels ``c0:c1``."""
    values = [graph.const(t) if t else None for t in node.inputs[1:]]
    if node.op_type == "Conv":
        return [values[0][c0:c1]] + ([values[1][c0:c1]] if len(values) > 1 and values[1] is not None else values[1:])
    if node.op_type == "MatMul":
        return [values[0][:, c0:c1]]
    b = values[0][c0:c1] if int(node.attr("transB", 0)) else values[0][:, c0:c1]
    out = [b]
    if len(values) > 1 and values[1] is not None:
        c = np.asarray(values[1])
        # C broadcasts to the output [M, O]: sliced along its last axis when that axis is O.
        out.append(c[..., c0:c1] if c.ndim and c.shape[-1] != 1 else c)
    return out


def split_by_output_channels(graph: Graph, model: onnx.ModelProto, index: int, bounds: list[tuple[int, int]]
                             ) -> tuple[Graph, onnx.ModelProto, dict[int, int]]:
    """``graph`` and ``model`` with node ``index`` split into one node per ``(c0, c1)`` of
    ``bounds`` and a Concat; and where each old node index went (a removed batch norm: to the
    Concat)."""
    node = graph.nodes[index]
    axis = _channel_axis(graph, node)
    out_shape = graph.tensor(node.outputs[0]).shape
    bn_at = _bn_follower(graph, index)
    tensors = dict(graph.tensors)
    inits: list[onnx.TensorProto] = []
    new_nodes: list[Node] = []

    def constant(name: str, value: np.ndarray) -> str:
        if name in tensors:  # (one tensor in two roles: a batch norm's mean and bias, say)
            return name
        value = np.ascontiguousarray(value)
        tensors[name] = Tensor(name, tuple(value.shape), str(value.dtype), value)
        inits.append(numpy_helper.from_array(value, name))
        return name

    def activation(name: str, c0: int, c1: int) -> str:
        shape = list(out_shape)
        shape[axis] = c1 - c0
        tensors[name] = Tensor(name, tuple(shape), graph.tensor(node.outputs[0]).dtype)
        return name

    gathered = []
    for c0, c1 in bounds:
        tag = f"channels_{c0}_{c1}"
        values = _slices(graph, node, c0, c1)
        inputs = [node.inputs[0]] + [constant(f"{t}/{tag}", v) if v is not None else t
                                     for t, v in zip(node.inputs[1:], values)]
        y = activation(f"{node.outputs[0]}/{tag}", c0, c1)
        new_nodes.append(Node(f"{node.name}/{tag}", node.op_type, inputs, [y], dict(node.attrs)))
        if bn_at is not None:
            bn = graph.nodes[bn_at]
            params = [constant(f"{t}/{tag}", np.asarray(graph.const(t))[c0:c1]) for t in bn.inputs[1:5]]
            z = activation(f"{bn.outputs[0]}/{tag}", c0, c1)
            new_nodes.append(Node(f"{bn.name}/{tag}", bn.op_type, [y] + params, [z], dict(bn.attrs)))
            y = z
        gathered.append(y)
    result = graph.nodes[bn_at].outputs[0] if bn_at is not None else node.outputs[0]
    concat = Node(f"{node.name}/concat", "Concat", gathered, [result], {"axis": axis})
    new_nodes.append(concat)

    order: list[Node] = []
    where: dict[int, int] = {}
    for i, n in enumerate(graph.nodes):
        where[i] = len(order)
        if i == index:
            order.extend(new_nodes)
        elif i != bn_at:
            order.append(n)
    if bn_at is not None:
        where[bn_at] = order.index(concat)
    host = {where[i]: reason for i, reason in graph.host.items()}
    new_graph = Graph(graph.name, tensors, order, list(graph.inputs), list(graph.outputs), graph.opset, host)

    new_model = onnx.ModelProto()
    new_model.CopyFrom(model)
    del new_model.graph.node[:]
    proto_of = {id(n): p for n, p in zip(graph.nodes, model.graph.node)}
    for n in order:
        if id(n) in proto_of:
            new_model.graph.node.append(proto_of[id(n)])
        else:
            new_model.graph.node.append(onnx.helper.make_node(n.op_type, n.inputs, n.outputs, name=n.name, **n.attrs))
    new_model.graph.initializer.extend(inits)
    return new_graph, new_model, where


def channel_bounds(channels: int, N: int, vectors: int, depth: int) -> list[tuple[int, int]] | None:
    """Slices of whole groups of ``N`` output channels, each holding at most ``depth`` of a
    layer's ``vectors`` of constants (spread evenly over its groups), as few as can be; None
    when one group alone needs more."""
    groups = -(-channels // N)
    per_group = -(-vectors // groups)
    fit = depth // per_group
    if fit < 1:
        return None
    count = -(-groups // fit)
    per_part = -(-groups // count)  # as even as whole groups allow
    return [(g * N, min((g + per_part) * N, channels)) for g in range(0, groups, per_part)]
