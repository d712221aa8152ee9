"""Numbers as the accelerator computes them: Tensil's fixed-point types and their arithmetic."""

from systolix.numerics.datatypes import DataType
from systolix.numerics.fixed import (
    ConversionStats,
    add_sat,
    from_fixed,
    mac,
    matvec,
    mul_rne,
    rne_shift,
    saturate,
    to_fixed,
)

__all__ = [
    "DataType",
    "ConversionStats",
    "add_sat",
    "from_fixed",
    "mac",
    "matvec",
    "mul_rne",
    "rne_shift",
    "saturate",
    "to_fixed",
]
