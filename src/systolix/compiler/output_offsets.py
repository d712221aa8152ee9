"""What a calibrated compile's outputs err by alike on every sample: the offsets
``systolix.hir_passes.correct_output_offsets`` takes out of their layers' biases."""

from __future__ import annotations

import warnings

import numpy as np
import onnx

from systolix.compiler.calibration import tensor_values
from systolix.ir import Graph


def measure_output_offsets(compiled, onnx_model: onnx.ModelProto, graph: Graph,
                           samples: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Per model output of shape ``[1, C]`` or ``[1, C, H, W]``, each channel's mean error (ours
    less onnxruntime's float value, in the output's real scale) over ``samples``, shrunk by its
    own noise: a mean ``m`` whose standard error over the samples is ``s`` counts as
    ``m (1 - s^2 / m^2)``, none below ``s`` (a correction as noisy as the offset would add as
    much error as it takes away)."""
    from systolix.runtime import SaturationWarning

    names = [name for name in graph.outputs
             if len(graph.tensor(name).shape) in (2, 4) and graph.tensor(name).shape[0] == 1]
    if not names or len(samples) < 2:
        return {}
    feeds = {key: np.stack([sample[key] for sample in samples]) for key in samples[0]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SaturationWarning)  # the samples' own saturation: counted elsewhere
        ours = compiled.run(feeds, batch=True)
    floats = tensor_values(onnx_model, graph, samples, names)
    offsets = {}
    for name in names:
        want = np.stack([values[name] for values in floats]).astype(np.float64)  # [S, 1, C, ...]
        got = np.asarray(ours[name], np.float64).reshape(want.shape)
        error = (got - want).reshape(want.shape[0], want.shape[2], -1).mean(axis=2)  # [S, C]: each sample's mean
        mean = error.mean(axis=0)
        noise = error.var(axis=0, ddof=1) / error.shape[0]
        keep = np.where(mean ** 2 > noise, 1.0 - noise / np.where(mean == 0, 1.0, mean ** 2), 0.0)
        offsets[name] = mean * keep
    return offsets
