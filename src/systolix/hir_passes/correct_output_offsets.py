"""Correct output offsets: in calibrated compiles, take the error the compiled program makes the
same on every sample out of each model output's bias.

Every rounding the accelerator makes is unbiased on its own, but a rounded constant times a
channel's mean is not (a weight's rounding, a gain's undo), and ReLUs pass noise on one side:
what is left after ``round_weights``' corrections adds up, layer after layer, into an error each
output channel makes on every input alike. On ``benchmarks/bench_accuracy.py``'s calibrated
compiles (``ultra96v2``, 64 random normal inputs) that offset was 0.47 of ResNet-20 v2's 1.06
LSB RMS at the logits (the format's limit: 0.05 of 0.68) and 1.02 of the MobileNetV2 stack's
2.31. The samples show it: the compiler runs them through the compiled program on the emulator,
measures each output channel's mean error against onnxruntime's float model
(``systolix.compiler.output_offsets``), and compiles again with that mean taken out of the bias
of the layer writing the output: at the accumulators' scale, where the layer's gain leaves a
step of ``1/G`` LSB. The layers before are the same IR (``CompileContext.memo``), so nothing else
moves. ResNet-20 v2's logits then erred by 0.94 LSB RMS, 0.13 of it the offset (1.57 -> 1.39
times the limit's error); the models no one tuned on, whose offsets were small (their batch norms
fitted to inputs like the benchmark's), by 0.00 to 0.03 times the limit less.

Only where the output's own layer is linear after its bias (its gain's undo, residual and part
adds, constants): through a ReLU or a clip a shift of the sums is not a shift of the output.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from systolix.ir.hir import ConvLayer, HirProgram
from systolix.ir.postops import AddConstant, AddTensor, Scale
from systolix.numerics.fixed import from_fixed, to_fixed


def shifted(layer: ConvLayer, shift: np.ndarray, dtype) -> ConvLayer | None:
    """``layer`` with its output moved by ``shift`` per channel (the stored output's scale), its
    bias on ``dtype``'s grid; None if a post-op between the bias and the output is not a
    constant multiply or an add (a shift of the sums would not be one of the output)."""
    C = layer.output.C
    factor = np.ones(C)
    for op in layer.post_ops:
        if isinstance(op, Scale) and np.size(op.values) == C:
            factor = factor * np.asarray(op.values, np.float64).reshape(C)
        elif not isinstance(op, (AddTensor, AddConstant)):
            return None
    if np.any(factor == 0):
        return None
    # On the grid as the constant image stores it (rounded, saturated).
    bias = from_fixed(to_fixed(np.asarray(layer.bias, np.float64) + shift / factor, dtype), dtype)
    return dataclasses.replace(layer, bias=bias)


def correct_output_offsets(hir: HirProgram, ctx) -> HirProgram:
    """The pass: for each model output in ``ctx.output_offsets`` (per channel, in the output's
    real scale) that a conv layer of this program writes whole, that layer's bias less it."""
    offsets = getattr(ctx, "output_offsets", None)
    dtype = ctx.arch.data_type
    if not offsets or not dtype.is_fixed:
        return hir
    layers = list(hir.layers)
    for name, offset in offsets.items():
        act = hir.outputs.get(name)
        if act is None or act.parent is not None or np.size(offset) != act.C:
            continue
        writers = [i for i, layer in enumerate(layers) if isinstance(layer, ConvLayer) and layer.output is act]
        if len(writers) != 1:
            continue
        exponent = hir.exponents.get(act.root()[0].name, 0)
        moved = shifted(layers[writers[0]], -np.asarray(offset, np.float64).reshape(-1) * 2.0 ** exponent, dtype)
        if moved is not None:
            layers[writers[0]] = moved
    return dataclasses.replace(hir, layers=layers)
