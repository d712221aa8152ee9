"""Size figures of an ONNX model: parameters and useful multiply-accumulates.

"Useful MACs" counts what Conv, Gemm and MatMul must multiply-accumulate for batch 1, the figure
Tensil's benchmarks divide by array cycles to get MAC efficiency: a Conv output element costs
``(C_in / groups) * kH * kW`` MACs, a Gemm/MatMul output element costs ``K``. Padding, bias,
pooling and element-wise ops count nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from systolix.models._graph import ModelBuildError


_SETTING_OPS = {"Resize", "Upsample", "Clip", "Pad", "Dropout", "Split", "Reshape", "Squeeze", "Unsqueeze",
                "ConstantOfShape", "Slice", "Gather", "Expand", "Tile"}


@dataclass(frozen=True)
class ModelStats:
    """Figures for one model."""

    parameters: int            # float initializer elements (weights, biases, BN statistics), not op settings
    macs: int                  # useful multiply-accumulates for one inference
    macs_by_op: dict[str, int]
    nodes: int
    opset: int
    inputs: dict[str, tuple[int, ...]]
    outputs: dict[str, tuple[int, ...]]


def _shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except onnx.shape_inference.InferenceError as e:
        raise ModelBuildError(f"{model.graph.name}: shape inference failed: {e}") from e
    shapes = {}
    for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        dims = vi.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            shapes[vi.name] = tuple(int(d.dim_value) for d in dims)
    for t in model.graph.initializer:
        shapes[t.name] = tuple(t.dims)
    # Tensors behind shape arithmetic onnx cannot follow: measure them in one onnxruntime run.
    wanted = [n.output[0] for n in model.graph.node if n.op_type in ("Conv", "Gemm", "MatMul")]
    wanted += [t for n in model.graph.node if n.op_type in ("Conv", "Gemm", "MatMul") for t in n.input[:2]]
    missing = list(dict.fromkeys(t for t in wanted if t and t not in shapes))
    if missing:
        from systolix.models.unit_scale import run_with_tensors
        from systolix.models.inputs import example_inputs

        for name, value in zip(missing, run_with_tensors(model, missing, example_inputs(model)), strict=True):
            shapes[name] = tuple(value.shape)
    return shapes


def model_stats(model: onnx.ModelProto) -> ModelStats:
    """Parameter count and useful MACs of ``model`` (shapes from onnx shape inference)."""
    shapes = _shapes(model)

    def shape(name: str, node: onnx.NodeProto) -> tuple[int, ...]:
        if name not in shapes:
            raise ModelBuildError(f"{model.graph.name}: node {node.name!r} ({node.op_type}): shape of {name!r} unknown")
        return shapes[name]

    macs_by_op: dict[str, int] = {}
    for node in model.graph.node:
        if node.op_type == "Conv":
            out = shape(node.output[0], node)
            w = shape(node.input[1], node)
            macs = int(np.prod(out)) * int(np.prod(w[1:]))
        elif node.op_type == "Gemm":
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            a = shape(node.input[0], node)
            k = a[0] if attrs.get("transA", 0) else a[1]
            macs = int(np.prod(shape(node.output[0], node))) * int(k)
        elif node.op_type == "MatMul":
            a = shape(node.input[0], node)
            macs = int(np.prod(shape(node.output[0], node))) * int(a[-1])
        else:
            continue
        macs_by_op[node.op_type] = macs_by_op.get(node.op_type, 0) + macs
    # Operands that configure an op (Resize scales, Clip bounds, Pad values...) are not parameters.
    settings = {t for n in model.graph.node if n.op_type in _SETTING_OPS for t in n.input[1:]}
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer
                 if t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE)
                 and t.name not in settings)
    for node in model.graph.node:  # weights written as Constant nodes count too
        if node.op_type == "Constant" and node.output[0] not in settings:
            for a in node.attribute:
                if a.name == "value" and a.t.data_type == onnx.TensorProto.FLOAT:
                    params += int(np.prod(a.t.dims))
    inits = {t.name for t in model.graph.initializer}
    return ModelStats(
        parameters=params, macs=sum(macs_by_op.values()), macs_by_op=macs_by_op, nodes=len(model.graph.node),
        opset=next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0),
        inputs={i.name: shapes.get(i.name, ()) for i in model.graph.input if i.name not in inits},
        outputs={o.name: shapes.get(o.name, ()) for o in model.graph.output})
