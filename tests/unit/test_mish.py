"""Mish on the accelerator: the ONNX op (opset 18) and ``Mul(x, Tanh(Softplus(x)))`` (torch's
export before it) as one SIMD post-op sequence; every FP16BP8 input through the emulator within
the error the README states, and after a conv against onnxruntime within the error model's bound."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from systolix.lowering.ops.mish import MAX_ERROR_LSB
from tests.exhaustive import conv_3x3, error_against_onnxruntime, every_input, largest_error_lsb
from tests.onnx_builders import ir_of, make_model

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]


def mish_nodes(x: str, y: str, swap: bool = False):
    operands = ["t", x] if swap else [x, "t"]
    return [helper.make_node("Softplus", [x], ["s"], name="softplus"), helper.make_node("Tanh", ["s"], ["t"], name="tanh"),
            helper.make_node("Mul", operands, [y], name="mul")]


def mish(x):
    return x * np.tanh(np.logaddexp(0.0, x))


def test_mish_on_every_input_within_the_stated_error():
    x, y = every_input("Mish", nodes=mish_nodes("x", "y"))
    err = largest_error_lsb(y, mish(x))
    print(f"largest error {err:.3f} LSB over 65,536 inputs")
    assert err <= MAX_ERROR_LSB


@pytest.mark.parametrize("form", ["op", "softplus_tanh_mul"])
def test_mish_joins_the_conv_before_it_within_the_bound(form):
    rng = np.random.default_rng(7)
    w = rng.normal(0, 0.4, (17, 5, 3, 3)).astype(np.float32)
    b = rng.normal(0, 0.5, 17).astype(np.float32)
    nodes = [helper.make_node("Mish", ["c"], ["y"], name="mish")] if form == "op" else mish_nodes("c", "y", swap=True)
    m = make_model([conv_3x3(), *nodes], [("x", [1, 5, 7, 6])], [("y", None)], {"w": w, "b": b}, opset=18)
    (layer,) = ir_of(m, "ultra96v2").layers
    assert [p.kind for p in layer.post_ops] == ["mish"]
    err, bound = error_against_onnxruntime(m, rng)
    assert err <= bound


def test_a_softplus_read_elsewhere_keeps_its_layers():
    m = make_model([*mish_nodes("x", "y"), helper.make_node("Relu", ["s"], ["z"], name="relu")],
                   [("x", [1, 5, 4, 4])], [("y", None), ("z", None)])
    kinds = sorted(p.kind for layer in ir_of(m).layers for p in layer.post_ops)
    assert kinds == ["mul_tensor", "relu", "softplus", "tanh"]
