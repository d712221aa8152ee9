"""The transformers of issue 21 end to end: latency next to host fallback, error, class agreement.

    .venv/bin/python benchmarks/bench_transformers.py [--inputs 200] [--markdown]

vit_tiny and bert_tiny (``systolix.models.transformers``) and torch's own ``nn.TransformerEncoder``
export (``untuned/torch_encoder``, never tuned on), compiled without calibration for ``ultra96v2``
(what the accelerator cannot run goes to the host), for ``ultra96v2_tandem`` with host fallback,
and for ``ultra96v2_tandem`` with ``--no-host`` (the issue's target; a row saying why when the
compile refuses). Per row: the nodes left on the host; the latency of one frame on the
Ultra96-V2 board as ``systolix estimate`` models it: the accelerator segments' clocks at 300 MHz,
and the host's share: the fitted per-scalar I/O cost of every tensor crossing to and from the
accelerator plus each host segment timed with onnxruntime on this machine (one thread, median;
this machine's core, not the board's ARM cores); the largest error of the outputs against
onnxruntime over the inputs, next to the error model's bounds (``tests/error_model.py``: the
algebraic ``output_bounds`` and ``simulated_output_bounds``, each the smallest over the first
three inputs); and how often the compiled model picks onnxruntime's class.
Inputs are the models' example inputs (seeds 0 to N-1; random normal for the torch export).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

import systolix.models as M
from systolix.arch import get_board
from systolix.compiler import compile_model
from systolix.errors import SystolixError
from systolix.onnxrt import session
from systolix.perf.estimate import estimate, estimate_partitioned, segment_manifests
from systolix.runtime import SaturationWarning

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.error_model import output_bounds, simulated_output_bounds  # noqa: E402

MODELS = ["vit_tiny", "bert_tiny", "untuned/torch_encoder"]
COMPILES = [("ultra96v2", True), ("ultra96v2_tandem", True), ("ultra96v2_tandem", False)]
LSB = 2.0 ** -8
CHUNK = 25


def _model(name: str):
    if name.startswith("untuned/"):
        from systolix.models.untuned import build_untuned

        return build_untuned(name)
    return M.build(name)


def _inputs(name: str, model, seed: int) -> dict:
    if name.startswith("untuned/"):
        return {"input": np.random.default_rng(seed).standard_normal((1, 32, 64)).astype(np.float32)}
    return M.example_inputs(model, seed=seed)


def _latency(compiled, board) -> tuple[float, float]:
    """(accelerator ms, host ms: I/O + host segments) of one frame."""
    with tempfile.TemporaryDirectory(prefix="bench-transformers-") as tmp:
        path = compiled.save(Path(tmp))
        est = estimate_partitioned(path, board)[0] if segment_manifests(path) is not None else estimate(path, board)
    return est.accelerator_ms, est.host_ms + est.host_segments_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=200)
    parser.add_argument("--model", action="append", choices=MODELS)
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table (for the README)")
    args = parser.parse_args()
    board = get_board("ultra96-v2")
    cols = ["model", "arch", "host nodes", "accelerator ms", "host ms", "total ms", "largest error (LSB)",
            "bound (LSB)", "simulated bound (LSB)", f"same class ({args.inputs} inputs)"]
    rows = []
    console = Console(width=200, stderr=True)
    for name in args.model or MODELS:
        model = _model(name)
        items = [_inputs(name, model, k) for k in range(args.inputs)]
        ref_session = session(model, source=name)
        ref = np.array([ref_session.run(None, f)[0].reshape(-1) for f in items])
        bound = min(next(iter(output_bounds(model, f).values())) for f in items[:3])
        simulated = min(next(iter(simulated_output_bounds(model, f).values())) for f in items[:3])
        for arch, host in COMPILES:
            label = arch if host else f"{arch} --no-host"
            started = time.perf_counter()
            with console.status(f"{name} on {label}"):
                try:
                    compiled = compile_model(model, arch, host=host)
                except SystolixError as e:
                    rows.append([name, label, "does not compile: " + str(e).splitlines()[0][:90], "", "", "", "", "", "", ""])
                    continue
                accel_ms, host_ms = _latency(compiled, board)
                got = []
                for first in range(0, len(items), CHUNK):
                    part = items[first:first + CHUNK]
                    feeds = {k: np.stack([it[k] for it in part]) for k in part[0]}
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", SaturationWarning)
                        got.append(next(iter(compiled.run(feeds, batch=True).values())).reshape(len(part), -1))
                got = np.concatenate(got)
            err = float(np.max(np.abs(got - ref)))
            same = float(np.mean(np.argmax(got, axis=1) == np.argmax(ref, axis=1)))
            hosts = len(compiled.summary.host_reasons)
            console.print(f"{name} on {label}: {time.perf_counter() - started:.0f} s")
            rows.append([name, label, str(hosts), f"{accel_ms:.3f}", f"{host_ms:.3f}", f"{accel_ms + host_ms:.3f}",
                         f"{err / LSB:.1f}", f"{bound / LSB:.0f}", f"{simulated / LSB:.0f}", f"{same:.1%}"])
    if args.markdown:
        print("| " + " | ".join(cols) + " |")
        print("| " + " | ".join("---" if c in ("model", "arch") else "---:" for c in cols) + " |")
        for r in rows:
            print("| " + " | ".join(r) + " |")
        return
    table = Table(title="Transformers on the Ultra96-V2 (latency model), against onnxruntime")
    for c in cols:
        table.add_column(c, justify="left" if c in ("model", "arch") else "right")
    for r in rows:
        table.add_row(*r)
    Console(width=200).print(table)


if __name__ == "__main__":
    main()
