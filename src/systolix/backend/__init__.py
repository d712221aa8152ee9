"""The backend: bound LIR to Tensil's files (``.tprog``, ``.tdata``, ``.tmodel``) and the listing."""

from systolix.backend.artifacts import Artifacts, build_artifacts, encode
from systolix.backend.bind import bind_memories

__all__ = ["Artifacts", "bind_memories", "build_artifacts", "encode"]
