"""LayerNorm, the token mean and the element-wise functions on the Tandem vector unit: accuracy
and the unit's clocks.

    .venv/bin/python benchmarks/bench_tandem_norm.py [--samples 10] [--tables ln,mean,functions]

1. LayerNorm: torch modules ``Linear(Din, D)`` then ``LayerNorm(D)`` (torch's initialisation, the
   LayerNorm's scale and shift then drawn from N(1, 0.2) and N(0, 0.2)), exported by torch at
   opset 17, so nothing here was tuned on them, compiled for ``ultra96v2_tandem`` with no host and
   run on the emulator. Per model: the largest error against onnxruntime, the LayerNorm input's
   own error (the same model ending at the Linear), the error against NumPy's LayerNorm of the
   accelerator's own input (the unit alone) and the unit's busy clocks per token in ``systolix estimate``'s model.
2. The token mean (``x.mean(dim=1)`` of ``[1, T, D]``, torch's ReduceMean over axis 1) after a Linear.
3. Sigmoid, Tanh, GeLU (both forms) and Sqrt over every FP16BP8 input (65,536 values), on the
   stock TCU's SIMD line fits (``ultra96v2``) and on the unit (``ultra96v2_tandem``): the largest
   error against the float64 function, in LSB, and the unit's clocks a vector.
"""

from __future__ import annotations

import argparse
import io
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import helper
from rich.console import Console
from rich.table import Table

from systolix.arch import get_board
from systolix.compiler import compile_model
from systolix.lowering.ops.tandem_functions import EXACT
from systolix.perf.estimate import estimate

TANDEM = "ultra96v2_tandem"
LN_CASES = ((64, 32, 64), (32, 64, 64), (16, 48, 40), (8, 32, 128))  # (T, Din, D): ViT's, BERT's, masked, wide


def export(net: torch.nn.Module, shape, opset: int = 17) -> onnx.ModelProto:
    buf = io.BytesIO()
    torch.onnx.export(net.eval(), torch.zeros(*shape), buf, input_names=["x"], output_names=["y"], opset_version=opset, dynamo=False)
    return onnx.load_from_string(buf.getvalue())


def ending_at(model: onnx.ModelProto, op: str) -> onnx.ModelProto:
    """The same model with its output at the input of its ``op`` node."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    (node,) = [n for n in m.graph.node if n.op_type == op]
    m.graph.node.remove(node)
    del m.graph.output[:]
    m.graph.output.append(helper.make_tensor_value_info(node.input[0], onnx.TensorProto.FLOAT, None))
    return m


def clocks(compiled) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        return estimate(str(compiled.save(tmp)), get_board("ultra96-v2")).to_json()["units"]["tandem"]["busy_cycles"]


def run(compiled, x) -> np.ndarray:
    return np.asarray(next(iter(compiled.run({"x": x}).values())), np.float64)


def layer_norm_table(samples: int) -> Table:
    table = Table(title="LayerNormalization on the Tandem unit, torch Linear + LayerNorm (opset 17)")
    for col in ("T x D", "samples", "max error", "input's error", "max error (LSB)", "unit alone (LSB)", "clocks/token"):
        table.add_column(col, justify="right")
    rng = np.random.default_rng(1)
    for T, Din, D in LN_CASES:
        torch.manual_seed(D + T)
        net = torch.nn.Sequential(torch.nn.Linear(Din, D), torch.nn.LayerNorm(D))
        with torch.no_grad():
            net[1].weight.normal_(1.0, 0.2)
            net[1].bias.normal_(0.0, 0.2)
        model = export(net, (1, T, Din))
        before = ending_at(model, "LayerNormalization")
        probe = onnx.ModelProto()  # the LayerNorm's input as a second output: what the unit reads, exactly
        probe.CopyFrom(model)
        probe.graph.output.append(before.graph.output[0])
        compiled, z_compiled = compile_model(model, TANDEM, host=False), compile_model(probe, TANDEM, host=False)
        sess, zsess = (ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]) for m in (model, before))
        gamma, beta = net[1].weight.detach().double().numpy(), net[1].bias.detach().double().numpy()
        err = dz = alone = 0.0
        for _ in range(samples):
            x = rng.normal(0, 1, (1, T, Din)).astype(np.float32)
            y = run(compiled, x)
            both = z_compiled.run({"x": x})
            y2, z = (np.asarray(both[name], np.float64) for name in ("y", before.graph.output[0].name))
            err = max(err, float(np.abs(y - sess.run(None, {"x": x})[0]).max()))
            dz = max(dz, float(np.abs(z - zsess.run(None, {"x": x})[0]).max()))
            mu = z.mean(-1, keepdims=True)
            own = (z - mu) / np.sqrt(((z - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * gamma + beta
            alone = max(alone, float(np.abs(y2 - own).max()))
        table.add_row(f"{T} x {D}", str(samples), f"{err:.2e}", f"{dz:.2e}", f"{err * 256:.2f}", f"{alone * 256:.3f}",
                      f"{clocks(compiled) / T:.0f}")
    return table


class TokenMean(torch.nn.Module):
    def __init__(self, d_in: int, d: int):
        super().__init__()
        self.linear = torch.nn.Linear(d_in, d)

    def forward(self, x):
        return self.linear(x).mean(dim=1)


def token_mean_table(samples: int) -> Table:
    table = Table(title="Token mean (ReduceMean over axis 1 of [1, T, D]), torch Linear + mean(dim=1)")
    for col in ("T x D", "samples", "max error", "max error (LSB)", "host nodes"):
        table.add_column(col, justify="right")
    rng = np.random.default_rng(2)
    for T, D in ((64, 64), (32, 40), (197, 16)):
        torch.manual_seed(T)
        model = export(TokenMean(24, D), (1, T, 24))
        compiled = compile_model(model, "ultra96v2")
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        err = 0.0
        for _ in range(samples):
            x = rng.normal(0, 1, (1, T, 24)).astype(np.float32)
            err = max(err, float(np.abs(run(compiled, x) - sess.run(None, {"x": x})[0]).max()))
        table.add_row(f"{T} x {D}", str(samples), f"{err:.2e}", f"{err * 256:.2f}", str(len(compiled.summary.host_nodes)))
    return table


def single(op: str, shape, **attrs) -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], name="f", **attrs)], "f",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 9
    return m


def functions_table() -> Table:
    table = Table(title="Element-wise functions over every FP16BP8 input: stock SIMD fits (ultra96v2) and the Tandem unit")
    for col in ("function", "stock max error (LSB)", "Tandem max error (LSB)", "Tandem clocks/vector"):
        table.add_column(col, justify="right")
    xs = np.arange(-32768, 32768) / 256.0
    x = xs.reshape(1, 16, 64, 64).astype(np.float32)  # a map of 16 channels: rows of 64 vectors
    for op, function, attrs in (("Sigmoid", "sigmoid", {}), ("Tanh", "tanh", {}), ("Gelu", "gelu", {}),
                                ("Gelu", "gelu_tanh", {"approximate": "tanh"}), ("Sqrt", "sqrt", {})):
        model = single(op, x.shape, **attrs)
        exact = EXACT[function](xs)
        errs = []
        for arch in ("ultra96v2", TANDEM):
            compiled = compile_model(model, arch)
            if compiled.summary.host_nodes:
                errs.append("host")
                continue
            errs.append(f"{np.abs(run(compiled, x).reshape(-1) - exact).max() * 256:.3f}")
        tandem = compile_model(model, TANDEM, host=False)
        table.add_row(function, errs[0], errs[1], f"{clocks(tandem) / (x.size // 16):.0f}")
    return table


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--tables", default="ln,mean,functions")
    args = ap.parse_args()
    console = Console(width=140)
    tables = args.tables.split(",")
    if "ln" in tables:
        console.print(layer_norm_table(args.samples))
    if "mean" in tables:
        console.print(token_mean_table(args.samples))
    if "functions" in tables:
        console.print(functions_table())


if __name__ == "__main__":
    main()
