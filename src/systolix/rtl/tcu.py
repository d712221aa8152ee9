"""The Tensor Compute Unit's top level, ``top_<name>``, with the ports of Tensil's ``Top``.

::

    instruction stream --> InstructionStream --> Decoder --+--> compute queue --> ComputeLane (array, accumulators, SIMD)
                                                            |                        | port A
                                                            |                   local memory (dual port)
                                                            |                        | port B
                                                            +--> DRAM queue ----> DramLane --> m_axi_dram0 / m_axi_dram1
    sample stream <-- Sampler

Beyond Tensil's ports (``clock``, ``reset``, ``instruction_*``, ``m_axi_dram0_*``,
``m_axi_dram1_*``, ``sample_*``) the top has the decoder's flags as outputs (``program_counter``,
``tracepoint``, ``timeout``, ``error``) and ``idle``: no instruction waiting and both lanes done,
which is how a driver (or the co-simulation) knows that a program has finished.
"""

from __future__ import annotations

from amaranth.hdl import ClockDomain, Elaboratable, Module, Signal
from amaranth.lib.memory import Memory

from systolix.rtl.axi import AxiMaster
from systolix.rtl.compute_lane import ComputeLane
from systolix.rtl.config import RtlConfig
from systolix.rtl.decoder import Decoder
from systolix.rtl.dram_lane import DramLane
from systolix.rtl.sampler import Sampler
from systolix.rtl.stream import InstructionStream


class TensorComputeUnit(Elaboratable):
    def __init__(self, cfg: RtlConfig):
        self.cfg = cfg
        self.clock = Signal(name="clock")
        self.reset = Signal(name="reset")
        self.instruction_tdata = Signal(cfg.axi_data_bits, name="instruction_tdata")
        self.instruction_tvalid = Signal(name="instruction_tvalid")
        self.instruction_tready = Signal(name="instruction_tready")
        self.instruction_tlast = Signal(name="instruction_tlast")
        self.dram0 = AxiMaster(cfg, "m_axi_dram0")
        self.dram1 = AxiMaster(cfg, "m_axi_dram1")
        self.sample_tdata = Signal(64, name="sample_tdata")
        self.sample_tvalid = Signal(name="sample_tvalid")
        self.sample_tready = Signal(name="sample_tready")
        self.sample_tlast = Signal(name="sample_tlast")
        self.program_counter = Signal(32, name="program_counter")
        self.tracepoint = Signal(name="tracepoint")
        self.timeout = Signal(name="timeout")
        self.error = Signal(name="error")
        self.idle = Signal(name="idle")

    @property
    def module_name(self) -> str:
        return f"top_{self.cfg.name}"

    def ports(self) -> list[tuple[Signal, str]]:
        """Every port with its direction, in the order they are declared."""
        outs = [(s, "in") for s in (self.clock, self.reset, self.instruction_tdata, self.instruction_tvalid,
                                     self.instruction_tlast)]
        outs += [(self.instruction_tready, "out")]
        outs += self.dram0.directions() + self.dram1.directions()
        outs += [(self.sample_tdata, "out"), (self.sample_tvalid, "out"), (self.sample_tready, "in"),
                 (self.sample_tlast, "out")]
        outs += [(s, "out") for s in (self.program_counter, self.tracepoint, self.timeout, self.error, self.idle)]
        return outs

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        m.domains.sync = sync = ClockDomain("sync")
        m.d.comb += [sync.clk.eq(self.clock), sync.rst.eq(self.reset)]

        m.submodules.stream = stream = InstructionStream(cfg.axi_data_bits, cfg.instruction_bits)
        m.submodules.decoder = decoder = Decoder(cfg)
        m.submodules.compute_lane = compute = ComputeLane(cfg)
        m.submodules.dram_lane = dram = DramLane(cfg, self.dram0, self.dram1)
        m.submodules.sampler = sampler = Sampler(cfg.sample_block_size)
        # no_rw_check: tell synthesis that the two ports never meet on one address in one clock
        # (the locks keep the lanes apart, and each lane reads or writes its port, never both), so
        # the memory maps onto true dual-port block RAM without collision logic.
        m.submodules.local_memory = local = Memory(shape=cfg.vector_bits, depth=cfg.arch.local_depth, init=[],
                                                   attrs={"no_rw_check": 1})
        port_a_write = local.write_port()
        port_a_read = local.read_port()
        port_b_write = local.write_port()
        port_b_read = local.read_port()

        m.d.comb += [
            stream.word.eq(self.instruction_tdata),
            stream.word_valid.eq(self.instruction_tvalid),
            self.instruction_tready.eq(stream.word_ready),
            decoder.instruction.eq(stream.instruction),
            decoder.instruction_valid.eq(stream.instruction_valid),
            stream.instruction_ready.eq(decoder.instruction_ready),
            compute.cmd.eq(decoder.compute_cmd),
            compute.cmd_valid.eq(decoder.compute_valid),
            decoder.compute_ready.eq(compute.cmd_ready),
            dram.cmd.eq(decoder.dram_cmd),
            dram.cmd_valid.eq(decoder.dram_valid),
            decoder.dram_ready.eq(dram.cmd_ready),
            decoder.compute_release.eq(compute.release),
            decoder.dram_release.eq(dram.release),
            decoder.lanes_idle.eq(compute.idle & dram.idle),
            # Local memory: port A for the compute lane, port B for the DRAM lane.
            port_a_read.addr.eq(compute.local_addr),
            port_a_write.addr.eq(compute.local_addr),
            port_a_write.data.eq(compute.local_wdata),
            port_a_write.en.eq(compute.local_we),
            compute.local_rdata.eq(port_a_read.data),
            port_b_read.addr.eq(dram.local_addr),
            port_b_write.addr.eq(dram.local_addr),
            port_b_write.data.eq(dram.local_wdata),
            port_b_write.en.eq(dram.local_we),
            dram.local_rdata.eq(port_b_read.data),
            # Flags.
            self.program_counter.eq(decoder.program_counter),
            self.tracepoint.eq(decoder.tracepoint),
            self.timeout.eq(decoder.timeout),
            self.error.eq(decoder.error),
            self.idle.eq(decoder.idle),
            # Sampler.
            sampler.interval.eq(decoder.sample_interval),
            sampler.program_counter.eq(decoder.program_counter),
            self.sample_tdata.eq(sampler.tdata),
            self.sample_tvalid.eq(sampler.tvalid),
            self.sample_tlast.eq(sampler.tlast),
            sampler.tready.eq(self.sample_tready),
        ]
        flags = {
            "instruction": (stream.instruction_valid, decoder.instruction_ready),
            "mem_port_a": (compute.local_active, compute.local_active),
            "mem_port_b": (dram.local_active, dram.local_active),
            "dataflow": (compute.cmd_valid, compute.cmd_ready),
            "acc": (compute.acc_active, compute.acc_active),
            "array": (compute.array_active, compute.array_active),
        }
        for name, port in (("dram0", self.dram0), ("dram1", self.dram1)):
            flags[name] = (port.arvalid | port.awvalid | port.wvalid,
                           (port.arvalid & port.arready) | (port.awvalid & port.awready) | (port.wvalid & port.wready))
        for bus, (valid, ready) in flags.items():
            m.d.comb += [sampler.valid[bus].eq(valid), sampler.ready[bus].eq(ready)]
        return m
