"""How an ONNX-shaped tensor sits in vector memory: channels across the lanes of a vector.

Every stage agrees on this (the lowering places tensors, the backend describes the model's
inputs and outputs, the float evaluation reads them back), so it lives with the IRs.
"""

from __future__ import annotations

import numpy as np


def canonical_chw(shape: tuple[int, ...]) -> tuple[int, int, int, list[int]] | None:
    """How an ONNX shape sits in memory: ``(C, H, W, perm)``; None for shapes we cannot place.

    NCHW tensors keep channels in vectors; ``[1, K]``/``[M, K]``/``[1, M, K]`` spread the last
    axis across vectors and count the rest as pixels.
    """
    r = len(shape)
    if r == 4 and shape[0] == 1:
        return shape[1], shape[2], shape[3], [0, 2, 3, 1]
    if r == 3 and shape[0] == 1:
        return shape[2], 1, shape[1], [0, 1, 2]
    if r == 2:
        return shape[1], 1, shape[0], [0, 1]
    if r == 1:
        return shape[0], 1, 1, [0]
    return None


def canonical_elements(shape: tuple[int, ...]) -> np.ndarray:
    """For each element of a tensor of ``shape`` (C order), its element id ``c * P + p`` in memory."""
    c, h, w, _ = canonical_chw(shape)
    ids = np.arange(c * h * w, dtype=np.int64).reshape(c, h * w)  # [c, p]
    if len(shape) in (2, 3):
        # [.., M, K]: element (m, k) is channel k of pixel m.
        return ids.T.reshape(shape)
    return ids.reshape(shape)
