"""Run compiled models on the emulator: ``systolix.runtime.load(path).run({name: array})``."""

from __future__ import annotations

from pathlib import Path

from systolix.artifacts import TModel
from systolix.runtime.layout import pack_input, tensor_to_vectors, vectors_to_tensor
from systolix.runtime.model import Model, ModelRun, RuntimeInputError, SaturationWarning, TensorSpec

__all__ = ["Model", "ModelRun", "RuntimeInputError", "SaturationWarning", "TensorSpec", "load", "pack_input", "tensor_to_vectors", "vectors_to_tensor"]


def load(path: str | Path):
    """Load a ``.tmodel``: a ``Model`` (or, for a model partitioned between accelerator and
    host, whatever ``systolix.runtime.partitioned.load_partitioned`` returns).

    Raises ``ArtifactError`` and ``DecodingError`` as ``systolix.load`` documents."""
    path = Path(path)
    manifest = TModel.load(path)
    if (manifest.systolix or {}).get("segments"):
        from systolix.runtime.partitioned import load_partitioned

        return load_partitioned(path)
    return Model(manifest, path.parent, str(path))
