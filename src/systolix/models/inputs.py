"""Example inputs for the test models: image-like tensors for image inputs, normal noise otherwise.

Pure noise is a poor test input for a classifier: a global average pool averages it away, so every
input gives nearly the same logits and "same class as onnxruntime" becomes a coin toss on ties.
Image-like inputs (a per-channel brightness, a few smooth low-frequency waves, a little pixel noise)
make deep features, and therefore the predicted class, differ from one input to the next, while
keeping values near unit scale as a normalised image would be.
"""

from __future__ import annotations

import json
import zlib

import numpy as np
import onnx
from onnx import helper

from systolix.models._graph import ModelBuildError


def input_layouts(model: onnx.ModelProto) -> dict[str, str]:
    """The layout each input was declared with (``NCHW``, ``NHWC``, ``NC``...), from the metadata
    the builders write; inputs without it get ``NCHW`` for rank 4 and no layout otherwise."""
    props = {p.key: p.value for p in model.metadata_props}
    return json.loads(props.get("systolix.input_layouts", "{}"))


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The real inputs of the graph (older IR versions also list initializers as inputs)."""
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def input_shape(value_info: onnx.ValueInfoProto) -> tuple[int, ...]:
    """Static shape of an input; symbolic dimensions (a batch named ``N``) become 1."""
    dims = value_info.type.tensor_type.shape.dim
    return tuple(int(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in dims)


def image_like(shape_chw: tuple[int, int, int], rng: np.random.Generator) -> np.ndarray:
    """One CxHxW image-like sample: brightness per channel + 4 smooth waves + pixel noise."""
    c, h, w = shape_chw
    yy = np.linspace(0.0, 1.0, h)[:, None]
    xx = np.linspace(0.0, 1.0, w)[None, :]
    waves = 4
    amp = rng.normal(0.0, 0.5, (c, waves))
    fy = rng.uniform(0.0, 3.0, (c, waves))
    fx = rng.uniform(0.0, 3.0, (c, waves))
    phase = rng.uniform(0.0, 2 * np.pi, (c, waves))
    img = rng.normal(0.0, 1.0, (c, 1, 1)) + rng.normal(0.0, 0.3, (c, h, w))
    for k in range(waves):
        img += amp[:, k, None, None] * np.cos(2 * np.pi * (fy[:, k, None, None] * yy + fx[:, k, None, None] * xx)
                                              + phase[:, k, None, None])
    return np.clip(img, -4.0, 4.0)


def _sample(shape: tuple[int, ...], layout: str | None, rng: np.random.Generator) -> np.ndarray:
    if len(shape) == 4 and layout in (None, "NCHW", "NHWC"):
        n, a, b, c = shape
        if layout == "NHWC":
            imgs = np.stack([image_like((c, a, b), rng) for _ in range(n)]).transpose(0, 2, 3, 1)
        else:
            imgs = np.stack([image_like((a, b, c), rng) for _ in range(n)])
        return imgs.astype(np.float32)
    return rng.standard_normal(shape).astype(np.float32)


def example_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """One set of inputs for ``model`` (name -> float32 array of the input's own shape)."""
    layouts = input_layouts(model)
    feeds = {}
    for vi in graph_inputs(model):
        if vi.type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
            dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
            raise ModelBuildError(f"input {vi.name!r} has type {dtype}; example inputs are float32 only")
        rng = np.random.default_rng([seed, zlib.crc32(vi.name.encode())])
        feeds[vi.name] = _sample(input_shape(vi), layouts.get(vi.name), rng)
    return feeds


def example_input_set(model: onnx.ModelProto, count: int, seed: int = 0,
                      min_margin: float | None = None, max_tries: int = 20) -> list[dict[str, np.ndarray]]:
    """``count`` different input sets (seeds ``seed*100003 + i``), e.g. for agreement tests.

    With ``min_margin`` (for a model with one output of class scores), keep only inputs whose
    onnxruntime top-1 score beats the runner-up by at least ``min_margin``: when two classes are
    closer than a fixed-point error bound, neither answer is wrong, so "same class" tests should
    draw their inputs this way with ``min_margin`` set to twice the bound on the scores' error."""
    if min_margin is None:
        return [example_inputs(model, seed * 100003 + i) for i in range(count)]
    from systolix.models.unit_scale import session

    sess = session(model)
    chosen: list[dict[str, np.ndarray]] = []
    for i in range(count * max_tries):
        feeds = example_inputs(model, seed * 100003 + i)
        scores = np.sort(sess.run(None, feeds)[0].reshape(-1))
        if scores.size >= 2 and scores[-1] - scores[-2] >= min_margin:
            chosen.append(feeds)
            if len(chosen) == count:
                return chosen
    raise ModelBuildError(f"only {len(chosen)} of {count * max_tries} inputs have a top-2 margin >= {min_margin}")
