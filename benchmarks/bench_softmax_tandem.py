"""Softmax on the Tandem vector unit: accuracy against onnxruntime and the unit's clocks.

    .venv/bin/python benchmarks/bench_softmax_tandem.py [--samples 20]

Small classifiers built as torch modules (Conv-ReLU-AdaptiveAvgPool-Flatten-Linear-Softmax) and
exported by torch, so nothing here was tuned on them, compiled for ``ultra96v2_tandem`` with no
host (the Softmax runs on the unit) and run on the emulator. Per model: the largest error of a
probability against onnxruntime, the logits' own error (the same model without the Softmax), the
bound ``tests/unit/test_softmax_tandem.py`` asserts (half an LSB + logits' error / 2 + the unit's
arithmetic), the error against NumPy's softmax of the accelerator's own logits (the unit
alone: at most half an LSB plus its arithmetic), and the unit's busy clocks in ``systolix estimate``'s model.
"""

from __future__ import annotations

import argparse
import io
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
import torch
from rich.console import Console
from rich.table import Table

from systolix.arch import get_board
from systolix.codegen.tandem_softmax import POLY_REL_ERROR
from systolix.compiler import compile_model
from systolix.perf.estimate import estimate

CLASSES = (10, 37, 100, 1000)


def classifier(classes: int, seed: int = 0) -> onnx.ModelProto:
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                              torch.nn.Flatten(), torch.nn.Linear(32, classes), torch.nn.Softmax(dim=1)).eval()
    buf = io.BytesIO()
    torch.onnx.export(net, torch.zeros(1, 3, 16, 16), buf, input_names=["x"], output_names=["p"], opset_version=13, dynamo=False)
    return onnx.load_from_string(buf.getvalue())


def without_softmax(model: onnx.ModelProto) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    (sm,) = [n for n in m.graph.node if n.op_type == "Softmax"]
    m.graph.node.remove(sm)
    del m.graph.output[:]
    m.graph.output.append(onnx.helper.make_tensor_value_info(sm.input[0], onnx.TensorProto.FLOAT, None))
    return m


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=20)
    args = ap.parse_args()
    table = Table(title="Softmax on the Tandem unit (ultra96v2_tandem), torch-exported classifiers")
    for col in ("classes", "samples", "max error", "logits' error", "bound", "max error (LSB)", "unit alone (LSB)",
                "Tandem clocks"):
        table.add_column(col, justify="right")
    rng = np.random.default_rng(1)
    board = get_board("ultra96-v2")
    for classes in CLASSES:
        model = classifier(classes)
        logits_model = without_softmax(model)
        compiled = compile_model(model, "ultra96v2_tandem", host=False)
        logits = compile_model(logits_model, "ultra96v2_tandem", host=False)
        sess, lsess = (ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]) for m in (model, logits_model))
        err = dz = bound = alone = 0.0
        for _ in range(args.samples):
            x = rng.normal(0, 1, (1, 3, 16, 16)).astype(np.float32)
            e = float(np.abs(np.asarray(compiled.run({"x": x})["p"]) - sess.run(None, {"x": x})[0]).max())
            p = np.asarray(compiled.run({"x": x})["p"], np.float64).reshape(-1)
            z = np.asarray(next(iter(logits.run({"x": x}).values())), np.float64).reshape(-1)
            d = float(np.abs(z - lsess.run(None, {"x": x})[0].reshape(-1)).max())
            alone = max(alone, float(np.abs(p - np.exp(z - z.max()) / np.exp(z - z.max()).sum()).max()))
            err, dz = max(err, e), max(dz, d)
            bound = max(bound, 0.5 / 256 + d / 2 + 2 * POLY_REL_ERROR + 8 * 2.0 ** -16)
        with tempfile.TemporaryDirectory() as tmp:
            report = estimate(str(compiled.save(tmp)), board)
            clocks = report.to_json()["units"]["tandem"]["busy_cycles"]
        table.add_row(str(classes), str(args.samples), f"{err:.2e}", f"{dz:.2e}", f"{bound:.2e}", f"{err * 256:.2f}", f"{alone * 256:.3f}",
                      f"{clocks:.0f}")
    Console(width=140).print(table)


if __name__ == "__main__":
    main()
