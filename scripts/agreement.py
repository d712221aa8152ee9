"""How often compiled classifiers pick onnxruntime's class, on many inputs.

    .venv/bin/python scripts/agreement.py [--inputs 1000] [--model resnet20v2 ...] [--arch zcu104 ...] [--plain]

Inputs are the models' example inputs, seeds 0 to N-1; calibration samples are seeds 1000 on
(128 of them by default, as in the tests). For each model the first two rows are FP16BP8's own
limits: onnxruntime's logits rounded to the output format, then onnxruntime with the input and
every computed tensor rounded to FP16BP8 and every product exact, what no FP16BP8 program can be
expected to beat (``systolix.models.rounded``). ``--option branch_scale=1.0`` passes a builder
option. ``--model yolov4_tiny`` (not a classifier: its errors count) and the small torch models
of ``tests/torch_models.py`` (``torch_cnn``, ...; random normal inputs, as their batch norms were
fitted to) and the held-out ``untuned/vgg``, ... (``systolix.models.untuned``, random normal inputs) are there for the errors against the limit (the column "x limit": the RMS error
over the every-tensor-rounded row's). Takes 30 to 90 s per model and array on two cores for 1,000 inputs (MobileNet,
ResNet-20); the MLP takes seconds. ``--model vit_tiny --model bert_tiny --arch ultra96v2 --arch
ultra96v2_tandem`` (issue 21's transformers; ``--no-host`` for the unit with no host fallback). ``--model resnet50v2`` (not among the defaults) takes about
12 minutes for 1,000 inputs on ``ultra96v2``, 9 on ``zcu104`` and 24 on ``pynqz1``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
import warnings

import numpy as np
from rich.console import Console
from rich.table import Table

import systolix.models as M
from systolix.compiler import compile_model
from systolix.models.rounded import rounded_feeds, with_rounded_tensors
from systolix.numerics import DataType
from systolix.onnxrt import session as ort_session
from systolix.runtime import SaturationWarning

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import torch_models  # noqa: E402  (tests/torch_models.py: small torch.nn models exported to ONNX)

CLASSIFIERS = ["mlp", "mobilenetv2_block", "resnet20v2"]
# Not run by default: 0.5 to 1.4 s per input on two cores, and 0.8 s per calibration sample.
LARGE_CLASSIFIERS = ["resnet50v2"]
OTHERS = ["yolov4_tiny", *torch_models.NAMES]
# Issue 21's transformers: not run by default; with ``--arch ultra96v2 --arch ultra96v2_tandem``.
TRANSFORMERS = ["vit_tiny", "bert_tiny"]
# Held-out models (``systolix.models.untuned``), never tuned on: measured, on random normal inputs.
HELD_OUT = ["untuned/vgg", "untuned/wide_resnet", "untuned/separable", "untuned/unet", "untuned/audio", "untuned/mlp",
            "untuned/dense"]
ARCHS = ["pynqz1", "ultra96v2", "zcu104"]
MORE_ARCHS = ["ultra96v2_tandem"]
LSB = DataType.FP16BP8.resolution


# Inputs run this many at a time: the emulator keeps a copy of the constants per batch item
# (ResNet-50's 1.5 M vectors are 190 MB each).
CHUNK = 16


def _run(compiled, items: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """The compiled model's first output on every input, and which inputs saturated (counted
    here, so their warnings are not printed too)."""
    outputs, saturated = [], []
    for first in range(0, len(items), CHUNK):
        part = items[first:first + CHUNK]
        feeds = {key: np.stack([it[key] for it in part]) for key in part[0]}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SaturationWarning)
            values, per_item = compiled.run_counting(feeds, batch=True, threads=2)
        outputs.append(next(iter(values.values())).reshape(len(part), -1))
        saturated.append(per_item > 0)
    return np.concatenate(outputs), np.concatenate(saturated)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=128, help="calibration samples")
    parser.add_argument("--model", action="append", choices=CLASSIFIERS + LARGE_CLASSIFIERS + OTHERS + TRANSFORMERS + HELD_OUT)
    parser.add_argument("--arch", action="append", choices=ARCHS + MORE_ARCHS)
    parser.add_argument("--no-host", action="store_true", help="compile with no host fallback (an error if a node cannot lower)")
    parser.add_argument("--plain", action="store_true", help="also compile without calibration data")
    parser.add_argument("--only-plain", action="store_true", help="compile without calibration data only")
    parser.add_argument("--estimate-gains", action=argparse.BooleanOptionalAction, default=True,
                        help="plain compiles with gains estimated from the model itself (the default; "
                             "--no-estimate-gains: compile_model(estimate_gains=False))")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a builder option for the models, e.g. branch_scale=1.0 (a number)")
    args = parser.parse_args()
    options = {}
    for option in args.option:
        key, _, value = option.partition("=")
        try:
            options[key] = float(value)
        except ValueError:
            parser.error(f"--option {option!r}: expected KEY=NUMBER, e.g. branch_scale=1.0")
    console = Console(width=240)
    table = Table(title=f"Same class as onnxruntime on {args.inputs:,} inputs")
    for col in ["model", "array", "compile", "same class", "error RMS (LSB)", "x limit", "top-2 difference's error RMS (LSB)",
                "median largest (LSB)", "largest (LSB)", "inputs saturated", "misses' top-2 margins (LSB)"]:
        table.add_column(col, justify="left" if col in ("model", "array", "compile", "misses' top-2 margins (LSB)") else "right")
    for name in args.model or CLASSIFIERS:
        if name in torch_models.NAMES:
            model, inputs = torch_models.build(name), torch_models.normal_inputs
        elif name in HELD_OUT:
            from systolix.models.untuned import build_untuned

            model, inputs = build_untuned(name), torch_models.normal_inputs
        else:
            inputs = M.example_inputs
            try:
                model = M.build(name, **options)
            except M.ModelBuildError as e:
                parser.error(str(e))
        session = ort_session(model, source=name)
        rounded = ort_session(with_rounded_tensors(model), source=f"{name} (every tensor rounded)")
        items = [inputs(model, seed=k) for k in range(args.inputs)]
        ref = np.array([session.run(None, feeds)[0].reshape(-1) for feeds in items])
        top2 = np.sort(ref, axis=1)[:, -2:]
        margin = (top2[:, 1] - top2[:, 0]) / LSB
        calibration = [inputs(model, seed=1000 + k) for k in range(args.samples)]
        ceiling = np.mean(np.argmax(np.round(ref / LSB), axis=1) == np.argmax(ref, axis=1))
        table.add_row(name, "", "onnxruntime, logits rounded to FP16BP8", f"{ceiling:.1%}", "", "", "", "", "", "",
                      f"{np.mean(margin < 1):.1%} of inputs under 1 LSB")
        floor = np.array([rounded.run(None, rounded_feeds(feeds))[0].reshape(-1) for feeds in items])
        limit = _add_row(table, name, "", "onnxruntime, every tensor rounded", floor, ref, margin,
                         np.zeros(len(items), bool))
        for arch in args.arch or ARCHS:
            compiles = [("plain", None)] if args.plain or args.only_plain else []
            for label, samples in compiles + ([] if args.only_plain else [("calibrated", calibration)]):
                started = time.perf_counter()
                with console.status(f"{name} on {arch}, {label}"):
                    compiled = compile_model(model, arch, calibration=samples, host=not args.no_host,
                                             estimate_gains=args.estimate_gains and samples is None)
                hosts = len(getattr(compiled.summary, "host_reasons", {}) or {})
                if hosts:
                    label += f", {hosts} host nodes"
                got, saturated = _run(compiled, items)
                _add_row(table, name, arch, f"{label} ({time.perf_counter() - started:.0f} s)", got, ref, margin,
                         saturated, limit)
    console.print(table)


def _add_row(table: Table, name: str, arch: str, label: str, got: np.ndarray, ref: np.ndarray, margin: np.ndarray,
             saturated: np.ndarray, limit: float | None = None) -> float:
    """One row: agreement and errors of ``got`` against ``ref`` (``[inputs, classes]``), and the
    RMS error over ``limit``'s; returns the RMS error. The error of the top-2 difference (what
    decides the class) leaves out inputs that saturated."""
    err = (got - ref) / LSB
    worst = np.max(np.abs(err), axis=1)
    miss = np.flatnonzero(np.argmax(got, axis=1) != np.argmax(ref, axis=1))
    order = np.argsort(ref, axis=1)
    rows = np.arange(len(ref))
    top2 = (err[rows, order[:, -1]] - err[rows, order[:, -2]])[~saturated]
    rms = float(np.sqrt(np.mean(err ** 2)))
    table.add_row(name, arch, label, f"{1 - len(miss) / len(ref):.1%}", f"{rms:.2f}",
                  f"{rms / limit:.2f}" if limit else "", f"{np.sqrt(np.mean(top2 ** 2)):.2f}" if top2.size else "", f"{np.median(worst):.2f}",
                  f"{np.max(worst):.1f}", f"{int(np.count_nonzero(saturated))}",
                  ", ".join(f"{m:.1f}" for m in sorted(margin[miss])))
    return rms


if __name__ == "__main__":
    main()
