"""The compute lane: MatMul, LoadWeights, SIMD and the moves between local memory and accumulators.

Every instruction becomes *slots*, one vector each, issued in order at most one a clock into a
pipeline of fixed depth ``D = 2N`` that ends at the accumulators:

- stage 0 (issue): a MatMul or LoadWeights slot reads its vector from local memory (port A);
- stage 1: that vector enters the systolic array, or shifts into its weights;
- stage D-1: the accumulator (and, for a local->accumulator move, local memory) is read;
- stage D: the array's result (2N-1 clocks after stage 1), the local vector or the SIMD ALUs'
  result is written to the accumulators, registers or local memory.

Because every slot reaches the accumulators exactly D clocks after it issued, the accumulators
see the program's order without any hazard logic; the accumulator memory's read port is
transparent, so a slot reads what the slot one clock ahead wrote. Only three things stall issue:

- local memory port A serves one access a clock: a slot whose late access (a move's read at
  D-1 or write at D) would meet another's waits, and an early read waits for a free clock;
- a vector read from local memory must not overtake an accumulator->local write still in the
  pipeline (early reads wait until no such write is in flight);
- LoadWeights waits until the last MatMul vector has passed every processing element
  (``RtlConfig.weight_drain`` clocks after it issued).

A SIMD instruction that both reads and accumulates into the accumulators needs two accumulator
reads and takes two slots (the first fetches its input).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Elaboratable, Module, Mux, Signal
from amaranth.lib import data
from amaranth.lib.memory import Memory

from systolix.rtl.alu import simd_alu
from systolix.rtl.arith import Arith
from systolix.rtl.array import SystolicArray, output_delay
from systolix.rtl.commands import ComputeKind, acc_bits, compute_command, local_bits, register_bits
from systolix.rtl.config import RtlConfig


def slot_layout(cfg: RtlConfig) -> data.StructLayout:
    return data.StructLayout({
        "valid": 1,
        "kind": 3,
        "zeroes": 1,
        "local_addr": local_bits(cfg),
        "acc_raddr": acc_bits(cfg),
        "acc_waddr": acc_bits(cfg),
        "accumulate": 1,
        "write": 1,
        "read": 1,
        "fetch": 1,  # first slot of a two-slot SIMD: only reads its input
        "two_slots": 1,
        "op": 4,
        "left": register_bits(cfg),
        "right": register_bits(cfg),
        "dest": register_bits(cfg),
        "last": 1,
        "lock": cfg.lock_bits,
    })


class ComputeLane(Elaboratable):
    def __init__(self, cfg: RtlConfig):
        self.cfg = cfg
        nw = cfg.vector_bits
        self.cmd = Signal(compute_command(cfg))
        self.cmd_valid = Signal()
        self.cmd_ready = Signal()
        # Local memory, port A.
        self.local_addr = Signal(local_bits(cfg))
        self.local_rdata = Signal(nw)
        self.local_wdata = Signal(nw)
        self.local_we = Signal()
        self.local_active = Signal()
        self.release = Signal(cfg.lock_bits)
        self.idle = Signal()
        # What the performance sampler watches.
        self.array_active = Signal()
        self.acc_active = Signal()
        self.depth = cfg.array_latency
        assert output_delay(cfg.n) + 1 == self.depth

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        n, w = cfg.n, cfg.scalar_bits
        D = self.depth
        lb, ab = local_bits(cfg), acc_bits(cfg)
        arith = Arith.of(cfg.data_type)
        m.submodules.array = array = SystolicArray(cfg)

        def lane(vector, k):
            return vector[k * w : (k + 1) * w]

        # --- accumulators -------------------------------------------------------------------
        m.submodules.accumulators = acc_mem = Memory(shape=cfg.vector_bits, depth=cfg.arch.accumulator_depth, init=[])
        acc_w = acc_mem.write_port()
        acc_r = acc_mem.read_port(transparent_for=(acc_w,))

        # --- the pipeline registers: stage[s] holds the slot issued s clocks ago ------------
        layout = slot_layout(cfg)
        stage = [None] + [Signal(layout, name=f"stage_{s}") for s in range(1, D + 1)]
        for s in range(1, D):
            m.d.sync += stage[s + 1].eq(stage[s])
        # Port A reservations: reserved[d] means a late access will use port A d clocks from now.
        reserved = Signal(D + 1)
        a2l_in_flight = Signal(range(D + 2))
        in_flight = Signal(range(D + 2))
        drain = Signal(range(max(2, cfg.weight_drain)))

        # --- issue (stage 0) -----------------------------------------------------------------
        head = self.cmd
        vector = Signal(cfg.layout.size_bits)
        fetched = Signal()  # a two-slot SIMD has issued its fetch slot
        kind = head.kind
        is_mm = kind == ComputeKind.MATMUL
        is_lw = kind == ComputeKind.LOAD_WEIGHTS
        is_simd = kind == ComputeKind.SIMD
        is_a2l = kind == ComputeKind.ACC_TO_LOCAL
        is_l2a = kind == ComputeKind.LOCAL_TO_ACC
        local_step = Signal(lb)
        m.d.comb += local_step.eq(Mux(is_lw, head.count_m1 - vector, vector) << head.local_stride)
        acc_step = Signal(ab)
        m.d.comb += acc_step.eq(vector << head.acc_stride)
        local_addr = Signal(lb)
        acc_addr = Signal(ab)
        m.d.comb += [local_addr.eq(head.local_addr + local_step), acc_addr.eq(head.acc_addr + acc_step)]
        two_slots = is_simd & head.read & head.write & head.accumulate
        fetch = two_slots & ~fetched
        early_read = (is_mm | is_lw) & ~head.zeroes
        last = Mux(is_simd, ~fetch, vector == head.count_m1)

        blocked = (
            (early_read & (reserved[0] | (a2l_in_flight != 0)))
            | (is_lw & (drain != 0))
            | (is_a2l & reserved[D])
            | (is_l2a & reserved[D - 1])
        )
        issue = Signal()
        m.d.comb += issue.eq(self.cmd_valid & ~blocked)
        m.d.comb += self.cmd_ready.eq(issue & last)

        slot = Signal(layout)
        m.d.comb += [
            slot.valid.eq(issue),
            slot.kind.eq(kind),
            slot.zeroes.eq(head.zeroes),
            slot.local_addr.eq(local_addr),
            slot.acc_waddr.eq(acc_addr),
            slot.accumulate.eq(head.accumulate),
            slot.write.eq(head.write),
            slot.read.eq(head.read),
            slot.fetch.eq(fetch),
            slot.two_slots.eq(two_slots),
            slot.op.eq(head.op),
            slot.left.eq(head.left),
            slot.right.eq(head.right),
            slot.dest.eq(head.dest),
            slot.last.eq(last),
            slot.lock.eq(Mux(last, head.lock, 0)),
            # SIMD reads its input (fetch, or a one-slot read) or the value it accumulates onto.
            slot.acc_raddr.eq(Mux(is_simd & (fetch | (head.read & ~two_slots)), head.read_addr, acc_addr)),
        ]
        m.d.sync += stage[1].eq(slot)
        with m.If(issue):
            with m.If(last):
                m.d.sync += [vector.eq(0), fetched.eq(0)]
            with m.Elif(fetch):
                m.d.sync += fetched.eq(1)
            with m.Else():
                m.d.sync += vector.eq(vector + 1)

        # Reservations shift towards now; a late access issued now is d clocks away.
        late = Signal(D + 1)
        m.d.comb += late.eq(Cat(reserved[1:], 0) | Mux(issue & is_a2l, 1 << (D - 1), 0) | Mux(issue & is_l2a, 1 << (D - 2), 0))
        m.d.sync += reserved.eq(late)
        with m.If(issue & is_mm):
            m.d.sync += drain.eq(cfg.weight_drain - 1)
        with m.Elif(drain != 0):
            m.d.sync += drain.eq(drain - 1)
        done = stage[D]
        m.d.sync += a2l_in_flight.eq(a2l_in_flight + (issue & is_a2l) - (done.valid & (done.kind == ComputeKind.ACC_TO_LOCAL)))
        m.d.sync += in_flight.eq(in_flight + issue - done.valid)
        m.d.comb += self.idle.eq(~self.cmd_valid & (in_flight == 0))

        # --- stage 1: into the array ------------------------------------------------------------
        first = stage[1]
        fed = first.valid & ~first.zeroes
        m.d.comb += [
            array.x.eq(Mux(fed & (first.kind == ComputeKind.MATMUL), self.local_rdata, 0)),
            array.shift.eq(first.valid & (first.kind == ComputeKind.LOAD_WEIGHTS)),
            array.shift_data.eq(Mux(fed, self.local_rdata, 0)),
            self.array_active.eq(first.valid & ((first.kind == ComputeKind.MATMUL) | (first.kind == ComputeKind.LOAD_WEIGHTS))),
        ]

        # --- stage D-1: read the accumulators ---------------------------------------------------
        before = stage[D - 1]
        m.d.comb += acc_r.addr.eq(before.acc_raddr)

        # --- port A: one access a clock (the reservations keep them apart) ----------------------
        a2l_write = done.valid & (done.kind == ComputeKind.ACC_TO_LOCAL)
        l2a_read = before.valid & (before.kind == ComputeKind.LOCAL_TO_ACC)
        m.d.comb += [
            self.local_addr.eq(Mux(a2l_write, done.local_addr, Mux(l2a_read, before.local_addr, local_addr))),
            self.local_we.eq(a2l_write),
            self.local_wdata.eq(acc_r.data),
            self.local_active.eq(a2l_write | l2a_read | (issue & early_read)),
        ]

        # --- stage D: compute and write ---------------------------------------------------------
        # SIMD registers and the fetched input are data: no reset (see array.py).
        regs = [[Signal(w, name=f"reg{r + 1}_{k}", reset_less=True) for k in range(n)]
                for r in range(cfg.arch.simd_registers_depth)]
        held = Signal(cfg.vector_bits, reset_less=True)
        is_exec = done.valid & (done.kind == ComputeKind.SIMD) & ~done.fetch
        with m.If(done.valid & done.fetch):
            m.d.sync += held.eq(acc_r.data)
        write_data = Signal(cfg.vector_bits)
        for k in range(n):
            old = lane(acc_r.data, k)
            inp = Mux(done.two_slots, lane(held, k), Mux(done.read, old, 0))

            def operand(select, k=k, inp=inp):
                value = inp
                for r, reg in enumerate(regs):
                    value = Mux(select == r + 1, reg[k], value)
                return value

            result = simd_alu(m, arith, done.op, inp, operand(done.left), operand(done.right), f"alu_{k}")
            with m.If(is_exec & (done.dest != 0) & (done.op != 0)):
                for r, reg in enumerate(regs):
                    with m.If(done.dest == r + 1):
                        m.d.sync += reg[k].eq(result)
            value = Signal(w, name=f"value_{k}")
            m.d.comb += value.eq(Mux(done.kind == ComputeKind.MATMUL, lane(array.y, k),
                                     Mux(done.kind == ComputeKind.LOCAL_TO_ACC, lane(self.local_rdata, k), result)))
            total = arith.add(m, old, value, f"acc_add_{k}")
            m.d.comb += lane(write_data, k).eq(Mux(done.accumulate, total, value))
        m.d.comb += [
            acc_w.addr.eq(done.acc_waddr),
            acc_w.data.eq(write_data),
            acc_w.en.eq(done.valid & ((done.kind == ComputeKind.MATMUL) | (done.kind == ComputeKind.LOCAL_TO_ACC)
                                      | (is_exec & done.write))),
            self.release.eq(Mux(done.valid, done.lock, 0)),
            self.acc_active.eq(done.valid),
        ]
        return m
