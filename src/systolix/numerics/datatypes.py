"""The data types a Tensor Compute Unit can be built with."""

from __future__ import annotations

from enum import Enum

import numpy as np


class DataType(Enum):
    """A scalar type: ``(width in bits, binary point, bytes per scalar in .tdata)``.

    ``FLOAT32`` is a reference type (Tensil's emulator supports it; no hardware does).
    """

    FP8BP4 = (8, 4, 1)
    FP16BP8 = (16, 8, 2)
    FP18BP10 = (18, 10, 4)
    FP32BP16 = (32, 16, 4)
    FLOAT32 = (32, 0, 4)

    @property
    def width(self) -> int:
        return self.value[0]

    @property
    def binary_point(self) -> int:
        return self.value[1]

    @property
    def size_bytes(self) -> int:
        """Bytes one scalar takes in ``.tdata`` files and DRAM images."""
        return self.value[2]

    @property
    def is_fixed(self) -> bool:
        return self is not DataType.FLOAT32

    @property
    def min_int(self) -> int:
        """Smallest raw integer (two's complement) of a fixed-point type."""
        return -(1 << (self.width - 1))

    @property
    def max_int(self) -> int:
        return (1 << (self.width - 1)) - 1

    @property
    def one(self) -> int:
        """The raw integer of 1.0."""
        return 1 << self.binary_point

    @property
    def resolution(self) -> float:
        """The value of one least significant bit."""
        return 2.0 ** -self.binary_point

    @property
    def max_value(self) -> float:
        return self.max_int / self.one

    @property
    def min_value(self) -> float:
        return self.min_int / self.one

    @property
    def storage_dtype(self) -> np.dtype:
        """The NumPy dtype we hold raw values in (wide enough for every add)."""
        if self is DataType.FLOAT32:
            return np.dtype(np.float32)
        return np.dtype(np.int64)

    def __str__(self) -> str:
        return self.name
