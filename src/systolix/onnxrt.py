"""The one place Systolix opens onnxruntime sessions.

Every ``InferenceSession`` comes from ``session()``: onnxruntime's own logging is silenced (its
messages would print on stderr before, and instead of, our one ``error:`` line), a model that
onnxruntime refuses becomes the caller's ``SystolixError`` subclass with onnxruntime's first
line, and a model whose tensors live in external data files is refused before onnxruntime
could open them (their paths are the model's to choose: ``/etc/...``, ``../..``).
"""

from __future__ import annotations

from typing import Any

from systolix.errors import SystolixError

#: onnxruntime's severity levels: 0 verbose, 1 info, 2 warning, 3 error, 4 fatal.
SILENT = 4
_silenced = False


def silence() -> None:
    """Raise onnxruntime's process-wide logger to fatal-only (idempotent)."""
    global _silenced
    if _silenced:
        return
    import onnxruntime as ort

    ort.set_default_logger_severity(SILENT)
    _silenced = True


def external_data_tensors(model) -> list[str]:
    """Names of the tensors of an ``onnx.ModelProto`` (subgraphs included) stored in external files."""
    from onnx import TensorProto
    from onnx.external_data_helper import uses_external_data

    try:
        from onnx.external_data_helper import _get_all_tensors

        tensors = list(_get_all_tensors(model))
    except ImportError:  # pragma: no cover - onnx moved its helper: check the initializers at least
        tensors = list(model.graph.initializer)
    return [t.name or "(unnamed)" for t in tensors
            if isinstance(t, TensorProto) and (uses_external_data(t) or t.data_location == TensorProto.EXTERNAL)]


def refuse_external_data(model, source: str, error: type[SystolixError] = SystolixError) -> None:
    """``error`` if ``model`` keeps any tensor in an external data file."""
    names = external_data_tensors(model)
    if names:
        raise error(f"{source}: tensor {names[0]!r} is stored in an external data file, which Systolix never "
                    "reads; save the model with its tensors inside (onnx.save(model, path, "
                    "save_as_external_data=False))")


def session(model: Any, *, source: str = "model", error: type[SystolixError] = SystolixError,
            threads: int | None = None, optimize: bool = True, what: str = "the model"):
    """An onnxruntime CPU session for ``model`` (serialized bytes or an ``onnx.ModelProto``).

    ``threads`` sets intra-op threads (one inter-op thread), ``optimize=False`` turns off
    onnxruntime's graph optimizations. Raises ``error`` naming ``source`` if onnxruntime refuses
    the model or the model uses external data.
    """
    import onnx
    import onnxruntime as ort

    silence()
    if isinstance(model, onnx.ModelProto):
        proto, data = model, None
    else:
        data = bytes(model)
        try:
            proto = onnx.load_from_string(data)
        except Exception as e:  # protobuf's DecodeError and friends
            raise error(f"{source}: not a valid ONNX model ({str(e).splitlines()[0][:100] if str(e) else type(e).__name__})") from None
    refuse_external_data(proto, source, error)
    if data is None:
        data = proto.SerializeToString()
    options = ort.SessionOptions()
    options.log_severity_level = SILENT
    options.log_verbosity_level = 0
    if threads is not None:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise error(f"{source}: onnxruntime cannot load {what}: {first[:300]}") from None
