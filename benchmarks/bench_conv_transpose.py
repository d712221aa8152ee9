"""Transposed convolutions as the DPU runs them against zero insertion, on a board's latency model.

    .venv/bin/python benchmarks/bench_conv_transpose.py [--board ultra96-v2]

For each decoder shape two models compute the same tensor: our ConvTranspose (``s x s`` stride-1
sub-convolutions of the input, one per output phase, then a remap interleaving them), and the
textbook form, an ordinary stride-1 convolution with the flipped kernel over the input with
``s - 1`` zeros inserted between its pixels (the input given already zero-inserted, so that form
pays nothing for making it but the larger tensor it reads). onnxruntime checks that the two are
the same function; ``systolix estimate``'s timing model gives each one's latency.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from rich.console import Console
from rich.table import Table

from systolix.arch import get_board
from systolix.compiler import compile_model
from systolix.perf.estimate import estimate

# (what, in channels, out channels, input size, kernel, stride, pads, output_padding)
SHAPES = [
    ("DCGAN generator", 256, 128, 8, 4, 2, 1, 0),
    ("pix2pix / DCGAN decoder", 64, 32, 28, 4, 2, 1, 0),
    ("ResNet/FCN decoder 3x3", 128, 64, 14, 3, 2, 1, 1),
    ("U-Net up-convolution 2x2", 256, 128, 14, 2, 2, 0, 0),
    ("FCN-32s-like 8x upsampling", 32, 32, 7, 16, 8, 4, 0),
]


def _model(node, x_shape, weights):
    g = helper.make_graph([node], "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(weights, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def pair(cin, cout, size, k, s, p, op, seed=0):
    """The ConvTranspose model, the zero-insertion Conv model and a function zero-inserting an input."""
    w = np.random.default_rng(seed).normal(0, 1 / np.sqrt(cin * k * k / (s * s)), (cin, cout, k, k)).astype(np.float32)
    transposed = _model(helper.make_node("ConvTranspose", ["x", "w"], ["y"], kernel_shape=[k, k], strides=[s, s],
                                         pads=[p] * 4, output_padding=[op, op]), [1, cin, size, size], w)
    flipped = np.ascontiguousarray(w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1])
    zsize = (size - 1) * s + 1
    lo, hi = k - 1 - p, k - 1 - p + op
    inserted = _model(helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[k, k], pads=[lo, lo, hi, hi]),
                      [1, cin, zsize, zsize], flipped)

    def zero_insert(x):
        z = np.zeros((1, cin, zsize, zsize), np.float32)
        z[:, :, ::s, ::s] = x
        return z
    return transposed, inserted, zero_insert


def latency_ms(model, board) -> tuple[float, int]:
    compiled = compile_model(model, board.architecture)
    with tempfile.TemporaryDirectory() as tmp:
        path = compiled.save(Path(tmp))
        e = estimate(path, board)
        return e.accelerator_ms, compiled.summary.macs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--board", default="ultra96-v2")
    args = parser.parse_args()
    board = get_board(args.board)
    console = Console(width=max(140, Console().width))
    table = Table(title=f"ConvTranspose: sub-convolutions (ours) vs. zero insertion then a convolution, {board.name} "
                        "(systolix estimate)")
    for col in ("decoder layer", "in", "out", "kernel/stride/pad", "ours (ms)", "zero insertion (ms)", "ratio",
                "array MACs ours / zero ins. (M)"):
        table.add_column(col, justify="left" if col == "decoder layer" else "right")
    for what, cin, cout, size, k, s, p, op in SHAPES:
        transposed, inserted, zero_insert = pair(cin, cout, size, k, s, p, op)
        x = np.random.default_rng(1).normal(0, 1, (1, cin, size, size)).astype(np.float32)
        a = ort.InferenceSession(transposed.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        b = ort.InferenceSession(inserted.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": zero_insert(x)})[0]
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)  # the same function
        ours, ours_macs = latency_ms(transposed, board)
        theirs, their_macs = latency_ms(inserted, board)
        table.add_row(what, f"{cin}x{size}x{size}", f"{cout}x{a.shape[2]}x{a.shape[3]}", f"{k}/{s}/{p}" + (f" op {op}" if op else ""),
                      f"{ours:.3f}", f"{theirs:.3f}", f"{theirs / ours:.2f}x", f"{ours_macs / 1e6:.1f} / {their_macs / 1e6:.1f}")
    console.print(table)


if __name__ == "__main__":
    main()
