"""Attention on the accelerator (``ultra96v2_tandem``): accuracy against onnxruntime and clocks.

    .venv/bin/python benchmarks/bench_attention_tandem.py [--samples 3]

Attention blocks written as torch modules (``nn.Linear`` projections, ``reshape``/``transpose``
to heads, ``q @ k / sqrt(Dh)``, ``softmax``, ``@ v``, back to tokens, the out-projection) and
exported by torch, so nothing here was tuned on them, plus the first attention block of the zoo's
``vit_tiny`` and ``bert_tiny``; compiled with no host and run on the emulator on unit-scale
tokens. Per block: the largest error of the output against onnxruntime, of the context (the
Transpose + Reshape back to tokens) against onnxruntime and against NumPy's attention on the
accelerator's own projections (the new kernels alone: scores, Tandem softmax, ``P x V``), the
bound ``tests/unit/test_attention_tandem.py`` derives for the latter, all in LSB of FP16BP8, and
the clocks of the scores and context layers and the Tandem unit's busy clocks in ``systolix estimate``.
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import torch
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit"))
import test_attention_tandem as t  # noqa: E402  (the graphs' helpers and the derived bound)

from systolix.arch import get_board  # noqa: E402
from systolix.compiler import compile_model  # noqa: E402
from systolix.models import build  # noqa: E402
from systolix.perf.estimate import TANDEM_UNIT, estimate  # noqa: E402

LSB = 2.0 ** -8


class Attention(torch.nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.h, self.dh = heads, dim // heads
        self.q, self.k, self.v, self.out = (torch.nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x):
        _, T, D = x.shape
        q = self.q(x).reshape(1, T, self.h, self.dh).transpose(1, 2)
        k = self.k(x).reshape(1, T, self.h, self.dh).permute(0, 2, 3, 1)
        v = self.v(x).reshape(1, T, self.h, self.dh).transpose(1, 2)
        p = torch.softmax(q @ k / self.dh ** 0.5, dim=-1)
        return self.out((p @ v).transpose(1, 2).reshape(1, T, D))


def torch_block(T: int, D: int, H: int) -> tuple[onnx.ModelProto, dict]:
    """The exported block and the names of its tensors (input, q/k/v projections, context, output)."""
    torch.manual_seed(T + D + H)
    net = Attention(D, H).eval()
    buf = io.BytesIO()
    torch.onnx.export(net, torch.zeros(1, T, D), buf, input_names=["x"], output_names=["y"], opset_version=17, dynamo=False)
    m = onnx.shape_inference.infer_shapes(onnx.load_from_string(buf.getvalue()))
    nodes = m.graph.node
    adds = [n.output[0] for n in nodes if n.op_type == "Add"]
    reshapes = [n.output[0] for n in nodes if n.op_type == "Reshape"]
    return m, {"x": "x", "proj": adds[:3], "context": reshapes[-1], "out": "y", "H": H}


def zoo_block(name: str) -> tuple[onnx.ModelProto, dict]:
    m = build(name)
    x = next(n for n in m.graph.node if n.name == "block0_attn_q_matmul").input[0]
    return m, {"x": x, "proj": [f"block0_attn_{p}_add" for p in "qkv"], "context": "block0_attn_context_reshape",
               "out": "block0_attn_out_add", "H": 4}


def measure(model: onnx.ModelProto, names: dict, samples: int) -> list:
    xn, proj, ctx_name, out_name, H = names["x"], names["proj"], names["context"], names["out"], names["H"]
    block = t.extract(model, [xn], [out_name])
    full = compile_model(block, t.TANDEM, host=False)
    projections = compile_model(t.extract(model, [xn], proj), t.TANDEM, host=False)
    context = compile_model(t.extract(model, [xn], [ctx_name]), t.TANDEM, host=False)
    ort_model = t.extract(model, [xn], [ctx_name, out_name])
    shape = [d.dim_value for d in block.graph.input[0].type.tensor_type.shape.dim]
    T, D = shape[1:]
    rng = np.random.default_rng(0)
    out_err = ctx_err = kernel_err = kernel_bound = 0.0
    for _ in range(samples):
        x = rng.normal(0, 1, shape).astype(np.float32)
        c_ort, out_ort = (r.reshape(T, D) for r in t.ort_run(ort_model, {xn: x}))
        pr = projections.run({xn: x})
        q, k, v = (np.asarray(pr[n], np.float64).reshape(T, D) for n in proj)
        c_np, scores = t.softmax_attention(q, k, v, H)
        c_acc = np.asarray(context.run({xn: x})[ctx_name], np.float64).reshape(T, D)
        out_acc = np.asarray(full.run({xn: x})[out_name], np.float64).reshape(T, D)
        out_err = max(out_err, float(np.abs(out_acc - out_ort).max()))
        ctx_err = max(ctx_err, float(np.abs(c_acc - c_ort).max()))
        kernel_err = max(kernel_err, float(np.abs(c_acc - c_np).max()))
        kernel_bound = max(kernel_bound, float(t.context_bound(scores, v, H).max()))
    with tempfile.TemporaryDirectory() as d:
        est = estimate(full.save(d), get_board("ultra96-v2"))
    layers = est.layers or []
    at = next(k for k, l in enumerate(layers) if "Softmax" in l.ops)  # scores (+ Div + Softmax), then the context
    scores, ctx = layers[at].cycles, layers[at + 1].cycles
    return [f"{T} x {D}, {H} heads", f"{out_err / LSB:.2f}", f"{ctx_err / LSB:.2f}", f"{kernel_err / LSB:.2f}",
            f"{kernel_bound / LSB:.1f}", f"{scores:,.0f}", f"{ctx:,.0f}", f"{est.unit_busy[TANDEM_UNIT]:,.0f}",
            f"{est.cycles:,.0f}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=3)
    args = ap.parse_args()
    table = Table(title="Attention blocks on ultra96v2_tandem (emulator vs onnxruntime; errors in LSB of FP16BP8)")
    for col in ("block", "shape", "out err", "context err", "kernels' err", "kernels' bound", "scores clocks",
                "context clocks", "Tandem busy", "block clocks"):
        table.add_column(col, justify="right")
    blocks = [(f"torch {T}x{D}/{H}", torch_block(T, D, H)) for T, D, H in ((16, 32, 2), (50, 64, 4), (64, 128, 4))]
    blocks += [(name, zoo_block(name)) for name in ("vit_tiny", "bert_tiny")]
    for label, (model, names) in blocks:
        table.add_row(label, *measure(model, names, args.samples))
    Console().print(table)


if __name__ == "__main__":
    main()
