"""measure_ranges: the sums calibration sees, against a direct NumPy computation."""

from __future__ import annotations

import numpy as np

from systolix.hir_passes.measure_ranges import measure
from systolix.ir.hir import Activation, ConvInput, ConvLayer, HirProgram


def depthwise(diagonal: np.ndarray, bias: np.ndarray, H: int, W: int, pads: tuple[int, int, int, int]) -> HirProgram:
    C, KH, KW = diagonal.shape
    x = Activation("x", C, H, W, 8)
    y = Activation("y", C, H + pads[0] + pads[2] - KH + 1, W + pads[1] + pads[3] - KW + 1, 8)
    layer = ConvLayer("dw", [ConvInput(x, diagonal=diagonal.astype(np.float32))], y, bias.astype(np.float32), (KH, KW),
                      pads=pads)
    return HirProgram("m", 8, [layer], {"x": x}, {"y": y}, {"x": (1, C, H, W)}, {"y": (1, C, y.H, y.W)})


def direct_peak(x: np.ndarray, diagonal: np.ndarray, bias: np.ndarray, pads) -> np.ndarray:
    """Per channel the largest of |bias|, |bias + taps so far| (tap by tap, row-major) and |one
    tap's product| over every output pixel: what the array's diagonal MatMuls and a fused affine
    (product first, bias after) hold."""
    C, KH, KW = diagonal.shape
    padded = np.pad(x[0].astype(np.float64), ((0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    OH, OW = padded.shape[1] - KH + 1, padded.shape[2] - KW + 1
    acc = np.repeat(bias.astype(np.float64)[:, None, None], OH * OW, axis=1).reshape(C, OH, OW)
    peak = np.abs(bias.astype(np.float64))
    for kh in range(KH):
        for kw in range(KW):
            term = diagonal[:, kh, kw].astype(np.float64)[:, None, None] * padded[:, kh:kh + OH, kw:kw + OW]
            acc = acc + term
            peak = np.maximum(peak, np.maximum(np.abs(acc).max(axis=(1, 2)), np.abs(term).max(axis=(1, 2))))
    return peak


def test_a_diagonal_products_own_size_counts_where_the_bias_brings_the_sum_back():
    # A per-channel affine 10 x - 90 on x near 10: the sums stay near 10, but a tail fused into its
    # producer (fuse_preactivations) multiplies first, and 10 x reaches 100 on its own.
    x = np.float32([[[[9.0, 10.0], [10.5, 9.5]], [[1.0, -2.0], [0.5, 0.0]]]])
    hir = depthwise(np.float32([10.0, 3.0])[:, None, None], np.float32([-90.0, 1.0]), 2, 2, (0, 0, 0, 0))
    seen = measure(hir, [{"x": x}])[0]
    np.testing.assert_allclose(seen.peak, [105.0, 6.0])  # |10 * 10.5| (the sums: 15 at most); |3 * -2|
    np.testing.assert_allclose(seen.peak, direct_peak(x, np.float32([[[10.0]], [[3.0]]]), np.float32([-90.0, 1.0]),
                                                       (0, 0, 0, 0)))


def test_a_depthwise_convs_peaks_are_every_tap_and_partial_sum_as_numpy_computes_them():
    rng = np.random.default_rng(0)
    diagonal = rng.normal(size=(3, 3, 3)).astype(np.float32)
    bias = np.float32([-4.0, 0.5, 2.0])
    pads = (1, 1, 1, 1)
    hir = depthwise(diagonal, bias, 5, 4, pads)
    samples = [{"x": rng.normal(size=(1, 3, 5, 4)).astype(np.float32) * 3} for _ in range(3)]
    seen = measure(hir, samples)[0]
    want = np.max([direct_peak(s["x"], diagonal, bias, pads) for s in samples], axis=0)
    np.testing.assert_allclose(seen.peak, want, rtol=1e-6)
    np.testing.assert_allclose(seen.largest, want, rtol=1e-6)
