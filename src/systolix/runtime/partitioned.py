"""Models partitioned between the accelerator and the host (``systolix.segments``).

The top-level ``.tmodel`` lists segments in execution order: ``accelerator`` segments are
plain compiled models (their own ``.tmodel``), ``host`` segments are ONNX subgraphs run with
onnxruntime. ``run`` feeds each segment from the tensors computed so far, by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np

from systolix.artifacts import TModel
from systolix.errors import ArtifactError
from systolix.runtime.model import Model, RuntimeInputError


class HostSegment:
    """An ONNX subgraph run by onnxruntime, one batch item at a time (its shapes have batch 1)."""

    def __init__(self, data: bytes, source: str):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        except Exception as e:
            raise ArtifactError(f"{source}: onnxruntime cannot load this host segment: {str(e).splitlines()[0]}") from None
        self.source = source
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.input_shapes = {i.name: tuple(i.shape) for i in self.session.get_inputs()}

    def run(self, feeds: dict[str, np.ndarray], batched: bool) -> dict[str, np.ndarray]:
        if not batched:
            values = self.session.run(self.output_names, {k: np.asarray(feeds[k], np.float32) for k in self.input_names})
            return dict(zip(self.output_names, values))
        batch = next(iter(feeds.values())).shape[0] if feeds else 1
        per_item = [self.run({k: feeds[k][b] for k in self.input_names}, False) for b in range(batch)]
        return {k: np.stack([r[k] for r in per_item]) for k in self.output_names}


class PartitionedModel:
    """A sequence of accelerator programs and host subgraphs; ``run`` like ``Model.run``."""

    def __init__(self, manifest: TModel, directory: Path, source: str):
        self.manifest = manifest
        self.directory = Path(directory)
        self.source = source
        self.arch = manifest.arch
        self.name = manifest.name
        ext = manifest.systolix or {}
        segments = ext.get("segments")
        if not isinstance(segments, list) or not segments:
            raise ArtifactError(f"{source}: systolix.segments must be a non-empty list")
        self.segments: list[tuple[str, Any, dict]] = []
        for k, seg in enumerate(segments):
            kind = seg.get("kind") if isinstance(seg, dict) else None
            where = f"{source}: systolix.segments[{k}]"
            if kind == "accelerator":
                path = self.directory / str(seg.get("tmodel", ""))
                if not path.is_file():
                    raise ArtifactError(f"{where}: accelerator program {path.name!r} does not exist in {self.directory}")
                self.segments.append((kind, Model.load(path), seg))
            elif kind == "host":
                path = self.directory / str(seg.get("onnx", ""))
                try:
                    data = path.read_bytes()
                except OSError:
                    raise ArtifactError(f"{where}: host subgraph {path.name!r} does not exist in {self.directory}") from None
                self.segments.append((kind, HostSegment(data, str(path)), seg))
            else:
                raise ArtifactError(f"{where}: kind must be 'accelerator' or 'host', got {kind!r}")
        self.input_shapes = {e["name"]: tuple(e["shape"]) for e in ext.get("inputs", [])}
        self.output_names = [e["name"] for e in ext.get("outputs", [])]
        self.placement = dict(ext.get("placement") or {})

    @classmethod
    def load(cls, path: str | Path) -> "PartitionedModel":
        path = Path(path)
        return cls(TModel.load(path), path.parent, str(path))

    def run(self, inputs, *, batch: bool | None = None, **run_options) -> dict[str, np.ndarray]:
        """Run on ``{name: array}`` in the model's own shapes (an extra leading axis is a batch);
        ``run_options`` (``threads``...) go to each accelerator program's ``Model.run``."""
        return self.run_counting(inputs, batch=batch, **run_options)[0]

    def run_counting(self, inputs, *, batch: bool | None = None,
                     **run_options) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Like ``run``, and how many results saturated on the accelerator, per batch item
        (``[batch]``; ``[1]`` without a batch axis)."""
        names = list(self.input_shapes)
        if not isinstance(inputs, Mapping):
            if len(names) != 1:
                raise RuntimeInputError(f"the model has {len(names)} inputs ({', '.join(names)}): pass a dict by name")
            inputs = {names[0]: inputs}
        env: dict[str, np.ndarray] = {}
        batched = None
        for n in names:
            if n not in inputs:
                raise RuntimeInputError(f"missing input {n!r}; the model's inputs are: {', '.join(names)}")
            a = np.asarray(inputs[n], np.float32)
            shape = self.input_shapes[n]
            if a.shape == shape and batch is not True:
                b = False
            elif a.ndim == len(shape) + 1 and a.shape[1:] == shape and batch is not False:
                b = True
            else:
                raise RuntimeInputError(f"input {n!r}: expected shape {list(shape)} (or with a batch axis), got {list(a.shape)}")
            if batched is not None and b != batched:
                raise RuntimeInputError("every input must have the same batch axis (or none)")
            batched = b
            env[n] = a
        unknown = [k for k in inputs if k not in names]
        if unknown:
            raise RuntimeInputError(f"unknown input {unknown[0]!r}; the model's inputs are: {', '.join(names)}")
        saturated = None
        for kind, runner, seg in self.segments:
            feeds = {t: env[t] for t in seg["inputs"]}
            if kind == "accelerator":
                outs, per_item = runner.run_counting(feeds, batch=bool(batched), **run_options)
                saturated = per_item if saturated is None else saturated + per_item
            else:
                outs = runner.run(feeds, bool(batched))
            env.update({k: np.asarray(v, np.float32) for k, v in outs.items()})
        if saturated is None:
            saturated = np.zeros(next(iter(env.values())).shape[0] if batched else 1, np.int64)
        return {n: env[n] for n in self.output_names}, saturated

    def __repr__(self) -> str:
        kinds = ", ".join(k for k, _, _ in self.segments)
        return f"<systolix PartitionedModel {self.name!r}: {kinds}>"


def load_partitioned(path: str | Path) -> PartitionedModel:
    """Load a partitioned model's top-level ``.tmodel``."""
    return PartitionedModel.load(path)
