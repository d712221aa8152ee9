"""The decoder: in-order issue into two command queues, the local-memory locks, the registers.

Each clock the decoder takes at most one instruction and either acts on it (NoOp, Configure) or
queues it as a command for the lane that runs it: the compute lane or the DRAM lane. It issues in
program order and stalls on the first instruction that cannot go.

The two lanes share only local memory, and only through the locks: local memory is cut into
regions (``RtlConfig.local_locks``; two halves by default, as Tensil's ``LockPool`` has two
locks), each with a reader/writer lock per lane. An instruction takes the locks of the regions its
address range touches when it is queued and its lane gives them back when it is done with local
memory. It may be queued only if the other lane holds no write lock on a region it touches, nor
(if it writes) a read lock. So every pair of instructions that touch the same region, one of them
writing, runs in program order, and everything else overlaps: a DRAM load into one half runs
while the array works on the other, and a program gives the same results as on the emulator,
whatever its order.

The configuration registers are Tensil's (``ConfigRegister``). DRAM offsets are read when a
DataMove is queued, so a Configure affects only the moves after it, in program order.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Elaboratable, Module, Mux, Signal
from amaranth.lib.fifo import SyncFIFOBuffered

from systolix.isa import ConfigRegister, DataFlow, Opcode
from systolix.rtl.commands import ComputeKind, compute_command, dram_command
from systolix.rtl.config import RtlConfig

LOCK_COUNTER_BITS = 10


class Decoder(Elaboratable):
    def __init__(self, cfg: RtlConfig):
        self.cfg = cfg
        self.instruction = Signal(cfg.instruction_bits)
        self.instruction_valid = Signal()
        self.instruction_ready = Signal()
        # Queue outputs (read side) for the lanes.
        self.compute_cmd = Signal(compute_command(cfg))
        self.compute_valid = Signal()
        self.compute_ready = Signal()
        self.dram_cmd = Signal(dram_command(cfg))
        self.dram_valid = Signal()
        self.dram_ready = Signal()
        self.compute_release = Signal(cfg.lock_bits)
        self.dram_release = Signal(cfg.lock_bits)
        self.lanes_idle = Signal()
        # Registers and flags.
        self.program_counter = Signal(32)
        self.tracepoint = Signal()
        self.timeout = Signal()
        self.error = Signal()
        self.sample_interval = Signal(16)
        self.idle = Signal()
        self.compute_queued = Signal()  # a command entered the compute queue (the sampler watches it)
        self.dram_queued = Signal()
        # The configuration registers by name (``CONFIG_REGISTER_NAMES``); DRAM offsets hold bytes.
        self.registers = {
            "dram0_offset": Signal(cfg.axi_addr_bits, name="dram0_offset"),
            "dram0_cache": Signal(4, name="dram0_cache"),
            "dram1_offset": Signal(cfg.axi_addr_bits, name="dram1_offset"),
            "dram1_cache": Signal(4, name="dram1_cache"),
            "timeout": Signal(16, init=cfg.decoder_timeout, name="timeout_limit"),
            "tracepoint": Signal(32, init=0xFFFFFFFF, name="tracepoint_register"),
            "program_counter": self.program_counter,
            "sample_interval": self.sample_interval,
        }

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        L = cfg.layout
        ins = self.instruction
        top = cfg.instruction_bits
        opcode = ins[top - 4 : top]
        flags = ins[top - 8 : top - 4]
        b0, b1 = L.operand0_bits, L.operand1_bits
        op0 = ins[0:b0]
        op1 = ins[b0 : b0 + b1]
        op2 = ins[b0 + b1 : b0 + b1 + L.operand2_bits]
        a0, a1, s0, s1 = L.operand0_address_bits, L.operand1_address_bits, L.stride0_bits, L.stride1_bits
        addr0, stride0 = op0[0:a0], op0[a0 : a0 + s0] if s0 else Const(0, 1)
        addr1, stride1 = op1[0:a1], op1[a1 : a1 + s1] if s1 else Const(0, 1)
        size_field = op2[0 : L.size_bits]
        r = L.simd_operand_bits

        m.submodules.compute_queue = cq = SyncFIFOBuffered(width=compute_command(cfg).size, depth=cfg.compute_queue_depth)
        m.submodules.dram_queue = dq = SyncFIFOBuffered(width=dram_command(cfg).size, depth=cfg.dram_queue_depth)
        m.d.comb += [
            self.compute_cmd.eq(cq.r_data), self.compute_valid.eq(cq.r_rdy), cq.r_en.eq(self.compute_ready),
            self.dram_cmd.eq(dq.r_data), self.dram_valid.eq(dq.r_rdy), dq.r_en.eq(self.dram_ready),
        ]

        # --- configuration registers ------------------------------------------------------------
        regs = self.registers
        dram_offset = [regs["dram0_offset"], regs["dram1_offset"]]
        dram_cache = [regs["dram0_cache"], regs["dram1_cache"]]
        timeout_limit = regs["timeout"]
        tracepoint = regs["tracepoint"]

        # --- what the instruction is -----------------------------------------------------------
        is_matmul = opcode == Opcode.MATMUL
        is_load = opcode == Opcode.LOADWEIGHTS
        is_move = opcode == Opcode.DATAMOVE
        is_simd = opcode == Opcode.SIMD
        is_config = opcode == Opcode.CONFIGURE
        is_noop = opcode == Opcode.NOOP
        dram_move = is_move & (flags < 4)
        acc_move = is_move & ((flags == DataFlow.ACC_TO_LOCAL) | (flags == DataFlow.LOCAL_TO_ACC)
                              | (flags == DataFlow.LOCAL_TO_ACC_ACCUMULATE))
        to_compute = is_matmul | is_load | is_simd | acc_move
        known = to_compute | dram_move | is_config | is_noop

        # Local-memory range and locks.
        count_m1 = Mux(is_load, addr1, size_field)
        reads_local = ((is_matmul & ~flags[1]) | (is_load & ~flags[0]) | (is_move & ((flags == DataFlow.LOCAL_TO_DRAM0)
                       | (flags == DataFlow.LOCAL_TO_DRAM1) | (flags == DataFlow.LOCAL_TO_ACC)
                       | (flags == DataFlow.LOCAL_TO_ACC_ACCUMULATE))))
        writes_local = is_move & ((flags == DataFlow.DRAM0_TO_LOCAL) | (flags == DataFlow.DRAM1_TO_LOCAL)
                                  | (flags == DataFlow.ACC_TO_LOCAL))
        first = addr0
        last = Signal(a0 + L.size_bits + (1 << max(1, s0)) + 1)
        m.d.comb += last.eq(first + (count_m1 << stride0))
        # Region r holds addresses [r * region, (r + 1) * region): the range touches it when it starts
        # before its end and ends at or after its start.
        region = cfg.lock_region
        touched = [((first < (r + 1) * region) if r < cfg.local_locks - 1 else 1) & (last >= r * region)
                   for r in range(cfg.local_locks)]
        lock = Signal(cfg.lock_bits)
        m.d.comb += lock.eq(Cat(*[Cat(t & reads_local, t & writes_local) for t in touched]))

        held = {lane: [Signal(LOCK_COUNTER_BITS, name=f"{lane}_lock_{i}") for i in range(cfg.lock_bits)]
                for lane in ("compute", "dram")}

        def conflicts(other):
            clash = 0
            for r, t in enumerate(touched):
                readers, writers = held[other][2 * r] != 0, held[other][2 * r + 1] != 0
                clash = clash | (t & (writers | (writes_local & readers)))
            return clash & (reads_local | writes_local)

        go = Signal()
        with m.If(to_compute):
            m.d.comb += go.eq(cq.w_rdy & ~conflicts("dram"))
        with m.Elif(dram_move):
            m.d.comb += go.eq(dq.w_rdy & ~conflicts("compute"))
        with m.Else():
            m.d.comb += go.eq(1)
        accept = Signal()
        m.d.comb += [accept.eq(self.instruction_valid & go), self.instruction_ready.eq(go)]

        # --- commands ---------------------------------------------------------------------------
        compute = Signal(compute_command(cfg))
        kind = Mux(is_matmul, ComputeKind.MATMUL, Mux(is_load, ComputeKind.LOAD_WEIGHTS, Mux(is_simd, ComputeKind.SIMD,
                   Mux(flags == DataFlow.ACC_TO_LOCAL, ComputeKind.ACC_TO_LOCAL, ComputeKind.LOCAL_TO_ACC))))
        m.d.comb += [
            compute.kind.eq(kind),
            compute.local_addr.eq(addr0),
            compute.local_stride.eq(stride0),
            compute.acc_addr.eq(Mux(is_simd, op0, addr1)),
            compute.acc_stride.eq(Mux(is_simd, 0, stride1)),
            compute.read_addr.eq(op1),
            compute.count_m1.eq(Mux(is_simd, 0, count_m1)),
            compute.accumulate.eq(Mux(is_matmul, flags[0], Mux(is_simd, flags[2], flags == DataFlow.LOCAL_TO_ACC_ACCUMULATE))),
            compute.zeroes.eq(Mux(is_matmul, flags[1], is_load & flags[0])),
            compute.read.eq(flags[0]),
            compute.write.eq(flags[1]),
            compute.lock.eq(lock),
        ]
        if r:
            m.d.comb += [
                compute.dest.eq(op2[0:r]), compute.right.eq(op2[r : 2 * r]), compute.left.eq(op2[2 * r : 3 * r]),
                compute.op.eq(op2[3 * r : 3 * r + 4]),
            ]
        else:
            m.d.comb += compute.op.eq(op2[0:4])
        dram = Signal(dram_command(cfg))
        which = flags[1]  # 0, 1: DRAM0; 2, 3: DRAM1
        m.d.comb += [
            dram.to_local.eq(~flags[0]),
            dram.dram.eq(which),
            dram.local_addr.eq(addr0),
            dram.local_stride.eq(stride0),
            dram.dram_addr.eq(Mux(which, dram_offset[1], dram_offset[0]) + addr1 * cfg.vector_bytes),
            dram.dram_stride.eq(stride1),
            dram.count_m1.eq(size_field),
            dram.cache.eq(Mux(which, dram_cache[1], dram_cache[0])),
            dram.lock.eq(lock),
            cq.w_data.eq(compute),
            cq.w_en.eq(accept & to_compute),
            dq.w_data.eq(dram),
            dq.w_en.eq(accept & dram_move),
            self.compute_queued.eq(accept & to_compute),
            self.dram_queued.eq(accept & dram_move),
        ]

        # --- lock counters: taken when queued, given back by the lanes --------------------------
        for lane, release in (("compute", self.compute_release), ("dram", self.dram_release)):
            taken = accept & (to_compute if lane == "compute" else dram_move)
            for i, counter in enumerate(held[lane]):
                m.d.sync += counter.eq(counter + (taken & lock[i]) - release[i])

        # --- Configure and the program counter --------------------------------------------------
        whole = ins[0 : top - 8]
        register = whole[0:4]
        value = whole[4:36]
        pc_written = Signal()
        with m.If(accept & is_config):
            with m.Switch(register):
                with m.Case(ConfigRegister.DRAM0_OFFSET):
                    m.d.sync += dram_offset[0].eq(value << 16)
                with m.Case(ConfigRegister.DRAM0_CACHE):
                    m.d.sync += dram_cache[0].eq(value)
                with m.Case(ConfigRegister.DRAM1_OFFSET):
                    m.d.sync += dram_offset[1].eq(value << 16)
                with m.Case(ConfigRegister.DRAM1_CACHE):
                    m.d.sync += dram_cache[1].eq(value)
                with m.Case(ConfigRegister.TIMEOUT):
                    m.d.sync += timeout_limit.eq(value)
                with m.Case(ConfigRegister.TRACEPOINT):
                    m.d.sync += tracepoint.eq(value)
                with m.Case(ConfigRegister.PROGRAM_COUNTER):
                    m.d.sync += self.program_counter.eq(value)
                    m.d.comb += pc_written.eq(1)
                with m.Case(ConfigRegister.SAMPLE_INTERVAL):
                    m.d.sync += self.sample_interval.eq(value)
        with m.If(accept & ~pc_written):  # writing the counter wins over counting
            m.d.sync += self.program_counter.eq(self.program_counter + 1)
        with m.If(accept & ~known):
            m.d.sync += self.error.eq(1)

        timer = Signal(16)
        with m.If(~self.instruction_valid | accept):
            m.d.sync += timer.eq(0)
        with m.Elif(timer < timeout_limit):
            m.d.sync += timer.eq(timer + 1)
        m.d.comb += [
            self.timeout.eq(timer == timeout_limit),
            self.tracepoint.eq(self.program_counter == tracepoint),
            self.idle.eq(~self.instruction_valid & (cq.level == 0) & (dq.level == 0) & self.lanes_idle),
        ]
        return m
