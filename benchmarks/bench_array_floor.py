"""How close a compile can get to the compute bound on Tensil's array at all: the array floor.

    .venv/bin/python benchmarks/bench_array_floor.py [--model resnet20v2 ...]

Issue 19 asks for accelerator time within 70% of the compute bound (useful MACs / N^2 clocks).
Tensil's array has no second weight buffer: every weight block costs a LoadWeights of N + 1
vectors, and before it the last input must leave the array (2N - 1 clocks, ``SystolicArray.scala``;
the same figures as the timing model's). So no schedule beats the *array floor*: every nonzero
N x N weight block of every conv (after the compiler's packing of the stem) loaded exactly once,
streaming every output pixel of its layer (all images of the batch) through it, with nothing else
on the array:

    floor = sum over blocks of (output pixels x batch + (N + 1) + (2N - 1))

Layers without useful MACs (pools, per-channel batch norms) are left out, so the floor is a lower
bound. The table gives, for each model and board, the compute bound, the floor, the best share
of the compute bound any program can reach (compute bound / floor), our compile's accelerator
clocks under the fitted model (``systolix estimate``), its share, and how far it is above the
floor.

``--published``: the nine rows of Tensil's published benchmark table (local-isolated, batch 1)
and the least time any program takes there on Tensil's TCU, whose decoder holds every
instruction that uses a local-memory port until its last vector has passed (the decoder rule,
``docs/latency-model.md``): the MatMuls and weight loads of the array floor and the weights'
DRAM1 loads add up; only the array's drains can hide behind those loads. Every weight block's N
rows cross DRAM1 once at the port's peak rate, and the host writes and reads the model's own
input and output values (no padding) at the board's fitted cost a scalar:

    decoder floor = sum over blocks (pixels + N + 1) + max(blocks x (2N - 1), DRAM1 bytes / peak bytes a clock)

Published / that floor is the most any compile can gain over Tensil's published latency on the
row.
"""

from __future__ import annotations

import argparse
import tempfile

import numpy as np
from rich.console import Console
from rich.table import Table

from systolix.arch import get_architecture, get_board
from systolix.compiler import compile_model
from systolix.models import build_cached
from systolix.perf.estimate import estimate

# (model, architecture, strategy, board): issue 19's rows (ResNet-20 v2 on zcu104_uram at its
# best strategy; the benchmark table's default strategy elsewhere).
ROWS = [
    ("resnet20v2", "zcu104_uram", "local-vars-and-consts", "zcu104"),
    ("resnet20v2", "ultra96v2", "local-isolated", "ultra96-v2"),
    ("yolov4_tiny", "ultra96v2", "local-isolated", "ultra96-v2"),
    ("resnet50v2", "ultra96v2", "local-isolated", "ultra96-v2"),
]


def nonzero_blocks(coefficients: np.ndarray, n: int, diagonal: bool) -> int:
    """N x N weight blocks with a nonzero weight: per tap (and phase) and pair of channel groups;
    a per-channel (diagonal) input has one block per tap and channel group."""
    if diagonal:  # [C, KH, KW]
        c = coefficients.shape[0]
        groups = -(-c // n)
        padded = np.zeros((groups * n,) + coefficients.shape[1:], bool)
        padded[:c] = coefficients != 0
        return int(np.count_nonzero(padded.reshape(groups, n, -1).any(axis=1)))
    cout, cin = coefficients.shape[:2]
    taps = int(np.prod(coefficients.shape[2:]))
    go, gi = -(-cout // n), -(-cin // n)
    padded = np.zeros((go * n, gi * n, taps), bool)
    padded[:cout, :cin] = (coefficients != 0).reshape(cout, cin, taps)
    return int(np.count_nonzero(padded.reshape(go, n, gi, n, taps).any(axis=(1, 3))))


def array_floor(hir_layers, n: int, batch: int = 1) -> tuple[int, int]:
    """``(floor clocks, weight blocks)`` of the conv layers with useful MACs."""
    floor = blocks = 0
    for layer in hir_layers:
        if layer.kind != "conv" or not layer.macs:
            continue
        pixels = layer.output.H * layer.output.W // layer.phases
        for inp in layer.inputs:
            diagonal = inp.weights is None
            b = nonzero_blocks(inp.coefficients, n, diagonal)
            blocks += b
            floor += b * (pixels * batch + (n + 1) + (2 * n - 1))
    return floor, blocks


def row(name: str, arch_name: str, strategy: str, board_name: str) -> dict:
    arch = get_architecture(arch_name)
    compiled = compile_model(build_cached(name), arch, strategy=strategy)
    layers = [layer for seg in compiled.summary.segments if seg.kind == "accelerator" for layer in seg.hir.layers]
    floor, blocks = array_floor(layers, arch.array_size)
    with tempfile.TemporaryDirectory(prefix="systolix-floor-") as tmp:
        est = estimate(compiled.save(tmp), get_board(board_name))
    bound = est.macs / arch.array_size**2
    return {"model": name, "arch": arch_name, "strategy": strategy, "board": board_name, "N": arch.array_size, "compute_bound": bound,
            "floor": floor, "blocks": blocks, "cycles": est.cycles}


def io_scalars(onnx_model) -> int:
    """Values of the model's graph inputs (not initializers) and outputs, at batch 1."""
    inits = {i.name for i in onnx_model.graph.initializer}

    def count(values) -> int:
        return sum(int(np.prod([max(1, d.dim_value) for d in v.type.tensor_type.shape.dim])) for v in values if v.name not in inits)

    return count(onnx_model.graph.input) + count(onnx_model.graph.output)


def published_row(name: str, board_name: str) -> dict:
    """One row of Tensil's published table: its latency, the decoder floor and our compile."""
    from systolix.compiler import program_estimate
    from systolix.perf.bench import PUBLISHED_FIGURES

    board = get_board(board_name)
    arch = board.architecture
    onnx_model = build_cached(name)
    compiled = compile_model(onnx_model, arch, tune=board.timing)
    n = arch.array_size
    layers = [layer for seg in compiled.summary.segments if seg.kind == "accelerator" for layer in seg.hir.layers]
    floor, blocks = array_floor(layers, n)
    dram1 = blocks * n * arch.vector_bytes / board.bytes_per_cycle
    decoder_floor = floor - blocks * (2 * n - 1) + max(blocks * (2 * n - 1), dram1)
    host_ms = io_scalars(onnx_model) * board.host_ns_per_scalar * 1e-6
    est = program_estimate(compiled, board)  # a model cut by its constants: its programs in a row
    per_ms = board.clock_mhz * 1e3
    return {"model": name, "board": board_name, "published_ms": PUBLISHED_FIGURES[name][board_name][0],
            "floor_ms": decoder_floor / per_ms + host_ms, "host_ms": host_ms, "dram1_ms": dram1 / per_ms,
            "array_floor_ms": floor / per_ms, "our_ms": est.latency_ms}


def published_table(models: list[str] | None) -> None:
    from systolix.perf.bench import BENCH_BOARDS, BENCH_MODELS

    table = Table(title="Tensil's published rows: the least any program takes on Tensil's TCU at batch 1 (the decoder floor)")
    for col in ("model", "board", "array floor ms", "weights via DRAM1 ms", "host I/O ms", "decoder floor ms", "our ms",
                "published ms", "published / floor", "published / ours"):
        table.add_column(col, justify="left" if col in ("model", "board") else "right")
    console = Console(width=200)
    best, ours = [], []
    for name in [m for m in BENCH_MODELS if not models or m in models]:
        for board_name in BENCH_BOARDS:
            r = published_row(name, board_name)
            best.append(r["published_ms"] / r["floor_ms"])
            ours.append(r["published_ms"] / r["our_ms"])
            table.add_row(name, board_name, f"{r['array_floor_ms']:.3g}", f"{r['dram1_ms']:.3g}", f"{r['host_ms']:.3g}",
                          f"{r['floor_ms']:.3g}", f"{r['our_ms']:.3g}", f"{r['published_ms']:g}", f"{best[-1]:.2f}x",
                          f"{ours[-1]:.2f}x")
            console.print(f"{name} on {board_name}: done")
    console.print(table)
    geo = lambda xs: float(np.exp(np.mean(np.log(xs))))  # noqa: E731
    console.print(f"geometric mean over {len(best)} rows: published / decoder floor {geo(best):.3f}x, published / ours {geo(ours):.3f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", action="append", help="only this model (repeatable)")
    parser.add_argument("--published", action="store_true", help="the nine rows of Tensil's published table and their decoder floor")
    args = parser.parse_args()
    if args.published:
        published_table(args.model)
        return
    rows = [r for r in ROWS if not args.model or r[0] in args.model]
    table = Table(title="The array floor: the least clocks any program takes on Tensil's array (batch 1)")
    for col in ("model", "arch", "strategy", "board", "N", "compute bound", "weight blocks", "array floor",
                "best possible share", "our clocks", "our share", "ours / floor"):
        table.add_column(col, justify="left" if col in ("model", "arch", "strategy", "board") else "right")
    console = Console(width=200)
    for r in map(lambda args: row(*args), rows):
        table.add_row(r["model"], r["arch"], r["strategy"], r["board"], str(r["N"]), f"{r['compute_bound']:,.0f}",
                      f"{r['blocks']:,}", f"{r['floor']:,}", f"{r['compute_bound'] / r['floor']:.1%}",
                      f"{r['cycles']:,.0f}", f"{r['compute_bound'] / r['cycles']:.1%}",
                      f"{r['cycles'] / r['floor']:.2f}x")
        console.print(f"{r['model']} on {r['arch']}: done")
    console.print(table)


if __name__ == "__main__":
    main()
