"""The ``.tmodel`` manifest: which program, which constants where, where inputs and outputs live.

Tensil's keys are kept exactly; Systolix's own additions (tensor shapes, layer map, host
subgraphs) live under the single top-level key ``systolix``, which Tensil's drivers ignore
(``docs/tmodel-extension.md``). Both are validated by strict schemas: a value of the wrong type,
a negative or impossible size, or a file name that is not a relative name inside the manifest's
folder is an ``ArtifactError`` naming the file and the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from systolix.arch.architecture import Architecture
from systolix.artifacts.files import check_member_name, member_size, read_json
from systolix.errors import ArchitectureError, ArtifactError
from systolix.validation import describe_validation_error

#: Largest address or size in vectors a manifest may state (the largest depth a .tarch allows).
MAX_VECTORS = 2**32
#: Largest program a manifest may name, in bytes.
MAX_PROGRAM_BYTES = 2**34
#: Largest tensor dimension the extension may record.
MAX_DIMENSION = 2**31
#: Largest batch a program may run (``systolix.compiler.batch.MAX_BATCH``).
MAX_BATCH = 1024
#: Largest window, stride or pad of a packed input (``TensorPacking``).
MAX_PACK_WINDOW = 1024


def _file_name(value: str) -> str:
    problem = check_member_name(value)
    if problem:
        raise ValueError(f"the file name {problem}")
    return value


class ProgramRef(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    file_name: str
    size: int = Field(ge=0, le=MAX_PROGRAM_BYTES, description="bytes")

    @field_validator("file_name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _file_name(value)


class ConstsRef(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    file_name: str
    base: int = Field(ge=0, le=MAX_VECTORS, description="first vector in DRAM1 (or local memory)")
    size: int = Field(ge=0, le=MAX_VECTORS, description="vectors")

    @field_validator("file_name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _file_name(value)


class TensorSpan(BaseModel):
    """An input or output: a span of vectors in DRAM0."""

    model_config = ConfigDict(extra="allow", strict=True)
    name: str
    base: int = Field(ge=0, le=MAX_VECTORS)
    size: int = Field(ge=0, le=MAX_VECTORS)


# --- the ``systolix`` extension -------------------------------------------------------
class TensorLayout(BaseModel):
    """How a tensor sits in its DRAM0 span (``docs/tmodel-extension.md``)."""

    model_config = ConfigDict(extra="allow", strict=True)
    perm: list[int] = Field(max_length=16)
    padded_channels: int = Field(ge=1, le=MAX_DIMENSION)


class TensorPacking(BaseModel):
    """How the driver packs a few-channel NCHW input before laying it out
    (``docs/tmodel-extension.md``): ``packed[0, (c*BH + i)*BW + j, y, x] =
    input[0, c, y*SH + i - PT, x*SW + j - PL]`` (zero outside), ``window`` = [BH, BW],
    ``stride`` = [SH, SW], ``pads`` = [PT, PL], ``grid`` = [GH, GW] the packed image's size."""

    model_config = ConfigDict(extra="forbid", strict=True)
    kind: Literal["im2col", "space_to_depth", "row_window"]
    window: list[int] = Field(min_length=2, max_length=2)
    stride: list[int] = Field(min_length=2, max_length=2)
    pads: list[int] = Field(min_length=2, max_length=2)
    grid: list[int] = Field(min_length=2, max_length=2)

    @model_validator(mode="after")
    def _ranges(self) -> "TensorPacking":
        for what, values, low, high in (("window", self.window, 1, MAX_PACK_WINDOW),
                                        ("stride", self.stride, 1, MAX_PACK_WINDOW),
                                        ("pads", self.pads, 0, MAX_PACK_WINDOW), ("grid", self.grid, 1, MAX_DIMENSION)):
            if not all(low <= v <= high for v in values):
                raise ValueError(f"pack {what} {values}: each value must be {low} to {high}")
        for axis in range(2):
            if self.pads[axis] >= self.window[axis] + (self.grid[axis] - 1) * self.stride[axis]:
                raise ValueError(f"pack pads {self.pads}: the packed image would read only padding")
        return self


class TensorEntry(BaseModel):
    """An input or output's ONNX shape (batch 1) and layout; an input may be packed first."""

    model_config = ConfigDict(extra="allow", strict=True)
    name: str
    shape: list[int] | None = Field(default=None, max_length=16)
    layout: TensorLayout | None = None
    pack: TensorPacking | None = None

    @field_validator("shape")
    @classmethod
    def _dims(cls, shape: list[int] | None) -> list[int] | None:
        for d in shape or ():
            if not 1 <= d <= MAX_DIMENSION:
                raise ValueError(f"dimensions must be 1 to {MAX_DIMENSION}, got {d}")
        return shape

    @model_validator(mode="after")
    def _packed(self) -> "TensorEntry":
        if self.pack is not None and (self.shape is None or len(self.shape) != 4 or self.shape[0] != 1):
            raise ValueError(f"{self.name!r}: only an NCHW input of shape [1, C, H, W] can be packed, the shape is "
                             f"{self.shape}")
        return self


class LayerEntry(BaseModel):
    """One layer of the layer map: its instruction range ``[first, end)``."""

    model_config = ConfigDict(extra="allow", strict=True)
    name: str = ""
    ops: list[str] = Field(default_factory=list)
    first: int = Field(ge=0)
    end: int = Field(ge=0)
    macs: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _range(self) -> "LayerEntry":
        if self.end < self.first:
            raise ValueError(f"end {self.end} is before first {self.first}")
        return self


class SegmentEntry(BaseModel):
    """One segment of a model partitioned between accelerator and host."""

    model_config = ConfigDict(extra="allow", strict=True)
    kind: Literal["accelerator", "host"]
    tmodel: str | None = None
    onnx: str | None = None
    inputs: list[str]
    outputs: list[str]
    nodes: list[str] = Field(default_factory=list)

    @field_validator("tmodel", "onnx")
    @classmethod
    def _names(cls, value: str | None) -> str | None:
        return None if value is None else _file_name(value)

    @model_validator(mode="after")
    def _file_for_kind(self) -> "SegmentEntry":
        if self.kind == "accelerator" and (self.tmodel is None or self.onnx is not None):
            raise ValueError("an accelerator segment names its program's manifest in 'tmodel' (and no 'onnx')")
        if self.kind == "host" and (self.onnx is None or self.tmodel is not None):
            raise ValueError("a host segment names its ONNX subgraph in 'onnx' (and no 'tmodel')")
        if not self.outputs:
            raise ValueError("a segment produces at least one tensor ('outputs' is empty)")
        return self


class SystolixExtension(BaseModel):
    """The ``systolix`` key of a ``.tmodel``; keys it does not know are kept and ignored."""

    model_config = ConfigDict(extra="allow", strict=True)
    version: Literal[1] = 1
    inputs: list[TensorEntry] = Field(default_factory=list)
    outputs: list[TensorEntry] = Field(default_factory=list)
    layers: list[LayerEntry] | None = None
    segments: list[SegmentEntry] | None = None
    placement: dict[str, Literal["accelerator", "host"]] | None = None
    strategy: str | None = None
    batch: int = Field(default=1, ge=1, le=MAX_BATCH)
    """Images the program runs (``systolix compile --batch``): each input and output span holds
    them one after another, ``size / batch`` vectors each."""

    @model_validator(mode="after")
    def _segments(self) -> "SystolixExtension":
        for e in self.outputs:
            if e.pack is not None:
                raise ValueError(f"output {e.name!r} has a pack: only inputs are packed")
        if self.segments is None:
            return self
        if not self.segments:
            raise ValueError("'segments' is an empty list (null for a model that runs wholly on the accelerator)")
        for what, entries in (("inputs", self.inputs), ("outputs", self.outputs)):
            if not entries:
                raise ValueError(f"a partitioned model lists its {what} (with shapes)")
            for e in entries:
                if e.shape is None:
                    raise ValueError(f"a partitioned model's {what} need shapes: {e.name!r} has none")
        available = {e.name for e in self.inputs}
        for k, seg in enumerate(self.segments):
            missing = [t for t in seg.inputs if t not in available]
            if missing:
                raise ValueError(f"segments[{k}] reads {missing[0]!r}, which neither the model's inputs nor an "
                                 "earlier segment produce")
            available.update(seg.outputs)
        missing = [e.name for e in self.outputs if e.name not in available]
        if missing:
            raise ValueError(f"no segment produces the model's output {missing[0]!r}")
        return self


class TModel(BaseModel):
    """A ``.tmodel`` manifest. ``directory`` is where its files are looked up (not saved)."""

    model_config = ConfigDict(extra="allow", strict=True, arbitrary_types_allowed=True)

    name: str
    prog: ProgramRef
    consts: list[ConstsRef]
    inputs: list[TensorSpan]
    outputs: list[TensorSpan]
    arch: Architecture
    load_consts_to_local: bool = False
    systolix: dict[str, Any] | None = None

    @field_validator("arch", mode="before")
    @classmethod
    def _arch(cls, value: Any) -> Architecture:
        if isinstance(value, Architecture):
            return value
        try:
            return Architecture.from_tarch(value, source="arch")
        except ArchitectureError as e:
            raise ValueError(str(e)) from None

    @property
    def extension(self) -> SystolixExtension | None:
        """The ``systolix`` key, parsed (None for a plain Tensil manifest)."""
        return None if self.systolix is None else SystolixExtension.model_validate(self.systolix)

    @property
    def partitioned(self) -> bool:
        """True for a model partitioned between accelerator and host (``systolix.segments``)."""
        return bool((self.systolix or {}).get("segments"))

    # --- files -------------------------------------------------------------------
    def to_json_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.name,
            "prog": self.prog.model_dump(),
            "consts": [c.model_dump() for c in self.consts],
            "inputs": [t.model_dump() for t in self.inputs],
            "outputs": [t.model_dump() for t in self.outputs],
            "arch": self.arch.to_tarch(),
            "load_consts_to_local": self.load_consts_to_local,
        }
        for key, value in (self.model_extra or {}).items():
            d[key] = value
        if self.systolix is not None:
            d["systolix"] = self.systolix
        return d

    def save(self, path: str | Path) -> None:
        """Write the manifest atomically (compact JSON, as Tensil writes it)."""
        from systolix.artifacts.atomic import write_text_atomic

        write_text_atomic(Path(path), json.dumps(self.to_json_dict(), separators=(",", ":")))

    @classmethod
    def parse(cls, data: Any, source: str) -> "TModel":
        """Validate a manifest's JSON object; raises ``ArtifactError`` naming ``source`` and the field."""
        if not isinstance(data, dict):
            raise ArtifactError(f"{source}: expected a JSON object")
        try:
            model = cls.model_validate(data)
        except ValidationError as e:
            raise ArtifactError(describe_validation_error(source, e)) from None
        if model.systolix is not None:
            # Validated against its schema, kept as written (so that it round-trips exactly).
            try:
                SystolixExtension.model_validate(model.systolix)
            except ValidationError as e:
                raise ArtifactError(describe_validation_error(source, e, prefix="systolix")) from None
        return model

    @classmethod
    def load(cls, path: str | Path, check_files: bool = True) -> "TModel":
        """Read and validate a manifest; with ``check_files`` its program and constants must be
        regular files inside its folder, at least as large as it states.

        Raises ``ArtifactError`` (the file is missing, not a regular file, not UTF-8 JSON, too
        deeply nested, fails the schema, or names a file outside its folder)."""
        path = Path(path)
        model = cls.parse(read_json(path, "model manifest (.tmodel)"), str(path))
        if check_files:
            model.check_files(path.parent, str(path))
        return model

    def check_files(self, directory: Path, source: str) -> None:
        """Every file the manifest names is a regular file inside ``directory`` with the size it states."""
        actual = member_size(directory, self.prog.file_name, "prog.file_name", source)
        if actual != self.prog.size:
            raise ArtifactError(f"{source}: prog.size says {self.prog.size} bytes but {self.prog.file_name} has {actual}")
        vector_bytes = self.arch.vector_bytes
        for i, c in enumerate(self.consts):
            have = member_size(directory, c.file_name, f"consts[{i}].file_name", source)
            if have < c.size * vector_bytes:
                raise ArtifactError(
                    f"{source}: consts[{i}] says {c.size} vectors ({c.size * vector_bytes} bytes) but "
                    f"{c.file_name} has only {have} bytes"
                )

    def check_spans(self, source: str) -> None:
        """Constants, inputs and outputs lie inside the memories the architecture has."""
        arch = self.arch
        target, depth = (("local", arch.local_depth) if self.load_consts_to_local else ("dram1", arch.dram1_depth))
        for k, c in enumerate(self.consts):
            if c.base + c.size > depth:
                raise ArtifactError(
                    f"{source}: consts[{k}] spans vectors {c.base}..{c.base + c.size - 1}, past {target} depth {depth}")
        for what, spans in (("inputs", self.inputs), ("outputs", self.outputs)):
            for span in spans:
                if span.base + span.size > arch.dram0_depth:
                    raise ArtifactError(f"{source}: {what} {span.name!r} spans vectors {span.base}..{span.base + span.size - 1}, "
                                        f"past dram0_depth {arch.dram0_depth}")
