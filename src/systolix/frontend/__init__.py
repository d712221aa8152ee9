"""The frontend: ONNX files to the compiler's graph IR (``systolix.ir``)."""

from systolix.frontend.onnx_frontend import (
    MAX_OPSET,
    MIN_OPSET,
    FrontendError,
    fold_constants,
    graph_from_model,
    import_onnx,
    load_onnx,
    to_graph,
)

__all__ = ["MAX_OPSET", "MIN_OPSET", "FrontendError", "fold_constants", "graph_from_model", "import_onnx", "load_onnx", "to_graph"]
