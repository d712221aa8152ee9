"""HardSigmoid on the accelerator (SIMD post-ops), against onnxruntime on the emulator, within
a bound derived from FP16BP8's roundings."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from systolix.compiler import compile_model
from tests.onnx_builders import ir_of, make_model

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]

LSB = 2.0 ** -8


def on_grid(v: float) -> float:
    return np.floor(v / LSB + 0.5) * LSB


def reference(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def test_hard_sigmoid_of_an_input_within_its_roundings():
    alpha, beta = 0.3, 0.45
    m = make_model([helper.make_node("HardSigmoid", ["x"], ["y"], name="hs", alpha=alpha, beta=beta)], [("x", [1, 5, 7, 6])], [("y", None)])
    x = np.random.default_rng(0).normal(0, 2, (1, 5, 7, 6)).astype(np.float32)
    compiled = compile_model(m, "pynqz1", host=False)
    (layer,) = ir_of(m).layers
    assert [p.kind for p in layer.post_ops] == ["hard_sigmoid"]
    err = np.abs(compiled.run({"x": x})["y"] - reference(m, {"x": x}))
    # The input and alpha stored to the grid (half a step each), the product rounded, beta stored.
    bound = alpha * LSB / 2 + abs(on_grid(alpha) - alpha) * np.abs(x) + LSB / 2 + abs(on_grid(beta) - beta) + 1e-6
    print(f"largest error {np.max(err) / LSB:.2f} LSB, {np.max(err / bound):.0%} of its bound")
    assert np.all(err <= bound), float(np.max(err / bound))


def test_hard_sigmoid_joins_the_conv_before_it():
    rng = np.random.default_rng(1)
    w = rng.normal(0, 0.2, (17, 5, 3, 3)).astype(np.float32)
    b = rng.normal(0, 0.1, 17).astype(np.float32)
    m = make_model([helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                    helper.make_node("HardSigmoid", ["c"], ["y"], name="hs")], [("x", [1, 5, 7, 6])], [("y", None)], {"w": w, "b": b})
    (layer,) = ir_of(m, "ultra96v2").layers
    assert layer.ops == ["Conv", "HardSigmoid"] and [p.kind for p in layer.post_ops] == ["hard_sigmoid"]
    x = rng.normal(0, 1, (1, 5, 7, 6)).astype(np.float32)
    ours = compile_model(m, "ultra96v2", host=False).run({"x": x})["y"]
    # The conv's error: every product rounded, every weight, input and the bias stored to the grid
    # (half a step each, weighted by what it multiplies), summed over the 3x3x5 window.
    padded = np.pad(np.abs(x[0]), ((0, 0), (1, 1), (1, 1)))
    window_sum = sum(padded[:, i:i + 7, j:j + 6].sum(axis=0) for i in range(3) for j in range(3))
    conv_err = LSB / 2 * (np.abs(w).sum(axis=(1, 2, 3))[:, None, None] + window_sum[None] + w[0].size + 1)
    c = reference(make_model([m.graph.node[0]], [("x", [1, 5, 7, 6])], [("c", None)], {"w": w, "b": b}), {"x": x})[0]
    bound = 0.2 * conv_err + abs(on_grid(0.2) - 0.2) * np.abs(c) + LSB / 2 + 1e-6
    err = np.abs(ours - reference(m, {"x": x}))[0]
    print(f"largest error {np.max(err) / LSB:.2f} LSB, {np.max(err / bound):.0%} of its bound")
    assert np.all(err <= bound), float(np.max(err / bound))
