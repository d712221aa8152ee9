"""An activation on the accelerator run on every FP16BP8 input (65,536 values) through the
emulator, for the approximation-error figures the README states."""

from __future__ import annotations

import warnings

import numpy as np
from onnx import helper

from systolix.compiler import compile_model
from systolix.runtime import SaturationWarning
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
