"""Models partitioned between the accelerator and the host (``systolix.segments``).

The top-level ``.tmodel`` lists segments in execution order: ``accelerator`` segments are
plain compiled models (their own ``.tmodel``), ``host`` segments are ONNX subgraphs run with
onnxruntime. ``run`` feeds each segment from the tensors computed so far, by name.

Every segment file is a relative name inside the top-level manifest's folder (the schema in
``systolix.artifacts.tmodel`` refuses absolute paths and ``..``; ``read_member`` refuses symbolic
links out of the folder and anything but a regular file), so a downloaded model cannot make
onnxruntime run an ONNX file from elsewhere on the disk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np

from systolix.artifacts import TModel
from systolix.artifacts.files import member_path, read_member, shown
from systolix.errors import ArtifactError
from systolix.runtime.model import Model, RuntimeInputError, check_constants_fit, check_input, constants_bytes


class HostSegment:
    """An ONNX subgraph run by onnxruntime, one batch item at a time (its shapes have batch 1)."""

    def __init__(self, data: bytes, source: str):
        from systolix.onnxrt import session

        self.session = session(data, source=source, error=ArtifactError, what="this host segment")
        self.source = source
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.input_shapes = {i.name: tuple(i.shape) for i in self.session.get_inputs()}

    def run(self, feeds: dict[str, np.ndarray], batched: bool) -> dict[str, np.ndarray]:
        if not batched:
            try:
                values = self.session.run(self.output_names, {k: np.asarray(feeds[k], np.float32) for k in self.input_names})
            except Exception as e:  # onnxruntime's own exceptions (a shape the subgraph does not take...)
                first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
                raise RuntimeInputError(f"{self.source}: onnxruntime cannot run this host segment: {first}") from None
            return dict(zip(self.output_names, values))
        batch = next(iter(feeds.values())).shape[0] if feeds else 1
        per_item = [self.run({k: feeds[k][b] for k in self.input_names}, False) for b in range(batch)]
        return {k: np.stack([r[k] for r in per_item]) for k in self.output_names}


class PartitionedModel:
    """A sequence of accelerator programs and host subgraphs; ``run`` like ``Model.run``."""

    def __init__(self, manifest: TModel, directory: Path, source: str):
        """Load every segment the manifest lists (files inside ``directory`` only).

        Raises ``ArtifactError``: no segments, a segment file outside the folder, missing or not
        a regular file, an accelerator segment that is itself partitioned, a segment whose
        inputs or outputs differ from what its file declares, or an ONNX subgraph onnxruntime
        refuses (or that keeps tensors in external data files).
        """
        self.manifest = manifest
        self.directory = Path(directory)
        self.source = source
        self.arch = manifest.arch
        self.name = manifest.name
        ext = manifest.extension
        if ext is None or not ext.segments:
            raise ArtifactError(f"{source}: systolix.segments must be a non-empty list")
        self.segments: list[tuple[str, object, dict]] = []
        constants = 0  # bytes of constants read so far, against the memory limit
        for k, seg in enumerate(ext.segments):
            where = f"{source}: systolix.segments[{k}]"
            entry = seg.model_dump()
            if seg.kind == "accelerator":
                path = member_path(self.directory, seg.tmodel, f"systolix.segments[{k}].tmodel", source)
                sub = TModel.load(path)
                if sub.partitioned:
                    raise ArtifactError(f"{where}: {shown(seg.tmodel)} is itself partitioned; an accelerator segment "
                                        "is one program (segments: null)")
                check_constants_fit(sub, str(path), already=constants)
                constants += constants_bytes(sub)
                runner = Model(sub, path.parent, str(path))
                names = [s.name for s in runner.inputs], [s.name for s in runner.outputs]
            else:
                data = read_member(self.directory, seg.onnx, f"systolix.segments[{k}].onnx", source, "host subgraph")
                runner = HostSegment(data, str(self.directory / seg.onnx))
                names = runner.input_names, runner.output_names
            unfed = [t for t in names[0] if t not in seg.inputs]
            if unfed or (seg.kind == "accelerator" and sorted(names[0]) != sorted(seg.inputs)):
                raise ArtifactError(f"{where}: lists inputs {shown(seg.inputs, 120)} but its {seg.kind} file takes "
                                    f"{shown(names[0], 120)}")
            missing = [t for t in seg.outputs if t not in names[1]]
            if missing:
                raise ArtifactError(f"{where}: lists output {missing[0]!r}, which its {seg.kind} file does not produce")
            self.segments.append((seg.kind, runner, entry))
        self.input_shapes = {e.name: tuple(e.shape) for e in ext.inputs}
        self.output_names = [e.name for e in ext.outputs]
        self.placement = dict(ext.placement or {})

    @classmethod
    def load(cls, path: str | Path) -> "PartitionedModel":
        path = Path(path)
        return cls(TModel.load(path), path.parent, str(path))

    def run(self, inputs, *, batch: bool | None = None, allow_nonfinite: bool = False,
            **run_options) -> dict[str, np.ndarray]:
        """Run on ``{name: array}`` in the model's own shapes (an extra leading axis is a batch);
        ``run_options`` (``threads``...) go to each accelerator program's ``Model.run``.

        Raises what ``Model.run`` raises; a host segment's NaN or infinite result that would
        enter an accelerator segment is a ``RuntimeInputError`` too, unless ``allow_nonfinite``.
        """
        return self.run_counting(inputs, batch=batch, allow_nonfinite=allow_nonfinite, **run_options)[0]

    def run_counting(self, inputs, *, batch: bool | None = None, allow_nonfinite: bool = False,
                     **run_options) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Like ``run``, and how many results saturated on the accelerator, per batch item
        (``[batch]``; ``[1]`` without a batch axis)."""
        names = list(self.input_shapes)
        if not isinstance(inputs, Mapping):
            if len(names) != 1:
                raise RuntimeInputError(f"the model has {len(names)} inputs ({', '.join(names)}): pass a dict by name")
            inputs = {names[0]: inputs}
        unknown = [k for k in inputs if k not in names]
        if unknown:
            raise RuntimeInputError(f"unknown input {unknown[0]!r}; the model's inputs are: {', '.join(names)}")
        env: dict[str, np.ndarray] = {}
        batched = None
        for n in names:
            if n not in inputs:
                raise RuntimeInputError(f"missing input {n!r}; the model's inputs are: {', '.join(names)}")
            a = check_input(n, inputs[n], allow_nonfinite=allow_nonfinite).astype(np.float32)
            shape = self.input_shapes[n]
            if a.shape == shape and batch is not True:
                b = False
            elif a.ndim == len(shape) + 1 and a.shape[1:] == shape and batch is not False:
                b = True
            else:
                raise RuntimeInputError(f"input {n!r}: expected shape {list(shape)} (or with a batch axis), got {list(a.shape)}")
            if batched is not None and b != batched:
                raise RuntimeInputError("every input must have the same batch axis (or none)")
            if b and a.shape[0] == 0:
                raise RuntimeInputError(f"input {n!r} holds a batch of 0 items: nothing to run")
            if batched is not None and b and a.shape[0] != next(iter(env.values())).shape[0]:
                raise RuntimeInputError("every input must have the same batch size")
            batched = b
            env[n] = a
        saturated = None
        for k, (kind, runner, seg) in enumerate(self.segments):
            feeds = {t: env[t] for t in seg["inputs"]}
            if kind == "accelerator":
                if not allow_nonfinite:
                    for t, v in feeds.items():
                        if t not in inputs and not np.all(np.isfinite(v)):
                            raise RuntimeInputError(
                                f"{self.source}: tensor {t!r}, computed on the host, holds NaN or infinite values and "
                                f"would enter accelerator segment {k}; pass allow_nonfinite=True "
                                "(--allow-nonfinite) to run it anyway (NaN becomes 0, infinities saturate)")
                outs, per_item = runner.run_counting(feeds, batch=bool(batched), allow_nonfinite=allow_nonfinite,
                                                     **run_options)
                saturated = per_item if saturated is None else saturated + per_item
            else:
                outs = runner.run(feeds, bool(batched))
            env.update({k2: np.asarray(v, np.float32) for k2, v in outs.items()})
        if saturated is None:
            saturated = np.zeros(next(iter(env.values())).shape[0] if batched else 1, np.int64)
        return {n: env[n] for n in self.output_names}, saturated

    def __repr__(self) -> str:
        kinds = ", ".join(k for k, _, _ in self.segments)
        return f"<systolix PartitionedModel {self.name!r}: {kinds}>"


def load_partitioned(path: str | Path) -> PartitionedModel:
    """Load a partitioned model's top-level ``.tmodel`` (raises what ``PartitionedModel`` raises)."""
    return PartitionedModel.load(path)
