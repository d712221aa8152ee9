"""A compiled model (``.tmodel``) ready to run on the emulator.

``Model.run({name: array})`` places the constants (DRAM1, or local memory when
``load_consts_to_local`` is set), writes the inputs into their DRAM0 spans, runs the program
for the whole batch in one pass and reads the outputs back.

Models our compiler makes carry tensor shapes and layouts (the ``systolix`` key): inputs and
outputs are float tensors in the ONNX model's shapes. Tensil-made models have none: inputs and
outputs are the raw vectors as floats, ``[n_vectors, array_size]``. Either way an extra
leading axis on every input is a batch, and the outputs get it too.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from systolix.artifacts import TModel, read_tdata
from systolix.emulator import Emulator, RunResult
from systolix.errors import ArtifactError, SystolixError
from systolix.isa import DecodedProgram, InstructionLayout, decode_program
from systolix.numerics import ConversionStats, from_fixed, to_fixed
from systolix.runtime.layout import tensor_to_vectors, vector_count, vectors_to_tensor


class RuntimeInputError(SystolixError):
    """Inputs given to ``Model.run`` do not match the model."""


class SaturationWarning(UserWarning):
    """A run saturated: some sum or input went past the data type's range, so the outputs may
    differ from the model's (fixed-point arithmetic clamps instead of failing)."""


@dataclass(frozen=True)
class TensorSpec:
    """One input or output: its DRAM0 span and, for our own models, its tensor shape and layout."""

    name: str
    base: int
    size: int
    shape: tuple[int, ...] | None = None
    layout: dict[str, Any] | None = None

    @property
    def vectors_only(self) -> bool:
        return self.shape is None


@dataclass
class ModelRun:
    """Everything one ``Model.run`` produced."""

    outputs: dict[str, np.ndarray]
    """Float outputs, as ``run`` returns them."""
    raw_outputs: dict[str, np.ndarray]
    """The outputs' raw fixed-point vectors, ``[batch, n, N]`` (int64; float32 for FLOAT32)."""
    result: RunResult
    input_saturations: int = 0
    """Input values that saturated when converted to fixed point."""
    batch: int = 1
    batched: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class Model:
    """A ``.tmodel`` with its program decoded and its constants read, ready to ``run``."""

    def __init__(self, manifest: TModel, directory: Path, source: str):
        self.manifest = manifest
        self.directory = Path(directory)
        self.source = source
        self.arch = manifest.arch
        self.name = manifest.name
        n = self.arch.array_size
        prog_path = self.directory / manifest.prog.file_name
        try:
            data = prog_path.read_bytes()
        except OSError as e:
            raise ArtifactError(f"{source}: cannot read program {prog_path}: {e.strerror}") from None
        if len(data) != manifest.prog.size:
            raise ArtifactError(f"{source}: prog.size says {manifest.prog.size} bytes but {prog_path} has {len(data)}")
        self.program: DecodedProgram = decode_program(data, InstructionLayout.of(self.arch), str(prog_path))

        self.constants: list[tuple[int, np.ndarray]] = []
        target = "local" if manifest.load_consts_to_local else "dram1"
        depth = self.arch.local_depth if target == "local" else self.arch.dram1_depth
        for k, c in enumerate(manifest.consts):
            path = self.directory / c.file_name
            vectors = read_tdata(path, self.arch.data_type, n)
            if vectors.shape[0] < c.size:
                raise ArtifactError(
                    f"{source}: consts[{k}] says {c.size} vectors but {path} holds only {vectors.shape[0]} "
                    f"({vectors.shape[0] * self.arch.vector_bytes} bytes of {c.size * self.arch.vector_bytes})"
                )
            if c.base + c.size > depth:
                raise ArtifactError(
                    f"{source}: consts[{k}] spans vectors {c.base}..{c.base + c.size - 1}, past {target} depth {depth}"
                )
            self.constants.append((c.base, vectors[: c.size]))
        self.constants_memory = target

        ext = manifest.systolix or {}
        self.inputs = self._specs(manifest.inputs, ext.get("inputs"), "inputs")
        self.outputs = self._specs(manifest.outputs, ext.get("outputs"), "outputs")

    def _specs(self, spans, extension, what: str) -> list[TensorSpec]:
        by_name: dict[str, dict] = {}
        for entry in extension or []:
            if isinstance(entry, dict) and "name" in entry:
                by_name[entry["name"]] = entry
        specs = []
        for span in spans:
            if span.base + span.size > self.arch.dram0_depth:
                raise ArtifactError(f"{self.source}: {what} {span.name!r} spans past dram0_depth {self.arch.dram0_depth}")
            entry = by_name.get(span.name)
            if entry is None or entry.get("shape") is None:
                specs.append(TensorSpec(span.name, span.base, span.size))
                continue
            shape = tuple(int(s) for s in entry["shape"])
            layout = entry.get("layout")
            if not layout:  # no layout recorded: the tensor as it is, its last axis padded to whole vectors
                n = self.arch.array_size
                last = shape[-1] if shape else 1
                layout = {"perm": list(range(len(shape))), "padded_channels": max(1, -(-last // n)) * n}
            need = vector_count(shape, layout, self.arch.array_size)
            if need != span.size:
                raise ArtifactError(
                    f"{self.source}: systolix.{what} {span.name!r}: shape {list(shape)} with its layout takes {need} "
                    f"vectors but the DRAM0 span has {span.size}"
                )
            specs.append(TensorSpec(span.name, span.base, span.size, shape, layout))
        return specs

    @classmethod
    def load(cls, path: str | Path) -> "Model":
        path = Path(path)
        return cls(TModel.load(path), path.parent, str(path))

    # --- inputs ------------------------------------------------------------------
    def _input_vectors(self, spec: TensorSpec, array: Any, batch: bool | None) -> tuple[np.ndarray, bool]:
        """Float vectors ``[batch, n, N]`` for one input and whether it was batched."""
        n = self.arch.array_size
        a = np.asarray(array)
        if a.dtype.kind not in "fiub":
            raise RuntimeInputError(f"input {spec.name!r}: expected numbers, got an array of {a.dtype}")
        if spec.vectors_only:
            single = (spec.size, n)
            if a.shape == single and batch is not True:
                return a[None].astype(np.float32), False
            if a.ndim == 3 and a.shape[1:] == single and batch is not False:
                return a.astype(np.float32), True
            raise RuntimeInputError(
                f"input {spec.name!r}: expected raw vectors {list(single)} (or [batch, {spec.size}, {n}]), "
                f"got shape {list(a.shape)}"
            )
        shape = spec.shape
        if a.shape == shape and batch is not True:
            return tensor_to_vectors(a[None], spec.layout, n).astype(np.float32), False
        if a.ndim == len(shape) + 1 and a.shape[1:] == shape and batch is not False:
            return tensor_to_vectors(a, spec.layout, n).astype(np.float32), True
        raise RuntimeInputError(
            f"input {spec.name!r}: expected shape {list(shape)} (or [batch, {', '.join(map(str, shape))}]), "
            f"got {list(a.shape)}"
        )

    def _collect(self, inputs: Any) -> dict[str, Any]:
        names = [s.name for s in self.inputs]
        if not isinstance(inputs, Mapping):
            if len(names) != 1:
                raise RuntimeInputError(f"the model has {len(names)} inputs ({', '.join(names)}): pass a dict by name")
            return {names[0]: inputs}
        unknown = [k for k in inputs if k not in names]
        if unknown:
            raise RuntimeInputError(f"unknown input {unknown[0]!r}; the model's inputs are: {', '.join(names)}")
        missing = [k for k in names if k not in inputs]
        if missing:
            raise RuntimeInputError(f"missing input {missing[0]!r}; the model's inputs are: {', '.join(names)}")
        return dict(inputs)

    # --- running -----------------------------------------------------------------
    def run(self, inputs, *, batch: bool | None = None, **run_options) -> dict[str, np.ndarray]:
        """Run on ``{name: array}`` (or one array for a one-input model); returns ``{name: array}``.

        ``batch=None`` infers a batch from an extra leading axis; ``True``/``False`` insist.
        Options (``tracepoint``, ``trace_file``, ``progress``...) go to ``Emulator.run``.
        A run that saturated (see ``run_detailed`` for the counts) warns with ``SaturationWarning``.
        """
        return self.run_counting(inputs, batch=batch, **run_options)[0]

    def run_counting(self, inputs, *, batch: bool | None = None,
                     **run_options) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Like ``run``, and how many results saturated, per batch item (``[batch]``; ``[1]``
        without a batch axis)."""
        detail = self.run_detailed(inputs, batch=batch, **run_options)
        self._warn_if_saturated(detail)
        return detail.outputs, detail.result.saturations_per_item.sum(axis=1)

    def _warn_if_saturated(self, detail: "ModelRun") -> None:
        sums, given = detail.result.saturation_total, detail.input_saturations
        if sums or given:
            items = int(np.count_nonzero(detail.result.saturations_per_item.sum(axis=1)))
            what = [f"{sums:,} results in {items} of {detail.batch} inputs"] if sums else []
            what += [f"{given:,} input values"] if given else []
            dtype = self.arch.data_type
            warnings.warn(SaturationWarning(
                f"{self.source}: {' and '.join(what)} saturated at the {dtype.name} range (+-{dtype.max_value:g}): "
                "the outputs may differ from the model's (a calibrated compile assumes inputs like its samples)"),
                stacklevel=4)

    def run_vectors(self, inputs, *, batch: bool | None = None, **run_options) -> ModelRun:
        """Like ``run_detailed`` but every input and output is raw vectors as floats, ``[n, N]``
        (``[batch, n, N]``), whatever shapes the manifest records (e.g. Tensil CSV inputs)."""
        plain = Model.__new__(Model)
        plain.__dict__.update(self.__dict__)
        plain.inputs = [TensorSpec(s.name, s.base, s.size) for s in self.inputs]
        plain.outputs = [TensorSpec(s.name, s.base, s.size) for s in self.outputs]
        return plain.run_detailed(inputs, batch=batch, **run_options)

    def run_detailed(
        self,
        inputs,
        *,
        batch: bool | None = None,
        progress: Callable[[int, int], None] | None = None,
        threads: int | None = None,
        engine: str = "emulator",
        rtl: Mapping[str, Any] | None = None,
        **run_options,
    ) -> ModelRun:
        """Run and return the outputs with their raw fixed-point values and the run's statistics.

        ``threads`` splits the batch across that many threads (default 1). ``engine="rtl"`` runs
        the program on the generated hardware under Verilator instead of the emulator (one
        co-simulation per batch item; ``rtl`` holds ``systolix.rtl.cosim.RtlMachine`` options such
        as ``dram``), and the result carries the RTL's clock counts (``result.cycles``).
        """
        given = self._collect(inputs)
        vectors: dict[str, np.ndarray] = {}
        batched_flags = []
        for spec in self.inputs:
            v, was_batched = self._input_vectors(spec, given[spec.name], batch)
            vectors[spec.name] = v
            batched_flags.append(was_batched)
        sizes = {v.shape[0] for v in vectors.values()}
        if len(sizes) > 1 or (len(set(batched_flags)) > 1):
            raise RuntimeInputError("every input must have the same batch axis (or none)")
        batch_size = sizes.pop() if sizes else 1
        batched = bool(batched_flags and batched_flags[0])

        dtype = self.arch.data_type
        emulator = self._machine(engine, batch_size, threads, rtl)
        for base, consts in self.constants:
            emulator.write(self.constants_memory, base, consts)
        stats = ConversionStats()
        for spec in self.inputs:
            emulator.write("dram0", spec.base, to_fixed(vectors[spec.name], dtype, stats, spec.name))
        result = emulator.run(self.program, source=str(self.directory / self.manifest.prog.file_name),
                              progress=progress, **run_options)

        outputs: dict[str, np.ndarray] = {}
        raw_outputs: dict[str, np.ndarray] = {}
        for spec in self.outputs:
            raw = emulator.read("dram0", spec.base, spec.size)
            raw_outputs[spec.name] = raw
            floats = from_fixed(raw, dtype)
            if spec.vectors_only:
                value = floats
            else:
                value = vectors_to_tensor(floats, spec.shape, spec.layout)
            outputs[spec.name] = value if batched else value[0]
        return ModelRun(outputs, raw_outputs, result, stats.total, batch_size, batched,
                        extra={"emulator": emulator, "engine": engine})

    def _machine(self, engine: str, batch: int, threads: int | None, rtl: Mapping[str, Any] | None):
        """What runs the program: the emulator, or the generated RTL under co-simulation."""
        if engine == "emulator":
            if rtl:
                raise RuntimeInputError("RTL options were given, but the engine is the emulator")
            return Emulator(self.arch, batch=batch, threads=threads)
        if engine == "rtl":
            from systolix.rtl.cosim import RtlMachine

            return RtlMachine(self.arch, batch=batch, threads=threads, **dict(rtl or {}))
        raise RuntimeInputError(f"unknown engine {engine!r}: 'emulator' or 'rtl'")

    def __repr__(self) -> str:
        ins = ", ".join(f"{s.name}{list(s.shape) if s.shape else f'[{s.size} vectors]'}" for s in self.inputs)
        outs = ", ".join(f"{s.name}{list(s.shape) if s.shape else f'[{s.size} vectors]'}" for s in self.outputs)
        return f"<systolix Model {self.name!r} ({ins}) -> ({outs}), {len(self.program)} instructions>"
