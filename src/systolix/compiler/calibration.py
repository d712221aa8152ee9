"""Calibration samples: what the user hands ``compile(..., calibration=...)`` or
``--calibrate FILE.npz``, checked against the model's inputs and split into one dict per sample.

Accepted: a dict ``{input name: array}`` (one sample in the input's own shape, or several
stacked on a new leading axis, or on the batch axis when the model's batch is 1), a list of such
dicts, or the path of an ``.npz`` file holding the dict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from systolix.errors import SystolixError
from systolix.ir import Graph


class CalibrationError(SystolixError):
    """Calibration data that does not fit the model."""


def _load_npz(path: Path) -> dict[str, np.ndarray]:
    from systolix.artifacts.arrays import read_arrays

    if path.exists() and not path.is_dir() and path.suffix.lower() == ".npy":
        raise CalibrationError(f"{path}: calibration samples go in an .npz file, one array per input name "
                               "(np.savez(path, **{input_name: samples})), not a single .npy array")
    loaded = read_arrays(path, CalibrationError)
    if isinstance(loaded, np.ndarray):
        raise CalibrationError(f"{path}: not a NumPy .npz file (a single .npy array); calibration samples go in an "
                               ".npz file, one array per input name")
    return loaded


def _split(source: str, graph: Graph, arrays: Mapping[str, Any]) -> list[dict[str, np.ndarray]]:
    missing = [n for n in graph.inputs if n not in arrays]
    if missing:
        raise CalibrationError(f"{source}: no values for the model's input {missing[0]!r} (it has {sorted(arrays)})")
    unknown = [n for n in arrays if n not in graph.inputs]
    if unknown:
        raise CalibrationError(f"{source}: {unknown[0]!r} is not an input of the model (inputs: {graph.inputs})")
    counts = {}
    stacked = {}
    for name in graph.inputs:
        from systolix.runtime.model import RuntimeInputError, check_input

        shape = tuple(graph.tensor(name).shape)
        try:
            a = check_input(name, arrays[name], allow_nonfinite=True, what=f"{source}: input").astype(np.float32)
        except RuntimeInputError as e:
            raise CalibrationError(str(e)) from None
        if a.shape == shape:
            a = a[None]
        elif a.ndim == len(shape) + 1 and a.shape[1:] == shape:
            pass
        elif shape and shape[0] == 1 and a.ndim == len(shape) and a.shape[1:] == shape[1:]:
            a = a[:, None]
        else:
            raise CalibrationError(f"{source}: input {name!r} has shape {list(a.shape)}; the model's is {list(shape)} "
                                   f"(give one sample in that shape or several stacked on a leading axis)")
        if not np.all(np.isfinite(a)):
            raise CalibrationError(f"{source}: input {name!r} holds NaN or infinite values")
        counts[name] = a.shape[0]
        stacked[name] = a
    if len(set(counts.values())) > 1:
        raise CalibrationError(f"{source}: inputs hold different numbers of samples: {counts}")
    n = next(iter(counts.values()), 0)
    if n == 0:
        raise CalibrationError(f"{source}: no samples")
    return [{name: stacked[name][k] for name in graph.inputs} for k in range(n)]


def calibration_samples(calibration: Any, graph: Graph) -> list[dict[str, np.ndarray]]:
    """One dict of ONNX-shaped arrays per sample; a ``CalibrationError`` naming the problem (an
    unreadable or non-``.npz`` file, a missing or unknown input, a wrong shape, complex,
    non-numeric, NaN or infinite values, no samples)."""
    if isinstance(calibration, (str, Path)):
        path = Path(calibration)
        return _split(str(path), graph, _load_npz(path))
    if isinstance(calibration, Mapping):
        return _split("calibration", graph, calibration)
    if isinstance(calibration, Sequence) and calibration and all(isinstance(s, Mapping) for s in calibration):
        out = []
        for k, sample in enumerate(calibration):
            out.extend(_split(f"calibration sample {k}", graph, sample))
        return out
    raise CalibrationError("calibration: expected a dict of input arrays, a list of such dicts, or an .npz path")


def tensor_values(model: onnx.ModelProto, graph: Graph, samples: list[dict[str, np.ndarray]],
                  names: Sequence[str]) -> list[dict[str, np.ndarray]]:
    """For each sample, the float values of the tensors ``names`` as onnxruntime computes them
    (the inputs of accelerator segments that start after a host segment)."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    have = {o.name for o in probe.graph.output}
    for name in names:
        if name not in have and name not in graph.inputs:
            t = graph.tensor(name)
            elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype))
            probe.graph.output.append(onnx.helper.make_tensor_value_info(name, elem, list(t.shape)))
    from systolix.onnxrt import session

    sess = session(probe, source="calibration", error=CalibrationError)
    fetch = [n for n in names if n not in graph.inputs]
    out = []
    for feeds in samples:
        values = dict(zip(fetch, sess.run(fetch, feeds))) if fetch else {}
        out.append({n: (feeds[n] if n in feeds else values[n]) for n in names})
    return out
