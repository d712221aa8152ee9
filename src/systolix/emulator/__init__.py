"""A bit-exact emulator of the Tensor Compute Unit (Tensil's accelerator).

``Emulator(arch, batch)`` holds the memories; ``Emulator.run(program)`` executes a decoded
program (or ``.tprog`` bytes) for every batch item in one pass over the instructions.
"""

from systolix.emulator.bounds import AccessSummary, analyse
from systolix.emulator.kernels import SAT_KINDS
from systolix.emulator.machine import Emulator, EmulatorError, RunResult

__all__ = ["AccessSummary", "Emulator", "EmulatorError", "RunResult", "SAT_KINDS", "analyse"]
