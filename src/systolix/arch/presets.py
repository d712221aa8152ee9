"""Built-in architectures (Tensil's own ``.tarch`` values) and boards."""

from __future__ import annotations

from pathlib import Path

from systolix.arch.architecture import Architecture, TandemConfig
from systolix.arch.board import Board
from systolix.errors import ArchitectureError
from systolix.numerics import DataType


def _arch(n: int, dram0: int, dram1: int, local: int, acc: int) -> Architecture:
    return Architecture(
        data_type=DataType.FP16BP8,
        array_size=n,
        dram0_depth=dram0,
        dram1_depth=dram1,
        local_depth=local,
        accumulator_depth=acc,
        simd_registers_depth=1,
        stride0_depth=8,
        stride1_depth=8,
        number_of_threads=1,
        thread_queue_depth=8,
    )


# Exactly Tensil's shipped architecture files (checked against them in the tests).
ARCHITECTURES: dict[str, Architecture] = {
    "pynqz1": _arch(8, 1048576, 1048576, 8192, 2048),
    "ultra96v2": _arch(16, 2097152, 2097152, 20480, 4096),
    "zcu104": _arch(32, 2097152, 2097152, 16384, 4096),
    "zcu104_uram": _arch(32, 2097152, 2097152, 49152, 20480),
    "artya7100t": _arch(8, 1048576, 1048576, 8192, 2048),
    "cmoda7": _arch(4, 4096, 32768, 4096, 4096),
}
# Ours: Tensil's Ultra96-V2 design plus the Tandem vector unit (docs/tandem.md).
ARCHITECTURES["ultra96v2_tandem"] = ARCHITECTURES["ultra96v2"].model_copy(update={"tandem": TandemConfig()})

ARCHITECTURE_NOTES = {
    "pynqz1": "Tensil's PYNQ-Z1 design",
    "ultra96v2": "Tensil's Ultra96-V2 design",
    "zcu104": "Tensil's ZCU104 design (block RAM)",
    "zcu104_uram": "Tensil's ZCU104 design with UltraRAM",
    "artya7100t": "Tensil's Arty A7-100T design",
    "cmoda7": "Tensil's Cmod A7 design",
    "ultra96v2_tandem": "ultra96v2 plus the Tandem vector unit (docs/tandem.md)",
}


# Boards for Tensil's published benchmark table and for the real ZCU104 measurements.
# Arty A7-35: no Tensil .tarch exists. Its XC7A35T has 50 RAMB36 (1,800 Kib). Local memory
# 4096 x 8 x 16 bit = 512 Kib and accumulators 1024 x 8 x 32 bit (accumulators are stored
# wider) = 256 Kib leave room for the instruction and DMA FIFOs.
# Pynq Z1 12x12: Tensil's published table uses 12x12, Tensil's pynqz1.tarch is 8x8. The XC7Z020 has
# 140 RAMB36 (4.9 Mib): local 8192 x 12 x 16 bit = 1.5 Mib, accumulators 2048 x 12 x 32 bit
# = 0.75 Mib, the same depths as pynqz1.tarch.
_ARTY_A7_35 = _arch(8, 1048576, 1048576, 4096, 1024)
_PYNQ_Z1_12 = _arch(12, 1048576, 1048576, 8192, 2048)

BOARDS: dict[str, Board] = {
    "arty-a7-35": Board(
        name="arty-a7-35", architecture=_ARTY_A7_35, clock_mhz=150.0, dram_bus_bits=64,
        # The Arty's only DRAM is a 16-bit DDR3L-667 (1.33 GB/s raw) behind Xilinx's MIG, shared
        # by both ports; long bursts sustain about 80% of that, ~1.07 GB/s = 0.9 x the port's
        # 1.2 GB/s (a typical MIG figure, not measured here).
        dram_efficiency=0.9,
        dram_peak_gbps=1.2, description="Digilent Arty A7-35 (XC7A35T), 8x8 at 150 MHz, as in Tensil's published benchmarks",
    ),
    "pynq-z1": Board(
        name="pynq-z1", architecture=_PYNQ_Z1_12, clock_mhz=150.0, dram_bus_bits=64,
        dram_peak_gbps=1.2, description="PYNQ-Z1 (XC7Z020), 12x12 at 150 MHz, as in Tensil's published benchmarks",
    ),
    "ultra96-v2": Board(
        name="ultra96-v2", architecture=ARCHITECTURES["ultra96v2"], clock_mhz=300.0, dram_bus_bits=128,
        dram_peak_gbps=4.8, description="Avnet Ultra96-V2 (ZU3EG), 16x16 at 300 MHz, as in Tensil's published benchmarks",
    ),
    "zcu104": Board(
        name="zcu104", architecture=ARCHITECTURES["zcu104"], clock_mhz=100.0, dram_bus_bits=128,
        # The data ports' AXI side at 300 MHz (4.8 GB/s a port), the usual HP-port clock of
        # Zynq UltraScale+ designs. An assumption the measured frame rates demand: read at
        # 100 MHz (1.6 GB/s) the model cannot fit them (docs/latency-model.md).
        dram_clock_mhz=300.0, dram_peak_gbps=4.8,
        description="Xilinx ZCU104 (ZU7EV), 32x32 at 100 MHz, Tensil's 128-bit AXI data ports",
    ),
    "rtl": Board(
        # The TCU we generate (systolix.rtl) at the architecture of the program it times, with the
        # co-simulation's DRAM (a read's first beat 32 clocks after its request, one beat a clock
        # on each 128-bit port). 100 MHz is a nominal clock for milliseconds and frame rates;
        # the cycle counts are what the model predicts exactly.
        name="rtl", architecture=ARCHITECTURES["zcu104"], clock_mhz=100.0, dram_bus_bits=128, dram_peak_gbps=1.6,
        timing="rtl", description="the TCU systolix generates, co-simulated (any architecture; DRAM latency 32 clocks)",
    ),
    "zcu104-512": Board(
        # Tensil's dual-clock variant: 512-bit data ports at the accelerator's 100 MHz (6.4 GB/s a
        # port), clock-converted to the PS side; the same program as `zcu104`.
        name="zcu104-512", architecture=ARCHITECTURES["zcu104"], clock_mhz=100.0, dram_bus_bits=512,
        dram_peak_gbps=6.4, description="Xilinx ZCU104, 32x32 at 100 MHz, dual-clock 512-bit AXI interface",
    ),
}


def get_architecture(name_or_path: str | Path) -> Architecture:
    """A preset by name (``zcu104``) or a ``.tarch`` file by path (``ArchitectureError`` for an
    unknown name or a bad file: see ``Architecture.load``)."""
    key = str(name_or_path)
    if key in ARCHITECTURES:
        return ARCHITECTURES[key]
    if key in BOARDS:
        return BOARDS[key].architecture
    path = Path(key)
    if path.suffix == ".tarch" or path.exists():
        return Architecture.load(path)
    names = ", ".join(dict.fromkeys(list(ARCHITECTURES) + list(BOARDS)))
    raise ArchitectureError(f"unknown architecture {key!r}: give a .tarch path or one of {names}")


def get_board(name: str) -> Board:
    """A board preset by name (``ArchitectureError`` for an unknown one)."""
    if name in BOARDS:
        return BOARDS[name]
    raise ArchitectureError(f"unknown board {name!r}: one of {', '.join(BOARDS)}")
