"""The backend: LIR to Tensil's files (``.tprog``, ``.tdata``, ``.tmodel``) and the listing."""

from systolix.backend.artifacts import Artifacts, build_artifacts, write_artifacts

__all__ = ["Artifacts", "build_artifacts", "write_artifacts"]
