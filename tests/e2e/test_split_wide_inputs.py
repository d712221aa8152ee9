"""A dilated conv whose input band for one output row does not fit local memory (DeepLabV3's
ASPP) runs in parts by input channels (``systolix.hir_passes.split_wide_inputs``), summed
exactly: the result agrees with onnxruntime within the derived FP16BP8 bound."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from systolix.compiler import compile_model
from systolix.onnxrt import session
from tests.error_model import output_bounds
from tests.onnx_builders import make_model

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]


@pytest.mark.parametrize("after_conv", [False, True], ids=["model-input", "computed-input"])
def test_dilated_conv_too_wide_for_local_memory_runs_in_parts(after_conv):
    # pynqz1 has 8,192 vectors of local memory; one output row reads 25 rows x 32 pixels x 16
    # channel groups = 12,800 of them.
    rng = np.random.default_rng(0)
    cin, cout, size = 128, 24, 32
    inits = {"w": rng.normal(0, (1 / (9 * cin)) ** 0.5, (cout, cin, 3, 3)).astype(np.float32),
             "b": rng.normal(0, 0.1, cout).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["t", "w", "b"], ["c"], name="aspp", pads=[12] * 4, dilations=[12, 12],
                              kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    if after_conv:  # the dilated conv reads a tensor the accelerator computed (planar), else the input (pixel-major)
        inits["w0"] = rng.normal(0, cin ** -0.5, (cin, cin, 1, 1)).astype(np.float32)
        nodes.insert(0, helper.make_node("Conv", ["x", "w0"], ["t"], name="pointwise", kernel_shape=[1, 1]))
    else:
        nodes[0].input[0] = "x"
    model = make_model(nodes, [("x", [1, cin, size, size])], [("y", None)], inits)
    compiled = compile_model(model, "pynqz1")
    parts = [layer.name for layer in compiled.summary.layers if layer.name.startswith("aspp")]
    assert parts == ["aspp [0:32]", "aspp [32:64]", "aspp [64:96]", "aspp [96:128]"]
    assert sum(layer.macs for layer in compiled.summary.layers if layer.name.startswith("aspp")) == cout * cin * 9 * size * size
    x = rng.normal(0, 1, (1, cin, size, size)).astype(np.float32)
    ref = session(model).run(None, {"x": x})[0]
    err = float(np.max(np.abs(compiled.run({"x": x})["y"] - ref)))
    assert err <= output_bounds(model, {"x": x})["y"]
