"""The timing simulator: a decoded program, issued in order to the units it occupies.

The model follows Tensil's RTL (``Decoder.scala``, ``SystolicArray.scala``,
``AccumulatorWithALUArray.scala``, ``axi/Converter.scala``, ``mutex/LockPool.scala``):

- The decoder dispatches at most one instruction per clock, in program order, into per-unit
  command queues; it stalls when a queue is full (DRAM queues hold ~2 instructions, the array,
  accumulator and local-router queues 2N).
- The decoder holds an instruction that uses a local-memory port until its last vector has
  passed that port (the decoder rule): ``MultiEnqueue`` dispatches only when every target
  took the instruction, and the port's ``SizeAndStrideHandler`` takes a request only with its
  last vector (a write only with its data, ``DualPortMem.scala``). So MatMul, LoadWeights and
  accumulator moves hold it for their vectors, a DRAM load until its last vector arrived, a save
  until its last vector left local memory: port instructions never overlap one another; only
  the work queued behind them without a port (SIMD, the array's fill, a save's round trip) does.
- Units: the DRAM0 and DRAM1 AXI ports; local memory port A (MatMul, LoadWeights and
  accumulator moves) and port B (every DRAM move, through the host router); the systolic
  array; the accumulators with the SIMD ALUs.
- MatMul streams one vector a clock through port A and the array; its results reach the
  accumulators ``2N`` clocks later (the array's propagation delay), so back-to-back MatMuls
  stream, but a LoadWeights waits until the last input has left the array and a SIMD or move
  on the accumulators waits for the results. LoadWeights moves ``size + 1`` vectors, one a clock.
- SIMD takes one accumulator clock, two when it both reads and writes (the accumulator
  reads first, then writes). Accumulator moves take one clock a vector.
- A DRAM move costs ``bytes / (bytes per clock x efficiency)`` plus a fixed cost per AXI
  request (one per vector when the DRAM stride is not 1, else one per burst of at most
  4 KiB), holds its DRAM port and local port B for that time, and completes one round-trip
  latency later. A port drains its reads before it writes and the other way round.
- The Tandem vector unit (on an architecture with it; ``docs/tandem.md``) is a unit of its own
  with its own queue (``tandem.queue_depth``): it overlaps the array and the memories, and only
  its sync instructions order it against them. ``TSync to_unit``: the unit's next instruction
  waits until every earlier TCU instruction is done; ``TSync to_array``: the decoder stops
  until every earlier unit instruction is done; ``TSync release buf=k`` marks the point of the
  unit's stream where buffer ``k`` is handed back, and ``TSync wait buf=k`` stops the decoder
  until the unit has reached the latest such mark. Each instruction costs its clocks per vector
  (``tandem_cycles``) times the iterations of the loops around it, as one block of work.
- An instruction also waits for earlier instructions whose memory ranges it depends on
  (read after write, write after read, write after write, tracked per vector in local memory,
  the accumulators and both DRAMs), and, as Tensil's lock pool does, for the previous request
  of the other local port on the same half of local memory to have started.

The kernel is compiled with numba; it runs in time linear in instructions plus vectors moved.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from systolix.arch import Architecture, Board
from systolix.isa.codec import DecodedProgram

# Units, in the order of every per-unit array.
UNITS = ("decoder", "dram0", "dram1", "port_a", "port_b", "array", "acc")
UNIT_LABELS = {
    "decoder": "instruction issue",
    "dram0": "DRAM0 port",
    "dram1": "DRAM1 port",
    "port_a": "local port A",
    "port_b": "local port B",
    "array": "systolic array",
    "acc": "accumulators + SIMD",
}
U_DEC, U_D0, U_D1, U_PA, U_PB, U_ARR, U_ACC = range(7)
# The Tandem unit: busy[U_TAN] of every timeline (reported only for architectures with the unit).
TANDEM_UNIT = "tandem"
U_TAN = 7
N_UNITS = 8
ALL_UNIT_LABELS = {**UNIT_LABELS, TANDEM_UNIT: "Tandem vector unit"}

# Indices into the parameter vector the kernel reads.
P_N, P_FILL, P_VEC_BYTES, P_BYTES_PER_CYCLE, P_REQ_CYCLES, P_LAT_CYCLES, P_BURST_VECTORS, \
    P_ISSUE, P_LOCAL_HALF, P_Q_DRAM, P_Q_COMPUTE, P_LOCKS, P_DRAIN, P_Q_TANDEM = range(14)
N_PARAMS = 14
MAX_QUEUE = 1024


@dataclass(frozen=True)
class TimingParameters:
    """Everything the kernel needs, in accelerator clocks, derived from a board."""

    array_size: int
    fill_cycles: float
    vector_bytes: int
    bytes_per_cycle: float
    request_cycles: float
    latency_cycles: float
    burst_vectors: int
    issue_cycles: float
    local_half: int
    dram_queue_depth: int
    compute_queue_depth: int
    local_locks: bool = True
    drain_on_turnaround: bool = True
    tandem_queue_depth: int = 1

    @classmethod
    def of(cls, board: Board, arch: Architecture | None = None) -> "TimingParameters":
        arch = arch or board.architecture
        n = arch.array_size
        cycles_per_ns = board.clock_mhz / 1e3
        max_burst = min(board.dram_max_burst_bytes, 256 * board.dram_bus_bits // 8)
        return cls(
            array_size=n,
            # SystolicArray.scala: arrayPropagationDelay = height + width - 1, plus one clock
            # through the accumulator's input queue.
            fill_cycles=float(2 * n),
            vector_bytes=arch.vector_bytes,
            bytes_per_cycle=board.bytes_per_cycle * board.dram_efficiency,
            request_cycles=board.dram_request_ns * cycles_per_ns,
            latency_cycles=board.dram_latency_ns * cycles_per_ns,
            burst_vectors=max(1, max_burst // arch.vector_bytes),
            issue_cycles=board.issue_cycles,
            # LockPool: two locks, each over one half of local memory.
            local_half=max(1, arch.local_depth // 2),
            # Decoder.scala: DRAM and host-router queues hold one command plus the lock
            # pool's two-deep actor queue; the array, accumulator and router queues 2N.
            dram_queue_depth=2,
            compute_queue_depth=min(MAX_QUEUE, 2 * n),
            tandem_queue_depth=arch.tandem.queue_depth if arch.tandem is not None else 1,
        )

    def vector(self) -> np.ndarray:
        p = np.zeros(N_PARAMS, dtype=np.float64)
        p[P_N] = self.array_size
        p[P_FILL] = self.fill_cycles
        p[P_VEC_BYTES] = self.vector_bytes
        p[P_BYTES_PER_CYCLE] = self.bytes_per_cycle
        p[P_REQ_CYCLES] = self.request_cycles
        p[P_LAT_CYCLES] = self.latency_cycles
        p[P_BURST_VECTORS] = self.burst_vectors
        p[P_ISSUE] = self.issue_cycles
        p[P_LOCAL_HALF] = self.local_half
        p[P_Q_DRAM] = self.dram_queue_depth
        p[P_Q_COMPUTE] = self.compute_queue_depth
        p[P_LOCKS] = 1.0 if self.local_locks else 0.0
        p[P_DRAIN] = 1.0 if self.drain_on_turnaround else 0.0
        p[P_Q_TANDEM] = self.tandem_queue_depth
        return p


@dataclass
class Timeline:
    """Per-instruction times (accelerator clocks) and per-unit busy totals."""

    issue: np.ndarray  # when the decoder dispatched it
    start: np.ndarray  # when its main unit began its work
    end: np.ndarray  # when its main unit finished (for MatMul: the array; DRAM moves: the port)
    done: np.ndarray  # when its results are in place (after the array fill or DRAM latency)
    busy: np.ndarray  # clocks each unit was busy, indexed like UNITS
    cycles: float  # when the last instruction completed
    params: TimingParameters
    stalls: dict[str, int] | None = None  # clocks lost by cause (the rtl board's model counts them)

    def __len__(self) -> int:
        return int(self.issue.shape[0])


@numba.njit(cache=True)
def _after(ready, addr, stride, n, offset, rate):
    """Earliest start so that vector k (touched at start + offset + k*rate) comes after ready[a_k].

    Per-vector chaining: a consumer may start before its producer has finished, as long as
    it never reaches a vector before the producer is done with it (the queues between
    Tensil's units stream vector by vector).
    """
    m = 0.0
    a = addr
    top = ready.shape[0]
    for k in range(n):
        if 0 <= a < top:
            v = ready[a] - offset - k * rate
            if v > m:
                m = v
        a += stride
    return m


@numba.njit(cache=True)
def _mark(ready, addr, stride, n, base, rate):
    """Vector k of the range is done at base + (k+1)*rate."""
    a = addr
    top = ready.shape[0]
    for k in range(n):
        if 0 <= a < top:
            v = base + (k + 1) * rate
            if ready[a] < v:
                ready[a] = v
        a += stride


@numba.njit(cache=True)
def _queue_slot(ring, count, unit, depth):
    # Start time of the instruction `depth` places earlier on this unit: until it has left
    # the queue, the decoder cannot enqueue another one.
    if count[unit] < depth:
        return 0.0
    return ring[unit, (count[unit] - depth) % ring.shape[1]]


@numba.njit(cache=True)
def _queue_push(ring, count, unit, t):
    ring[unit, count[unit] % ring.shape[1]] = t
    count[unit] += 1


@numba.njit(cache=True)
def _simulate(opcode, flags, addr0, stride0, addr1, stride1, size, op0, op1, p,
              local_depth, acc_depth, dram0_depth, dram1_depth, tandem_cost, sync_buf):
    n_instr = opcode.shape[0]
    issue = np.zeros(n_instr)
    start = np.zeros(n_instr)
    end = np.zeros(n_instr)
    done = np.zeros(n_instr)
    busy = np.zeros(N_UNITS)
    q_tandem = int(p[P_Q_TANDEM])
    tcu_done = 0.0  # when every TCU instruction so far is done
    unit_done = 0.0  # when every Tandem instruction so far is done
    unit_gate = 0.0  # the unit starts nothing before this (TSync to_unit)
    released = np.zeros(4)  # when the unit reached the latest TSync release of each buffer

    fill = p[P_FILL]
    vec_bytes = p[P_VEC_BYTES]
    bpc = p[P_BYTES_PER_CYCLE]
    req_cycles = p[P_REQ_CYCLES]
    lat = p[P_LAT_CYCLES]
    burst = int(p[P_BURST_VECTORS])
    issue_cycles = p[P_ISSUE]
    half = int(p[P_LOCAL_HALF])
    q_dram = int(p[P_Q_DRAM])
    q_comp = int(p[P_Q_COMPUTE])
    use_locks = p[P_LOCKS] != 0.0
    drain = p[P_DRAIN] != 0.0

    # Per-vector readiness: when the last write completes / the last read ends.
    local_w = np.zeros(local_depth)
    local_r = np.zeros(local_depth)
    acc_w = np.zeros(acc_depth)
    acc_r = np.zeros(acc_depth)
    d0_w = np.zeros(dram0_depth)
    d0_r = np.zeros(dram0_depth)
    d1_w = np.zeros(dram1_depth)
    d1_r = np.zeros(dram1_depth)

    free = np.zeros(N_UNITS)  # when each unit can take new work
    array_load_free = 0.0  # when the last MatMul input has left the array
    dram_read_done = np.zeros(2)
    dram_write_done = np.zeros(2)
    # LockPool: last request start per (port, half of local memory).
    lock_start = np.zeros((2, 2))
    ring = np.zeros((N_UNITS, MAX_QUEUE))
    count = np.zeros(N_UNITS, dtype=np.int64)

    t_issue = 0.0
    last_done = 0.0
    for i in range(n_instr):
        op = opcode[i]
        f = flags[i]
        n = size[i] + 1
        la = addr0[i]
        ls = 1 << stride0[i]
        ra = addr1[i]
        rs = 1 << stride1[i]
        t = t_issue
        held = 0.0  # when the decoder lets go of a local-port instruction (the decoder rule)
        if op == 1:  # MatMul
            zeroes = (f & 2) != 0
            accumulate = (f & 1) != 0
            t = max(t, _queue_slot(ring, count, U_ARR, q_comp), _queue_slot(ring, count, U_ACC, q_comp))
            issue[i] = t
            s = max(t, free[U_ARR], free[U_ACC] - fill)
            if not zeroes:
                s = max(s, free[U_PA], _after(local_w, la, ls, n, 0.0, 1.0))
                s = max(s, lock_start[1, min(1, la // half)] * use_locks)
            # Results reach the accumulators `fill` clocks after their input entered the array.
            s = max(s, _after(acc_w, ra, rs, n, fill, 1.0), _after(acc_r, ra, rs, n, fill, 1.0))
            e = s + n
            d = e + fill
            free[U_ARR] = e
            array_load_free = e + fill - 1
            free[U_ACC] = d
            busy[U_ARR] += n
            busy[U_ACC] += n
            if not zeroes:
                free[U_PA] = e
                busy[U_PA] += n
                _mark(local_r, la, ls, n, s, 1.0)
                lock_start[0, min(1, la // half)] = s
                _queue_push(ring, count, U_PA, s)
                held = e
            if accumulate:
                _mark(acc_r, ra, rs, n, s + fill, 1.0)
            _mark(acc_w, ra, rs, n, s + fill, 1.0)
            _queue_push(ring, count, U_ARR, s)
            _queue_push(ring, count, U_ACC, s)
        elif op == 3:  # LoadWeights: the size is in operand 1
            n = ra + 1
            zeroes = (f & 1) != 0
            top = la + (n - 1) * ls  # Tensil reads the weights last address first
            t = max(t, _queue_slot(ring, count, U_ARR, q_comp))
            issue[i] = t
            s = max(t, free[U_ARR], array_load_free)
            if not zeroes:
                s = max(s, free[U_PA], _after(local_w, top, -ls, n, 0.0, 1.0))
                s = max(s, lock_start[1, min(1, top // half)] * use_locks)
            e = s + n
            d = e
            free[U_ARR] = e
            array_load_free = e
            busy[U_ARR] += n
            if not zeroes:
                free[U_PA] = e
                busy[U_PA] += n
                _mark(local_r, top, -ls, n, s, 1.0)
                lock_start[0, min(1, top // half)] = s
                _queue_push(ring, count, U_PA, s)
                held = e
            _queue_push(ring, count, U_ARR, s)
        elif op == 2 and (f == 12 or f == 13 or f == 15):  # accumulators <-> local memory
            t = max(t, _queue_slot(ring, count, U_ACC, q_comp), _queue_slot(ring, count, U_PA, q_comp))
            issue[i] = t
            s = max(t, free[U_PA], free[U_ACC])
            s = max(s, lock_start[1, min(1, la // half)] * use_locks)
            # One clock through the accumulator's output register between read and write.
            if f == 12:
                s = max(s, _after(acc_w, ra, rs, n, 0.0, 1.0))
                s = max(s, _after(local_w, la, ls, n, 1.0, 1.0), _after(local_r, la, ls, n, 1.0, 1.0))
            else:
                s = max(s, _after(local_w, la, ls, n, 0.0, 1.0))
                s = max(s, _after(acc_w, ra, rs, n, 1.0, 1.0), _after(acc_r, ra, rs, n, 1.0, 1.0))
            e = s + n
            d = e + 1.0
            free[U_PA] = e
            free[U_ACC] = e
            busy[U_PA] += n
            busy[U_ACC] += n
            lock_start[0, min(1, la // half)] = s
            # A local write takes each vector as the accumulators deliver it.
            held = d if f == 12 else e
            if f == 12:
                _mark(acc_r, ra, rs, n, s, 1.0)
                _mark(local_w, la, ls, n, s + 1.0, 1.0)
            else:
                _mark(local_r, la, ls, n, s, 1.0)
                if f == 15:
                    _mark(acc_r, ra, rs, n, s + 1.0, 1.0)
                _mark(acc_w, ra, rs, n, s + 1.0, 1.0)
            _queue_push(ring, count, U_PA, s)
            _queue_push(ring, count, U_ACC, s)
        elif op == 2:  # DRAM <-> local memory
            port = 0 if f <= 1 else 1
            unit = U_D0 + port
            to_local = f == 0 or f == 2
            if rs != 1:
                requests = n  # Tensil's StrideHandler: one AXI request per vector
            else:
                requests = (ra + n - 1) // burst - ra // burst + 1
            xfer = n * vec_bytes / bpc + requests * req_cycles
            c = xfer / n
            t = max(t, _queue_slot(ring, count, unit, q_dram), _queue_slot(ring, count, U_PB, q_dram))
            issue[i] = t
            s = max(t, free[unit], free[U_PB])
            s = max(s, lock_start[0, min(1, la // half)] * use_locks)
            if port == 0:
                dw = d0_w
                dr = d0_r
            else:
                dw = d1_w
                dr = d1_r
            if to_local:
                s = max(s, dram_write_done[port] * drain)  # the converter drains writes before reading
                s = max(s, _after(dw, ra, rs, n, 0.0, c))
                s = max(s, _after(local_w, la, ls, n, lat, c), _after(local_r, la, ls, n, lat, c))
            else:
                s = max(s, dram_read_done[port] * drain)  # and reads before writing
                s = max(s, _after(local_w, la, ls, n, 0.0, c))
                s = max(s, _after(dw, ra, rs, n, 0.0, c), _after(dr, ra, rs, n, 0.0, c))
            e = s + xfer
            d = e + lat
            free[unit] = e
            free[U_PB] = e
            busy[unit] += xfer
            busy[U_PB] += xfer
            lock_start[1, min(1, la // half)] = s
            # Port B writes each vector as its data arrives from DRAM.
            held = d if to_local else e
            if to_local:
                dram_read_done[port] = max(dram_read_done[port], d)
                _mark(dr, ra, rs, n, s, c)
                _mark(local_w, la, ls, n, s + lat, c)
            else:
                dram_write_done[port] = max(dram_write_done[port], d)
                _mark(local_r, la, ls, n, s, c)
                _mark(dw, ra, rs, n, s + lat, c)
            _queue_push(ring, count, unit, s)
            _queue_push(ring, count, U_PB, s)
        elif op == 4:  # SIMD on one accumulator vector
            read = (f & 1) != 0
            write = (f & 2) != 0
            accumulate = (f & 4) != 0
            t = max(t, _queue_slot(ring, count, U_ACC, q_comp))
            issue[i] = t
            s = max(t, free[U_ACC])
            wa = op0[i]
            rd = op1[i]
            c = 2.0 if (read and write) else 1.0  # a read-and-write SIMD reads, then writes
            if read and rd < acc_depth:
                s = max(s, acc_w[rd])
            if write and wa < acc_depth:
                s = max(s, acc_w[wa] - c + 1.0, acc_r[wa] - c + 1.0)
            e = s + c
            d = e
            free[U_ACC] = e
            busy[U_ACC] += c
            if read and rd < acc_depth and acc_r[rd] < s + 1.0:
                acc_r[rd] = s + 1.0
            if write and wa < acc_depth:
                if accumulate and acc_r[wa] < e:
                    acc_r[wa] = e
                if acc_w[wa] < e:
                    acc_w[wa] = e
            _queue_push(ring, count, U_ACC, s)
        elif op == 13:  # TSync: orders the unit and the TCU, no work
            if f == 0:  # to_unit: the unit waits for the TCU
                unit_gate = max(unit_gate, tcu_done)
            elif f == 1:  # to_array: the decoder waits for the unit
                t = max(t, unit_done)
            elif f == 2:  # release: a marker in the unit's stream, reached when its work so far is done
                released[sync_buf[i]] = max(t, unit_done, unit_gate)
            else:  # wait: the decoder waits for the buffer's latest release
                t = max(t, released[sync_buf[i]])
            issue[i] = t
            s = t
            e = t
            d = t
        elif 6 <= op <= 12:  # a Tandem instruction (with the iterations of the loops around it)
            t = max(t, _queue_slot(ring, count, U_TAN, q_tandem))
            issue[i] = t
            s = max(t, free[U_TAN], unit_gate)
            c = tandem_cost[i]
            e = s + c
            d = e
            free[U_TAN] = e
            busy[U_TAN] += c
            unit_done = max(unit_done, e)
            _queue_push(ring, count, U_TAN, s)
        else:  # NoOp, Configure, LoadLUT: only the decoder
            issue[i] = t
            s = t
            e = t
            d = t
        if op < 6 or op > 13:
            tcu_done = max(tcu_done, d)
        start[i] = s
        end[i] = e
        done[i] = d
        if d > last_done:
            last_done = d
        busy[U_DEC] += issue_cycles
        t_issue = max(issue[i] + issue_cycles, held)
    return issue, start, end, done, busy, max(last_done, t_issue)


def tandem_cycles(program: DecodedProgram, arch: Architecture, executions: np.ndarray) -> np.ndarray:
    """Clocks each Tandem instruction keeps the unit busy, over all its loop iterations: one
    clock a vector (the ALU, comparisons, casts and lane reductions are pipelined across the
    lanes), a division ``2w`` clocks (one quotient bit a clock), a transpose ``2N`` (N vectors
    into the permute engine, N out), configuration and TLoop one clock (a TLoop each time the loop
    around it replays it), TSync none."""
    from systolix.isa.instructions import Opcode
    from systolix.isa.tandem import TAluOp, TPermuteOp

    op = program.opcode
    f = program.flags
    per = np.ones(len(program))
    per[(op == Opcode.TALU) & (f == TAluOp.DIV)] = 2 * arch.data_type.width
    per[(op == Opcode.TPERMUTE) & (f == TPermuteOp.TRANSPOSE)] = 2 * arch.array_size
    counted = (op >= Opcode.TALU) & (op <= Opcode.TCAST)
    cost = np.where(counted, per * executions, 0.0)
    cost[op == Opcode.TCONFIG] = 1.0
    # A loop inside a loop body is replayed with it: one clock each time. It runs as often as the
    # first instruction of its body, divided by its own iterations (from the innermost out).
    runs = np.asarray(executions, np.float64).copy()
    for i in np.flatnonzero(op == Opcode.TLOOP)[::-1]:
        runs[i] = max(1.0, runs[i + 1] / program.instruction(int(i)).iterations)
        cost[i] = runs[i]
    return cost


def _extent(addr: np.ndarray, stride_log2: np.ndarray, size: np.ndarray, mask: np.ndarray) -> int:
    """One past the highest address the selected instructions touch."""
    if not mask.any():
        return 1
    top = addr[mask] + size[mask] * (np.int64(1) << stride_log2[mask])
    return int(top.max()) + 1


def simulate(program: DecodedProgram, board: Board, arch: Architecture | None = None) -> Timeline:
    """Time a decoded program on a board (``arch`` defaults to the board's architecture)."""
    arch = arch or board.architecture
    if board.timing == "rtl":
        from systolix.perf.rtl_timing import simulate_rtl

        if arch.tandem is not None or ((program.opcode >= 6) & (program.opcode <= 13)).any():
            from systolix.emulator import EmulatorError

            raise EmulatorError("the generated RTL has no Tandem unit (its RTL is not written yet): "
                                "time a program for it on another board")

        return simulate_rtl(program, arch)
    params = TimingParameters.of(board, arch)
    op = program.opcode.astype(np.int64)
    fl = program.flags.astype(np.int64)
    size = program.size.astype(np.int64)
    addr0 = program.addr0.astype(np.int64)
    addr1 = program.addr1.astype(np.int64)
    s0 = program.stride0.astype(np.int64)
    s1 = program.stride1.astype(np.int64)
    is_dm = op == 2
    lw = op == 3
    # Tracking arrays only as large as the program's addresses reach (not the DRAM depths).
    local_extent = _extent(addr0, s0, np.where(lw, addr1, size), (op == 1) | lw | is_dm)
    acc_mask = (op == 1) | (is_dm & (fl >= 12))
    acc_extent = max(_extent(addr1, s1, size, acc_mask), int(program.op0[op == 4].max(initial=0)) + 1,
                     int(program.op1[op == 4].max(initial=0)) + 1)
    d0_extent = _extent(addr1, s1, size, is_dm & (fl <= 1))
    d1_extent = _extent(addr1, s1, size, is_dm & ((fl == 2) | (fl == 3)))
    tandem_cost = np.zeros(len(program))
    sync_buf = np.zeros(len(program), dtype=np.int64)
    if ((op >= 6) & (op <= 13)).any():
        from systolix.emulator import EmulatorError
        from systolix.emulator.tandem import analyse_tandem

        from systolix.emulator.bounds import _describe

        summary = analyse_tandem(program, arch, "program", describe=lambda i: _describe(program, i))
        if summary.violation is not None:
            raise EmulatorError(summary.violation[1])
        tandem_cost = tandem_cycles(program, arch, summary.executions)
        for i in np.flatnonzero(op == 13):
            sync_buf[i] = program.payload(int(i)) & 3
    issue, start, end, done, busy, cycles = _simulate(
        op, fl, addr0, s0, addr1, s1, size,
        program.op0.astype(np.int64), program.op1.astype(np.int64), params.vector(),
        local_extent, acc_extent, d0_extent, d1_extent, tandem_cost, sync_buf,
    )
    return Timeline(issue=issue, start=start, end=end, done=done, busy=busy, cycles=float(cycles), params=params)
