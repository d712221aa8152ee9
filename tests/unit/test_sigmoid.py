"""Sigmoid on the accelerator (SIMD post-ops, a clamp of lines): every FP16BP8 input through the
emulator within the error the README states, and against onnxruntime within the error model's
bound."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from systolix.lowering.ops.sigmoid import MAX_ERROR_LSB
from tests.exhaustive import conv_3x3, error_against_onnxruntime, every_input, largest_error_lsb
from tests.onnx_builders import ir_of, make_model

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]

LSB = 2.0 ** -8


def test_sigmoid_on_every_input_within_the_stated_error():
    x, y = every_input("Sigmoid")
    err = largest_error_lsb(y, 1 / (1 + np.exp(-x)))
    print(f"largest error {err:.3f} LSB over 65,536 inputs")
    assert err <= MAX_ERROR_LSB


def test_sigmoid_joins_the_conv_before_it_within_the_bound():
    rng = np.random.default_rng(3)
    w = rng.normal(0, 0.4, (17, 5, 3, 3)).astype(np.float32)
    b = rng.normal(0, 0.5, 17).astype(np.float32)
    m = make_model([conv_3x3(),
                    helper.make_node("Sigmoid", ["c"], ["y"], name="sig")], [("x", [1, 5, 7, 6])], [("y", None)], {"w": w, "b": b})
    (layer,) = ir_of(m, "ultra96v2").layers
    assert layer.ops == ["Conv", "Sigmoid"] and [p.kind for p in layer.post_ops] == ["sigmoid"]
    err, bound = error_against_onnxruntime(m, rng)
    assert err <= bound
