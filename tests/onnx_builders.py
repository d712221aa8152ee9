"""Small ONNX models built in the tests with ``onnx.helper`` (IR version onnxruntime accepts)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make_model(nodes, inputs, outputs, inits=(), opset: int = 13) -> onnx.ModelProto:
    """``inputs``/``outputs``: ``(name, shape)`` pairs (shape None for outputs: inferred)."""
    g = helper.make_graph(
        nodes, "test",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def conv_bn_relu(cin=5, cout=17, h=7, w=6, seed=0, graph_output_conv=False) -> tuple[onnx.ModelProto, dict]:
    rng = np.random.default_rng(seed)
    p = {
        "w": rng.normal(0, 0.3, (cout, cin, 3, 3)).astype(np.float32),
        "b": rng.normal(0, 0.1, cout).astype(np.float32),
        "scale": rng.uniform(0.5, 1.5, cout).astype(np.float32),
        "beta": rng.normal(0, 0.2, cout).astype(np.float32),
        "mean": rng.normal(0, 0.2, cout).astype(np.float32),
        "var": rng.uniform(0.5, 2.0, cout).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("BatchNormalization", ["c", "scale", "beta", "mean", "var"], ["n"], name="bn", epsilon=1e-3),
        helper.make_node("Relu", ["n"], ["y"], name="relu"),
    ]
    outputs = [("y", None)] + ([("c", None)] if graph_output_conv else [])
    return make_model(nodes, [("x", [1, cin, h, w])], outputs, p), p


def ir_of(model: onnx.ModelProto, arch="pynqz1", until: str = "eliminate dead layers", strategy: str = "local-isolated", **options):
    """The IR of the model's (first) accelerator segment after the pass ``until``: by default
    its HIR lowered, folded, fused and cleaned, as the planning passes get it (the whole program
    or placed graph for the first two passes)."""
    from systolix.arch import Architecture, get_architecture
    from systolix.compiler.context import CompileContext
    from systolix.compiler.driver import run_passes
    from systolix.frontend import graph_from_model, import_onnx

    arch = arch if isinstance(arch, Architecture) else get_architecture(arch)
    imported, source, shapes = import_onnx(model)
    ctx = CompileContext(arch, strategy, onnx_model=imported, **options)
    program = run_passes(graph_from_model(imported, source, shapes), ctx, until=until)
    return program if until in ("place on host", "partition") else program.segments[0].ir
