"""A board: an architecture plus the clock and the DRAM interface it runs with."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from systolix.arch.architecture import Architecture

# Latency-model parameters shared by every Tensil design (the same RTL on every board).
# The two marked "fitted" come from systolix.perf.fitting (docs/latency-model.md): fitted on
# two of the six frame rates measured on a real ZCU104 (../shared/conformance/tensil/
# resnet20_zcu104/expected.json) and checked on the other four. The others are physical.

#: Fitted: fixed cost of one AXI request on a DRAM port (address phase, DDR row/bank
#: turnaround of a short burst), in ns. Tensil splits a strided DataMove into one request
#: per vector and a contiguous one into bursts of at most 4 KiB, so this is what makes strided
#: weight loads slow. Fitted on `ultra_ram/` (the DRAM-heavy program).
FITTED_DRAM_REQUEST_NS = 73.33
#: Fitted: host time per input or output scalar per frame (Tensil's bare-metal driver converts
#: each float to fixed point and writes it to DRAM0, then reads the outputs back), in ns.
#: Fitted on `ultra_ram_local_vars_and_consts/` (no DRAM traffic but the input and output).
FITTED_HOST_NS_PER_SCALAR = 22.86


class Board(BaseModel):
    """Where a program runs: the latency model reads its clock, memory interface and costs.

    Every latency-model parameter lives here, with where its value comes from.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    architecture: Architecture
    clock_mhz: float = Field(gt=0, description="accelerator clock")
    dram_bus_bits: int = Field(gt=0, description="width of the accelerator's DRAM data ports")
    dram_peak_gbps: float = Field(gt=0, description="peak DRAM bandwidth of one port, GB/s (bus bits x clock)")
    description: str = ""
    # DRAM ports (Tensil's axi.Converter behind each of DRAM0 and DRAM1).
    # Share of the port's peak that long bursts reach. 1.0: one AXI port moves at most a few
    # GB/s while the boards' DDR (e.g. the ZCU104's 64-bit DDR4-2666, 21 GB/s) is several
    # times faster, so the DDR does not throttle a port; physical, not fitted.
    dram_efficiency: float = Field(default=1.0, gt=0, le=1, description="share of peak bandwidth long bursts reach")
    # Round trip from an AXI read request to its data (or a write to its response) through
    # the PS interconnect to DDR: about 200 ns on Zynq/ZynqMP HP ports; physical, not fitted.
    # Paid once per DataMove (requests are pipelined, up to 255 in flight) and when a port
    # switches between reading and writing (the converter drains one direction first).
    dram_latency_ns: float = Field(default=200.0, ge=0, description="AXI round-trip latency")
    dram_request_ns: float = Field(default=FITTED_DRAM_REQUEST_NS, ge=0, description="fixed cost per AXI request (fitted)")
    # Largest AXI burst: 4 KiB (the AXI rule that a burst never crosses a 4 KiB boundary) and
    # at most 256 beats (AxLEN); Tensil's converter splits requests accordingly.
    dram_max_burst_bytes: int = Field(default=4096, gt=0)
    # Host side of one frame (Tensil's driver writes the input and reads the output).
    host_ns_per_scalar: float = Field(default=FITTED_HOST_NS_PER_SCALAR, ge=0, description="host cost per I/O scalar (fitted)")
    # Decoder: Tensil's decoder accepts at most one instruction per clock (Decoder.scala).
    issue_cycles: float = Field(default=1.0, gt=0)

    # Clock of the DRAM data ports' AXI side (None: the accelerator clock); with it the
    # port's peak is bus bits x this clock.
    dram_clock_mhz: float | None = Field(default=None, gt=0)
    # Which timing model: Tensil's hardware (systolix.perf.simulator, calibrated on a real
    # ZCU104) or the TCU that systolix.rtl generates (systolix.perf.rtl_timing, clock-exact
    # against its co-simulation, with the co-simulation's DRAM model).
    timing: Literal["tensil", "rtl"] = "tensil"

    @property
    def bytes_per_cycle(self) -> float:
        """DRAM bytes one port moves per accelerator clock at peak."""
        port_clock = self.dram_clock_mhz or self.clock_mhz
        return min(self.dram_bus_bits / 8 * port_clock, self.dram_peak_gbps * 1e3) / self.clock_mhz

    def with_parameters(self, **changes) -> "Board":
        """A copy with some parameters changed (the latency fit and what-if runs)."""
        return self.model_copy(update=changes)

    def with_architecture(self, architecture: Architecture) -> "Board":
        """The same board running another architecture (a .tmodel brings its own)."""
        return self.model_copy(update={"architecture": architecture})
