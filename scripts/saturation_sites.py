"""Where a compiled model saturates on the emulator: per layer and kind, on many inputs.

    .venv/bin/python scripts/saturation_sites.py [--model resnet20v2] [--arch ultra96v2] [--inputs 1000]
        [--samples 128] [--channel-headroom 2.5] [--layer-headroom 1.5] [--plain]

Inputs and calibration samples as ``scripts/agreement.py`` makes them (the models' example inputs,
seeds 0 to N-1; samples from seed 1000). The headroom options set ``amplify_weights``'
``CHANNEL_HEADROOM`` and ``LAYER_HEADROOM`` for this run. Each row: a layer of the program's layer
map (``systolix.layers`` in the ``.tmodel``), a kind of saturation as the emulator counts them
(``array``: a partial sum inside the systolic array; ``accumulate``: adding a MatMul's result into
the accumulators, i.e. the sums between blocks and taps; ``alu``: a SIMD result, e.g. a fused
tail's multiply or add; ``simd_accumulate``), the events and the inputs they happened on. The
emulator's kernel is run layer by layer for this (wrapped, nothing else changes). Issue 20: with
both headrooms cut to 1.25, ResNet-20 v2 saturated 17 of 1,000 inputs, none inside the array.
"""

from __future__ import annotations

import argparse
import collections
import warnings

import numpy as np
from rich.console import Console
from rich.table import Table

import systolix.hir_passes.amplify_weights as amplify
import systolix.models as M
from systolix.compiler import compile_model
from systolix.emulator import kernels

CHUNK = 16
# Positions of kernels.execute's arguments this script reads.
START, STOP, SATURATIONS = 12, 13, 21


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet20v2", choices=sorted(M.MODELS))
    parser.add_argument("--arch", default="ultra96v2")
    parser.add_argument("--inputs", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=128, help="calibration samples")
    parser.add_argument("--plain", action="store_true", help="compile without calibration data")
    parser.add_argument("--channel-headroom", type=float, default=amplify.CHANNEL_HEADROOM)
    parser.add_argument("--layer-headroom", type=float, default=amplify.LAYER_HEADROOM)
    args = parser.parse_args()
    amplify.CHANNEL_HEADROOM, amplify.LAYER_HEADROOM = args.channel_headroom, args.layer_headroom
    console = Console()
    model = M.build(args.model)
    samples = None if args.plain else [M.example_inputs(model, seed=1000 + k) for k in range(args.samples)]
    with console.status(f"compiling {args.model} for {args.arch}"):
        compiled = compile_model(model, args.arch, calibration=samples)
    extension = compiled.manifest.systolix
    layers = [(entry["name"], entry["first"], entry["end"]) for entry in (extension or {}).get("layers") or []]
    if not layers:
        parser.error(f"{args.model}: the compiled program has no layer map (a model with host segments?)")
    cuts = sorted({first for _, first, _ in layers} | {end for _, _, end in layers})
    events: collections.Counter = collections.Counter()
    hit: dict[tuple[str, str], set] = collections.defaultdict(set)
    offset = [0]  # the first input of the batch running
    execute = kernels.execute

    def by_layer(*given):
        """``kernels.execute`` one layer's instructions at a time, saturations counted per layer."""
        given = list(given)
        start, stop, saturations = given[START], given[STOP], given[SATURATIONS]
        result = (start, kernels.STATUS_DONE)
        for end in [c for c in cuts if start < c < stop] + [stop]:
            given[START], given[STOP] = start, end
            before = saturations.copy()
            result = execute(*given)
            name = next((n for n, first, last in layers if first <= start < last), f"instruction {start}")
            added = saturations - before
            for kind in np.flatnonzero(added.sum(axis=0)):
                key = (name, kernels.SAT_KINDS[kind])
                events[key] += int(added[:, kind].sum())
                hit[key].update(offset[0] + np.flatnonzero(added[:, kind]))
            start = result[0]
            if result[1] != kernels.STATUS_DONE or start != end:
                break
        return result

    kernels.execute = by_layer
    saturated = set()
    try:
        for first in range(0, args.inputs, CHUNK):
            with console.status(f"running inputs {first} to {min(args.inputs, first + CHUNK) - 1}"):
                items = [M.example_inputs(model, seed=k) for k in range(first, min(args.inputs, first + CHUNK))]
                feeds = {key: np.stack([it[key] for it in items]) for key in items[0]}
                offset[0] = first
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    _, counts = compiled.run_counting(feeds, batch=True, threads=1)
                saturated.update(first + np.flatnonzero(counts))
    finally:
        kernels.execute = execute
    label = "plain" if args.plain else f"calibrated, headrooms {args.channel_headroom} / {args.layer_headroom}"
    table = Table(title=f"{args.model} on {args.arch} ({label}): {len(saturated)} of {args.inputs} inputs saturated")
    for col in ["layer", "kind", "events", "inputs"]:
        table.add_column(col, justify="left" if col in ("layer", "kind") else "right")
    for (name, kind), count in events.items():
        table.add_row(name, kind, f"{count:,}", f"{len(hit[(name, kind)])}")
    console.print(table)


if __name__ == "__main__":
    main()
