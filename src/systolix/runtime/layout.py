"""Tensors to DRAM vectors and back (``docs/tmodel-extension.md``).

A layout ``{"perm": [...], "padded_channels": P}`` says: transpose the tensor by ``perm`` so the
last axis is the one spread across a vector, zero-pad that axis to ``P`` (a multiple of the
array size N), then read the result in C order as consecutive vectors of N scalars. Both
functions accept an extra leading batch axis.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from systolix.errors import ArtifactError


def _perm_and_padding(layout: dict[str, Any], ndim: int, array_size: int | None) -> tuple[list[int], int]:
    try:
        perm = [int(p) for p in layout["perm"]]
        padded = int(layout["padded_channels"])
    except (KeyError, TypeError, ValueError):
        raise ArtifactError(f"layout {layout!r}: expected {{'perm': [...], 'padded_channels': int}}") from None
    if sorted(perm) != list(range(ndim)):
        raise ArtifactError(f"layout perm {perm} is not a permutation of the tensor's {ndim} axes")
    if padded < 1 or (array_size is not None and padded % array_size):
        raise ArtifactError(f"layout padded_channels {padded} is not a positive multiple of the array size {array_size}")
    return perm, padded


def vector_count(shape: Sequence[int], layout: dict[str, Any], array_size: int) -> int:
    """How many vectors a tensor of ``shape`` (no batch axis) takes in DRAM."""
    perm, padded = _perm_and_padding(layout, len(shape), array_size)
    moved = [int(shape[p]) for p in perm]
    if moved and moved[-1] > padded:
        raise ArtifactError(f"layout padded_channels {padded} is smaller than the channel axis ({moved[-1]})")
    outer = math.prod(moved[:-1]) if len(moved) > 1 else 1  # Python ints: no silent overflow
    return outer * padded // array_size


def tensor_to_vectors(array: np.ndarray, layout: dict[str, Any], array_size: int) -> np.ndarray:
    """A tensor ``[*shape]`` (or ``[batch, *shape]``) as vectors ``[n, N]`` (or ``[batch, n, N]``).

    Whether there is a batch axis is read from the layout: a tensor with one axis more than
    ``perm`` has entries is batched.
    """
    a = np.asarray(array)
    ndim = len(layout.get("perm", ())) if isinstance(layout, dict) else 0
    batched = a.ndim == ndim + 1
    if not batched and a.ndim != ndim:
        raise ArtifactError(f"tensor has {a.ndim} axes, the layout expects {ndim} (or {ndim + 1} with a batch axis)")
    perm, padded = _perm_and_padding(layout, ndim, array_size)
    axes = ([0] + [p + 1 for p in perm]) if batched else perm
    moved = np.transpose(a, axes)
    channels = moved.shape[-1] if moved.ndim else 1
    if channels > padded:
        raise ArtifactError(f"layout padded_channels {padded} is smaller than the channel axis ({channels})")
    if channels < padded:
        pad = [(0, 0)] * (moved.ndim - 1) + [(0, padded - channels)]
        moved = np.pad(moved, pad)
    lead = (a.shape[0],) if batched else ()
    return np.ascontiguousarray(moved).reshape(lead + (-1, array_size))


def vectors_to_tensor(vectors: np.ndarray, shape: Sequence[int], layout: dict[str, Any]) -> np.ndarray:
    """Vectors ``[n, N]`` (or ``[batch, n, N]``) back to a tensor of ``shape`` (or ``[batch, *shape]``)."""
    v = np.asarray(vectors)
    shape = [int(s) for s in shape]
    if v.ndim not in (2, 3):
        raise ArtifactError(f"vectors must be [n, N] or [batch, n, N], got shape {list(v.shape)}")
    array_size = v.shape[-1]
    perm, padded = _perm_and_padding(layout, len(shape), array_size)
    batched = v.ndim == 3
    moved_shape = [shape[p] for p in perm]
    padded_shape = moved_shape[:-1] + [padded]
    expected = int(np.prod(padded_shape, dtype=np.int64))
    have = v.shape[-2] * array_size
    if have != expected:
        raise ArtifactError(
            f"{v.shape[-2]} vectors of {array_size} hold {have} values; a {shape} tensor padded to "
            f"{padded} channels needs {expected}"
        )
    lead = [v.shape[0]] if batched else []
    t = v.reshape(lead + padded_shape)[..., : moved_shape[-1]]
    inverse = list(np.argsort(perm))
    axes = ([0] + [p + 1 for p in inverse]) if batched else inverse
    return np.ascontiguousarray(np.transpose(t, axes))


def packed_shape(shape: Sequence[int], pack: dict[str, Any]) -> tuple[int, ...]:
    """The shape ``[1, C*BH*BW, GH, GW]`` of an NCHW input ``shape`` once packed by ``pack``."""
    if len(shape) != 4:
        raise ArtifactError(f"pack: only a 4-D NCHW tensor can be packed, the shape is {list(shape)}")
    (bh, bw), (gh, gw) = pack["window"], pack["grid"]
    return (int(shape[0]), int(shape[1]) * int(bh) * int(bw), int(gh), int(gw))


def pack_input(array: np.ndarray, pack: dict[str, Any]) -> np.ndarray:
    """An NCHW input ``[1, C, H, W]`` (or ``[batch, 1, C, H, W]``) packed by ``pack``
    (``docs/tmodel-extension.md``): ``[.., 1, C*BH*BW, GH, GW]`` with

        packed[0, (c*BH + i)*BW + j, y, x] = input[0, c, y*SH + i - PT, x*SW + j - PL]

    (zero where the index falls outside the input). ``im2col`` makes one packed pixel of a
    kernel window (the conv becomes 1x1), ``space_to_depth`` of a ``stride x stride`` block,
    ``row_window`` of the columns k output pixels of a row read (the conv gets k output phases).
    """
    a = np.asarray(array)
    (bh, bw), (sh, sw), (pt, pl), (gh, gw) = (tuple(int(v) for v in pack[k]) for k in ("window", "stride", "pads", "grid"))
    lead, (one, c, h, w) = a.shape[:-4], a.shape[-4:]
    # Zero-pad so that every index y*SH + i - PT (and for x) lies inside the padded array.
    need_h, need_w = (gh - 1) * sh + bh, (gw - 1) * sw + bw
    pad_h, pad_w = (pt, max(0, need_h - pt - h)), (pl, max(0, need_w - pl - w))
    padded = np.pad(a, [(0, 0)] * (a.ndim - 2) + [pad_h, pad_w])
    taps = [padded[..., i:i + (gh - 1) * sh + 1:sh, j:j + (gw - 1) * sw + 1:sw]
            for i in range(bh) for j in range(bw)]  # each [.., 1, C, GH, GW]
    out = np.stack(taps, axis=-3)  # [.., 1, C, BH*BW, GH, GW]: channel (c*BH + i)*BW + j
    return np.ascontiguousarray(out.reshape(lead + (one, c * bh * bw, gh, gw)))
