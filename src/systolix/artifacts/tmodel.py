"""The ``.tmodel`` manifest: which program, which constants where, where inputs and outputs live.

Tensil's keys are kept exactly; Systolix's own additions (tensor shapes, layer map, host
subgraphs) live under the single top-level key ``systolix``, which Tensil's drivers ignore.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from systolix.arch.architecture import Architecture
from systolix.errors import ArchitectureError, ArtifactError
from systolix.validation import describe_validation_error


class ProgramRef(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    file_name: str
    size: int = Field(ge=0, description="bytes")


class ConstsRef(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    file_name: str
    base: int = Field(ge=0, description="first vector in DRAM1 (or local memory)")
    size: int = Field(ge=0, description="vectors")


class TensorSpan(BaseModel):
    """An input or output: a span of vectors in DRAM0."""

    model_config = ConfigDict(extra="allow", strict=True)
    name: str
    base: int = Field(ge=0)
    size: int = Field(ge=0)


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
        if not isinstance(data, dict):
            raise ArtifactError(f"{source}: expected a JSON object")
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise ArtifactError(describe_validation_error(source, e)) from None

    @classmethod
    def load(cls, path: str | Path, check_files: bool = True) -> "TModel":
        """Read and validate a manifest; with ``check_files`` its program and constants must exist."""
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as e:
            raise ArtifactError(f"{path}: cannot read: {e.strerror}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ArtifactError(f"{path}: not valid JSON: {e.msg} at line {e.lineno}") from None
        model = cls.parse(data, str(path))
        if check_files:
            model.check_files(path.parent, str(path))
        return model

    def check_files(self, directory: Path, source: str) -> None:
        """Every file the manifest names exists and has the size it states."""
        prog = directory / self.prog.file_name
        if not prog.is_file():
            raise ArtifactError(f"{source}: prog.file_name {self.prog.file_name!r} does not exist in {directory.resolve()}")
        actual = prog.stat().st_size
        if actual != self.prog.size:
            raise ArtifactError(f"{source}: prog.size says {self.prog.size} bytes but {prog} has {actual}")
        vector_bytes = self.arch.vector_bytes
        for i, c in enumerate(self.consts):
            f = directory / c.file_name
            if not f.is_file():
                raise ArtifactError(f"{source}: consts[{i}].file_name {c.file_name!r} does not exist in {directory.resolve()}")
            have = f.stat().st_size
            if have < c.size * vector_bytes:
                raise ArtifactError(
                    f"{source}: consts[{i}] says {c.size} vectors ({c.size * vector_bytes} bytes) but "
                    f"{f} has only {have} bytes"
                )
