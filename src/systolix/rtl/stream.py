"""The instruction stream: bus words in, whole instructions out.

The host streams a ``.tprog``'s bytes over an AXI4-Stream as wide as the DRAM ports (Tensil's
``connectDownstreamInterface``); an instruction may straddle two words (9-byte instructions on a
16-byte bus). A byte buffer one word plus one instruction long joins them.
"""

from __future__ import annotations

from amaranth.hdl import Elaboratable, Module, Mux, Signal


class InstructionStream(Elaboratable):
    def __init__(self, word_bits: int, instruction_bits: int):
        self.word_bits = word_bits
        self.instruction_bits = instruction_bits
        self.word = Signal(word_bits)
        self.word_valid = Signal()
        self.word_ready = Signal()
        self.instruction = Signal(instruction_bits)
        self.instruction_valid = Signal()
        self.instruction_ready = Signal()

    def elaborate(self, platform):
        m = Module()
        wb, ib = self.word_bits // 8, self.instruction_bits // 8
        capacity = wb + ib
        buffer = Signal(8 * capacity)
        fill = Signal(range(capacity + 1))  # bytes held
        m.d.comb += [self.instruction.eq(buffer[0 : 8 * ib]), self.instruction_valid.eq(fill >= ib)]
        taken = self.instruction_valid & self.instruction_ready
        kept = Signal(range(capacity + 1))
        m.d.comb += kept.eq(fill - Mux(taken, ib, 0))
        m.d.comb += self.word_ready.eq(kept <= capacity - wb)
        arriving = self.word_valid & self.word_ready
        shifted = Signal(8 * capacity)
        m.d.comb += shifted.eq(Mux(taken, buffer >> (8 * ib), buffer))
        with m.If(arriving):
            m.d.sync += [buffer.eq(shifted | (self.word << (kept * 8))), fill.eq(kept + wb)]
        with m.Else():
            m.d.sync += [buffer.eq(shifted), fill.eq(kept)]
        return m
