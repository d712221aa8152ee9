"""Softplus on the accelerator (SIMD post-ops, ``max(x, 0)`` plus a clamp of lines on ``|x|``):
every FP16BP8 input through the emulator within the error the README states, and after a conv
against onnxruntime within the error model's bound."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from systolix.lowering.ops.softplus import MAX_ERROR_LSB
from tests.exhaustive import conv_3x3, error_against_onnxruntime, every_input, largest_error_lsb
from tests.onnx_builders import ir_of, make_model

pytestmark = [pytest.mark.needs_emulator, pytest.mark.needs_onnxruntime]


def test_softplus_on_every_input_within_the_stated_error():
    x, y = every_input("Softplus")
    err = largest_error_lsb(y, np.logaddexp(0.0, x))
    print(f"largest error {err:.3f} LSB over 65,536 inputs")
    assert err <= MAX_ERROR_LSB


def test_softplus_joins_the_conv_before_it_within_the_bound():
    rng = np.random.default_rng(6)
    w = rng.normal(0, 0.4, (17, 5, 3, 3)).astype(np.float32)
    b = rng.normal(0, 0.5, 17).astype(np.float32)
    m = make_model([conv_3x3(), helper.make_node("Softplus", ["c"], ["y"], name="softplus")],
                   [("x", [1, 5, 7, 6])], [("y", None)], {"w": w, "b": b})
    (layer,) = ir_of(m, "ultra96v2").layers
    assert layer.ops == ["Conv", "Softplus"] and [p.kind for p in layer.post_ops] == ["softplus"]
    err, bound = error_against_onnxruntime(m, rng)
    assert err <= bound
