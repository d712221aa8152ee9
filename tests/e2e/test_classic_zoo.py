"""SqueezeNet 1.0 and Inception v1 as the ONNX model zoo's early files spell them (opsets 7 to 9:
Dropout with its mask output named, LRN, ceil-mode pools as extra pads, Softmax over 4-D, Reshape
by an initializer), built by ``systolix.models.classic_zoo`` at a small input size, compiled for
the Ultra96-V2 and compared with onnxruntime within the FP16BP8 bound of ``tests/error_model.py``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import systolix.models as M
from systolix.compiler import compile_model
from tests.error_model import output_bounds

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]


def compile_and_compare(model, checked=True):
    if checked:
        onnx.checker.check_model(model)
    feeds = M.example_inputs(model, seed=0)
    compiled = compile_model(model, "ultra96v2")
    ours = compiled.run(feeds)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    refs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    bounds = output_bounds(model, feeds)
    for name, ref in refs.items():
        err = float(np.max(np.abs(ours[name] - ref)))
        assert ours[name].shape == ref.shape and err <= bounds[name], f"{name}: max error {err:.4g} > bound {bounds[name]:.4g}"
    return compiled


@pytest.mark.parametrize("opset", [7, 9])
def test_squeezenet10_as_the_zoo_wrote_it(opset):
    model = M.build("squeezenet10_zoo", opset=opset, size=48)
    assert any(n.op_type == "Dropout" and len(n.output) == 2 for n in model.graph.node)
    compiled = compile_and_compare(model)
    # The Dropout (its mask read by nothing) is removed; only the Softmax runs on the host.
    assert compiled.summary.host_nodes == ["softmax"]


def test_inception_v1_as_the_zoo_wrote_it():
    model = M.build("inception_v1_zoo", opset=8, size=48)
    ops = {n.op_type for n in model.graph.node}
    assert {"LRN", "Dropout", "Reshape", "Gemm", "Softmax", "AveragePool"} <= ops
    compiled = compile_and_compare(model)
    assert compiled.summary.host_nodes == ["pool1/norm1", "conv2/norm2", "prob"]


def test_the_zoos_own_squeezenet_graph():
    """The zoo's SqueezeNet 1.1 graph as the onnx package ships it for its backend tests (opset 9,
    Dropout with its mask, every weight a ConstantOfShape of 0.02), not built by us: each weight
    made a random He-scaled initializer (0.02 everywhere would saturate FP16BP8), the input 64x64."""
    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_squeezenet.onnx"
    model = onnx.load(str(path))
    rng = np.random.default_rng(0)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    kept = []
    for node in model.graph.node:
        if node.op_type != "ConstantOfShape":
            kept.append(node)
            continue
        shape = tuple(int(d) for d in inits[node.input[0]])
        fan_in = int(np.prod(shape[1:]))
        value = rng.normal(0, np.sqrt(2 / fan_in) if len(shape) > 1 else 0.05, shape).astype(np.float32)
        model.graph.initializer.append(numpy_helper.from_array(value, node.output[0]))
    del model.graph.node[:]
    model.graph.node.extend(kept)
    data = next(i for i in model.graph.input if i.name == "data_0").type.tensor_type.shape.dim
    data[2].dim_value = data[3].dim_value = 64
    assert model.opset_import[0].version == 9 and any(n.op_type == "Dropout" and len(n.output) == 2 for n in kept)
    compiled = compile_and_compare(model, checked=False)  # (IR 3: the new initializers are no graph inputs)
    assert [compiled.summary.placement_ops[n][0] for n in compiled.summary.host_nodes] == ["Softmax"]
