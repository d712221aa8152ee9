"""The zoo table: real architectures (torchvision's constructors with random weights, a U-Net
with transposed convolutions, a YOLOv5n-style detector) compiled for ultra96v2.

    .venv/bin/python benchmarks/bench_zoo.py [--markdown | --json] [--size 64] [--zoo-model NAME ...]

The same as ``systolix bench --zoo``: per model, whether it compiles, its MACs and the share on
the accelerator, host nodes and why, the latency on ultra96-v2 under the latency model of
``systolix estimate``, and the emulator's RMS output error against onnxruntime next to the
FP16BP8 limit (every computed tensor rounded). Needs torch and torchvision (the dev extra).
"""

from __future__ import annotations

import sys

from systolix.cli import main

if __name__ == "__main__":
    main(["bench", "--zoo", *sys.argv[1:]])
