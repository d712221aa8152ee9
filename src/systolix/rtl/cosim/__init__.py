"""Co-simulation: programs on the Verilated RTL, with DRAMs modelled in C++.

``build`` makes (and caches) the Verilator model of a design with the harness around it;
``RtlMachine`` runs programs on it with the interface of ``systolix.emulator.Emulator``
(``write``, ``read``, ``run``), one process per batch item, so that the model driver runs either
engine the same way.
"""

from systolix.rtl.cosim.build import CosimError, ToolMissing, build, cache_root, require_verilator, state_items
from systolix.rtl.cosim.machine import DramModel, RtlMachine, RtlRun, RtlRunResult

__all__ = ["CosimError", "DramModel", "RtlMachine", "RtlRun", "RtlRunResult", "ToolMissing", "build", "cache_root",
           "require_verilator", "state_items"]
