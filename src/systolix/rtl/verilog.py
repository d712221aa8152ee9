"""Verilog from the Amaranth design (Amaranth's RTLIL, then its bundled Yosys's ``write_verilog``)."""

from __future__ import annotations

import re

from amaranth.back import rtlil
from amaranth.back.verilog import _convert_rtlil_text  # the step after RTLIL that convert() runs (pinned 0.5)

from systolix.rtl.config import RtlConfig
from systolix.rtl.tcu import TensorComputeUnit

# A memory initialiser whose data is all zeros (Amaranth writes one for every memory).
_ZERO_MEMINIT = re.compile(r"\n  cell \$meminit_v2 \S+\n(?:    (?!connect \\DATA)[^\n]*\n)*"
                           r"    connect \\DATA \d+'0+\n(?:    [^\n]*\n)*  end\n")


def generate_verilog(cfg: RtlConfig) -> str:
    """The whole TCU as one Verilog text whose top module is ``top_<cfg.name>``.

    The memories' zero initialisers are left out: written as RTLIL they are a bit per memory bit
    (25 Mbit for a ZCU104 UltraRAM design's local memory, minutes for Yosys to read), and as
    Verilog a line per word that costs Verilator and the C++ compiler minutes more, while block
    RAM and the simulator (``--x-initial 0``) start at zero anyway.
    """
    top = TensorComputeUnit(cfg)
    text = rtlil.convert(top, name=top.module_name, ports=[s for s, _ in top.ports()], emit_src=False)
    return _convert_rtlil_text(_ZERO_MEMINIT.sub("\n", text))
