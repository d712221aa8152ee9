"""Correct biases: in plain compiles, round each layer's weights here and take the mean of their
rounding error out of its bias.

Rounding a weight ``w`` to the grid errs by ``d = rne(w) - w``, the same on every input, so a
sum ``sum_k w_k x_k`` errs by ``sum_k d_k x_k``: over inputs whose mean is far from zero (what a
ReLU leaves) a constant shift ``sum_k d_k E[x_k]`` per output channel, which no later rounding
averages away (a global pool shrinks the products' independent roundings by its window but not
this). Nagel et al. (2019, data-free quantization) subtract it from the bias; the channels' means
come from the estimate's synthetic runs (``LayerRange.input_mean``: the model's batch-norm
statistics wherever it states them). The calibrated compile's ``round_weights`` makes up for the
same error from the samples' Gram matrices instead; this pass runs only on estimated ranges.

Runs after ``amplify_weights`` (the amplified weights are the ones rounded); the weights are left
on the grid, so that placing the constants rounds them no further.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from systolix.hir_passes.measure_ranges import exact
from systolix.ir.hir import ConvInput, ConvLayer, HirProgram
from systolix.numerics import from_fixed, to_fixed

# The share of the estimated error taken out of the bias: the synthetic runs' channel means
# correlate with real inputs' by only 0.3 to 0.6 on the test models (their batch-norm statistics
# are random, not fitted), so the estimate is shrunk by half. Plain, 32 random normal inputs,
# RMS LSB without / half / whole: ResNet-20 v2 3.11 / 2.33 / 1.88, the MobileNetV2 stack 4.97 /
# 4.98 / 6.55, tests/torch_models' torch_resnet 1.03 / 0.62 / 0.59, the MLP and the others within 5%.
SHARE = 0.5


def corrected(layer: ConvLayer, means: list[np.ndarray], exponents: list[int], dtype) -> ConvLayer:
    """``layer`` with its weights rounded and its bias less their rounding error times the
    inputs' means (``means`` in the real scale, ``exponents`` the inputs' stored exponents)."""
    bias = np.asarray(layer.bias, np.float64).copy()
    inputs = []
    for inp, mean, e in zip(layer.inputs, means, exponents):
        w = inp.coefficients
        rounded = from_fixed(to_fixed(w, dtype), dtype).astype(np.float32)
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
    layers = []
    for index, layer in enumerate(hir.layers):
        seen = hir.ranges.get(index)
        if (not isinstance(layer, ConvLayer) or seen is None or not seen.estimated or seen.input_mean is None
                or exact(layer, dtype)):
            layers.append(layer)
            continue
        exponents = [hir.exponents.get(inp.act.root()[0].name, 0) for inp in layer.inputs]
        layers.append(corrected(layer, seen.input_mean, exponents, dtype))
    return dataclasses.replace(hir, layers=layers)
