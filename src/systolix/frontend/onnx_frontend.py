"""Load an ONNX model, fix its batch to 1, infer shapes, fold constant subgraphs, build the IR.

Constant folding uses onnx's own reference evaluator on every node whose inputs are all known
(initializers, ``Constant`` nodes, earlier folded results), plus ``Shape``/``Size`` of tensors
whose shape inference gave a static shape. Nothing here evaluates an op by hand.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from systolix.errors import SystolixError
from systolix.ir import Graph, Node, Tensor

# Opsets 7 and 8 are what older exporters (Caffe2, early PyTorch and TensorFlow converters) wrote.
MIN_OPSET = 7
MAX_OPSET = 21
# Ops whose value changes from run to run: never folded.
NONDETERMINISTIC = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}


class FrontendError(SystolixError):
    """The ONNX file cannot be read or has something the compiler cannot work with."""


def load_onnx(model_or_path: Any) -> tuple[onnx.ModelProto, str]:
    """An ``onnx.ModelProto`` and a name for messages, from a path, bytes or a ModelProto."""
    if isinstance(model_or_path, onnx.ModelProto):
        return model_or_path, model_or_path.graph.name or "model"
    if isinstance(model_or_path, (bytes, bytearray)):
        source, data = "model", bytes(model_or_path)
    else:
        from systolix.artifacts.files import read_bytes

        path = Path(model_or_path)
        source = str(path)
        data = read_bytes(path, "ONNX file", FrontendError)
    if not data:
        raise FrontendError(f"{source}: empty file, not an ONNX model")
    try:
        model = onnx.load_from_string(data)
    except Exception as e:  # protobuf raises DecodeError and friends for garbage and truncation
        first = str(e).strip().splitlines()[0][:100] if str(e).strip() else type(e).__name__
        raise FrontendError(f"{source}: not a valid ONNX file (truncated or not an ONNX model: {first})") from None
    if model.ir_version <= 0 or not model.opset_import or len(model.graph.output) == 0:
        raise FrontendError(f"{source}: not a valid ONNX model (no IR version, opset or graph outputs)")
    return model, source


def check_constants(model: onnx.ModelProto, source: str) -> None:
    """Every constant a model brings is readable and finite: no external data files, no NaN or
    infinite weights (the accelerator's fixed point has neither, and a NaN weight would make
    every output it touches meaningless). ``FrontendError`` naming the initializer or node."""
    from systolix.onnxrt import refuse_external_data

    refuse_external_data(model, source, FrontendError)
    named = [(f"initializer {t.name!r}", t) for t in model.graph.initializer]
    for i, node in enumerate(model.graph.node):
        for a in node.attribute:
            where = f"node {node.name or f'{node.op_type}_{i}'!r} ({node.op_type}) attribute {a.name!r}"
            if a.type == onnx.AttributeProto.TENSOR:
                named.append((where, a.t))
            elif node.op_type == "Constant" and a.type in (onnx.AttributeProto.FLOAT, onnx.AttributeProto.FLOATS):
                values = np.asarray([a.f] if a.type == onnx.AttributeProto.FLOAT else list(a.floats), dtype=np.float32)
                if not np.all(np.isfinite(values)):
                    raise FrontendError(f"{source}: {where} holds NaN or infinite values; weights must be finite numbers")
    for what, tensor in named:
        try:
            value = numpy_helper.to_array(tensor)
        except Exception as e:  # data shorter than its dims, an unknown type...
            first = str(e).strip().splitlines()[0][:100] if str(e).strip() else type(e).__name__
            raise FrontendError(f"{source}: {what}: cannot read its values ({first})") from None
        if value.dtype.kind in "fc" and value.size and not np.all(np.isfinite(value)):
            bad = ~np.isfinite(value)
            nan = int(np.count_nonzero(np.isnan(value)))
            kinds = " and ".join(t for t in (f"{nan:,} NaN" if nan else "",
                                             f"{int(np.count_nonzero(bad)) - nan:,} infinite" if int(np.count_nonzero(bad)) > nan else "") if t)
            first = [int(i) for i in np.unravel_index(int(np.flatnonzero(bad.reshape(-1))[0]), value.shape)] if value.ndim else []
            raise FrontendError(f"{source}: {what} holds {kinds} value(s) (the first at index {first}); weights must be "
                                "finite numbers")


def _opset(model: onnx.ModelProto, source: str) -> int:
    versions = {o.domain: o.version for o in model.opset_import}
    v = versions.get("", versions.get("ai.onnx"))
    if v is None:
        raise FrontendError(f"{source}: the model imports no default ONNX opset")
    if not MIN_OPSET <= v <= MAX_OPSET:
        raise FrontendError(f"{source}: ONNX opset {v} is not supported (opsets {MIN_OPSET} to {MAX_OPSET} are)")
    return int(v)


def _fix_batch(model: onnx.ModelProto, initializer_names: set[str], source: str) -> None:
    """Dynamic leading dimensions of graph inputs become 1; any other dynamic dimension is an error."""
    for vi in model.graph.input:
        if vi.name in initializer_names:
            continue
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            raise FrontendError(f"{source}: input {vi.name!r} has no shape")
        for axis, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                continue
            if axis == 0:
                d.Clear()
                d.dim_value = 1
            else:
                what = d.dim_param or "?"
                raise FrontendError(
                    f"{source}: input {vi.name!r} has a dynamic dimension {what!r} at axis {axis}; only the batch axis may be dynamic"
                )


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in node.attribute:
        v = onnx.helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, onnx.TensorProto):
            v = numpy_helper.to_array(v)
        elif isinstance(v, list) and v and isinstance(v[0], bytes):
            v = [x.decode() for x in v]
        out[a.name] = v
    return out


def _static_shape(vi: onnx.ValueInfoProto | None) -> tuple[int, ...] | None:
    if vi is None or not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
        return None
    dims = []
    for d in vi.type.tensor_type.shape.dim:
        if not d.HasField("dim_value"):
            return None
        dims.append(int(d.dim_value))
    return tuple(dims)


def _value_infos(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    g = model.graph
    return {vi.name: vi for vi in list(g.input) + list(g.value_info) + list(g.output)}


def _infer(model: onnx.ModelProto, source: str) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception as e:
        raise FrontendError(f"{source}: shape inference failed: {e}") from None


def _evaluate(node: onnx.NodeProto, feeds: dict[str, np.ndarray], opsets) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    inputs = [onnx.helper.make_empty_tensor_value_info(i) for i in node.input if i]
    outputs = [onnx.helper.make_empty_tensor_value_info(o) for o in node.output if o]
    graph = onnx.helper.make_graph([node], "fold", inputs, outputs)
    model = onnx.helper.make_model(graph, opset_imports=opsets)
    return ReferenceEvaluator(model).run(None, {i: feeds[i] for i in node.input if i})


def _one_pixel_instance_norm(node: onnx.NodeProto, consts: dict[str, np.ndarray], shapes) -> np.ndarray | None:
    """The output of an InstanceNormalization over maps of one pixel (its bias ``B``, broadcast),
    or None when the map is larger, its shape unknown or its bias computed."""
    shape = shapes.get(node.input[0])
    if shape is None or len(shape) < 3 or int(np.prod(shape[2:])) != 1 or node.input[2] not in consts:
        return None
    bias = np.asarray(consts[node.input[2]], np.float32).reshape(1, -1, *([1] * (len(shape) - 2)))
    return np.ascontiguousarray(np.broadcast_to(bias, tuple(shape)))


def fold_constants(model: onnx.ModelProto, source: str = "model", shapes=None) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Fold every node whose inputs are all known; returns the reduced model and the constants.

    ``shapes`` maps tensor names to ``(shape, dtype)`` (onnxruntime's); without it, onnx's
    shape inference decides which ``Shape`` nodes are constant.
    """
    g = model.graph
    consts: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    if shapes is None:
        shapes = {name: _static_shape(vi) for name, vi in _value_infos(_infer(model, source)).items()}
    else:
        shapes = {name: s for name, (s, _) in shapes.items()}
    opsets = list(model.opset_import)
    kept: list[onnx.NodeProto] = []
    for node in g.node:
        known = all((not i) or i in consts for i in node.input)
        if node.op_type in ("Shape", "Size") and node.input[0] not in consts and shapes.get(node.input[0]) is not None:
            shape = np.array(shapes[node.input[0]], dtype=np.int64)
            if node.op_type == "Size":
                consts[node.output[0]] = np.array(int(np.prod(shape)), dtype=np.int64)
            else:
                a = _attrs(node)
                start, end = a.get("start", 0), a.get("end", None)
                consts[node.output[0]] = shape[start:end]
            continue
        if node.op_type == "InstanceNormalization" and _one_pixel_instance_norm(node, consts, shapes) is not None:
            # A map of one pixel: x - mean(x) is 0 and the output is B, whatever x is.
            consts[node.output[0]] = _one_pixel_instance_norm(node, consts, shapes)
            continue
        if known and node.domain in ("", "ai.onnx") and node.op_type not in NONDETERMINISTIC:
            try:
                values = _evaluate(node, consts, opsets)
            except Exception as e:
                raise FrontendError(f"{source}: node {node.name!r} ({node.op_type}): cannot fold its constant inputs: {e}") from None
            for name, v in zip([o for o in node.output if o], values):
                consts[name] = np.asarray(v)
            continue
        kept.append(node)
    # The reduced model: remaining nodes, constants they use as initializers.
    used = {i for n in kept for i in n.input if i} | {o.name for o in g.output}
    new = onnx.ModelProto()
    new.CopyFrom(model)
    del new.graph.node[:]
    new.graph.node.extend(kept)
    del new.graph.initializer[:]
    new.graph.initializer.extend(numpy_helper.from_array(np.asarray(v), name) for name, v in consts.items() if name in used)
    del new.graph.value_info[:]
    const_names = set(consts)
    inputs = [vi for vi in new.graph.input if vi.name not in const_names]
    del new.graph.input[:]
    new.graph.input.extend(inputs)
    return new, consts


def _names_used(graph: onnx.GraphProto, used: set[str]) -> set[str]:
    """Every tensor name a node reads, in ``graph`` and the subgraphs of its nodes."""
    for n in graph.node:
        used.update(i for i in n.input if i)
        for a in n.attribute:
            for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                _names_used(sub, used)
    return used


def drop_unused_optional_outputs(model: onnx.ModelProto) -> None:
    """Unname every optional output nothing reads (Dropout's mask, MaxPool's indices, a
    BatchNormalization's statistics at opset 14 or later), in place. Old exporters name them
    all; their shapes are often unknown (a mask at opset 9) and onnxruntime refuses some (a
    BatchNormalization's statistics outside training mode). Before opset 14 a
    BatchNormalization's statistics outputs are what puts it in training mode (onnxruntime
    then normalises by the batch's own statistics), so they stay."""
    import onnx.defs

    g = model.graph
    used = _names_used(g, set()) | {o.name for o in g.output}
    versions = {o.domain: o.version for o in model.opset_import}
    opset = versions.get("", versions.get("ai.onnx"))
    for n in g.node:
        if n.domain not in ("", "ai.onnx") or len(n.output) < 2 or (n.op_type == "BatchNormalization" and opset < 14):
            continue
        try:
            schema = onnx.defs.get_schema(n.op_type, opset)
        except Exception:  # an op onnx does not know: onnxruntime will say so
            continue
        formal = list(schema.outputs)
        names = list(n.output)
        for i, name in enumerate(names):
            if (name and name not in used and i < len(formal)
                    and formal[i].option == onnx.defs.OpSchema.FormalParameterOption.Optional):
                names[i] = ""
        while names and not names[-1]:
            names.pop()
        if names != list(n.output):
            del n.output[:]
            n.output.extend(names)


def _runtime_shapes(model: onnx.ModelProto, source: str, batch_one: onnx.ModelProto) -> dict[str, tuple[tuple[int, ...], str]]:
    """Every tensor's shape and dtype as onnxruntime computes them, from one run on zeros.

    onnxruntime is the reference the compiled model is compared with, so its shapes win over
    onnx's shape inference (they differ, e.g., for Resize scales that round in float32).
    """
    typed = _infer(model, source)
    elem = {vi.name: vi.type.tensor_type.elem_type for vi in list(typed.graph.value_info) + list(typed.graph.output) + list(typed.graph.input)}
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    existing = {o.name for o in probe.graph.output}
    for n in probe.graph.node:
        for o in n.output:
            if o and o not in existing and elem.get(o):
                probe.graph.output.append(onnx.helper.make_tensor_value_info(o, elem[o], None))
                existing.add(o)
    from systolix.onnxrt import session as ort_session

    session = ort_session(probe, source=source, error=FrontendError, optimize=False)
    feeds = {}
    init = {t.name for t in model.graph.initializer}
    for vi in batch_one.graph.input:
        if vi.name in init:
            continue
        shape = _static_shape(vi)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        feeds[vi.name] = np.zeros(shape, dtype=dtype)
    names = [o.name for o in session.get_outputs()]
    try:
        values = session.run(names, feeds)
    except Exception as e:
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        raise FrontendError(f"{source}: onnxruntime cannot run the model: {first}") from None
    out = {name: (tuple(int(d) for d in np.shape(v)), str(np.asarray(v).dtype)) for name, v in zip(names, values)}
    for name, value in feeds.items():
        out[name] = (tuple(value.shape), str(value.dtype))
    return out


def import_onnx(model_or_path: Any) -> tuple[onnx.ModelProto, str, dict[str, tuple[tuple[int, ...], str]]]:
    """Load, validate, fix the batch, fold constants: a folded ModelProto and every tensor's shape."""
    model, source = load_onnx(model_or_path)
    _opset(model, source)
    check_constants(model, source)
    if not model.graph.node:
        raise FrontendError(f"{source}: the graph has no nodes: nothing to compile")
    model_copy = onnx.ModelProto()
    model_copy.CopyFrom(model)
    model = model_copy
    drop_unused_optional_outputs(model)
    # onnxruntime validates the model when it loads it for the shapes below (onnx's checker is
    # stricter than the reference about, e.g., outputs without a declared shape).
    initializer_names = {t.name for t in model.graph.initializer}
    # The model keeps its dynamic batch (fixing it can make onnx's shape inference reject models
    # onnxruntime runs fine); shapes come from onnxruntime with a batch of 1.
    batch_one = onnx.ModelProto()
    batch_one.CopyFrom(model)
    _fix_batch(batch_one, initializer_names, source)
    shapes = _runtime_shapes(model, source, batch_one)
    model, _ = fold_constants(model, source, shapes)
    return model, source, shapes


def to_graph(model_or_path: Any) -> Graph:
    """The compiler's IR of an ONNX model: static shapes, constants folded, topological order."""
    model, source, shapes = import_onnx(model_or_path)
    return graph_from_model(model, source, shapes)


def graph_from_model(model: onnx.ModelProto, source: str, shapes) -> Graph:
    """The IR of a model ``import_onnx`` prepared; ``nodes[i]`` is ``model.graph.node[i]``."""
    g = model.graph
    opset = _opset(model, source)
    tensors: dict[str, Tensor] = {}
    for t in g.initializer:
        v = numpy_helper.to_array(t)
        if v.dtype.kind in "fc" and v.size and not np.all(np.isfinite(v)):
            raise FrontendError(f"{source}: constant {t.name!r}, computed from the model's constants, holds NaN or "
                                "infinite values (a division by zero, a log of 0...); weights must be finite numbers")
        tensors[t.name] = Tensor(t.name, tuple(v.shape), str(v.dtype), v)
    for name, (shape, dtype) in shapes.items():
        if name not in tensors:
            tensors[name] = Tensor(name, shape, dtype)
    nodes = []
    outputs_and_reads = {o.name for o in g.output} | {i for n in g.node for i in n.input}
    for i, n in enumerate(g.node):
        name = n.name or f"{n.op_type}_{i}"
        if n.domain not in ("", "ai.onnx"):
            raise FrontendError(f"{source}: node {name!r} uses op {n.op_type!r} from domain {n.domain!r}, not standard ONNX")
        for o in n.output:
            # (an output nothing reads needs no shape: a training-mode batch norm's statistics)
            if o and o not in tensors and (o in outputs_and_reads or o == n.output[0]):
                raise FrontendError(f"{source}: node {name!r} ({n.op_type}): shape inference could not find a static shape for output {o!r}")
        nodes.append(Node(name, n.op_type, list(n.input), [o for o in n.output], _attrs(n)))
    inputs = [vi.name for vi in g.input if vi.name not in {t.name for t in g.initializer}]
    outputs = [o.name for o in g.output]
    if not nodes:
        raise FrontendError(f"{source}: nothing to compile: every output is an input or a constant "
                            "(the graph has no nodes left after folding its constants)")
    for o in outputs:
        if o not in tensors:
            raise FrontendError(f"{source}: output {o!r} has no static shape")
    return Graph(g.name or Path(source).stem, tensors, nodes, inputs, outputs, opset)
