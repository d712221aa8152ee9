"""Correct biases (plain compiles): the weights rounded after ``amplify_weights`` and the mean of
their rounding error, over the estimated channel means, taken out of the bias."""

from __future__ import annotations

import dataclasses

import numpy as np

from systolix.arch import get_architecture
from systolix.compiler.context import CompileContext
from systolix.hir_passes.correct_biases import SHARE, correct_biases
from systolix.hir_passes.measure_ranges import LayerRange
from systolix.ir import same
from systolix.ir.hir import Activation, ConvInput, ConvLayer, HirProgram

ARCH = get_architecture("ultra96v2")  # FP16BP8
LSB = 2.0 ** -8


def _program(w: np.ndarray, bias: np.ndarray, mean: np.ndarray, estimated: bool = True,
             anchored: bool = True) -> HirProgram:
    """The conv under test last; ``anchored``: its input written by a per-channel layer with
    batch-norm statistics (its estimated means are the model's), else the program's input."""
    C = w.shape[1]
    x = Activation("x", C, 4, 4, 16)
    y = Activation("y", w.shape[0], 4, 4, 16)
    layers, source = [], x
    if anchored:
        source = Activation("image", C, 4, 4, 16)
        layers.append(ConvLayer("bn", [ConvInput(source, diagonal=np.ones((C, 1, 1), np.float32))], x,
                                np.zeros(C, np.float32), (1, 1), statistics=(np.zeros(C), np.ones(C))))
    layers.append(ConvLayer("conv", [ConvInput(x, weights=w)], y, bias, (1, 1)))
    peak = np.ones(w.shape[0])
    ranges = {len(layers) - 1: LayerRange(peak, peak, 16, estimated=estimated, input_mean=[mean])}
    return HirProgram("m", 16, layers, {"x": source}, {"y": y}, {"x": (1, C, 4, 4)}, {"y": (1, w.shape[0], 4, 4)},
                      ranges=ranges)


def test_the_weights_are_rounded_and_the_bias_takes_their_mean_error():
    # Weights between grid points, inputs of mean 0.5 and 2 (channel by channel): the bias moves
    # by -SHARE * sum_i (rne(w_i) - w_i) * mean_i, from hand-rounded weights.
    w = np.array([[0.3 * LSB, 2.4 * LSB], [-1.3 * LSB, 5.0 * LSB]], np.float32)[:, :, None, None]
    bias = np.array([0.25, -0.5], np.float32)
    mean = np.array([0.5, 2.0])
    after = correct_biases(_program(w, bias, mean), CompileContext(ARCH))
    rounded = np.array([[0.0, 2.0 * LSB], [-1.0 * LSB, 5.0 * LSB]], np.float32)[:, :, None, None]
    error = np.array([[-0.3 * LSB, -0.4 * LSB], [0.3 * LSB, 0.0]])
    want_bias = (bias - SHARE * error @ mean).astype(np.float32)
    want = _program(rounded, want_bias, mean)
    assert same(dataclasses.replace(after, ranges={}), dataclasses.replace(want, ranges={}))
    assert np.all(want_bias != bias)  # the test says something: both biases moved


def test_means_no_batch_norm_statistics_back_leave_the_bias_alone():
    # The same layer reading a tensor the estimate carried through the weights from synthetic
    # inputs (no statistics upstream, as in a model whose batch norms were folded before export):
    # its weights are rounded, its bias is not moved by their guessed means.
    w = np.array([[0.3 * LSB, 2.4 * LSB], [-1.3 * LSB, 5.0 * LSB]], np.float32)[:, :, None, None]
    bias = np.array([0.25, -0.5], np.float32)
    after = correct_biases(_program(w, bias, np.array([0.5, 2.0]), anchored=False), CompileContext(ARCH)).layers[-1]
    rounded = np.array([[0.0, 2.0 * LSB], [-1.0 * LSB, 5.0 * LSB]], np.float32)[:, :, None, None]
    assert np.array_equal(after.inputs[0].weights, rounded)
    assert np.array_equal(after.bias, bias)


def test_measured_ranges_and_plain_compiles_without_gains_keep_their_weights():
    w = np.full((2, 2, 1, 1), 0.3 * LSB, np.float32)
    hir = _program(w, np.zeros(2, np.float32), np.ones(2), estimated=False)
    assert correct_biases(hir, CompileContext(ARCH)) is hir
    bare = dataclasses.replace(hir, ranges={})
    assert correct_biases(bare, CompileContext(ARCH, estimate_gains=False)) is bare


def test_the_correction_cancels_the_mean_error_of_the_rounded_sums():
    # NumPy: a 64-input layer, inputs of the stated channel means plus noise; the rounded
    # weights' sums err on average by the correction's target, and the corrected bias takes
    # SHARE of that average out (the rest is left: SHARE hedges an estimate of the means).
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((32, 64)) * 0.03).astype(np.float32)
    mean = rng.uniform(0.2, 1.0, 64)
    x = mean + 0.3 * rng.standard_normal((20000, 64))
    bias = np.zeros(32, np.float32)
    after = correct_biases(_program(w[:, :, None, None], bias, mean), CompileContext(ARCH)).layers[-1]
    wq = after.inputs[0].weights[:, :, 0, 0].astype(np.float64)
    assert np.all(wq * 256 == np.round(wq * 256))  # on the grid
    exact = x @ w.T.astype(np.float64)
    before = np.mean(x @ wq.T - exact, axis=0)  # the mean error per output, rounded weights
    corrected = np.mean(x @ wq.T + after.bias - exact, axis=0)
    np.testing.assert_allclose(corrected, (1 - SHARE) * before, atol=0.02 * LSB)
    assert np.sqrt(np.mean(before ** 2)) > 0.5 * LSB  # a mean error worth correcting


def _conv_program(w: np.ndarray, mean: np.ndarray) -> HirProgram:
    hir = _program(w, np.zeros(w.shape[0], np.float32), mean)
    layer = dataclasses.replace(hir.layers[-1], kernel=w.shape[2:], pads=(1, 1, 1, 1))
    return dataclasses.replace(hir, layers=hir.layers[:-1] + [layer])


def test_an_input_channels_taps_round_to_their_rounded_sum():
    # By hand: taps of 0.4, 0.45 and 0.3 LSB sum to 1.15, so one of them (the largest remainder)
    # goes up where the nearest points put all three at 0; taps of -0.6, 0.2, 0.1 sum to -0.3,
    # rounded 0: the nearest points give -1, 0, 0, balanced they are 0, 0, 0.
    w = np.array([[[[0.4, 0.45, 0.3]], [[-0.6, 0.2, 0.1]]]], np.float32) * LSB
    after = correct_biases(_conv_program(w, np.zeros(2)), CompileContext(ARCH)).layers[-1]
    np.testing.assert_array_equal(after.inputs[0].weights / LSB, [[[[0, 1, 0]], [[0, 0, 0]]]])


def test_balanced_taps_leave_less_mean_error_than_the_nearest_points():
    # NumPy: a 3x3 conv's output mean error over inputs whose channel means are the same at every
    # pixel (as a channel's is): sum_c mean_c * (its taps' summed rounding error). Balanced, each
    # channel's taps err by at most half a step in sum; each weight by less than one step.
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((32, 48, 3, 3)) * 0.03).astype(np.float32)
    mean = rng.uniform(0.2, 1.0, 48)
    after = correct_biases(_conv_program(w, mean), CompileContext(ARCH)).layers[-1]
    wq = after.inputs[0].weights.astype(np.float64)
    assert np.all(wq / LSB == np.round(wq / LSB))  # on the grid
    error = (wq - w) / LSB
    nearest = (np.floor(w.astype(np.float64) / LSB + 0.5) - w / LSB)
    assert np.max(np.abs(error)) < 1.0 and np.max(np.abs(error.sum(axis=(2, 3)))) <= 0.5
    # Few weights leave their nearest point (7.3% here), and the weights' own error grows little
    # (its variance by 10%): the README's figures.
    moved = np.round(wq / LSB) != np.floor(w.astype(np.float64) / LSB + 0.5)
    assert np.mean(moved) < 0.1 and np.var(error) < 1.15 * np.var(nearest)
    assert np.max(np.abs(nearest.sum(axis=(2, 3)))) > 1.0  # the nearest points' sums do err past it
    # The systematic error per output (before the bias takes its share): 3x smaller or more.
    balanced_bias, nearest_bias = error.sum(axis=(2, 3)) @ mean, nearest.sum(axis=(2, 3)) @ mean
    assert np.sqrt(np.mean(balanced_bias ** 2)) * 2.5 < np.sqrt(np.mean(nearest_bias ** 2))
    # And the bias takes SHARE of what is left, as for nearest rounding.
    np.testing.assert_allclose(after.bias, -SHARE * balanced_bias * LSB, atol=1e-6)
