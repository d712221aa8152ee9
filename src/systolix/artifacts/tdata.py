"""``.tdata`` files and DRAM images: scalars packed little-endian (FLOAT32 big-endian)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from systolix.errors import ArtifactError
from systolix.numerics import DataType


def pack_scalars(raw: np.ndarray, dtype: DataType) -> bytes:
    """Raw values (int for fixed point, float for FLOAT32) to bytes."""
    raw = np.asarray(raw)
    if dtype is DataType.FLOAT32:
        return raw.astype(">f4").tobytes()
    v = raw.astype(np.int64)
    if v.size and (v.min() < dtype.min_int or v.max() > dtype.max_int):
        raise ArtifactError(f"value out of range for {dtype.name}")
    if dtype is DataType.FP8BP4:
        return v.astype("<i1").tobytes()
    if dtype is DataType.FP16BP8:
        return v.astype("<i2").tobytes()
    if dtype is DataType.FP32BP16:
        return v.astype("<i4").tobytes()
    # FP18BP10: 4 bytes a scalar, the 18 bits of two's complement in the low bits, the rest zero.
    return (v & ((1 << 18) - 1)).astype("<u4").tobytes()


def unpack_scalars(data: bytes, dtype: DataType, source: str = "data") -> np.ndarray:
    """Bytes to raw values (int64 for fixed point, float32 for FLOAT32)."""
    if len(data) % dtype.size_bytes:
        raise ArtifactError(f"{source}: {len(data)} bytes is not a whole number of {dtype.size_bytes}-byte {dtype.name} scalars")
    if dtype is DataType.FLOAT32:
        return np.frombuffer(data, dtype=">f4").astype(np.float32)
    if dtype is DataType.FP8BP4:
        return np.frombuffer(data, dtype="<i1").astype(np.int64)
    if dtype is DataType.FP16BP8:
        return np.frombuffer(data, dtype="<i2").astype(np.int64)
    if dtype is DataType.FP32BP16:
        return np.frombuffer(data, dtype="<i4").astype(np.int64)
    # FP18BP10: sign-extend from bit 17 and ignore the bits above, as Tensil's reader does.
    u = np.frombuffer(data, dtype="<u4").astype(np.int64) & ((1 << 18) - 1)
    return np.where(u >= (1 << 17), u - (1 << 18), u)


def read_tdata(path: str | Path, dtype: DataType, array_size: int, vectors: int | None = None) -> np.ndarray:
    """A ``.tdata`` file as raw vectors ``[n_vectors, array_size]`` (only the first ``vectors`` if given).

    Raises ``ArtifactError``: not a regular file, unreadable, fewer than ``vectors`` vectors, or
    (without ``vectors``) not a whole number of vectors.
    """
    from systolix.artifacts.files import read_bytes

    path = Path(path)
    vector_bytes = dtype.size_bytes * array_size
    data = read_bytes(path, "constants file (.tdata)", count=None if vectors is None else vectors * vector_bytes)
    return unpack_vectors(data, dtype, array_size, str(path), vectors)


def unpack_vectors(data: bytes, dtype: DataType, array_size: int, source: str, vectors: int | None = None) -> np.ndarray:
    """``.tdata`` bytes as raw vectors ``[n, array_size]``; ``vectors``: how many there must be."""
    vector_bytes = dtype.size_bytes * array_size
    if vectors is not None:
        if len(data) < vectors * vector_bytes:
            raise ArtifactError(f"{source}: holds only {len(data) // vector_bytes} vectors of {vector_bytes} bytes, "
                                f"{vectors} expected")
        data = data[: vectors * vector_bytes]
    if len(data) % vector_bytes:
        raise ArtifactError(
            f"{source}: {len(data)} bytes is not a whole number of {vector_bytes}-byte vectors "
            f"({array_size} x {dtype.name})"
        )
    return unpack_scalars(data, dtype, source).reshape(-1, array_size)


def write_tdata(path: str | Path, raw_vectors: np.ndarray, dtype: DataType) -> None:
    """Write raw vectors as a ``.tdata`` file, atomically."""
    from systolix.artifacts.atomic import write_bytes_atomic

    write_bytes_atomic(Path(path), pack_scalars(raw_vectors, dtype))
