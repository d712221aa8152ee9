"""A model's best case in fixed point: every computed tensor rounded, every product exact.

An accelerator stores every tensor it computes (and its accumulators) in its data type, so no
program for it can be closer to the float model than that model run with each computed tensor
rounded to the type's grid and saturated at its range, with weights and products kept exact.
:func:`with_rounded_tensors` builds that model in ONNX so onnxruntime runs it: the limit a
compiled model's agreement with the float model is measured against (``scripts/agreement.py``).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from systolix.models.unit_scale import elem_types
from systolix.numerics import DataType, from_fixed, to_fixed

# Ops whose float outputs are constants or copies: rounding them again changes nothing an
# accelerator would compute.
_NOT_COMPUTED = {"Constant", "ConstantOfShape", "Shape", "Identity", "Dropout", "Reshape", "Flatten", "Squeeze",
                 "Unsqueeze"}


def with_rounded_tensors(model: onnx.ModelProto, dtype: DataType = DataType.FP16BP8) -> onnx.ModelProto:
    """A copy of ``model`` in which every float tensor a node computes (the outputs too) is
    rounded (half up, as the driver converts floats) to ``dtype``'s resolution and saturated at
    its range. Not rounded: the inputs (``rounded_feeds`` rounds them as the driver does), and a tensor that only BatchNormalizations read (a compiler folds a batch norm
    into the conv or Gemm before it, and the tensor before it is never stored). Subgraphs of
    If and Loop are left as they are."""
    if not dtype.is_fixed:
        raise ValueError(f"{dtype.name} is not a fixed-point type")
    rounded = onnx.ModelProto()
    rounded.CopyFrom(model)
    graph = rounded.graph
    types = elem_types(model)
    outputs = {o.name for o in graph.output}
    readers: dict[str, set[str]] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, set()).add(node.op_type)
    prefix = "_fixed_point_"
    scale, half, inverse, low, high = (f"{prefix}{n}" for n in ("scale", "half", "inverse", "low", "high"))
    graph.initializer.extend(numpy_helper.from_array(np.array(v, np.float32), name) for name, v in [
        (scale, 2.0 ** dtype.binary_point), (half, 0.5), (inverse, dtype.resolution),
        (low, dtype.min_int * dtype.resolution), (high, dtype.max_value)])
    renamed: dict[str, str] = {}
    nodes = []
    for index, original in enumerate(model.graph.node):
        node = onnx.NodeProto()
        node.CopyFrom(original)
        for k, name in enumerate(node.input):
            node.input[k] = renamed.get(name, name)
        nodes.append(node)
        if node.op_type in _NOT_COMPUTED:
            continue
        for k, name in enumerate(node.output):
            if not name or types.get(name) != onnx.TensorProto.FLOAT:
                continue
            if name not in outputs and readers.get(name) == {"BatchNormalization"}:
                continue
            exact = f"{prefix}{index}_{k}_exact"
            node.output[k] = exact
            # A graph output keeps its name; any other tensor's readers take the rounded copy.
            result = name if name in outputs else f"{prefix}{index}_{k}"
            if result != name:
                renamed[name] = result
            # Floor(x + 1/2) and Max/Min rather than Round and Clip: every opset from 9 has them.
            nodes += [helper.make_node("Mul", [exact, scale], [f"{exact}_scaled"]),
                      helper.make_node("Add", [f"{exact}_scaled", half], [f"{exact}_shifted"]),
                      helper.make_node("Floor", [f"{exact}_shifted"], [f"{exact}_rounded"]),
                      helper.make_node("Mul", [f"{exact}_rounded", inverse], [f"{exact}_grid"]),
                      helper.make_node("Max", [f"{exact}_grid", low], [f"{exact}_floor"]),
                      helper.make_node("Min", [f"{exact}_floor", high], [result])]
    del graph.node[:]
    graph.node.extend(nodes)
    # value_info names tensors by their old names, some now produced unrounded: drop it.
    del graph.value_info[:]
    return rounded


def rounded_feeds(feeds: dict[str, np.ndarray], dtype: DataType = DataType.FP16BP8) -> dict[str, np.ndarray]:
    """``feeds`` as the driver hands them to the accelerator: on ``dtype``'s grid, saturated,
    back in float32 (the inputs ``with_rounded_tensors``' model should get)."""
    return {name: from_fixed(to_fixed(value, dtype), dtype).astype(np.float32) for name, value in feeds.items()}
