"""Calibrated weight rounding: each weight rounded up or down so that the layer's outputs on the
calibration samples stay as close as they can to the float layer's (GPTQ's error feedback).

Rounding every weight to the nearest step of the fixed-point type perturbs each output by
``sum_k dw_k x_k``. The rounding errors of weights that read correlated inputs (neighbouring
pixels of an image, channels that move together) can cancel instead of add: GPTQ (Frantar et
al., 2022, after Optimal Brain Quantization) rounds one weight at a time and moves the weights
not yet rounded to compensate, using the Gram matrix ``H = E[x x^T]`` of the layer's inputs over
the samples. On the MobileNetV2 stack it takes the logits' error from rounding the weights from
1.9 LSB RMS (15 largest) to 1.0 (5 largest); the products' and the stored results' roundings,
which no choice of weights changes, are the rest of the error.

The bias is rounded last as one more weight whose input is always 1, so it takes up what the
mean of the inputs carries of the others' errors. ``measure_ranges`` collects the Gram matrices
in the same float runs that find the accumulator ranges.

A layer with too few observations for its Gram matrix (``OBSERVATIONS_PER_WEIGHT``: the small
maps of a deep network's last stages, where a 3x3 conv over 256 channels reads 2,305 weights a
row) gets what a plain compile does (``correct_biases.corrected``): balanced taps and the mean of
their rounding error taken out of the bias, with the channels' means measured on the samples.
Rounded to nearest without it, ResNet-50 v2's residual stream gathered a per-channel offset
that its global average pool kept: calibrated on 64 samples, 3.3 LSB RMS at the logits without
it, 1.07 with it (``benchmarks/bench_accuracy.py resnet50v2``, with this session's pool changes
at an intermediate state for "without"; the plain compile 1.00).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from systolix.ir.evaluate import taps
from systolix.ir.hir import ConvInput, ConvLayer, HirProgram
from systolix.numerics import DataType, from_fixed, to_fixed

# Ridge added to H, as a share of its mean diagonal: enough to keep the Cholesky factorisation
# of a rank-deficient H (dead channels, padding) stable. On the MobileNetV2 stack 0.001 left a
# smaller error than GPTQ's usual 0.01 (1.0 against 1.2 LSB RMS) and 0.1 or 1.0 (1.2, 1.4).
DAMPING = 0.001
# Columns rounded between two updates of the rest of the matrix (GPTQ's lazy batches).
BLOCK = 128
# Fewer input vectors than this per weight of a row, and the Gram matrix is a poor picture of
# the inputs: the weights fit the samples and miss on other inputs (a Gemm sees one vector per
# sample; on the MLP, 32 samples for 257 weights per row made the error 18% larger than plain
# rounding did).
OBSERVATIONS_PER_WEIGHT = 8
# Observations (samples x output pixels, as ``LayerRange.observations`` counts them) a layer
# left to plain rounding needs for its inputs' means to correct its bias (``round_weights``): a
# mean of n values is known to about 1/sqrt(n) of their spread, here 1/16. A Gemm's 32 (one
# vector a sample) made the MLPs' error 5% larger; the MobileNetV2 stack's 3x3 maps (288) gain.
OBSERVATIONS_FOR_MEANS = 256
# Gram matrices held at once, in float64 entries (256 MB); a model with more needs more runs.
GRAM_BUDGET = 1 << 25


def _columns(layer: ConvLayer, ev) -> list[np.ndarray]:
    """Each input's im2col: ``[C, KH*KW, pixels]`` (taps in row-major order, as the weights)."""
    out = layer.output
    cols = []
    for inp in layer.inputs:
        x = ev.read(inp.act)
        windows = [w.reshape(x.shape[0], -1) for _, _, w in
                   taps(x, out.H, out.W, layer.kernel, layer.stride, layer.dilation, layer.pads, 0.0)]
        cols.append(np.stack(windows, axis=1))
    return cols


def _kind(layer: ConvLayer) -> str | None:
    """``dense`` (every input has dense weights), ``diagonal`` (one input, per-channel weights) or
    None (rounded to nearest: a mix of both, or a window whose taps all have the same weights,
    an average pool, which the schedule stores and loads once for every tap; rounding its taps
    differently would load the array once per tap)."""
    for inp in layer.inputs:
        c = inp.coefficients
        if c.shape[-2] * c.shape[-1] > 1 and np.array_equal(c, np.broadcast_to(c[..., :1, :1], c.shape)):
            return None
    if all(inp.weights is not None for inp in layer.inputs):
        return "dense"
    if len(layer.inputs) == 1:
        return "diagonal"
    return None


def _row_length(layer: ConvLayer) -> int:
    """Weights each output reads, the bias counted."""
    return sum(inp.coefficients[0].size for inp in layer.inputs) + 1


def gram_size(layer: ConvLayer, samples: int) -> int:
    """Entries of the layer's Gram matrix over ``samples`` inputs; 0 for a layer this pass
    leaves to plain rounding (a mix of dense and per-channel inputs, or too few observations)."""
    kind = _kind(layer)
    k = _row_length(layer)
    if kind is None or samples * layer.output.P < OBSERVATIONS_PER_WEIGHT * k:
        return 0
    return k * k if kind == "dense" else layer.output.C * k * k


def accumulate_gram(layer: ConvLayer, ev, gram: np.ndarray | None) -> np.ndarray:
    """``gram`` plus this sample's ``sum x x^T`` over output pixels (with the constant-1 bias
    input last), for a layer ``gram_size`` admits (dense if its inputs have dense weights)."""
    cols = _columns(layer, ev)
    pixels = layer.output.H * layer.output.W
    if layer.inputs[0].weights is not None:
        x = np.concatenate([c.reshape(-1, pixels) for c in cols] + [np.ones((1, pixels))], axis=0)
        add = x @ x.T
    else:
        c = cols[0]
        x = np.concatenate([c, np.ones((c.shape[0], 1, pixels))], axis=1)
        add = np.einsum("ctp,cup->ctu", x, x)
    return add if gram is None else gram + add


def _inverse_factor(h: np.ndarray) -> np.ndarray:
    """Upper Cholesky factor of ``H^-1`` (batched over leading axes), with ``DAMPING`` of ridge;
    an input that never varies (a dead channel) gets a unit diagonal so it is rounded plainly."""
    eye = np.eye(h.shape[-1])
    dead = np.diagonal(h, axis1=-2, axis2=-1) <= 0
    h = h + dead[..., None, :] * eye
    diag = np.diagonal(h, axis1=-2, axis2=-1)
    damping = DAMPING
    while True:
        ridge = damping * np.mean(diag, axis=-1)[..., None, None] * eye
        try:
            lower = np.linalg.cholesky(h + ridge)
            inverse = np.linalg.inv(lower)
            return np.swapaxes(np.linalg.cholesky(np.swapaxes(inverse, -1, -2) @ inverse), -1, -2)
        except np.linalg.LinAlgError:
            damping *= 10  # numerically singular: more ridge until it factors


def gptq(weights: np.ndarray, gram: np.ndarray, quantize: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Round ``weights`` (``[rows, K]``, every row reading the same inputs with Gram matrix
    ``gram``, ``[K, K]``) column by column with ``quantize``, each column's error fed into the
    columns after it so that ``(weights - result) @ x`` stays small over the inputs ``x``."""
    w = np.array(weights, np.float64)
    u = _inverse_factor(gram)
    out = np.empty_like(w)
    K = w.shape[1]
    for b0 in range(0, K, BLOCK):
        b1 = min(K, b0 + BLOCK)
        block = w[:, b0:b1].copy()
        errors = np.empty_like(block)
        for i in range(b1 - b0):
            q = quantize(block[:, i])
            err = (block[:, i] - q) / u[b0 + i, b0 + i]
            block[:, i:] -= np.outer(err, u[b0 + i, b0 + i:b1])
            out[:, b0 + i] = q
            errors[:, i] = err
        w[:, b1:] -= errors @ u[b0:b1, b1:]
    return out


def gptq_diagonal(weights: np.ndarray, gram: np.ndarray, quantize: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """``gptq`` for a per-channel layer: row ``c`` of ``weights`` (``[C, T]``) has its own Gram
    matrix ``gram[c]`` (``[C, T, T]``)."""
    w = np.array(weights, np.float64)
    u = _inverse_factor(gram)
    out = np.empty_like(w)
    for i in range(w.shape[1]):
        q = quantize(w[:, i])
        err = (w[:, i] - q) / u[:, i, i]
        w[:, i:] -= err[:, None] * u[:, i, i:]
        out[:, i] = q
    return out


def on_grid(dtype: DataType) -> Callable[[np.ndarray], np.ndarray]:
    """The value the backend will store for each float: rounded and saturated as ``to_fixed``."""
    return lambda v: from_fixed(to_fixed(v, dtype), dtype).astype(np.float64)


def round_weights(hir: HirProgram, ctx) -> HirProgram:
    """The pass: each conv layer with a Gram matrix (in ``HirProgram.ranges``, by index into
    ``hir.layers``, as ``measure_ranges`` collects them: summed over samples and pixels) gets
    weights and bias already on the data type's grid, chosen by ``gptq``; the constant image then
    stores them unchanged."""
    # (here: ``measure_ranges`` imports this module for its Gram matrices)
    from systolix.hir_passes.correct_biases import corrected
    from systolix.hir_passes.measure_ranges import exact

    grams = {i: r.gram for i, r in hir.ranges.items() if r.gram is not None}
    dtype = ctx.arch.data_type
    if not dtype.is_fixed:
        return hir
    quantize = on_grid(dtype)
    layers = list(hir.layers)
    corrected_names = []
    for index, seen in hir.ranges.items():
        layer = layers[index]
        if (seen.gram is None and not seen.estimated and seen.input_mean is not None and isinstance(layer, ConvLayer)
                and seen.observations >= OBSERVATIONS_FOR_MEANS and _kind(layer) is not None and not exact(layer, dtype)):
            exponents = [hir.exponents.get(inp.act.root()[0].name, 0) for inp in layer.inputs]
            layers[index] = corrected(layer, seen.input_mean, exponents, dtype)
            corrected_names.append(layer.name)
    for index, gram in grams.items():
        layer = layers[index]
        bias = np.asarray(layer.bias, np.float64)[:, None]
        if layer.inputs[0].weights is not None:
            flat = [inp.weights.reshape(inp.weights.shape[0], -1) for inp in layer.inputs]
            rounded = gptq(np.concatenate(flat + [bias], axis=1), gram, quantize)
            inputs, start = [], 0
            for inp, w in zip(layer.inputs, flat):
                part = rounded[:, start:start + w.shape[1]].reshape(inp.weights.shape)
                inputs.append(ConvInput(inp.act, weights=part.astype(np.float32)))
                start += w.shape[1]
        else:
            inp = layer.inputs[0]
            flat = inp.diagonal.reshape(inp.diagonal.shape[0], -1)
            rounded = gptq_diagonal(np.concatenate([flat, bias], axis=1), gram, quantize)
            inputs = [ConvInput(inp.act, diagonal=rounded[:, :-1].reshape(inp.diagonal.shape).astype(np.float32))]
        layers[index] = dataclasses.replace(layer, inputs=inputs, bias=rounded[:, -1].astype(np.float32))
    names = [layers[i].name for i in sorted(grams)]
    return dataclasses.replace(hir, layers=layers, rounded=list(hir.rounded) + names + corrected_names)
