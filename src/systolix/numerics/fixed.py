"""Fixed-point conversion and arithmetic, vectorised with NumPy.

Semantics (``../shared/notes/tensil-formats.md``, Tensil's ``FixedBase``):

* float -> fixed: ``round(f * 2^bp)`` half *up* on the float32 value (Java ``Math.round``),
  then saturate; NaN becomes 0.
* multiply-accumulate: ``sat(z + rne(x * y / 2^bp))``, each product rounded half to even,
  the add exact and then saturated.

Raw values are held as ``int64``: products of two 32-bit values still fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from systolix.numerics.datatypes import DataType


@dataclass
class ConversionStats:
    """Counts of values that saturated while converting or computing."""

    overflows: int = 0
    underflows: int = 0
    by_source: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.overflows + self.underflows

    def add(self, over: int, under: int, source: str = "") -> None:
        self.overflows += int(over)
        self.underflows += int(under)
        if source and (over or under):
            self.by_source[source] = self.by_source.get(source, 0) + int(over) + int(under)


def saturate(raw: np.ndarray, dtype: DataType, stats: ConversionStats | None = None, source: str = "") -> np.ndarray:
    """Clamp raw integers to the type's range, counting what was clamped."""
    raw = np.asarray(raw, dtype=np.int64)
    if stats is not None:
        stats.add(np.count_nonzero(raw > dtype.max_int), np.count_nonzero(raw < dtype.min_int), source)
    return np.clip(raw, dtype.min_int, dtype.max_int)


def to_fixed(values, dtype: DataType, stats: ConversionStats | None = None, source: str = "") -> np.ndarray:
    """Convert floats to raw fixed-point integers (round half up, saturate).

    For ``FLOAT32`` returns float32 values unchanged.
    """
    f = np.asarray(values, dtype=np.float32)
    if dtype is DataType.FLOAT32:
        return f.copy()
    # The scaling by a power of two is exact in float32 (as in Java); the +0.5 and floor
    # are exact in float64 for every value that does not saturate anyway.
    scaled = f.astype(np.float64) * float(dtype.one)
    with np.errstate(invalid="ignore"):
        rounded = np.floor(scaled + 0.5)
    rounded = np.where(np.isnan(rounded), 0.0, rounded)
    limit = float(2**62)
    rounded = np.clip(rounded, -limit, limit)
    return saturate(rounded.astype(np.int64), dtype, stats, source)


def from_fixed(raw, dtype: DataType) -> np.ndarray:
    """Raw fixed-point integers to float32 (exact for every type up to FP18BP10)."""
    if dtype is DataType.FLOAT32:
        return np.asarray(raw, dtype=np.float32)
    return (np.asarray(raw, dtype=np.float64) / dtype.one).astype(np.float32)


def rne_shift(value: np.ndarray, shift: int) -> np.ndarray:
    """``value / 2^shift`` rounded half to even, for int64 arrays (exact)."""
    value = np.asarray(value, dtype=np.int64)
    if shift == 0:
        return value.copy()
    floor = value >> shift
    rem = value - (floor << shift)
    half = 1 << (shift - 1)
    round_up = (rem > half) | ((rem == half) & ((floor & 1) == 1))
    return floor + round_up.astype(np.int64)


def mul_rne(x, y, dtype: DataType) -> np.ndarray:
    """The accelerator's product ``rne(x * y / 2^bp)`` before any saturation."""
    if dtype is DataType.FLOAT32:
        return np.asarray(x, np.float32) * np.asarray(y, np.float32)
    return rne_shift(np.asarray(x, np.int64) * np.asarray(y, np.int64), dtype.binary_point)


def add_sat(x, y, dtype: DataType, stats: ConversionStats | None = None, source: str = "") -> np.ndarray:
    """Exact add, then saturate."""
    if dtype is DataType.FLOAT32:
        return np.asarray(x, np.float32) + np.asarray(y, np.float32)
    return saturate(np.asarray(x, np.int64) + np.asarray(y, np.int64), dtype, stats, source)


def mac(x, y, z, dtype: DataType, stats: ConversionStats | None = None, source: str = "") -> np.ndarray:
    """One multiply-accumulate step: ``sat(z + rne(x * y / 2^bp))``, elementwise."""
    return add_sat(z, mul_rne(x, y, dtype), dtype, stats, source)


def matvec(
    inputs: np.ndarray,
    weights: np.ndarray,
    bias: np.ndarray,
    dtype: DataType,
    stats: ConversionStats | None = None,
) -> np.ndarray:
    """What the systolic array computes for a batch of input vectors.

    ``inputs`` is ``[..., K]``, ``weights`` ``[K, N]``, ``bias`` ``[N]`` (all raw). Each output
    starts from the bias and adds one rounded product per row, saturating after every add:
    the sequential order matters only when a partial sum saturates.
    """
    inputs = np.asarray(inputs)
    weights = np.asarray(weights)
    if dtype is DataType.FLOAT32:
        acc = np.broadcast_to(np.asarray(bias, np.float32), inputs.shape[:-1] + (weights.shape[1],)).copy()
        for k in range(weights.shape[0]):
            acc += inputs[..., k : k + 1].astype(np.float32) * weights[k].astype(np.float32)
        return acc
    products = rne_shift(inputs[..., :, None].astype(np.int64) * weights.astype(np.int64), dtype.binary_point)
    acc = np.broadcast_to(np.asarray(bias, np.int64), inputs.shape[:-1] + (weights.shape[1],))
    # Fast path: if no prefix sum leaves the range, saturation never fires and the
    # sequential result equals the plain sum.
    prefix = np.cumsum(products, axis=-2) + acc[..., None, :]
    lo, hi = dtype.min_int, dtype.max_int
    if prefix.size == 0 or (prefix.min() >= lo and prefix.max() <= hi):
        return prefix[..., -1, :] if products.shape[-2] else acc.copy()
    out = acc.copy()
    for k in range(products.shape[-2]):
        out = add_sat(out, products[..., k, :], dtype, stats, "array")
    return out
