"""The performance sampler (Tensil's ``Sampler.scala``; layout in ``systolix.perf.samples``).

Every ``interval`` clocks (0: off) it takes a 64-bit word, the program counter in bits 0-31 and
a valid/ready pair per bus above, and offers it on the sample stream; ``tlast`` closes each block
of ``block_size`` samples. A sample the stream has not taken when the next is due is dropped, as
in Tensil's design, so that sampling never stalls the TCU.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Elaboratable, Module, Signal

# Bus order from bit 32 up: array, acc, dataflow, dram1, dram0, mem_port_b, mem_port_a, instruction.
BUSES = ("array", "acc", "dataflow", "dram1", "dram0", "mem_port_b", "mem_port_a", "instruction")


class Sampler(Elaboratable):
    def __init__(self, block_size: int):
        self.block_size = block_size
        self.interval = Signal(16)
        self.program_counter = Signal(32)
        self.valid = {bus: Signal(name=f"{bus}_valid") for bus in BUSES}
        self.ready = {bus: Signal(name=f"{bus}_ready") for bus in BUSES}
        self.tdata = Signal(64)
        self.tvalid = Signal()
        self.tready = Signal()
        self.tlast = Signal()

    def elaborate(self, platform):
        m = Module()
        countdown = Signal(16)
        in_block = Signal(range(max(2, self.block_size)))
        due = Signal()
        with m.If(self.interval == 0):
            m.d.sync += countdown.eq(0)
        with m.Elif(countdown == 0):
            m.d.comb += due.eq(1)
            m.d.sync += countdown.eq(self.interval - 1)
        with m.Else():
            m.d.sync += countdown.eq(countdown - 1)
        flags = Cat(*[Cat(self.valid[b], self.ready[b]) for b in BUSES])
        with m.If(~self.tvalid | self.tready):
            with m.If(due):
                last = in_block == self.block_size - 1
                m.d.sync += [
                    self.tvalid.eq(1),
                    self.tdata.eq(Cat(self.program_counter, flags)),
                    self.tlast.eq(last),
                    in_block.eq(0 if self.block_size == 1 else in_block + 1),
                ]
                with m.If(last):
                    m.d.sync += in_block.eq(0)
            with m.Else():
                m.d.sync += [self.tvalid.eq(0), self.tlast.eq(0)]
        return m
