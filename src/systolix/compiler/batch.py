"""Batch programs (``systolix compile --batch B``): one program that runs B images, each weight
tile loaded into the array streaming every image's vectors (``systolix.planning.tiling.conv``).

Here: the batch a compile asks for, checked, and a model whose ONNX inputs fix a batch above 1
relabelled to a free batch axis so that it compiles as a batch program of that size.
"""

from __future__ import annotations

from typing import Any

import onnx

from systolix.errors import SystolixError
from systolix.frontend import FrontendError, load_onnx

#: Most images one program may run (each image's activations take their own DRAM0 spans).
MAX_BATCH = 1024


def check_batch(batch: Any) -> int:
    """``batch`` as an int from 1 to ``MAX_BATCH``, or ``SystolixError``."""
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH:
        raise SystolixError(f"batch {batch!r}: expected a whole number of images from 1 to {MAX_BATCH}")
    return batch


def model_batch(model: onnx.ModelProto) -> tuple[int | None, list[tuple[str, int | None]]]:
    """The batch the model's inputs fix (their leading dimension, when every input fixes the
    same one above 1), or None; and each input's leading dimension (None: free)."""
    initializers = {t.name for t in model.graph.initializer}
    leads = []
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        dims = vi.type.tensor_type.shape.dim
        lead = dims[0].dim_value if len(dims) and dims[0].HasField("dim_value") and dims[0].dim_value > 0 else None
        leads.append((vi.name, lead))
    fixed = {d for _, d in leads if d is not None and d > 1}
    return (fixed.pop() if len(fixed) == 1 else None), leads


def free_batch(model_or_path: Any, batch: int | None) -> tuple[Any, int, str | None]:
    """The model to compile, the batch to compile it for, and (for a relabelled model) the name
    of the original for messages.

    A model whose inputs are all images (NCHW) fixing a batch b above 1 compiles as a batch-b program: its inputs'
    and outputs' leading dimension becomes a free one (the frontend then traces it at batch 1).
    ``batch`` (``--batch``) must then be b or None. Inputs whose leading dimensions differ
    (a computed weight ``[Cout, Cin, KH, KW]`` beside an image) are not a batch: the model
    compiles as it is.
    """
    batch = check_batch(batch) if batch is not None else None
    model, source = load_onnx(model_or_path)
    fixed, leads = model_batch(model)
    above = [(n, d) for n, d in leads if d is not None and d > 1]
    inits = {t.name for t in model.graph.initializer}
    ranks = [len(vi.type.tensor_type.shape.dim) for vi in model.graph.input if vi.name not in inits]
    # Only images (NCHW) say which axis is the batch: the leading axis of a matrix or token tensor
    # ([M, K], [B, T, D]) may be its rows, which the ops mix (a reduction or product over them).
    if not above or fixed is None or len(above) != len(leads) or any(r != 4 for r in ranks):
        return model_or_path, batch or 1, None
    if batch is not None and batch != fixed:
        raise FrontendError(f"{source}: the model's inputs have batch {fixed} but --batch is {batch}; drop --batch or "
                            f"give {fixed}")
    check_batch(fixed)
    relabelled = onnx.ModelProto()
    relabelled.CopyFrom(model)
    for vi in list(relabelled.graph.input) + list(relabelled.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if len(dims) and dims[0].HasField("dim_value") and dims[0].dim_value == fixed:
            dims[0].Clear()
            dims[0].dim_param = "batch"
    return relabelled, fixed, source


__all__ = ["MAX_BATCH", "check_batch", "free_batch", "model_batch"]
