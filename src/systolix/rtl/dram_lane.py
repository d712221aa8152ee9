"""The DRAM lane: DataMoves between local memory (port B) and DRAM0/DRAM1 over AXI4.

One command at a time, in order. A move's DRAM side is cut into AXI bursts: a contiguous move
(DRAM stride 1) is one span of ``count x beats_per_vector`` beats, a strided one a span per
vector; every burst is at most 256 beats and never crosses a 4 KiB boundary, as the AXI rules
require and Tensil's ``MemBoundarySplitter`` does. Up to ``max_outstanding_bursts`` bursts are in
flight. Reads are written into local memory a vector at a time as their last beat arrives;
writes read local memory ahead into a small queue and stream it out. A command is done (and
gives back its local-memory lock) when its last vector is in local memory, or when the last write
response has come back, so that a later read of the same DRAM address sees the write.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Elaboratable, Module, Mux, Signal
from amaranth.lib.fifo import SyncFIFOBuffered

from systolix.rtl.axi import AXI_BURST_INCR, axi_size
from systolix.rtl.commands import dram_command, local_bits
from systolix.rtl.config import AXI_BOUNDARY_BYTES, AXI_MAX_BURST_BEATS, RtlConfig

WRITE_QUEUE_VECTORS = 4


class DramLane(Elaboratable):
    def __init__(self, cfg: RtlConfig, dram0, dram1):
        self.cfg = cfg
        self.dram0 = dram0
        self.dram1 = dram1
        self.cmd = Signal(dram_command(cfg))
        self.cmd_valid = Signal()
        self.cmd_ready = Signal()
        self.local_addr = Signal(local_bits(cfg))
        self.local_rdata = Signal(cfg.vector_bits)
        self.local_wdata = Signal(cfg.vector_bits)
        self.local_we = Signal()
        self.local_active = Signal()
        self.release = Signal(cfg.lock_bits)
        self.idle = Signal()

    def _to_dram(self, vector):
        """Internal scalars to DRAM scalars (FP18BP10's 18 bits in 32, the rest zero)."""
        cfg = self.cfg
        w, dw = cfg.scalar_bits, cfg.dram_scalar_bits
        if w == dw:
            return vector
        return Cat(*[Cat(vector[k * w : (k + 1) * w], Const(0, dw - w)) for k in range(cfg.n)])

    def _from_dram(self, vector):
        cfg = self.cfg
        w, dw = cfg.scalar_bits, cfg.dram_scalar_bits
        if w == dw:
            return vector
        return Cat(*[vector[k * dw : k * dw + w] for k in range(cfg.n)])

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        bb = cfg.axi_data_bytes
        bpv = cfg.beats_per_vector
        size_bits = cfg.layout.size_bits
        cmd = Signal(dram_command(cfg))
        busy = Signal()

        # --- accept a command ------------------------------------------------------------------
        m.d.comb += self.cmd_ready.eq(~busy)
        with m.If(self.cmd_valid & ~busy):
            m.d.sync += [cmd.eq(self.cmd), busy.eq(1)]

        count = Signal(size_bits + 1)
        m.d.comb += count.eq(cmd.count_m1 + 1)
        contiguous = cmd.dram_stride == 0
        stride_bytes = Signal(cfg.axi_addr_bits)
        m.d.comb += stride_bytes.eq(cfg.vector_bytes << cmd.dram_stride)

        # --- bursts: spans cut at 256 beats and 4 KiB -------------------------------------------
        started = Signal()  # the span generator holds this command's first span
        span_addr = Signal(cfg.axi_addr_bits)
        span_base = Signal(cfg.axi_addr_bits)
        span_left = Signal(size_bits + 2 + bpv.bit_length())  # beats left in the current span
        spans_left = Signal(size_bits + 1)  # spans after the current one
        generating = Signal()
        to_boundary = Signal(range(AXI_BOUNDARY_BYTES // bb + 1))
        m.d.comb += to_boundary.eq((AXI_BOUNDARY_BYTES - span_addr[0:12]) >> axi_size(cfg))
        shorter = Mux(span_left < to_boundary, span_left, to_boundary)
        burst_len = Signal(range(AXI_MAX_BURST_BEATS + 1))
        m.d.comb += burst_len.eq(Mux(shorter > AXI_MAX_BURST_BEATS, AXI_MAX_BURST_BEATS, shorter))
        issued = Signal(size_bits + bpv.bit_length() + 2)  # bursts issued for this command
        completed = Signal.like(issued)
        room = (issued - completed) < cfg.max_outstanding_bursts
        fire = Signal()  # a burst's address handshake this clock

        with m.If(busy & ~started):
            m.d.sync += [
                started.eq(1),
                generating.eq(1),
                span_addr.eq(cmd.dram_addr),
                span_base.eq(cmd.dram_addr),
                span_left.eq(Mux(contiguous, count * bpv, bpv)),
                spans_left.eq(Mux(contiguous, 0, cmd.count_m1)),
            ]
        with m.If(fire):
            m.d.sync += issued.eq(issued + 1)
            with m.If(burst_len == span_left):
                with m.If(spans_left == 0):
                    m.d.sync += generating.eq(0)
                with m.Else():
                    m.d.sync += [
                        spans_left.eq(spans_left - 1),
                        span_base.eq(span_base + stride_bytes),
                        span_addr.eq(span_base + stride_bytes),
                        span_left.eq(bpv),
                    ]
            with m.Else():
                m.d.sync += [span_addr.eq(span_addr + burst_len * bb), span_left.eq(span_left - burst_len)]

        # The selected port; the other one stays quiet.
        ports = (self.dram0, self.dram1)
        arvalid = Signal()
        awvalid = Signal()
        ready = Signal()
        m.d.comb += ready.eq(Mux(cmd.dram, Mux(cmd.to_local, self.dram1.arready, self.dram1.awready),
                                 Mux(cmd.to_local, self.dram0.arready, self.dram0.awready)))
        for index, port in enumerate(ports):
            mine = cmd.dram == index
            m.d.comb += [
                port.arvalid.eq(arvalid & mine),
                port.awvalid.eq(awvalid & mine),
                port.araddr.eq(span_addr), port.awaddr.eq(span_addr),
                port.arlen.eq(burst_len - 1), port.awlen.eq(burst_len - 1),
                port.arsize.eq(axi_size(cfg)), port.awsize.eq(axi_size(cfg)),
                port.arburst.eq(AXI_BURST_INCR), port.awburst.eq(AXI_BURST_INCR),
                port.arcache.eq(cmd.cache), port.awcache.eq(cmd.cache),
                port.wstrb.eq(-1),
                # One transaction ID, normal unlocked unprivileged accesses, no QoS.
                port.arid.eq(0), port.awid.eq(0), port.wid.eq(0), port.arlock.eq(0), port.awlock.eq(0),
                port.arprot.eq(0), port.awprot.eq(0), port.arqos.eq(0), port.awqos.eq(0),
            ]
        write_lengths = SyncFIFOBuffered(width=burst_len.shape().width, depth=cfg.max_outstanding_bursts)
        m.submodules.write_lengths = write_lengths
        can_issue = busy & started & generating & room
        m.d.comb += [
            arvalid.eq(can_issue & cmd.to_local),
            awvalid.eq(can_issue & ~cmd.to_local & write_lengths.w_rdy),
            fire.eq((arvalid | awvalid) & ready),
            write_lengths.w_en.eq(awvalid & ready),
            write_lengths.w_data.eq(burst_len),
        ]

        # --- reads: beats into vectors into local memory ----------------------------------------
        rvalid = Mux(cmd.dram, self.dram1.rvalid, self.dram0.rvalid)
        rdata = Mux(cmd.dram, self.dram1.rdata, self.dram0.rdata)
        rlast = Mux(cmd.dram, self.dram1.rlast, self.dram0.rlast)
        for index, port in enumerate(ports):
            m.d.comb += port.rready.eq(busy & cmd.to_local & (cmd.dram == index))
        beat = Signal(range(max(2, bpv)))
        gathered = Signal(max(1, cfg.axi_data_bits * (bpv - 1)), reset_less=True)
        vectors = Signal(size_bits + 1)  # vectors done (written to local, or read from it)
        local_write = Signal()
        beat_in = busy & cmd.to_local & rvalid
        with m.If(beat_in):
            if bpv > 1:  # beats shift down: the first (lowest addresses) ends lowest
                m.d.sync += gathered.eq(Cat(gathered[cfg.axi_data_bits:], rdata))
            with m.If(beat == bpv - 1):
                m.d.sync += beat.eq(0)
            with m.Else():
                m.d.sync += beat.eq(beat + 1)
            with m.If(rlast):
                m.d.sync += completed.eq(completed + 1)
        m.d.comb += local_write.eq(beat_in & (beat == bpv - 1))
        whole = Cat(gathered, rdata) if bpv > 1 else rdata

        # --- writes: local memory ahead into a queue, out as beats -----------------------------
        queue = SyncFIFOBuffered(width=cfg.vector_bytes * 8, depth=WRITE_QUEUE_VECTORS)
        m.submodules.write_queue = queue
        reading = Signal()  # a local read issued last clock: its data arrives now
        outstanding_reads = queue.level + reading
        local_read = Signal()
        m.d.comb += local_read.eq(busy & started & ~cmd.to_local & (vectors != count)
                                  & (outstanding_reads < WRITE_QUEUE_VECTORS))
        m.d.sync += reading.eq(local_read)
        m.d.comb += [queue.w_en.eq(reading), queue.w_data.eq(self._to_dram(self.local_rdata))]

        out_beat = Signal(range(max(2, bpv)))
        burst_left = Signal(range(AXI_MAX_BURST_BEATS + 1))  # beats left in the current W burst
        in_burst = Signal()
        wvalid = Signal()
        wlast = Signal()
        wready = Mux(cmd.dram, self.dram1.wready, self.dram0.wready)
        m.d.comb += [
            wvalid.eq(busy & ~cmd.to_local & queue.r_rdy & (in_burst | write_lengths.r_rdy)),
            wlast.eq(Mux(in_burst, burst_left == 1, write_lengths.r_data == 1)),
        ]
        wdata = Signal(cfg.axi_data_bits)
        m.d.comb += wdata.eq(queue.r_data.word_select(out_beat, cfg.axi_data_bits) if bpv > 1 else queue.r_data)
        for index, port in enumerate(ports):
            mine = cmd.dram == index
            m.d.comb += [port.wvalid.eq(wvalid & mine), port.wdata.eq(wdata), port.wlast.eq(wlast),
                         port.bready.eq(busy & ~cmd.to_local & mine)]
        w_fire = wvalid & wready
        with m.If(w_fire):
            with m.If(~in_burst):
                m.d.comb += write_lengths.r_en.eq(1)
            m.d.sync += [in_burst.eq(~wlast), burst_left.eq(Mux(in_burst, burst_left, write_lengths.r_data) - 1)]
            with m.If(out_beat == bpv - 1):
                m.d.sync += out_beat.eq(0)
                m.d.comb += queue.r_en.eq(1)
            with m.Else():
                m.d.sync += out_beat.eq(out_beat + 1)
        bvalid = Mux(cmd.dram, self.dram1.bvalid, self.dram0.bvalid)
        with m.If(busy & ~cmd.to_local & bvalid):
            m.d.sync += completed.eq(completed + 1)

        # --- local memory port B --------------------------------------------------------------
        local_step = Signal(local_bits(cfg))
        m.d.comb += local_step.eq(vectors << cmd.local_stride)
        m.d.comb += [
            self.local_addr.eq(cmd.local_addr + local_step),
            self.local_we.eq(local_write),
            self.local_wdata.eq(self._from_dram(whole)),
            self.local_active.eq(local_write | local_read),
        ]
        with m.If(local_write | local_read):
            m.d.sync += vectors.eq(vectors + 1)

        # --- done -------------------------------------------------------------------------------
        all_moved = (vectors == count) & ~generating & started & (completed == issued) & ~reading & ~queue.r_rdy
        finished = busy & all_moved
        with m.If(finished):
            m.d.sync += [busy.eq(0), started.eq(0), vectors.eq(0), issued.eq(0), completed.eq(0)]
        m.d.comb += [
            self.release.eq(Mux(finished, cmd.lock, 0)),
            self.idle.eq(~busy & ~self.cmd_valid),
        ]
        return m
