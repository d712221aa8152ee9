"""Estimate ranges: without calibration samples, the sums each conv layer's accumulators reach,
estimated from the model itself, in ``HirProgram.ranges`` for ``amplify_weights``.

A plain compile has no data, but the model says much about its own values: a batch norm's
statistics give each channel's mean and spread before the activation (``ConvLayer.statistics``,
kept when it folds), and the weights carry the spread of their inputs forward, correlations
between channels and pixels included. The pass runs the model in float (``systolix.ir.evaluate``,
so every layer kind, padding and post-op counts as it computes), layer by layer, on ``RUNS``
synthetic inputs: ``N(0, 1)`` per element (``INPUT_STD``: normalised inputs), with a part shared
by the pixels of each channel (``PIXEL_CORRELATION``, as an image's brightness is), so that an
average pool's mean varies as much as an image's would. Where a layer has batch-norm statistics,
its synthetic sums are moved and scaled per channel to them before its post-ops run, so the
estimate follows the model's own statistics wherever it states them (an input distribution
unlike the synthetic one is corrected at the first batch norm; the inputs of a program after a
host op are taken as the model's are). A channel's range is its mean plus
``SIGMAS`` standard deviations (the statistics', or the synthetic sums'), times as much further
as its partial sums went (an average pool's, before its scaling): what ``amplify_weights`` keeps
below saturation.

Measured against the largest sums of 16 real inputs (``scripts/agreement.py``'s models), a
channel's real peak reaches up to 12 standard deviations on the project's image-like inputs (heavy
tails: per-image brightness, ReLU chains): at ``SIGMAS = 12`` a few of 32 inputs saturated
(ResNet-20 v2, the MobileNetV2 stack), at 16 none, at 8 up to 14 of 32.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from systolix.hir_passes.measure_ranges import LayerRange
from systolix.ir.evaluate import Evaluation, run_layer
from systolix.ir.hir import ConvLayer, HirProgram

# The spread assumed of each element of the model's inputs (mean 0): normalised inputs.
INPUT_STD = 1.0
# A channel's range: its mean plus this many standard deviations.
SIGMAS = 16.0
# Synthetic inputs run through the model.
RUNS = 8
# Neighbouring values of a tensor are correlated (an image's brightness, a feature's extent):
# an average pool's mean varies far more than that of independent values. Synthetic inputs
# have this correlation between any two pixels of a channel.
PIXEL_CORRELATION = 0.5
SEED = 0


def _synthetic_inputs(hir: HirProgram, rng: np.random.Generator) -> Evaluation:
    """One synthetic input: each channel of each model input a part shared by its pixels and a
    part of their own (correlation ``PIXEL_CORRELATION`` between any two pixels), ``N(0, 1)``."""
    ev = Evaluation()
    shared, own = math.sqrt(PIXEL_CORRELATION), math.sqrt(1 - PIXEL_CORRELATION)
    for act in hir.inputs.values():
        z = shared * rng.standard_normal((act.C, 1, 1)) + own * rng.standard_normal((act.C, act.H, act.W))
        ev.write(act, INPUT_STD * z)
    return ev


def _channel_moments(values: list[np.ndarray], C: int) -> tuple[np.ndarray, np.ndarray]:
    stacked = np.concatenate([v.reshape(C, -1) for v in values], axis=1)
    return stacked.mean(axis=1), stacked.std(axis=1)


def estimate(hir: HirProgram, seed: int = SEED) -> dict[int, LayerRange]:
    """Per conv layer (index into ``hir.layers``) its estimated ``LayerRange``."""
    rng = np.random.default_rng(seed)
    evs = [_synthetic_inputs(hir, rng) for _ in range(RUNS)]
    ranges: dict[int, LayerRange] = {}
    for index, layer in enumerate(hir.layers):
        out = layer.output
        if not isinstance(layer, ConvLayer):
            for ev in evs:
                ev.write(out, run_layer(ev, layer, index))
            continue
        # The sums, through an average pool's own scaling, before the other post-ops.
        core = dataclasses.replace(layer, post_ops=layer.post_ops[:layer.scaling_ops])
        sums = [run_layer(ev, core, index) for ev in evs]
        partial = np.max(np.stack([ev.accumulator_max[index] for ev in evs]), axis=0)
        mean, std = _channel_moments(sums, out.C)
        final = np.max(np.stack([np.max(np.abs(s.reshape(out.C, -1)), axis=1, initial=0.0) for s in sums]), axis=0)
        if layer.statistics is not None:
            # The model's own statistics: the synthetic sums moved and scaled to them.
            target_mean = np.asarray(layer.statistics[0], np.float64)
            target_std = np.asarray(layer.statistics[1], np.float64)
            ratio = np.where(std > 0, target_std / np.where(std > 0, std, 1.0), 1.0)
            sums = [(s - mean[:, None, None]) * ratio[:, None, None] + target_mean[:, None, None] for s in sums]
            mean, std = target_mean, target_std
        # Partial sums (an average pool's, before its scaling) may go further than the final
        # ones: as much further as they did on the synthetic inputs.
        further = np.where(final > 0, partial / np.where(final > 0, final, 1.0), 1.0)
        peak = (np.abs(mean) + SIGMAS * std) * np.maximum(further, 1.0)
        ranges[index] = LayerRange(peak, peak, RUNS * out.P, estimated=True)
        post = layer.post_ops[layer.scaling_ops:]
        for ev, acc in zip(evs, sums):
            for p in post:
                acc = p.evaluate(acc, ev.read)
            ev.write(out, acc)
    return ranges


def estimate_ranges(hir: HirProgram, ctx) -> HirProgram:
    """The pass, in plain compiles of a fixed-point architecture asked for estimated gains
    (``ctx.estimate_gains``; with ``ctx.samples`` ``measure_ranges`` measures instead):
    ``HirProgram.ranges`` from ``estimate``."""
    if ctx.samples or not ctx.estimate_gains or not ctx.arch.data_type.is_fixed:
        return hir
    return dataclasses.replace(hir, ranges=estimate(hir))
