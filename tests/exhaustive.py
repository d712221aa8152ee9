"""An activation on the accelerator run on every FP16BP8 input (65,536 values) through the
emulator, for the approximation-error figures the README states; and the same activation after a
conv, against onnxruntime within the error model's bound."""

from __future__ import annotations

import warnings

import numpy as np
import onnxruntime as ort
from onnx import helper

from systolix.compiler import compile_model
from systolix.runtime import SaturationWarning
from tests.error_model import output_bounds
from tests.onnx_builders import make_model

LSB = 2.0 ** -8


def every_input(op: str, opset: int = 13, arch: str = "pynqz1", nodes=None) -> tuple[np.ndarray, np.ndarray]:
    """The op alone (or ``nodes``, from ``x`` to ``y``) on all 65,536 FP16BP8 values:
    ``(inputs, outputs)`` as float64."""
    x = (np.arange(-32768, 32768) * LSB).astype(np.float32).reshape(1, 16, 64, 64)
    nodes = nodes or [helper.make_node(op, ["x"], ["y"], name="act")]
    m = make_model(nodes, [("x", list(x.shape))], [("y", None)], opset=opset)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SaturationWarning)  # |-128| saturates to 127.996: expected
        y = compile_model(m, arch, host=False).run({"x": x})["y"]
    return x.reshape(-1).astype(np.float64), y.reshape(-1).astype(np.float64)


def largest_error_lsb(y: np.ndarray, exact: np.ndarray) -> float:
    return float(np.max(np.abs(y - exact))) / LSB


def conv_3x3(output: str = "c", bias: bool = True):
    """The 3x3 conv (5 to 17 channels, input ``x`` of shape [1, 5, 7, 6]) the activations follow."""
    return helper.make_node("Conv", ["x", "w", "b"] if bias else ["x", "w"], [output], name="conv",
                            kernel_shape=[3, 3], pads=[1, 1, 1, 1])


def error_against_onnxruntime(model, rng: np.random.Generator, arch: str = "ultra96v2") -> tuple[float, float]:
    """Our largest error on output ``y`` for one normal input ``x`` of shape [1, 5, 7, 6], and the
    error model's bound for it (both printed)."""
    x = rng.normal(0, 1, (1, 5, 7, 6)).astype(np.float32)
    ours = compile_model(model, arch, host=False).run({"x": x})["y"]
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    err, bound = float(np.max(np.abs(ours - ref))), output_bounds(model, {"x": x})["y"]
    print(f"largest error {err / LSB:.2f} LSB, {err / bound:.0%} of its bound")
    return err, bound
