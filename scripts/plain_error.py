"""The plain compile's output error against onnxruntime: RMS and largest, in LSB of FP16BP8.

    .venv/bin/python scripts/plain_error.py resnet20v2 mobilenetv2_block untuned/vgg [--inputs 32] [--arch ultra96v2]

Standard normal inputs (seed 5), the default compile (gains estimated from the model), one batch
on the emulator; the first output. A quick check of one change to the plain numerics (the limit
and the calibrated compile: ``benchmarks/bench_accuracy.py``).
"""

from __future__ import annotations

import argparse

import numpy as np

import systolix
from systolix.models import build_cached
from systolix.models.untuned import UNTUNED, build_untuned
from systolix.onnxrt import session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--inputs", type=int, default=32)
    parser.add_argument("--arch", default="ultra96v2")
    args = parser.parse_args()
    for name in args.models:
        model = build_untuned(name) if name in UNTUNED else build_cached(name)
        compiled = systolix.compile(model, args.arch)
        ref_session = session(model)
        inp = ref_session.get_inputs()[0]
        shape = [d if isinstance(d, int) else 1 for d in inp.shape]
        xs = np.random.default_rng(5).standard_normal((args.inputs, *shape)).astype(np.float32)
        out = ref_session.get_outputs()[0].name
        ref = np.stack([ref_session.run([out], {inp.name: x})[0] for x in xs])
        ours = np.asarray(compiled.run({inp.name: xs}, batch=True)[out]).reshape(ref.shape)
        err = (ours - ref) * 2.0 ** compiled.arch.data_type.binary_point  # in LSB
        print(f"{name:24s} {args.arch}: RMS {np.sqrt(np.mean(err ** 2)):.3f} LSB, largest {np.abs(err).max():.1f} LSB", flush=True)


if __name__ == "__main__":
    main()
