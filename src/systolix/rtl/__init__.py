"""The hardware: a Tensor Compute Unit generated in Amaranth from an ``Architecture``.

``RtlConfig`` says what to build, ``generate_verilog`` writes it, ``systolix.rtl.cosim`` runs
programs on it under Verilator and ``systolix.rtl.synth`` measures its FPGA resources.
"""

from systolix.rtl.config import RtlConfig
from systolix.rtl.verilog import generate_verilog

__all__ = ["RtlConfig", "generate_verilog"]
