"""Mul of two computed tensors on the accelerator: of one shape (``MulTensor``) and by one value
per channel (``MulBroadcast``, squeeze-excite's gate), bit for bit the float product of the two
FP16BP8 operands rounded once (half to even), computed here in integers with NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from systolix.compiler import compile_model
from tests.onnx_builders import ir_of, make_model

pytestmark = pytest.mark.needs_emulator


def fixed(v: np.ndarray) -> np.ndarray:
    """FP16BP8 raw values: round half up, saturate."""
    return np.clip(np.floor(v.astype(np.float32) * np.float32(256) + np.float32(0.5)), -32768, 32767).astype(np.int64)


def product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    p = fixed(a) * fixed(b)
    return np.clip((p + 127 + ((p >> 8) & 1)) >> 8, -32768, 32767) / 256.0


@pytest.mark.parametrize("gate_shape,kind", [((1, 19, 1, 1), "mul_bcast"), ((1, 19, 5, 6), "mul_tensor")])
def test_mul_of_two_computed_tensors_is_the_rounded_product(gate_shape, kind):
    rng = np.random.default_rng(11)
    x = rng.normal(0, 3, (1, 19, 5, 6)).astype(np.float32)
    g = rng.uniform(-1.5, 1.5, gate_shape).astype(np.float32)
    m = make_model([helper.make_node("Mul", ["x", "g"], ["y"], name="mul")], [("x", list(x.shape)), ("g", list(gate_shape))],
                   [("y", None)])
    assert [p.kind for layer in ir_of(m, "ultra96v2").layers for p in layer.post_ops] == [kind]
    y = compile_model(m, "ultra96v2", host=False).run({"x": x, "g": g})["y"]
    np.testing.assert_array_equal(y, product(x, np.broadcast_to(g, x.shape)))
