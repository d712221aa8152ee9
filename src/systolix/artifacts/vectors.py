"""Tensil's CSV vector files: one vector a line, comma-separated floats."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from systolix.errors import ArtifactError


def read_vectors_csv(path: str | Path, array_size: int | None = None) -> np.ndarray:
    """Read a CSV of vectors as float32 ``[n_vectors, width]``; checks the width if given.

    Raises ``ArtifactError``: not a regular file, not UTF-8, no rows, rows of different lengths,
    a value that is not a number, or (with ``array_size``) the wrong width. NaN and infinities
    parse; the runtime refuses them as inputs unless told to allow them.
    """
    from systolix.artifacts.files import clip, read_text

    path = Path(path)
    text = read_text(path, "CSV file of vectors")
    rows = [line for line in text.splitlines() if line.strip()]
    if not rows:
        raise ArtifactError(f"{path}: no vectors in file")
    try:
        data = np.loadtxt(io.StringIO("\n".join(rows)), delimiter=",", dtype=np.float32, ndmin=2)
    except ValueError as e:
        raise ArtifactError(f"{path}: not a CSV of numbers: {clip(str(e))}") from None
    if array_size is not None and data.shape[1] != array_size:
        raise ArtifactError(f"{path}: vectors have {data.shape[1]} values, the architecture's array size is {array_size}")
    return data


def write_vectors_csv(path: str | Path, vectors: np.ndarray) -> None:
    """Write vectors one a line, as Tensil does."""
    from systolix.artifacts.atomic import write_text_atomic

    vectors = np.asarray(vectors, dtype=np.float32).reshape(-1, np.asarray(vectors).shape[-1])
    lines = [",".join(repr(float(x)) for x in row) for row in vectors]
    write_text_atomic(Path(path), "\n".join(lines) + "\n")
