#!/usr/bin/env python
"""Train the digits CNN (scikit-learn's 8x8 digits, NumPy training), export it to ONNX and score it.

    python scripts/train_digits_cnn.py -o out/      # writes out/digits_cnn.onnx and out/digits_heldout.npz

The held-out split (``x``: float32 N x 1 x 8 x 8 holding pixel / 16, ``y``: int64 labels) is the
one :func:`systolix.models.digits_split` returns; the printed accuracy comes from onnxruntime
running the exported file on it.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from systolix.errors import SystolixError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out", type=Path, required=True, help="output folder")
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--opset", type=int, default=13)
    parser.add_argument("--no-cache", action="store_true", help="train even if a cached result exists")
    args = parser.parse_args(argv)
    console = Console(highlight=False)
    try:
        from systolix.artifacts import write_bytes_atomic
        from systolix.models import build_digits_cnn, save
        from systolix.models.unit_scale import session

        start = time.perf_counter()
        with console.status("training the digits CNN"):
            result = build_digits_cnn(opset=args.opset, epochs=args.epochs, seed=args.seed, cache=not args.no_cache)
        seconds = time.perf_counter() - start
        model_path = save(result.model, args.out / "digits_cnn.onnx")
        buf = io.BytesIO()
        np.savez(buf, x=result.heldout_x, y=result.heldout_y)
        write_bytes_atomic(args.out / "digits_heldout.npz", buf.getvalue())
        sess = session(result.model)
        predicted = np.array([sess.run(None, {"digits": x[None]})[0].argmax() for x in result.heldout_x])
        ort_accuracy = float((predicted == result.heldout_y).mean())
        table = Table("figure", "value")
        table.add_row("train accuracy (NumPy)", f"{result.train_accuracy:.4f}")
        table.add_row("held-out accuracy (NumPy)", f"{result.heldout_accuracy:.4f}")
        table.add_row(f"held-out accuracy (onnxruntime, {len(predicted)} images)", f"{ort_accuracy:.4f}")
        table.add_row("seconds (training or cache)", f"{seconds:.1f}")
        table.add_row("model", str(model_path))
        table.add_row("held-out split", str(args.out / "digits_heldout.npz"))
        console.print(table)
        return 0
    except SystolixError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
