"""Systolix: ONNX models to systolic-array accelerators compatible with Tensil."""

from systolix.arch import ARCHITECTURES, BOARDS, Architecture, Board, get_architecture, get_board
from systolix.errors import SystolixError
from systolix.numerics import DataType

__version__ = "0.1.0"

__all__ = [
    "ARCHITECTURES", "BOARDS", "Architecture", "Board", "DataType", "SystolixError", "get_architecture",
    "get_board", "__version__",
]


def load(path):
    """Load a compiled model (``.tmodel``) for running on the emulator: ``load(p).run({...})``."""
    from systolix.runtime import load as _load

    return _load(path)


def compile(model, arch, **options):  # noqa: A001 - the public name the brief asks for
    """Compile an ONNX model (path or ``onnx.ModelProto``) for ``arch``; returns a runnable model."""
    from systolix.compiler import compile_model

    return compile_model(model, arch, **options)


__all__ += ["compile", "load"]
