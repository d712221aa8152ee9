"""HardSwish on the accelerator (SIMD post-ops): every FP16BP8 input through the emulator within
the error the README states, and against onnxruntime within the error model's bound."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from systolix.lowering.ops.hardswish import MAX_ERROR_LSB
from tests.exhaustive import conv_3x3, error_against_onnxruntime, every_input, largest_error_lsb
from tests.onnx_builders import ir_of, make_model

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]

LSB = 2.0 ** -8


def test_hard_swish_on_every_input_within_the_stated_error():
    x, y = every_input("HardSwish", 14)
    err = largest_error_lsb(y, x * np.clip(x / 6 + 0.5, 0, 1))
    print(f"largest error {err:.3f} LSB over 65,536 inputs")
    assert err <= MAX_ERROR_LSB


def test_hard_swish_joins_the_conv_before_it_within_the_bound():
    rng = np.random.default_rng(2)
    w = rng.normal(0, 0.3, (17, 5, 3, 3)).astype(np.float32)
    b = rng.normal(0, 0.5, 17).astype(np.float32)
    m = make_model([conv_3x3(),
                    helper.make_node("HardSwish", ["c"], ["y"], name="hs")], [("x", [1, 5, 7, 6])], [("y", None)], {"w": w, "b": b}, opset=14)
    (layer,) = ir_of(m, "ultra96v2").layers
    assert layer.ops == ["Conv", "HardSwish"] and [p.kind for p in layer.post_ops] == ["hard_swish"]
    err, bound = error_against_onnxruntime(m, rng)
    assert err <= bound


def test_x_times_hard_sigmoid_of_x_is_hard_swish():
    """Exports before opset 14 write HardSwish as Mul(x, HardSigmoid(x, 1/6, 1/2))."""
    nodes = [helper.make_node("HardSigmoid", ["x"], ["g"], name="hsig", alpha=1 / 6, beta=0.5),
             helper.make_node("Mul", ["g", "x"], ["y"], name="mul")]
    x, y = every_input("HardSwish", 13, nodes=nodes)
    assert largest_error_lsb(y, x * np.clip(x / 6 + 0.5, 0, 1)) <= MAX_ERROR_LSB
    w = np.random.default_rng(6).normal(0, 0.3, (17, 5, 3, 3)).astype(np.float32)
    conv = helper.make_node("Conv", ["i", "w"], ["x"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    (layer,) = ir_of(make_model([conv, *nodes], [("i", [1, 5, 7, 6])], [("y", None)], {"w": w})).layers
    assert [p.kind for p in layer.post_ops] == ["hard_swish"]
