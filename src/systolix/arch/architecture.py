"""The accelerator's architecture: one typed, validated object every stage reads.

Mirrors Tensil's ``.tarch`` JSON key for key (see ``../shared/notes/tensil-formats.md``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from systolix.errors import ArchitectureError
from systolix.numerics import DataType
from systolix.validation import describe_validation_error

# The .tarch keys in Tensil's own order, which is also the order we write them in.
TARCH_KEYS = (
    "data_type",
    "array_size",
    "dram0_depth",
    "dram1_depth",
    "local_depth",
    "accumulator_depth",
    "simd_registers_depth",
    "stride0_depth",
    "stride1_depth",
    "number_of_threads",
    "thread_queue_depth",
)


class TandemConfig(BaseModel):
    """The optional Tandem vector unit beside the array (``docs/tandem.md``): the ``tandem`` key
    of a ``.tarch``. Its vectors have the array's ``array_size`` lanes."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    iterators: int = Field(default=32, ge=1, le=32, description="iterator-table entries per namespace")
    immediates: int = Field(default=32, ge=1, le=32, description="slots of the immediate buffer")
    loop_levels: int = Field(default=8, ge=1, le=8, description="nesting levels of the hardware loops")
    interim_depth: int = Field(default=1024, ge=1, le=2**16, description="vectors of the unit's own wide buffer")
    queue_depth: int = Field(default=16, ge=1, le=1024, description="instructions the unit's command queue holds")


# The .tarch keys of the Tandem sub-object, in the order we write them.
TANDEM_KEYS = ("iterators", "immediates", "loop_levels", "interim_depth", "queue_depth")
# Fixed-point types the Tandem unit supports: its wide type is twice as wide, at most 32 bits.
TANDEM_MAX_WIDTH = 16


class Architecture(BaseModel):
    """A Tensor Compute Unit configuration (Tensil's ``.tarch``).

    Depths are counted in vectors of ``array_size`` scalars.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    data_type: DataType
    array_size: int = Field(ge=2, le=256, description="N: the array is N x N, a vector holds N scalars")
    dram0_depth: int = Field(ge=1, le=2**32, description="vectors in DRAM0 (variables)")
    dram1_depth: int = Field(ge=1, le=2**32, description="vectors in DRAM1 (constants)")
    local_depth: int = Field(ge=1, le=2**24, description="vectors in the on-chip local memory")
    accumulator_depth: int = Field(ge=1, le=2**24, description="vectors in the accumulators")
    simd_registers_depth: int = Field(ge=0, le=16, description="registers per SIMD ALU")
    stride0_depth: int = Field(ge=1, le=2**8, description="power-of-two strides encodable in operand 0")
    stride1_depth: int = Field(ge=1, le=2**8, description="power-of-two strides encodable in operand 1")
    number_of_threads: int = Field(default=1, ge=1, le=2)
    thread_queue_depth: int = Field(default=8, ge=1)
    tandem: TandemConfig | None = Field(default=None, description="the optional Tandem vector unit")

    @field_validator("data_type", mode="before")
    @classmethod
    def _data_type_from_name(cls, value: Any) -> DataType:
        if isinstance(value, DataType):
            return value
        if isinstance(value, str):
            try:
                return DataType[value]
            except KeyError:
                names = ", ".join(d.name for d in DataType)
                raise ValueError(f"unknown data type {value!r} (expected one of {names})") from None
        raise ValueError(f"expected a data type name, got {type(value).__name__}")

    @field_validator("tandem")
    @classmethod
    def _tandem_fits(cls, value: TandemConfig | None, info: ValidationInfo) -> TandemConfig | None:
        if value is None or any(k not in info.data for k in TARCH_KEYS):  # another field already failed
            return value
        dt = info.data["data_type"]
        if not dt.is_fixed or dt.width > TANDEM_MAX_WIDTH:
            raise ValueError(f"the Tandem unit needs a fixed-point data type of at most {TANDEM_MAX_WIDTH} bits "
                             f"(its wide type is twice as wide), not {dt.name}")
        from types import SimpleNamespace

        from systolix.isa.layout import TANDEM_PAYLOAD_BITS, InstructionLayout

        bits = InstructionLayout.of(SimpleNamespace(**info.data, tandem=None)).operands_bits
        if bits < TANDEM_PAYLOAD_BITS:
            raise ValueError(f"the Tandem unit's instructions need {TANDEM_PAYLOAD_BITS} operand bits; this "
                             f"architecture's instructions carry {bits} (make a memory deeper)")
        return value

    @property
    def has_tandem(self) -> bool:
        return self.tandem is not None

    # --- derived quantities -------------------------------------------------------
    @property
    def vector_bytes(self) -> int:
        """Bytes one vector occupies in DRAM."""
        return self.array_size * self.data_type.size_bytes

    def to_tarch(self) -> dict[str, Any]:
        """The architecture as Tensil's ``.tarch`` JSON object."""
        d = {key: getattr(self, key) for key in TARCH_KEYS}
        d["data_type"] = self.data_type.name
        if self.tandem is not None:  # absent for the stock TCU: Tensil's files stay byte for byte
            d["tandem"] = {key: getattr(self.tandem, key) for key in TANDEM_KEYS}
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_tarch(), indent=4)

    @classmethod
    def from_tarch(cls, data: Any, source: str = "architecture") -> "Architecture":
        """Validate a ``.tarch`` JSON object; ``ArchitectureError`` names ``source`` and the field."""
        if not isinstance(data, dict):
            raise ArchitectureError(f"{source}: expected a JSON object, got {type(data).__name__}")
        missing = [k for k in TARCH_KEYS if k not in data and k not in ("number_of_threads", "thread_queue_depth")]
        if missing:
            raise ArchitectureError(f"{source}: missing key {missing[0]!r}")
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise ArchitectureError(describe_validation_error(source, e)) from None

    @classmethod
    def load(cls, path: str | Path) -> "Architecture":
        """Read a ``.tarch`` file.

        Raises ``ArchitectureError``: missing or not a regular file, not UTF-8 JSON, a missing
        key, an unknown key, or a value of the wrong type or out of range."""
        from systolix.artifacts.files import read_json

        path = Path(path)
        data = read_json(path, "architecture file (.tarch)", ArchitectureError)
        return cls.from_tarch(data, source=str(path))

    def save(self, path: str | Path) -> None:
        """Write a ``.tarch`` file atomically."""
        from systolix.artifacts.atomic import write_text_atomic

        write_text_atomic(Path(path), self.to_json() + "\n")
