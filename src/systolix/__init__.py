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
    """Load a compiled model (``.tmodel``) for running on the emulator: ``load(p).run({...})``.

    Raises ``ArtifactError`` for a manifest that is missing, not a regular file, not UTF-8 JSON,
    fails the schema (Tensil's keys or the ``systolix`` key), names a file outside its folder or
    one that is not a regular file, or whose files are shorter than it states; ``DecodingError``
    for a program that does not decode. The returned model's ``run`` raises ``RuntimeInputError``,
    ``MemoryLimitError`` and ``EmulatorError`` (see ``systolix.runtime.Model.run``).
    """
    from systolix.runtime import load as _load

    return _load(path)


def compile(model, arch, **options):  # noqa: A001 - the public name the brief asks for
    """Compile an ONNX model (path or ``onnx.ModelProto``) for ``arch``; returns a runnable model.

    Raises ``FrontendError`` (the file is missing, not a regular file or not ONNX; an unsupported
    opset; NaN or infinite weights, naming the initializer; tensors in external data files; a
    graph with no nodes; a model onnxruntime refuses), ``ArchitectureError`` (an unknown preset or
    a bad ``.tarch``), ``CalibrationError`` (unusable ``calibration`` samples: not an ``.npz``,
    complex, NaN, wrong shapes), ``UnsupportedOpError`` (with ``host=False``) and
    ``SchedulingError`` (a layer that does not fit the architecture); all are ``SystolixError``.
    """
    from systolix.compiler import compile_model

    return compile_model(model, arch, **options)


__all__ += ["compile", "load"]
