"""Accuracy benchmark: how far each compile is from what FP16BP8 allows (issue 20).

    .venv/bin/python benchmarks/bench_accuracy.py [--arch ultra96v2] [--inputs 64] [--samples 64] [--no-large] [--no-calibrated] [MODEL ...]

For each model: the outputs' RMS error in LSB against onnxruntime's float model, over random
standard normal inputs (seeds from 0), of the format limit (onnxruntime with every computed tensor
rounded to FP16BP8 and products exact, ``systolix.models.rounded.with_rounded_tensors``), of the
plain compile (as compiled by default: gains estimated from the model itself) and of the compile
calibrated on ``--samples`` random normal samples (a seed of
their own, never the test inputs); the ratios to the limit, against issue 20's targets (plain
within 2.0x, calibrated within 1.3x), and the share of inputs whose class matches the float
model's. The figures come from ``systolix.accuracy.measure`` (what ``systolix accuracy`` runs),
outputs only. Models marked ``untuned`` (``systolix.models.untuned``: torch.nn modules, default
initialisation, torch's exporter) are kept out of every tuning loop: their rows are the honest ones.
The large models (YOLOv4-tiny, ResNet-50 v2) run on fewer inputs (``--large-inputs``).
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

import systolix.models as M
from systolix.accuracy import measure
from systolix.models.untuned import UNTUNED, build_untuned

PLAIN_TARGET, CALIBRATED_TARGET = 2.0, 1.3
# The benchmark models, the network test models (the digits CNN is trained, not random: left out),
# and the untuned ones.
TUNED = ["resnet20v2", "yolov4_tiny", "resnet50v2", "mobilenetv2_block", "mlp"]
LARGE = {"yolov4_tiny", "resnet50v2"}
DEFAULT = TUNED + list(UNTUNED)


def _build(name: str):
    return build_untuned(name) if name in UNTUNED else M.build_cached(name)


def _samples(model, count: int, seed: int) -> list[dict]:
    from systolix.accuracy import random_inputs
    from systolix.frontend import to_graph

    return random_inputs(to_graph(model), count, seed)


def _pct(v) -> str:
    return "-" if v is None else f"{v:.1%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=DEFAULT, help=f"default: {' '.join(DEFAULT)}")
    parser.add_argument("--arch", default="ultra96v2")
    parser.add_argument("--inputs", type=int, default=64, help="test inputs per model")
    parser.add_argument("--large-inputs", type=int, default=16, help="test inputs for YOLOv4-tiny and ResNet-50 v2")
    parser.add_argument("--samples", type=int, default=64, help="calibration samples")
    parser.add_argument("--no-large", action="store_true", help="leave out YOLOv4-tiny and ResNet-50 v2")
    parser.add_argument("--no-calibrated", action="store_true",
                        help="the plain compile only (ResNet-50 v2's calibration alone takes most of an hour)")
    args = parser.parse_args()
    names = [n for n in args.models if not (args.no_large and n in LARGE)]
    unknown = [n for n in names if n not in M.MODELS and n not in UNTUNED]
    if unknown:
        parser.error(f"unknown model {unknown[0]!r} (one of {', '.join(DEFAULT)})")
    console = Console(width=max(160, Console().width))
    table = Table(title=f"Outputs' RMS error (LSB of FP16BP8) against onnxruntime float on {args.arch}, random normal "
                        f"inputs; calibrated on {args.samples} other samples")
    for col in ["model", "untuned", "inputs", "limit", "plain", "calibrated", "plain / limit", "calibrated / limit",
                "same class: limit", "plain", "calibrated", "seconds"]:
        table.add_column(col, justify="left" if col in ("model", "untuned") else "right")
    started = time.perf_counter()
    met = []
    for name in names:
        t0 = time.perf_counter()
        with console.status(f"{name}"):
            model = _build(name)
            count = args.large_inputs if name in LARGE else args.inputs
            plain = measure(model, args.arch, count=count, seed=0, per_layer=False)
            calibrated = None
            if not args.no_calibrated:
                calibration = _samples(model, args.samples, seed=1_000_000)
                calibrated = measure(model, args.arch, count=count, seed=0, calibration=calibration, per_layer=False)
        limit = plain.limit_rms
        ratio_plain = plain.rms / limit if limit else float("nan")
        ratio_cal = None if calibrated is None else calibrated.rms / limit if limit else float("nan")
        met.append((ratio_plain <= PLAIN_TARGET, ratio_cal is not None and ratio_cal <= CALIBRATED_TARGET))
        first = plain.outputs[0]
        cal_first = None if calibrated is None else calibrated.outputs[0]
        cal_rms = "-" if calibrated is None else f"{calibrated.rms:.2f}"
        cal_ratio = "-" if ratio_cal is None else f"{'[red]' if ratio_cal > CALIBRATED_TARGET else ''}x{ratio_cal:.2f}"
        cal_agreement = "-" if cal_first is None else _pct(cal_first.agreement)
        table.add_row(name, "untuned" if name in UNTUNED else "", str(count), f"{limit:.2f}", f"{plain.rms:.2f}",
                      cal_rms, f"{'[red]' if ratio_plain > PLAIN_TARGET else ''}x{ratio_plain:.2f}", cal_ratio,
                      _pct(first.limit_agreement), _pct(first.agreement), cal_agreement,
                      f"{time.perf_counter() - t0:.0f}")
        console.print(f"{name}: limit {limit:.2f}, plain {plain.rms:.2f} (x{ratio_plain:.2f}), calibrated "
                      f"{cal_rms} ({cal_ratio.removeprefix('[red]')}), same class {_pct(first.limit_agreement)} / "
                      f"{_pct(first.agreement)} / {cal_agreement}, {time.perf_counter() - t0:.0f} s",
                      highlight=False)
    console.print(table)
    plain_ok = sum(p for p, _ in met)
    cal_ok = sum(c for _, c in met)
    calibrated_part = "not measured" if args.no_calibrated else f"{cal_ok} of {len(met)} (x{CALIBRATED_TARGET})"
    console.print(f"within the targets: plain {plain_ok} of {len(met)} (x{PLAIN_TARGET}), calibrated {calibrated_part}; "
                  "class agreement is the first output's, against the float model's class; '-' where the output is "
                  "not one class vector")
    console.print(f"run time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
