#!/usr/bin/env python
"""A SHA-256 digest table of the compiler's output for every test and benchmark model.

    .venv/bin/python scripts/artifact_digest.py > /tmp/digests.txt        # everything (about 15 min)
    .venv/bin/python scripts/artifact_digest.py --only resnet20v2 --only ops/relu
    .venv/bin/python scripts/artifact_digest.py --quick                   # no large models
    diff /tmp/before.txt /tmp/after.txt                                   # what a change did

Every model builder of the zoo (``systolix.models``), the bundled digits example and Tensil's
speech model are compiled for ``pynqz1``, ``ultra96v2``, ``zcu104`` and ``zcu104_uram`` with each
of Tensil's four strategies, plus a calibrated compile of a few models. One line per artifact
file: ``model | arch | strategy | file | sha256``; a compile the compiler refuses gives one line
with its error message instead (refusals are behaviour too). The first line per
model is the digest of the ONNX model itself, so that a changed builder shows as such and not as
a changed compile. A refactoring of the compiler must leave this table unchanged.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

import numpy as np

PROJECT = Path(__file__).resolve().parents[1]
SPEECH = PROJECT.parent / "shared" / "conformance" / "tensil" / "speech_robot" / "speech_commands.onnx"
DIGITS = PROJECT / "src" / "systolix" / "examples" / "digits_cnn.onnx"
ARCHS = ("pynqz1", "ultra96v2", "zcu104", "zcu104_uram")
STRATEGIES = ("local-isolated", "local-vars", "local-consts", "local-vars-and-consts")
# Calibrated compiles: (model, arch, samples). ResNet-50's head is split into parts (reductions).
CALIBRATED = (
    ("resnet20v2", "ultra96v2", 8),
    ("mobilenetv2_block", "zcu104", 8),
    ("mlp", "pynqz1", 16),
    ("digits_cnn", "pynqz1", 8),
    ("ops/avgpool_3x3_pad_include", "ultra96v2", 8),
    ("ops/globalavgpool_large", "pynqz1", 8),
    ("ops/add_broadcast_pooled", "zcu104", 8),
    ("resnet50v2", "ultra96v2", 2),
)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def refusals(only: list[str]) -> list[str]:
    """What ``--no-host`` says of every model with a host node, and what the bad models get."""
    from systolix.models import MODELS, build_cached

    lines = []
    for name, spec in MODELS.items():
        if (only and name not in only) or spec.family not in ("host", "bad", "ops"):
            continue
        model = build_cached(name)
        if spec.family == "ops":
            import systolix

            placement = systolix.compile(model, "ultra96v2").summary.placement
            if "host" not in placement.values():
                continue
        lines += compile_lines(f"{name} no-host", model, "ultra96v2", "local-isolated", host=False)
    return lines


def models(only: list[str], quick: bool):
    """(name, onnx.ModelProto) of every model to compile, in a fixed order."""
    import onnx

    from systolix.models import MODELS, build_cached

    for name, spec in MODELS.items():
        if spec.family == "bad" or (only and name not in only) or (quick and spec.large):
            continue
        yield name, build_cached(name)
    for name, path in (("example/digits_cnn", DIGITS), ("tensil/speech_commands", SPEECH)):
        if not only or name in only:
            yield name, onnx.load(str(path))


def compile_lines(label: str, model, arch: str, strategy: str, **options) -> list[str]:
    import systolix
    from systolix.errors import SystolixError

    try:
        compiled = systolix.compile(model, arch, strategy=strategy, name="m", **options)
    except SystolixError as e:
        message = " ".join(str(e).split())
        return [f"{label} | {arch} | {strategy} | error | {type(e).__name__}: {message}"]
    return [f"{label} | {arch} | {strategy} | {fname} | {sha(data)}" for fname, data in sorted(compiled.artifacts.items())]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], help="only this model (repeatable)")
    parser.add_argument("--quick", action="store_true", help="leave out the large models (ResNet-50, YOLOv4-tiny)")
    parser.add_argument("--no-calibrated", action="store_true", help="leave out the calibrated compiles")
    args = parser.parse_args(argv)

    from systolix.models import example_input_set

    started = time.perf_counter()
    built = {}
    for name, model in models(args.only, args.quick):
        built[name] = model
        print(f"{name} | onnx | - | model | {sha(model.SerializeToString())}", flush=True)
        for arch in ARCHS:
            for strategy in STRATEGIES:
                for line in compile_lines(name, model, arch, strategy):
                    print(line, flush=True)
        print(f"# {name}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    for line in refusals(args.only):
        print(line, flush=True)
    if not args.no_calibrated:
        for name, arch, count in CALIBRATED:
            if name not in built:
                continue
            samples = example_input_set(built[name], count, seed=7)
            stacked = {k: np.stack([s[k] for s in samples]) for k in samples[0]}
            for line in compile_lines(f"{name} calibrated({count})", built[name], arch, "local-isolated", calibration=stacked):
                print(line, flush=True)
            print(f"# {name} calibrated: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    print(f"# {time.perf_counter() - started:.0f} s in all", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
