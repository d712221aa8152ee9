#!/usr/bin/env python
"""Write the test and benchmark models as .onnx files, with a table of their sizes.

    python scripts/build_models.py -o models/                 # every model
    python scripts/build_models.py -o models/ resnet20v2 ops/conv_dilated_17ch
    python scripts/build_models.py -o models/ --family ops --opset 11
    python scripts/build_models.py --list                     # names and descriptions only

A name with a slash (``ops/relu``) becomes a sub-folder (``models/ops/relu.onnx``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from systolix.errors import SystolixError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="models to build (default: all, or all of --family)")
    parser.add_argument("-o", "--out", type=Path, help="folder to write the .onnx files into")
    parser.add_argument("--family", help="only this family: benchmark, network, classic, ops, host, cnn, bad")
    parser.add_argument("--opset", type=int, help="ONNX opset (default: each model's own default)")
    parser.add_argument("--small", action="store_true", help="skip the large models (ResNet-50, YOLOv4-tiny)")
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    args = parser.parse_args(argv)
    console = Console(highlight=False)
    try:
        import systolix.models as zoo

        names = args.names or zoo.names(family=args.family, large=False if args.small else None)
        unknown = [n for n in names if n not in zoo.MODELS]
        if unknown:
            zoo.build(unknown[0])  # raises the error with suggestions
        if args.list:
            table = Table("name", "family", "opsets", "description")
            for n in names:
                s = zoo.MODELS[n]
                table.add_row(n, s.family, f"{s.min_opset}..{s.max_opset} (default {s.default_opset})", s.description)
            console.print(table)
            return 0
        if args.out is None:
            raise SystolixError("give an output folder with -o/--out (or --list)")
        table = Table("model", "input shape", "parameters", "MACs", "opset", "build s", "file")
        for n in names:
            options = {} if args.opset is None else {"opset": args.opset}
            start = time.perf_counter()
            with console.status(f"building {n}"):
                model = zoo.build(n, **options)
            seconds = time.perf_counter() - start
            path = zoo.save(model, args.out / f"{n}.onnx")
            st = zoo.model_stats(model)
            shapes = ", ".join("x".join(map(str, s)) for s in st.inputs.values())
            table.add_row(n, shapes, f"{st.parameters:,}", f"{st.macs:,}", str(st.opset), f"{seconds:.2f}", str(path))
        console.print(table)
        return 0
    except SystolixError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
