"""A board: an architecture plus the clock and the DRAM interface it runs with."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from systolix.arch.architecture import Architecture


class Board(BaseModel):
    """Where a program runs: the latency model reads its clock and memory interface.

    Later issues (the latency model) add their calibrated parameters here, each with a
    comment saying where its value comes from.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    architecture: Architecture
    clock_mhz: float = Field(gt=0, description="accelerator clock")
    dram_bus_bits: int = Field(gt=0, description="width of the accelerator's DRAM data ports")
    dram_peak_gbps: float = Field(gt=0, description="peak DRAM bandwidth of one port, GB/s (bus bits x clock)")
    description: str = ""

    @property
    def bytes_per_cycle(self) -> float:
        """DRAM bytes one port moves per accelerator clock at peak."""
        return self.dram_bus_bits / 8
