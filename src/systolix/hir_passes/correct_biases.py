"""Correct biases: in plain compiles, round each layer's weights here and take the mean of their
rounding error out of its bias.

Rounding a weight ``w`` to the grid errs by ``d = rne(w) - w``, the same on every input, so a
sum ``sum_k w_k x_k`` errs by ``sum_k d_k x_k``: over inputs whose mean is far from zero (what a
ReLU leaves) a constant shift ``sum_k d_k E[x_k]`` per output channel, which no later rounding
averages away (a global pool shrinks the products' independent roundings by its window but not
this). Nagel et al. (2019, data-free quantization) subtract it from the bias; the channels' means
come from the estimate's synthetic runs (``LayerRange.input_mean``) where they follow the model's
batch-norm statistics (``estimate_ranges.normalised_tensors``). Elsewhere (a model exported with
its batch norms folded into the convs, as torch's exporter does) a mean is that of the synthetic
inputs carried through the weights: a guess at the data, and a wrong guess shifts the output by
as much as the error it was to remove. Through the zoo's MobileNetV3-small (batch norms fitted to
image-like inputs, then folded) the estimate's values grew to 20 times those of image-like
inputs, and with their means corrected its plain error on two such inputs at 224x224 was 28 times
the limit's (EfficientNet-B0: 28 times); without, 4.6 and 2.4 times. So those inputs' means are
not used (their taps are still balanced, below). Where the data is what the estimate assumes
(the untuned models' random normal inputs, ``benchmarks/bench_accuracy.py``) the guess was
right and that costs a little: the untuned VGG 1.81 -> 1.91 times the limit, the DenseNet-like
net 1.30 -> 1.49, the wide ResNet 1.22 -> 1.29. The calibrated compile's ``round_weights`` makes up for
the same error from the samples' Gram matrices instead; this pass runs only on estimated ranges.

The weights are rounded so that each output channel's taps on one input channel sum to their
own sum rounded (``balanced_taps``: the nearest grid point for each, but, where the taps' errors
would add up past half a step, those nearest the middle of two points go the other way). Every
tap of an input channel reads the same mean (a channel's mean is the same at every pixel), so that
mean times the taps' summed error is what biases the output; balanced, it is at most half a step
instead of about ``sqrt(taps)`` times the nearest-point rounding's, whatever the means are. A
1x1 or dense layer has one tap a channel: its rounding is the nearest point's.

Runs after ``amplify_weights`` (the amplified weights are the ones rounded); the weights are left
on the grid, so that placing the constants rounds them no further.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from systolix.hir_passes.estimate_ranges import normalised_tensors
from systolix.hir_passes.measure_ranges import exact
from systolix.ir.hir import ConvInput, ConvLayer, HirProgram

# The share of the estimated error taken out of the bias. The synthetic runs' channel means
# correlate with real inputs' by only 0.3 to 0.6 on the test models (their batch-norm statistics
# are random, not fitted), and with nearest-point rounding half was best (plain, 32 random normal
# inputs, RMS LSB without / half / whole: ResNet-20 v2 3.11 / 2.33 / 1.88, the MobileNetV2 stack
# 4.97 / 4.98 / 6.55). With balanced taps the error left to correct is smaller, and whole is
# best: plain, 64 random normal inputs, the outputs' RMS over the format limit's, mean of
# estimate seeds 0-2, SHARE 0 / 0.5 / 0.75 / 1: ResNet-20 v2 x1.92 / 1.91 / 1.93 / 1.82, the
# MobileNetV2 stack x2.95 / 2.07 / 1.84 / 1.67, the MLP x1.94 / 1.83 / 1.88 / 1.92; YOLOv4-tiny
# (16 inputs, seed 0) x4.18 / 4.06 / - / 4.00.
SHARE = 1.0


def balanced_taps(w: np.ndarray, dtype, tap_axes: tuple[int, ...]) -> np.ndarray:
    """``w`` on ``dtype``'s grid, each group of taps (the values sharing every index but
    ``tap_axes``) summing to its own sum rounded half up: each value goes to the grid point below
    it, and of each group as many as that sum needs go up, those with the largest remainders."""
    one = float(dtype.one)
    scaled = np.moveaxis(np.asarray(w, np.float64) * one, tap_axes, tuple(range(-len(tap_axes), 0)))
    groups = scaled.reshape(scaled.shape[:scaled.ndim - len(tap_axes)] + (-1,))
    below = np.floor(groups)
    remainder = groups - below
    ups = np.floor(groups.sum(-1) + 0.5) - below.sum(-1)  # 0 to taps: how many of the group go up
    rank = np.argsort(np.argsort(-remainder, axis=-1, kind="stable"), axis=-1, kind="stable")
    rounded = np.clip(below + (rank < ups[..., None]), dtype.min_int, dtype.max_int) / one
    return np.moveaxis(rounded.reshape(scaled.shape), tuple(range(-len(tap_axes), 0)), tap_axes).astype(np.float32)


def _tap_axes(layer: ConvLayer, inp) -> tuple[int, ...]:
    """The axes of ``inp``'s coefficients one output value sums over for one input channel: the
    kernel's, or, for a phased layer (``ConvLayer.phases``), its rows (each phase is an output pixel
    of its own)."""
    first = 2 if inp.weights is not None else 1
    return (first,) if layer.phases > 1 else (first, first + 1)


def corrected(layer: ConvLayer, means: list[np.ndarray], exponents: list[int], dtype) -> ConvLayer:
    """``layer`` with its weights rounded (``balanced_taps``) and its bias less their rounding
    error times the inputs' means (``means`` in the real scale, ``exponents`` the inputs' stored
    exponents)."""
    bias = np.asarray(layer.bias, np.float64).copy()
    inputs = []
    for inp, mean, e in zip(layer.inputs, means, exponents):
        w = inp.coefficients
        rounded = balanced_taps(w, dtype, _tap_axes(layer, inp))
        error = rounded.astype(np.float64) - w.astype(np.float64)
        stored = SHARE * np.asarray(mean, np.float64) * 2.0 ** e
        if inp.weights is not None:
            bias -= np.einsum("oikl,i->o", error, stored)
            inputs.append(ConvInput(inp.act, weights=rounded))
        else:
            bias -= np.sum(error, axis=(1, 2)) * stored
            inputs.append(ConvInput(inp.act, diagonal=rounded))
    bias = np.clip(bias, dtype.min_value, dtype.max_value).astype(np.float32)
    return dataclasses.replace(layer, inputs=inputs, bias=bias)


def correct_biases(hir: HirProgram, ctx) -> HirProgram:
    """The pass: every conv layer with estimated ranges (plain compiles; ``estimate_ranges``)
    whose weights are not already exact."""
    dtype = ctx.arch.data_type
    if not dtype.is_fixed or not any(r.estimated for r in hir.ranges.values()):
        return hir
    anchored = normalised_tensors(hir)
    layers = []
    for index, layer in enumerate(hir.layers):
        seen = hir.ranges.get(index)
        if (not isinstance(layer, ConvLayer) or seen is None or not seen.estimated or seen.input_mean is None
                or exact(layer, dtype)):
            layers.append(layer)
            continue
        exponents = [hir.exponents.get(inp.act.root()[0].name, 0) for inp in layer.inputs]
        means = [mean if id(inp.act.root()[0]) in anchored else np.zeros_like(mean)
                 for inp, mean in zip(layer.inputs, seen.input_mean)]
        layers.append(corrected(layer, means, exponents, dtype))
    return dataclasses.replace(hir, layers=layers)
