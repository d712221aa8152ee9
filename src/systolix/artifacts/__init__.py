"""Tensil's files: ``.tmodel`` manifests, ``.tdata`` constants, CSV vectors."""

from systolix.artifacts.atomic import write_bytes_atomic, write_text_atomic
from systolix.artifacts.tdata import pack_scalars, read_tdata, unpack_scalars, write_tdata
from systolix.artifacts.tmodel import ConstsRef, ProgramRef, TensorSpan, TModel
from systolix.artifacts.vectors import read_vectors_csv, write_vectors_csv

__all__ = [
    "ConstsRef", "ProgramRef", "TModel", "TensorSpan", "pack_scalars", "read_tdata", "read_vectors_csv",
    "unpack_scalars", "write_bytes_atomic", "write_tdata", "write_text_atomic", "write_vectors_csv",
]
