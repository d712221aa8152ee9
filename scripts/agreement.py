"""How often compiled classifiers pick onnxruntime's class, on many inputs.

    .venv/bin/python scripts/agreement.py [--inputs 1000] [--model resnet20v2 ...] [--arch zcu104 ...] [--plain]

Inputs are the models' example inputs, seeds 0 to N-1; calibration samples are seeds 1000 on
(128 of them), as in the tests. For each model the first row is FP16BP8's own limit:
onnxruntime's logits rounded to the output format. Takes 30 to 90 s per model and array on two
cores for 1,000 inputs (MobileNet, ResNet-20); the MLP takes seconds. ``--model resnet50v2``
(not among the defaults) takes about 1.3 s per input on ``ultra96v2``.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import onnxruntime as ort
from rich.console import Console
from rich.table import Table

import systolix.models as M
from systolix.compiler import compile_model
from systolix.runtime import SaturationWarning

CLASSIFIERS = ["mlp", "mobilenetv2_block", "resnet20v2"]
# Not run by default: about 1.3 s per input on two cores (ultra96v2), and 0.8 s per calibration sample.
LARGE_CLASSIFIERS = ["resnet50v2"]
ARCHS = ["pynqz1", "ultra96v2", "zcu104"]
LSB = 2.0 ** -8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=128, help="calibration samples")
    parser.add_argument("--model", action="append", choices=CLASSIFIERS + LARGE_CLASSIFIERS)
    parser.add_argument("--arch", action="append", choices=ARCHS)
    parser.add_argument("--plain", action="store_true", help="also compile without calibration data")
    args = parser.parse_args()
    console = Console(width=200)
    table = Table(title=f"Same class as onnxruntime on {args.inputs:,} inputs")
    for col in ["model", "array", "compile", "same class", "error RMS (LSB)", "median largest (LSB)", "largest (LSB)",
                "saturated", "misses' top-2 margins (LSB)"]:
        table.add_column(col, justify="left" if col in ("model", "array", "compile", "misses' top-2 margins (LSB)") else "right")
    for name in args.model or CLASSIFIERS:
        model = M.build(name)
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        items = [M.example_inputs(model, seed=k) for k in range(args.inputs)]
        ref = np.array([session.run(None, feeds)[0].reshape(-1) for feeds in items])
        top2 = np.sort(ref, axis=1)[:, -2:]
        margin = (top2[:, 1] - top2[:, 0]) / LSB
        batch = {key: np.stack([it[key] for it in items]) for key in items[0]}
        calibration = [M.example_inputs(model, seed=1000 + k) for k in range(args.samples)]
        ceiling = np.mean(np.argmax(np.round(ref / LSB), axis=1) == np.argmax(ref, axis=1))
        table.add_row(name, "", "onnxruntime rounded to FP16BP8", f"{ceiling:.1%}", "", "", "", "",
                      f"{np.mean(margin < 1):.1%} of inputs under 1 LSB")
        for arch in args.arch or ARCHS:
            for label, samples in ([("plain", None)] if args.plain else []) + [("calibrated", calibration)]:
                started = time.perf_counter()
                with console.status(f"{name} on {arch}, {label}"):
                    compiled = compile_model(model, arch, calibration=samples)
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always", SaturationWarning)
                        got = next(iter(compiled.run(batch, threads=2).values())).reshape(len(items), -1)
                saturated = sum(1 for w in caught if issubclass(w.category, SaturationWarning))
                err = (got - ref) / LSB
                worst = np.max(np.abs(err), axis=1)
                miss = np.flatnonzero(np.argmax(got, axis=1) != np.argmax(ref, axis=1))
                table.add_row(name, arch, f"{label} ({time.perf_counter() - started:.0f} s)",
                              f"{1 - len(miss) / len(items):.1%}", f"{np.sqrt(np.mean(err ** 2)):.2f}",
                              f"{np.median(worst):.2f}", f"{np.max(worst):.1f}",
                              "yes" if saturated else "no",
                              ", ".join(f"{m:.1f}" for m in sorted(margin[miss])))
    console.print(table)


if __name__ == "__main__":
    main()
