"""What the hardware generator builds: an architecture plus the few choices a ``.tarch`` leaves open.

Everything the RTL, its co-simulation harness and the ``rtl`` timing model share is derived here,
so that the three never disagree about a width, a latency or a queue depth.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field

from systolix.arch import Architecture
from systolix.errors import ArchitectureError
from systolix.isa import InstructionLayout
from systolix.numerics import DataType

#: AXI data widths the generator accepts (Tensil's ``--dram-axi-width`` choices).
AXI_DATA_WIDTHS = (16, 32, 64, 128, 256, 512, 1024)
#: Largest AXI4 burst (AxLEN is 8 bits) and the boundary no burst may cross.
AXI_MAX_BURST_BEATS = 256
AXI_BOUNDARY_BYTES = 4096
#: The generator's own limits (beyond them the Verilog grows past what we simulate or test).
MAX_ARRAY_SIZE = 128
MAX_MEMORY_DEPTH = 1 << 20


def _largest_power_of_two_dividing(n: int) -> int:
    return n & -n


def preset_name(arch: Architecture) -> str:
    """The preset an architecture is (``zcu104``...), else ``tcu``: names the generated module."""
    from systolix.arch import ARCHITECTURES

    return next((name for name, preset in ARCHITECTURES.items() if preset == arch), "tcu")


@dataclass(frozen=True)
class RtlConfig:
    """One Tensor Compute Unit design: an ``Architecture`` and the generator's options.

    ``axi_data_bits`` is the width of the DRAM ports and of the instruction stream (Tensil's
    ``--dram-axi-width``); a vector must be a whole number of bus words, so the default is the
    board's 128 bits or the largest power of two that divides a vector, whichever is smaller.
    """

    arch: Architecture
    axi_data_bits: int = 0
    axi_addr_bits: int = 32
    axi_id_bits: int = 6
    #: Instructions each execution lane's command queue holds (the decoder runs ahead by this much).
    compute_queue_depth: int = 4
    dram_queue_depth: int = 4
    #: AXI bursts a DRAM port keeps in flight.
    max_outstanding_bursts: int = 16
    #: Samples per block of the performance sample stream (TLAST after each block).
    sample_block_size: int = 16
    #: Reset value of the decoder's timeout register (Tensil's default, in cycles).
    decoder_timeout: int = 100
    #: Regions of local memory with a lock each (Tensil's lock pool has two, one per half): a DRAM
    #: move and a compute instruction overlap when they touch different regions.
    local_locks: int = 2
    name: str = field(default="")

    def __post_init__(self) -> None:
        if not self.axi_data_bits:
            object.__setattr__(self, "axi_data_bits", min(128, 8 * _largest_power_of_two_dividing(self.vector_bytes)))
        if not self.name:
            object.__setattr__(self, "name", preset_name(self.arch))
        self.validate()

    # --- what cannot be built ----------------------------------------------------
    def validate(self) -> None:
        a = self.arch
        where = f"architecture {self.name!r}"
        if a.number_of_threads != 1:
            raise ArchitectureError(
                f"{where}: number_of_threads = {a.number_of_threads}: the generator builds single-threaded TCUs "
                "(as Tensil's RTL does); set it to 1")
        if a.tandem is not None:
            raise ArchitectureError(
                f"{where}: has the Tandem vector unit, which the generator does not build yet (docs/tandem.md); "
                "drop the 'tandem' key to build the TCU alone")
        if a.array_size > MAX_ARRAY_SIZE:
            raise ArchitectureError(
                f"{where}: array_size = {a.array_size}: the generator builds arrays of at most "
                f"{MAX_ARRAY_SIZE}x{MAX_ARRAY_SIZE}")
        for key in ("local_depth", "accumulator_depth"):
            depth = getattr(a, key)
            if depth < 2:
                raise ArchitectureError(f"{where}: {key} = {depth}: at least 2 vectors are needed")
            if depth > MAX_MEMORY_DEPTH:
                raise ArchitectureError(f"{where}: {key} = {depth}: on-chip memories of at most {MAX_MEMORY_DEPTH:,} vectors")
        for key in ("dram0_depth", "dram1_depth"):
            depth = getattr(a, key)
            span = depth * self.vector_bytes
            if span > 1 << self.axi_addr_bits:
                raise ArchitectureError(
                    f"{where}: {key} = {depth:,} vectors of {self.vector_bytes} bytes ({span:,} bytes) do not fit "
                    f"the {self.axi_addr_bits}-bit AXI address space")
        if a.stride0_depth > 16 or a.stride1_depth > 16:
            raise ArchitectureError(f"{where}: stride0_depth/stride1_depth above 16 (strides past 2^15) are not built")
        if self.axi_data_bits not in AXI_DATA_WIDTHS:
            raise ArchitectureError(
                f"{where}: AXI data width {self.axi_data_bits} is not one of {', '.join(map(str, AXI_DATA_WIDTHS))}")
        if (8 * self.vector_bytes) % self.axi_data_bits:
            raise ArchitectureError(
                f"{where}: a vector ({self.vector_bytes} bytes: array_size {a.array_size} x {a.data_type.name}) is not a "
                f"whole number of {self.axi_data_bits}-bit AXI words; use a width dividing it")
        if self.layout.instruction_bytes * 8 > 256:
            raise ArchitectureError(f"{where}: instructions of {self.layout.instruction_bytes} bytes are too wide")
        for key in ("compute_queue_depth", "dram_queue_depth", "max_outstanding_bursts"):
            if not 2 <= getattr(self, key) <= 256:
                raise ArchitectureError(f"{where}: {key} = {getattr(self, key)}: between 2 and 256")
        if not 1 <= self.sample_block_size <= 2**16:
            raise ArchitectureError(f"{where}: sample_block_size = {self.sample_block_size}: between 1 and 65536")
        if not 1 <= self.local_locks <= min(32, a.local_depth):
            raise ArchitectureError(f"{where}: local_locks = {self.local_locks}: between 1 and 32 (and at most local_depth)")

    # --- derived -------------------------------------------------------------------
    @property
    def n(self) -> int:
        return self.arch.array_size

    @property
    def data_type(self) -> DataType:
        return self.arch.data_type

    @property
    def scalar_bits(self) -> int:
        """Bits of one scalar inside the TCU (18 for FP18BP10)."""
        return self.arch.data_type.width

    @property
    def vector_bits(self) -> int:
        return self.n * self.scalar_bits

    @property
    def dram_scalar_bits(self) -> int:
        """Bits of one scalar in DRAM (FP18BP10 takes 32)."""
        return 8 * self.arch.data_type.size_bytes

    @property
    def vector_bytes(self) -> int:
        return self.arch.vector_bytes

    @property
    def axi_data_bytes(self) -> int:
        return self.axi_data_bits // 8

    @property
    def beats_per_vector(self) -> int:
        return self.vector_bytes // self.axi_data_bytes

    @property
    def layout(self) -> InstructionLayout:
        return InstructionLayout.of(self.arch)

    @property
    def instruction_bits(self) -> int:
        return 8 * self.layout.instruction_bytes

    @property
    def lock_region(self) -> int:
        """Vectors of local memory under one lock (the last region may be shorter)."""
        return -(-self.arch.local_depth // self.local_locks)

    @property
    def lock_bits(self) -> int:
        """A read and a write lock per region: bit 2r reads region r, bit 2r+1 writes it."""
        return 2 * self.local_locks

    @property
    def array_latency(self) -> int:
        """Clocks from a MatMul vector's local read to its result at the accumulators."""
        return 2 * self.n

    @property
    def weight_drain(self) -> int:
        """Clocks after a MatMul vector's issue before a LoadWeights vector may issue (the last
        processing element must have used the old weights)."""
        return 2 * self.n - 2

    def key(self) -> str:
        """A short hash naming this design (caches of Verilog, harnesses and syntheses)."""
        d = asdict(self)
        d["arch"] = self.arch.to_tarch()
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]

    def describe(self) -> dict:
        """The design's parameters as a JSON-able dict (written beside the Verilog)."""
        return {
            "name": self.name,
            "architecture": self.arch.to_tarch(),
            "axi_data_bits": self.axi_data_bits,
            "axi_addr_bits": self.axi_addr_bits,
            "axi_id_bits": self.axi_id_bits,
            "instruction_bits": self.instruction_bits,
            "beats_per_vector": self.beats_per_vector,
            "compute_queue_depth": self.compute_queue_depth,
            "dram_queue_depth": self.dram_queue_depth,
            "max_outstanding_bursts": self.max_outstanding_bursts,
            "sample_block_size": self.sample_block_size,
            "local_locks": self.local_locks,
            "array_latency": self.array_latency,
        }
