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
from systolix.runtime.layout import pack_input, packed_shape, tensor_to_vectors, vector_count, vectors_to_tensor


class RuntimeInputError(SystolixError):
    """Inputs given to ``Model.run`` do not match the model."""


def check_input(name: str, value: Any, *, allow_nonfinite: bool = False, what: str = "input") -> np.ndarray:
    """``value`` as a NumPy array of real numbers, or ``RuntimeInputError`` naming ``name``.

    Refused: what NumPy cannot make an array of numbers from (ragged lists, strings, objects),
    complex values, and (unless ``allow_nonfinite``) NaN or infinite values (float64 values past
    float32's range count as infinite: the model computes in float32). With
    ``allow_nonfinite`` they run as Tensil's driver converts them: NaN becomes 0 and infinities
    saturate at the data type's range (a FLOAT32 architecture keeps them).
    """
    try:
        a = np.asarray(value)
    except (ValueError, TypeError) as e:
        raise RuntimeInputError(f"{what} {name!r}: not an array of numbers ({str(e).splitlines()[0][:80]})") from None
    if a.dtype.kind == "c":
        raise RuntimeInputError(f"{what} {name!r}: complex values ({a.dtype}); the model takes real numbers")
    if a.dtype.kind not in "fiub":
        raise RuntimeInputError(f"{what} {name!r}: expected numbers, got an array of {a.dtype}")
    if a.dtype.kind == "f" and not allow_nonfinite:
        # The model computes in float32: a float64 past float32's range is infinite there.
        with np.errstate(over="ignore"):
            bad = ~np.isfinite(a.astype(np.float32, copy=False))
        if bad.any():
            nan = int(np.count_nonzero(np.isnan(a)))  # the rest are infinite (or beyond float32)
            inf = int(np.count_nonzero(bad)) - nan
            first = [int(i) for i in np.unravel_index(int(np.flatnonzero(bad.reshape(-1))[0]), a.shape)] if a.ndim else []
            counts = " and ".join(t for t in (f"{nan:,} NaN" if nan else "", f"{inf:,} infinite" if inf else "") if t)
            raise RuntimeInputError(
                f"{what} {name!r} holds {counts} value{'s' if nan + inf > 1 else ''} (the first at index {first}); "
                "pass allow_nonfinite=True (systolix run --allow-nonfinite) to run them as Tensil's driver converts "
                "them: NaN becomes 0 and infinities saturate")
    return a


def _group(values: np.ndarray, total: int) -> np.ndarray:
    """``values`` ``[n, ...]`` padded with zeros to ``[total, ...]``."""
    if values.shape[0] == total:
        return values
    pad = np.zeros((total - values.shape[0],) + values.shape[1:], values.dtype)
    return np.concatenate([values, pad])


def _nonempty(name: str, batch: np.ndarray) -> None:
    if batch.shape[0] == 0:
        raise RuntimeInputError(f"input {name!r} holds a batch of 0 items: nothing to run")


def tensor_specs(manifest: TModel, source: str) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The inputs' and outputs' specs: each DRAM0 span with, where the ``systolix`` key records
    it, its tensor's shape and layout; ``ArtifactError`` where a shape and its layout do not take
    exactly the span's vectors."""
    ext = manifest.extension
    arch = manifest.arch
    images = ext.batch if ext else 1
    result = []
    for what, spans, entries in (("inputs", manifest.inputs, ext.inputs if ext else []),
                                 ("outputs", manifest.outputs, ext.outputs if ext else [])):
        by_name = {entry.name: entry for entry in entries}
        specs = []
        for span in spans:
            entry = by_name.get(span.name)
            if entry is None or entry.shape is None:
                specs.append(TensorSpec(span.name, span.base, span.size))
                continue
            shape = tuple(entry.shape)
            pack = entry.pack.model_dump() if entry.pack is not None else None
            # A packed input's layout lays out the packed tensor, not the ONNX-shaped one.
            laid_out = packed_shape(shape, pack) if pack else shape
            layout = entry.layout.model_dump() if entry.layout is not None else None
            if not layout:  # no layout recorded: the tensor as it is, its last axis padded to whole vectors
                n = arch.array_size
                last = laid_out[-1] if laid_out else 1
                layout = {"perm": list(range(len(laid_out))), "padded_channels": max(1, -(-last // n)) * n}
            try:
                need = vector_count(laid_out, layout, arch.array_size)
            except ArtifactError as e:
                raise ArtifactError(f"{source}: systolix.{what} {span.name!r}: {e}") from None
            if need * images != span.size:
                raise ArtifactError(
                    f"{source}: systolix.{what} {span.name!r}: shape {list(shape)}"
                    f"{f' packed to {list(laid_out)}' if pack else ''} with its layout takes {need:,} "
                    f"vectors{f' an image, {need * images:,} for the batch of {images},' if images > 1 else ''} "
                    f"but the DRAM0 span has {span.size:,}"
                )
            specs.append(TensorSpec(span.name, span.base, span.size, shape, layout, pack))
        result.append(specs)
    return result[0], result[1]


def constants_bytes(manifest: TModel) -> int:
    """Bytes the manifest's constants take once read (raw values, 8 bytes a scalar)."""
    storage = np.dtype(manifest.arch.data_type.storage_dtype).itemsize
    return sum(c.size for c in manifest.consts) * manifest.arch.array_size * storage


def check_constants_fit(manifest: TModel, source: str, already: int = 0) -> None:
    """``MemoryLimitError`` if reading the constants (plus ``already`` bytes) would pass the limit."""
    from systolix.limits import MemoryLimitError, format_bytes, limit_source, memory_limit

    need = already + constants_bytes(manifest)
    limit = memory_limit()
    if need > limit:
        raise MemoryLimitError(f"{source}: the constants would need {format_bytes(need)} once read, more than the "
                               f"memory limit of {format_bytes(limit)} ({limit_source()})")


def check_layer_map(manifest: TModel, instructions: int, source: str) -> None:
    """Every layer of ``systolix.layers`` covers instructions of the program (``ArtifactError``)."""
    ext = manifest.extension
    for i, layer in enumerate((ext.layers or []) if ext else []):
        if layer.end > instructions:
            raise ArtifactError(f"{source}: systolix.layers[{i}] ({layer.name!r}): instruction range [{layer.first}, "
                                f"{layer.end}) is outside the program's {instructions} instructions")


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
    pack: dict[str, Any] | None = None
    """An input the driver packs before laying it out (``systolix.runtime.layout.pack_input``)."""

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
        """Read the program and constants ``manifest`` names (relative names inside ``directory``).

        Raises ``ArtifactError`` (a file outside the folder, not a regular file, missing, shorter
        than the manifest says, spans past the architecture's memories, a ``systolix`` shape or
        layout that does not match its span) and ``DecodingError`` (a malformed program).
        """
        from systolix.artifacts.files import read_member
        from systolix.artifacts.tdata import unpack_vectors

        self.manifest = manifest
        self.directory = Path(directory)
        self.source = source
        self.arch = manifest.arch
        self.name = manifest.name
        n = self.arch.array_size
        manifest.check_spans(source)
        prog_name = manifest.prog.file_name
        data = read_member(self.directory, prog_name, "prog.file_name", source, "program",
                           count=manifest.prog.size + 1)
        if len(data) != manifest.prog.size:
            raise ArtifactError(f"{source}: prog.size says {manifest.prog.size} bytes but {prog_name} has "
                                f"{'more' if len(data) > manifest.prog.size else len(data)}")
        self.program: DecodedProgram = decode_program(data, InstructionLayout.of(self.arch), str(self.directory / prog_name))

        check_constants_fit(manifest, source)
        self.constants: list[tuple[int, np.ndarray]] = []
        target = "local" if manifest.load_consts_to_local else "dram1"
        vector_bytes = self.arch.vector_bytes
        for k, c in enumerate(manifest.consts):
            raw = read_member(self.directory, c.file_name, f"consts[{k}].file_name", source, "constants",
                              count=c.size * vector_bytes)
            if len(raw) < c.size * vector_bytes:
                raise ArtifactError(
                    f"{source}: consts[{k}] says {c.size} vectors but {c.file_name} holds only {len(raw) // vector_bytes} "
                    f"({len(raw)} bytes of {c.size * vector_bytes})"
                )
            self.constants.append((c.base, unpack_vectors(raw, self.arch.data_type, n, str(self.directory / c.file_name))))
        self.constants_memory = target

        self.inputs, self.outputs = tensor_specs(manifest, source)
        ext = manifest.extension
        self.program_batch = ext.batch if ext else 1
        """Images one run of the program takes (``systolix compile --batch``): ``run`` groups the
        inputs by that many, each span holding them one after another."""
        check_layer_map(manifest, len(self.program), source)

    @classmethod
    def load(cls, path: str | Path) -> "Model":
        """A ``.tmodel`` that runs wholly on the accelerator (``ArtifactError`` for a bad one)."""
        path = Path(path)
        return cls(TModel.load(path), path.parent, str(path))

    # --- inputs ------------------------------------------------------------------
    def _input_vectors(self, spec: TensorSpec, array: Any, batch: bool | None,
                       allow_nonfinite: bool = False) -> tuple[np.ndarray, bool]:
        """Float vectors ``[batch, n, N]`` for one input and whether it was batched."""
        n = self.arch.array_size
        a = check_input(spec.name, array, allow_nonfinite=allow_nonfinite)
        if spec.vectors_only:
            single = (spec.size, n)
            if a.shape == single and batch is not True:
                return a[None].astype(np.float32), False
            if a.ndim == 3 and a.shape[1:] == single and batch is not False:
                _nonempty(spec.name, a)
                return a.astype(np.float32), True
            raise RuntimeInputError(
                f"input {spec.name!r}: expected raw vectors {list(single)} (or [batch, {spec.size}, {n}]), "
                f"got shape {list(a.shape)}"
            )
        shape = spec.shape
        if a.shape == shape and batch is not True:
            return self._lay_out(spec, a[None]), False
        if a.ndim == len(shape) + 1 and a.shape[1:] == shape and batch is not False:
            _nonempty(spec.name, a)
            return self._lay_out(spec, a), True
        raise RuntimeInputError(
            f"input {spec.name!r}: expected shape {list(shape)} (or [batch, {', '.join(map(str, shape))}]), "
            f"got {list(a.shape)}"
        )

    def _lay_out(self, spec: TensorSpec, batch: np.ndarray) -> np.ndarray:
        """A batch ``[batch, *shape]`` as float vectors ``[batch, n, N]``: packed first if the
        manifest says so (the same values, so the same conversions to fixed point)."""
        if spec.pack is not None:
            batch = pack_input(batch, spec.pack)
        return tensor_to_vectors(batch, spec.layout, self.arch.array_size).astype(np.float32)

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
        ``allow_nonfinite=True`` runs NaN and infinite inputs (NaN becomes 0, infinities
        saturate, as Tensil's driver converts them) instead of refusing them.
        Options (``tracepoint``, ``trace_file``, ``progress``...) go to ``Emulator.run``.
        A run that saturated (see ``run_detailed`` for the counts) warns with ``SaturationWarning``.

        Raises ``RuntimeInputError`` (an unknown or missing input, a wrong shape, a batch of 0,
        complex, non-numeric, NaN or infinite values), ``MemoryLimitError`` (the run would need
        more memory than ``systolix.limits.memory_limit()``) and ``EmulatorError`` (the program
        addresses memory past the architecture's depths, or uses LoadLUT).
        """
        return self.run_counting(inputs, batch=batch, **run_options)[0]

    def run_counting(self, inputs, *, batch: bool | None = None,
                     **run_options) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Like ``run``, and how many results saturated, per batch item (``[batch]``; ``[1]``
        without a batch axis)."""
        detail = self.run_detailed(inputs, batch=batch, **run_options)
        self._warn_if_saturated(detail)
        per_run = detail.result.saturations_per_item.sum(axis=1)
        images = getattr(self, "program_batch", 1)
        if images > 1:  # a batch program's run: each input counted with the images it ran with
            per_run = np.repeat(per_run, images)[:detail.batch]
        return detail.outputs, per_run

    def _warn_if_saturated(self, detail: "ModelRun") -> None:
        sums, given = detail.result.saturation_total, detail.input_saturations
        if sums or given:
            items = int(np.count_nonzero(detail.result.saturations_per_item.sum(axis=1)))
            what = [f"{sums:,} results in {items} of {detail.batch} inputs"] if sums else []
            what += [f"{given:,} input values"] if given else []
            dtype = self.arch.data_type
            warnings.warn(SaturationWarning(
                f"{self.source}: {' and '.join(what)} saturated at the {dtype.name} range (+-{dtype.max_value:g}): "
                "the outputs may differ from the model's (a compile sizes its sums for inputs like its calibration "
                "samples, or without samples for normalised ones, mean 0 and spread 1; `systolix accuracy` shows "
                "which layers saturate)"),
                stacklevel=4)

    def run_vectors(self, inputs, *, batch: bool | None = None, **run_options) -> ModelRun:
        """Like ``run_detailed`` but every input and output is raw vectors as floats, ``[n, N]``
        (``[batch, n, N]``), whatever shapes the manifest records (e.g. Tensil CSV inputs)."""
        plain = Model.__new__(Model)
        plain.__dict__.update(self.__dict__)
        plain.inputs = [TensorSpec(s.name, s.base, s.size) for s in self.inputs]
        plain.outputs = [TensorSpec(s.name, s.base, s.size) for s in self.outputs]
        plain.program_batch = 1  # raw spans: a batch program's images together
        return plain.run_detailed(inputs, batch=batch, **run_options)

    def run_detailed(
        self,
        inputs,
        *,
        batch: bool | None = None,
        progress: Callable[[int, int], None] | None = None,
        threads: int | None = None,
        allow_nonfinite: bool = False,
        memory_limit: int | None = None,
        engine: str = "emulator",
        rtl: Mapping[str, Any] | None = None,
        **run_options,
    ) -> ModelRun:
        """Run and return the outputs with their raw fixed-point values and the run's statistics.

        ``threads`` splits the batch across that many threads (default 1). ``memory_limit``:
        most bytes the emulator's memories may take (default ``systolix.limits.memory_limit()``).
        ``engine="rtl"`` runs the program on the generated hardware under Verilator instead of
        the emulator (one co-simulation per batch item; ``rtl`` holds
        ``systolix.rtl.cosim.RtlMachine`` options such as ``dram``), and the result carries the
        RTL's clock counts (``result.cycles``). Raises what ``run`` raises, and for the RTL
        ``systolix.rtl.cosim.ToolMissing`` (no Verilator) and ``CosimError``.
        """
        given = self._collect(inputs)
        vectors: dict[str, np.ndarray] = {}
        batched_flags = []
        for spec in self.inputs:
            v, was_batched = self._input_vectors(spec, given[spec.name], batch, allow_nonfinite)
            vectors[spec.name] = v
            batched_flags.append(was_batched)
        sizes = {v.shape[0] for v in vectors.values()}
        if len(sizes) > 1 or (len(set(batched_flags)) > 1):
            raise RuntimeInputError("every input must have the same batch axis (or none)")
        batch_size = sizes.pop() if sizes else 1
        batched = bool(batched_flags and batched_flags[0])
        if batch_size < 1:
            raise RuntimeInputError(f"{self.source}: the inputs hold a batch of 0 items: nothing to run")

        dtype = self.arch.data_type
        # A batch program takes ``images`` inputs a run, one after another in each span: the
        # inputs go in groups of that many (the last group padded with zeros), a group a run.
        images = getattr(self, "program_batch", 1)
        runs = -(-batch_size // images)
        emulator = self._machine(engine, runs, threads, rtl, memory_limit)
        for base, consts in self.constants:
            emulator.write(self.constants_memory, base, consts)
        stats = ConversionStats()
        for spec in self.inputs:
            fixed = to_fixed(vectors[spec.name], dtype, stats, spec.name)
            if images > 1:
                fixed = _group(fixed, runs * images).reshape(runs, -1, fixed.shape[-1])
            emulator.write("dram0", spec.base, fixed)
        result = emulator.run(self.program, source=str(self.directory / self.manifest.prog.file_name),
                              progress=progress, **run_options)

        outputs: dict[str, np.ndarray] = {}
        raw_outputs: dict[str, np.ndarray] = {}
        for spec in self.outputs:
            raw = emulator.read("dram0", spec.base, spec.size)
            if images > 1:
                raw = raw.reshape(runs * images, spec.size // images, raw.shape[-1])[:batch_size]
            raw_outputs[spec.name] = raw
            floats = from_fixed(raw, dtype)
            if spec.vectors_only:
                value = floats
            else:
                value = vectors_to_tensor(floats, spec.shape, spec.layout)
            outputs[spec.name] = value if batched else value[0]
        return ModelRun(outputs, raw_outputs, result, stats.total, batch_size, batched,
                        extra={"emulator": emulator, "engine": engine})

    def _machine(self, engine: str, batch: int, threads: int | None, rtl: Mapping[str, Any] | None,
                 memory_limit: int | None):
        """What runs the program: the emulator, or the generated RTL under co-simulation."""
        if engine == "rtl":
            from systolix.rtl.cosim import RtlMachine

            return RtlMachine(self.arch, batch=batch, threads=threads, **dict(rtl or {}))
        if engine != "emulator":
            raise RuntimeInputError(f"unknown engine {engine!r}: 'emulator' or 'rtl'")
        if rtl:
            raise RuntimeInputError("RTL options were given, but the engine is the emulator")
        emulator = Emulator(self.arch, batch=batch, threads=threads, memory_limit=memory_limit)
        # Room for everything the run touches, checked against the memory limit before anything
        # is allocated: the program's own addresses, the constants, the inputs and the outputs.
        io_spans = np.array([[s.base, s.base + s.size] for s in self.inputs + self.outputs], dtype=np.int64).reshape(-1, 2)
        const_spans = np.array([[b, b + len(c)] for b, c in self.constants], dtype=np.int64).reshape(-1, 2)
        emulator.reserve_program(self.program, str(self.directory / self.manifest.prog.file_name),
                                 spans={"dram0": io_spans, self.constants_memory: const_spans})
        return emulator

    def __repr__(self) -> str:
        ins = ", ".join(f"{s.name}{list(s.shape) if s.shape else f'[{s.size} vectors]'}" for s in self.inputs)
        outs = ", ".join(f"{s.name}{list(s.shape) if s.shape else f'[{s.size} vectors]'}" for s in self.outputs)
        return f"<systolix Model {self.name!r} ({ins}) -> ({outs}), {len(self.program)} instructions>"
