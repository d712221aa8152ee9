"""SiLU (Sigmoid then Mul by its input, as ONNX exports it) on the accelerator: one SIMD post-op
sequence, every FP16BP8 input through the emulator within the error the README states, and
YOLOv5's Conv-BN-SiLU against onnxruntime within the error model's bound."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from systolix.lowering.ops.silu import MAX_ERROR_LSB
from tests.exhaustive import conv_3x3, error_against_onnxruntime, every_input, largest_error_lsb
from tests.onnx_builders import ir_of, make_model

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]

LSB = 2.0 ** -8


def silu_nodes(x: str, y: str, swap: bool = False):
    operands = ["s", x] if swap else [x, "s"]
    return [helper.make_node("Sigmoid", [x], ["s"], name="sig"), helper.make_node("Mul", operands, [y], name="mul")]


def test_silu_on_every_input_within_the_stated_error():
    x, y = every_input("SiLU", nodes=silu_nodes("x", "y"))
    err = largest_error_lsb(y, x / (1 + np.exp(-x)))
    print(f"largest error {err:.3f} LSB over 65,536 inputs")
    assert err <= MAX_ERROR_LSB


def test_conv_bn_silu_is_one_layer_within_the_bound():
    rng = np.random.default_rng(4)
    p = {"w": rng.normal(0, 0.3, (17, 5, 3, 3)).astype(np.float32), "scale": rng.uniform(0.5, 1.5, 17).astype(np.float32),
         "beta": rng.normal(0, 0.5, 17).astype(np.float32), "mean": rng.normal(0, 0.2, 17).astype(np.float32),
         "var": rng.uniform(0.5, 2.0, 17).astype(np.float32)}
    m = make_model([conv_3x3(bias=False),
                    helper.make_node("BatchNormalization", ["c", "scale", "beta", "mean", "var"], ["n"], name="bn", epsilon=1e-3),
                    *silu_nodes("n", "y", swap=True)], [("x", [1, 5, 7, 6])], [("y", None)], p)
    (layer,) = ir_of(m, "ultra96v2").layers
    assert [p.kind for p in layer.post_ops] == ["silu"]
    err, bound = error_against_onnxruntime(m, rng)
    assert err <= bound


def test_a_sigmoid_read_elsewhere_too_keeps_its_layer():
    m = make_model([*silu_nodes("x", "y"), helper.make_node("Relu", ["s"], ["z"], name="relu")], [("x", [1, 5, 4, 4])], [("y", None), ("z", None)])
    kinds = sorted(p.kind for layer in ir_of(m).layers for p in layer.post_ops)
    assert kinds == ["relu", "sigmoid", "silu"]
