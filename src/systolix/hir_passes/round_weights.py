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

A Gram matrix from few samples is a poor picture of the inputs (the small maps of a deep
network's last stages, where a 3x3 conv over 256 channels reads 2,305 weights a row from 36
pixels a sample): GPTQ fits its noise and misses on other inputs. Its correlations are therefore
shrunk toward zero first, as far as their spread from sample to sample says they are noise
(``shrinkage``: Schaefer and Strimmer's estimate, no constant of ours), which moves GPTQ toward
rounding to nearest with the mean error taken out of the bias. Such layers had been rounded as
a plain compile does (balanced taps, bias corrected by the samples' means) below 8 observations
a weight; with the shrinkage every layer with ``OBSERVATIONS_FOR_MEANS`` takes GPTQ
(64 samples, this change alone: ResNet-50 v2's calibrated error 1.42 -> 1.35 times the limit's
with its 7x7 stages, ``benchmarks/bench_accuracy.py``; YOLOv4-tiny's 1.83 -> 1.79 with its 6x6
and 12x12 ones, its two outputs' ratios pooled, ``systolix.accuracy.measure``; the other tuned
models within 0.5%).
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
# Observations (samples x output pixels) a layer needs for GPTQ: its inputs' means, which take the
# weights' rounding out of its bias, are then known to about 1/sqrt(n) of their spread, here 1/16.
# A Gemm's 32 (one vector a sample) made the MLPs' error 5% larger than rounding to nearest.
OBSERVATIONS_FOR_MEANS = 256
# Gram matrices held at once, in float64 entries (512 MB), with the sums of their squares
# (``GramSums``); a model with more needs more runs.
GRAM_BUDGET = 1 << 26


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
    """Entries ``GramSums`` holds for the layer over ``samples`` inputs; 0 for a layer this pass
    leaves to plain rounding (a mix of dense and per-channel inputs, or fewer observations than
    ``OBSERVATIONS_FOR_MEANS``)."""
    kind = _kind(layer)
    k = _row_length(layer)
    if kind is None or samples * layer.output.P < OBSERVATIONS_FOR_MEANS:
        return 0
    return 2 * (k * k if kind == "dense" else layer.output.C * k * k)


def accumulate_gram(layer: ConvLayer, ev, gram: GramSums | None) -> GramSums:
    """``gram`` plus this sample's ``sum x x^T`` over output pixels (with the constant-1 bias
    input last), for a layer ``gram_size`` admits (dense if its inputs have dense weights), and
    what ``shrunk`` needs of how much its correlations vary from sample to sample."""
    cols = _columns(layer, ev)
    pixels = layer.output.H * layer.output.W
    if layer.inputs[0].weights is not None:
        x = np.concatenate([c.reshape(-1, pixels) for c in cols] + [np.ones((1, pixels))], axis=0)
        add = x @ x.T
    else:
        c = cols[0]
        x = np.concatenate([c, np.ones((c.shape[0], 1, pixels))], axis=1)
        add = np.einsum("ctp,cup->ctu", x, x)
    mean = add / pixels  # this sample's own Gram matrix, a mean over its pixels
    if gram is None:
        return GramSums(add, mean * mean, 1)
    return GramSums(gram.total + add, gram.squares + mean * mean, gram.samples + 1)


@dataclasses.dataclass
class GramSums:
    """A layer's Gram matrix as the samples add to it: ``total`` the sum of ``x x^T`` over samples
    and pixels (``[K+1, K+1]``, or ``[C, T+1, T+1]`` per channel), ``squares`` the sum over samples
    of each entry of a sample's own Gram matrix (its mean over pixels) squared, ``samples`` how many."""

    total: np.ndarray
    squares: np.ndarray
    samples: int


def _covariance(gram: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(covariance, means, count)`` of the inputs of ``gram`` (a sum of ``x x^T`` whose last
    input is the constant 1, so its last row holds the sums and the count)."""
    count = gram[..., -1, -1]
    safe = np.where(count > 0, count, 1.0)
    means = gram[..., :-1, -1] / safe[..., None]
    cov = gram[..., :-1, :-1] / safe[..., None, None] - means[..., :, None] * means[..., None, :]
    return cov, means, count


def _off_diagonal(m: np.ndarray) -> np.ndarray:
    """Sum of ``m``'s entries off its diagonal (per leading index)."""
    return np.sum(m, axis=(-2, -1)) - np.sum(np.diagonal(m, axis1=-2, axis2=-1), axis=-1)


def shrinkage(sums: GramSums) -> np.ndarray:
    """How far the Gram matrix's correlations (of its inputs centred) are pulled toward zero (0:
    not at all, 1: to a diagonal matrix, with which GPTQ rounds to nearest and takes the mean
    error out of the bias): Schaefer and Strimmer's (2005) estimate for their target D, the
    summed variance of the correlations' estimates over their summed squares. The variance comes
    from the spread of the samples' own Gram matrices, not from their pixels, which one image
    makes alike. Few samples for many weights (a deep layer's small maps, a dense layer's one
    vector a sample) give a noisy Gram matrix, which GPTQ would fit and miss on other inputs;
    this pulls it toward plain rounding as far as its noise calls for."""
    cov, _, count = _covariance(np.asarray(sums.total, np.float64))
    return _shrinkage(sums, cov, count)


def _shrinkage(sums: GramSums, cov: np.ndarray, count: np.ndarray) -> np.ndarray:
    """``shrinkage`` from the covariance and count ``_covariance`` gave of ``sums.total``."""
    m = sums.samples
    d = np.diagonal(cov, axis1=-2, axis2=-1)
    inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1.0), 0.0)
    weight = inv[..., :, None] * inv[..., None, :]  # 1 / (d_i d_j): covariances squared to correlations squared
    pooled = _off_diagonal(cov * cov * weight)
    if m < 2:
        return np.ones_like(pooled)
    mean = sums.total[..., :-1, :-1] / np.where(count > 0, count, 1.0)[..., None, None]  # of the samples' Gram matrices
    variance = np.maximum(sums.squares[..., :-1, :-1] / m - mean * mean, 0.0) / (m - 1)
    spread = _off_diagonal(variance * weight)
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = np.where(pooled > 0, spread / pooled, 1.0)
    return np.clip(lam, 0.0, 1.0)


def shrunk(sums: GramSums) -> np.ndarray:
    """The Gram matrix (the sum of ``x x^T``) with the correlations of its centred inputs shrunk by
    ``shrinkage``: each input's variance and its mean (the bias row: means are known far better
    than correlations, and are what takes the weights' rounding out of the bias) kept."""
    cov, means, count = _covariance(np.asarray(sums.total, np.float64))
    lam = _shrinkage(sums, cov, count)
    keep = (1.0 - lam)[..., None, None] if np.ndim(lam) else 1.0 - float(lam)
    diag = np.diagonal(cov, axis1=-2, axis2=-1).copy()
    cov = cov * keep
    idx = np.arange(cov.shape[-1])
    cov[..., idx, idx] = diag
    gram = np.array(sums.total, np.float64)
    gram[..., :-1, :-1] = (cov + means[..., :, None] * means[..., None, :]) * count[..., None, None]
    return gram


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
    grams = {i: r.gram for i, r in hir.ranges.items() if r.gram is not None}
    dtype = ctx.arch.data_type
    if not dtype.is_fixed:
        return hir
    quantize = on_grid(dtype)
    layers = list(hir.layers)
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
    return dataclasses.replace(hir, layers=layers, rounded=list(hir.rounded) + names)
