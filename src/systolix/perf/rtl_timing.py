"""The timing of the TCU we generate (``systolix.rtl``), clock by clock: the ``rtl`` board.

This is the RTL's control path written again without its data: the instruction stream, the
decoder with its two command queues (Amaranth's ``SyncFIFOBuffered``: two clocks from write to
read) and the local-memory locks, the compute lane's slot issue (port A reservations, the wait
for accumulator->local writes, the weight drain, two-slot SIMD), its fixed pipeline of ``2N``
clocks, and the DRAM lane's bursts against the co-simulation's DRAM model (``harness.cpp``:
latency, a beat every ``beat_cycles``, gaps). Every rule is the RTL's own, so the cycle count
is the RTL's; ``benchmarks/bench_rtl_timing.py`` checks that on real programs. A clock costs a
few tens of nanoseconds, so a million-clock program takes a fraction of a second.
"""

from __future__ import annotations

import numba
import numpy as np

from systolix.arch import Architecture
from systolix.isa import ConfigRegister, DataFlow, DecodedProgram, Opcode
from systolix.perf.simulator import Timeline, TimingParameters, U_ACC, U_ARR, U_D0, U_D1, U_DEC, U_PA, U_PB

# Compute kinds, as systolix.rtl.commands.ComputeKind.
K_MM, K_LW, K_SIMD, K_A2L, K_L2A = range(5)
STALL_CAUSES = ("lock", "compute queue full", "DRAM queue full", "port A busy", "accumulator->local write in flight",
                "weight drain", "DRAM latency")
S_LOCK, S_COMPUTE_FULL, S_DRAM_FULL, S_PORT_A, S_A2L, S_DRAIN, S_DRAM_WAIT = range(7)
LANE_NONE, LANE_COMPUTE, LANE_DRAM = range(3)
AXI_MAX_BURST = 256
AXI_BOUNDARY = 4096


def decode_for_rtl(program: DecodedProgram, arch: Architecture, lock_region: int, local_locks: int):
    """Per-instruction columns the cycle model reads (lane, kind, locks, DRAM addresses)."""
    op = program.opcode.astype(np.int64)
    f = program.flags.astype(np.int64)
    n_instr = op.shape[0]
    size = program.size.astype(np.int64)
    addr0 = program.addr0.astype(np.int64)
    s0 = program.stride0.astype(np.int64)
    addr1 = program.addr1.astype(np.int64)
    s1 = program.stride1.astype(np.int64)
    is_mm, is_lw, is_dm, is_simd = op == Opcode.MATMUL, op == Opcode.LOADWEIGHTS, op == Opcode.DATAMOVE, op == Opcode.SIMD
    acc_move = is_dm & ((f == DataFlow.ACC_TO_LOCAL) | (f == DataFlow.LOCAL_TO_ACC) | (f == DataFlow.LOCAL_TO_ACC_ACCUMULATE))
    dram_move = is_dm & (f < 4)
    lane = np.where(is_mm | is_lw | is_simd | acc_move, LANE_COMPUTE, np.where(dram_move, LANE_DRAM, LANE_NONE))
    kind = np.select([is_mm, is_lw, is_simd, is_dm & (f == DataFlow.ACC_TO_LOCAL)], [K_MM, K_LW, K_SIMD, K_A2L], K_L2A)
    count_m1 = np.where(is_lw, addr1, np.where(is_simd, 0, size))
    zeroes = np.where(is_mm, (f & 2) != 0, is_lw & ((f & 1) != 0))
    two_slots = is_simd & ((f & 7) == 7)
    reads = (is_mm & ((f & 2) == 0)) | (is_lw & ((f & 1) == 0)) | (is_dm & np.isin(f, [1, 3, 13, 15]))
    writes = is_dm & np.isin(f, [0, 2, 12])
    last = addr0 + (count_m1 << s0)
    lock = np.zeros(n_instr, dtype=np.int64)
    for r in range(local_locks):  # as the decoder: bit 2r reads region r, bit 2r+1 writes it
        touched = (last >= r * lock_region) & ((addr0 < (r + 1) * lock_region) if r < local_locks - 1 else True)
        lock |= (touched & reads).astype(np.int64) << (2 * r) | (touched & writes).astype(np.int64) << (2 * r + 1)
    # DRAM byte addresses with the offset registers as the program set them before each move.
    offsets = np.zeros(2, dtype=np.int64)
    dram_addr = np.zeros(n_instr, dtype=np.int64)
    configure = np.flatnonzero((op == Opcode.CONFIGURE) | dram_move)
    for i in configure:
        if op[i] == Opcode.CONFIGURE:
            instr = program.instruction(int(i))
            if instr.register in (ConfigRegister.DRAM0_OFFSET, ConfigRegister.DRAM1_OFFSET):
                offsets[instr.register // 4] = (int(instr.value) << 16) & 0xFFFFFFFF
        else:
            dram_addr[i] = (offsets[(f[i] >> 1) & 1] + addr1[i] * arch.vector_bytes) & 0xFFFFFFFF
    return (lane.astype(np.int64), kind.astype(np.int64), count_m1, zeroes.astype(np.int64), two_slots.astype(np.int64),
            lock.astype(np.int64), dram_addr, s1, ((f >> 1) & 1).astype(np.int64), (dram_move & ((f & 1) == 0)).astype(np.int64))


@numba.njit(cache=True)
def _fifo_step(inner, head, level, r_rdy, out_item, w_en, w_item, r_en, depth):
    """One clock of Amaranth's SyncFIFOBuffered (depth >= 2): an inner queue of depth-1 entries
    and an output register. Returns (head, level, r_rdy, out_item, written)."""
    cap = inner.shape[0]
    w_rdy = level != depth - 1
    do_write = w_en and w_rdy
    do_inner_read = level != 0 and ((not r_rdy) or r_en)
    new_item = out_item
    new_r_rdy = r_rdy
    new_head = head
    new_level = level
    if do_inner_read:
        new_item = inner[head % cap]
        new_head = head + 1
        new_r_rdy = True
        new_level -= 1
    elif r_en:
        new_r_rdy = False
    if do_write:
        inner[(head + level) % cap] = w_item
        new_level += 1
    return new_head, new_level, new_r_rdy, new_item, do_write


@numba.njit(cache=True)
def _simulate_rtl(lane, kind, count_m1, zeroes, two_slots, lock, dram_addr, dram_stride, dram_port, to_local,
                  n_instr, p_instr_bytes, p_bus_bytes, p_vector_bytes, p_n, p_cq_depth, p_dq_depth, p_outstanding,
                  p_latency, p_write_latency, p_beat_cycles, p_gap, p_locks, max_cycles):
    D = 2 * p_n
    drain_reset = 2 * p_n - 3
    bpv = p_vector_bytes // p_bus_bytes
    size_shift = 0
    while (1 << size_shift) < p_bus_bytes:
        size_shift += 1
    # Clocks lost, by cause (STALL_CAUSES): the decoder waiting on a lock or a full queue, the
    # compute lane's head slot waiting on port A, an accumulator->local write or the weight
    # drain, and the DRAM lane waiting for data after its requests went out.
    stalls = np.zeros(7, dtype=np.int64)
    issue_t = np.full(n_instr, -1.0)
    start_t = np.full(n_instr, -1.0)
    end_t = np.full(n_instr, -1.0)
    done_t = np.full(n_instr, -1.0)
    busy = np.zeros(7)

    # Stream.
    program_bytes = n_instr * p_instr_bytes
    padded = program_bytes
    while padded % p_bus_bytes:
        padded += p_instr_bytes
    total_instr = padded // p_instr_bytes  # with the host's padding NoOps
    fill = 0
    sent = 0
    next_instr = 0
    cap = p_bus_bytes + p_instr_bytes
    # Decoder lock counters [lane][bit].
    held = np.zeros((3, 2 * p_locks), dtype=np.int64)
    # Queues.
    cq_inner = np.zeros(max(1, p_cq_depth - 1), dtype=np.int64)
    cq_head = 0
    cq_level = 0
    cq_rdy = False
    cq_item = 0
    dq_inner = np.zeros(max(1, p_dq_depth - 1), dtype=np.int64)
    dq_head = 0
    dq_level = 0
    dq_rdy = False
    dq_item = 0
    # Compute lane.
    R = D + 1
    ring_valid = np.zeros(R, dtype=np.bool_)
    ring_kind = np.zeros(R, dtype=np.int64)
    ring_lock = np.zeros(R, dtype=np.int64)
    ring_instr = np.zeros(R, dtype=np.int64)
    ring_last = np.zeros(R, dtype=np.bool_)
    RR = D + 2
    resv = np.zeros(RR, dtype=np.bool_)
    vector = 0
    fetched = False
    a2l = 0
    in_flight = 0
    drain = 0
    # DRAM lane.
    busy_d = False
    cmd = 0
    started = False
    generating = False
    span_addr = 0
    span_base = 0
    span_left = 0
    spans_left = 0
    issued = 0
    completed = 0
    vectors = 0
    beat = 0
    reading = False
    wq_inner = np.zeros(3, dtype=np.int64)  # the write queue (4 deep): only its occupancy matters
    wq_head = 0
    wq_level = 0
    wq_rdy = False
    wq_item = 0
    wl_inner = np.zeros(max(1, p_outstanding - 1), dtype=np.int64)  # burst lengths
    wl_head = 0
    wl_level = 0
    wl_rdy = False
    wl_item = 0
    out_beat = 0
    burst_left = 0
    in_burst = False
    # DRAM model (one port is active at a time; both share these arrays by port).
    rq_ready = np.zeros((2, 4096), dtype=np.int64)
    rq_beats = np.zeros((2, 4096), dtype=np.int64)
    rq_head = np.zeros(2, dtype=np.int64)
    rq_tail = np.zeros(2, dtype=np.int64)
    read_beat = np.zeros(2, dtype=np.int64)
    next_read_free = np.zeros(2, dtype=np.int64)
    next_beat_at = np.zeros(2, dtype=np.int64)
    wq_beats = np.zeros((2, 4096), dtype=np.int64)
    wq_h = np.zeros(2, dtype=np.int64)
    wq_t = np.zeros(2, dtype=np.int64)
    write_beat = np.zeros(2, dtype=np.int64)
    next_write_at = np.zeros(2, dtype=np.int64)
    resp = np.zeros((2, 4096), dtype=np.int64)
    resp_h = np.zeros(2, dtype=np.int64)
    resp_t = np.zeros(2, dtype=np.int64)
    QM = 4096

    c = 0
    while c < max_cycles:
        # ---------------- combinational view of this clock ----------------
        # Compute lane: what reaches stages D and D-1 now.
        di = (c - D) % R
        done_valid = ring_valid[di] and c >= D
        done_kind = ring_kind[di]
        release_c = ring_lock[di] if done_valid else 0
        # Issue.
        issue = False
        last = False
        fetch = False
        if cq_rdy:
            i = cq_item
            k = kind[i]
            early = (k == K_MM or k == K_LW) and zeroes[i] == 0
            fetch = two_slots[i] == 1 and not fetched
            blocked = (early and (resv[c % RR] or a2l != 0)) or (k == K_LW and drain != 0) or \
                (k == K_A2L and resv[(c + D) % RR]) or (k == K_L2A and resv[(c + D - 1) % RR])
            issue = not blocked
            if blocked:
                if k == K_LW and drain != 0:
                    stalls[S_DRAIN] += 1
                elif early and a2l != 0:
                    stalls[S_A2L] += 1
                else:
                    stalls[S_PORT_A] += 1
            if k == K_SIMD:
                last = not fetch
            else:
                last = vector == count_m1[i]
        cq_r_en = issue and last
        # DRAM lane.
        release_d = 0
        dq_r_en = not busy_d
        port = dram_port[cmd]
        tl = to_local[cmd] == 1
        count = count_m1[cmd] + 1
        # Bursts.
        to_boundary = (AXI_BOUNDARY - (span_addr & (AXI_BOUNDARY - 1))) >> size_shift
        burst_len = span_left if span_left < to_boundary else to_boundary
        if burst_len > AXI_MAX_BURST:
            burst_len = AXI_MAX_BURST
        room = (issued - completed) < p_outstanding
        can_issue = busy_d and started and generating and room
        wl_w_rdy = wl_level != p_outstanding - 1
        arvalid = can_issue and tl
        awvalid = can_issue and (not tl) and wl_w_rdy
        fire = arvalid or awvalid
        # Read beats from the DRAM model.
        rvalid = False
        rlast = False
        if busy_d and tl and rq_head[port] != rq_tail[port]:
            h = rq_head[port] % QM
            if c >= next_beat_at[port] and c >= rq_ready[port, h]:
                rvalid = True
                rlast = read_beat[port] + 1 == rq_beats[port, h]
        local_write = rvalid and beat == bpv - 1
        # Writes.
        wq_level_total = wq_level + (1 if wq_rdy else 0)
        local_read = busy_d and started and (not tl) and vectors != count and (wq_level_total + (1 if reading else 0)) < 4
        wvalid = busy_d and (not tl) and wq_rdy and (in_burst or wl_rdy)
        wlast = (burst_left == 1) if in_burst else (wl_item == 1)
        wready = wq_h[port] != wq_t[port] and c >= next_write_at[port]
        w_fire = wvalid and wready
        if busy_d and started and issued != completed and not (rvalid or w_fire or fire):
            stalls[S_DRAM_WAIT] += 1
        bvalid = busy_d and (not tl) and resp_h[port] != resp_t[port] and c >= resp[port, resp_h[port] % QM]
        all_moved = vectors == count and (not generating) and started and completed == issued and (not reading) \
            and (not wq_rdy)
        finished = busy_d and all_moved
        if finished:
            release_d = lock[cmd]
        # Decoder.
        valid = fill >= p_instr_bytes and next_instr < total_instr
        accept = False
        if valid:
            i = next_instr
            if i < n_instr:
                ln = lane[i]
                lk = lock[i]
                go = True
                if ln != LANE_NONE:
                    other = LANE_DRAM if ln == LANE_COMPUTE else LANE_COMPUTE
                    writes = False
                    for r in range(p_locks):
                        if (lk >> (2 * r + 1)) & 1:
                            writes = True
                    conflict = False
                    for r in range(p_locks):
                        if (lk >> (2 * r)) & 3:  # the range touches region r
                            if held[other, 2 * r + 1] != 0 or (writes and held[other, 2 * r] != 0):
                                conflict = True
                    full = (cq_level == p_cq_depth - 1) if ln == LANE_COMPUTE else (dq_level == p_dq_depth - 1)
                    go = not full and not conflict
                    if conflict:
                        stalls[S_LOCK] += 1
                    elif full:
                        stalls[S_COMPUTE_FULL if ln == LANE_COMPUTE else S_DRAM_FULL] += 1
                accept = go
            else:
                accept = True  # a padding NoOp
        taken = accept
        kept = fill - (p_instr_bytes if taken else 0)
        word_ready = kept <= cap - p_bus_bytes
        arriving = sent < padded and word_ready

        # ---------------- state updates (the clock edge) ----------------
        if taken and next_instr < n_instr:
            i = next_instr
            issue_t[i] = c
            busy[U_DEC] += 1
            ln = lane[i]
            if ln != LANE_NONE:
                for b in range(2 * p_locks):
                    if (lock[i] >> b) & 1:
                        held[ln, b] += 1
            else:
                start_t[i] = c
                end_t[i] = c
                done_t[i] = c
        for b in range(2 * p_locks):
            if (release_c >> b) & 1:
                held[LANE_COMPUTE, b] -= 1
            if (release_d >> b) & 1:
                held[LANE_DRAM, b] -= 1
        # Compute lane state.
        if done_valid:
            if ring_last[di]:
                done_t[ring_instr[di]] = c
            busy[U_ACC] += 1
            if done_kind == K_A2L:
                a2l -= 1
                busy[U_PA] += 1
        bi = (c - D + 1) % R
        if ring_valid[bi] and c >= D - 1 and ring_kind[bi] == K_L2A:
            busy[U_PA] += 1
        slot = c % R
        ring_valid[slot] = issue
        if issue:
            i = cq_item
            k = kind[i]
            ring_kind[slot] = k
            ring_lock[slot] = lock[i] if last else 0
            ring_instr[slot] = i
            ring_last[slot] = last
            if start_t[i] < 0:
                start_t[i] = c
            if last:
                end_t[i] = c
            if (k == K_MM or k == K_LW):
                busy[U_ARR] += 1
                if zeroes[i] == 0:
                    busy[U_PA] += 1
            if k == K_A2L:
                resv[(c + D) % RR] = True
                a2l += 1
            elif k == K_L2A:
                resv[(c + D - 1) % RR] = True
            if last:
                vector = 0
                fetched = False
            elif fetch:
                fetched = True
            else:
                vector += 1
            if k == K_MM:
                drain = drain_reset
            elif drain != 0:
                drain -= 1
        elif drain != 0:
            drain -= 1
        resv[c % RR] = False
        in_flight += (1 if issue else 0) - (1 if done_valid else 0)
        # Compute queue.
        cq_head, cq_level, cq_rdy, cq_item, _w = _fifo_step(
            cq_inner, cq_head, cq_level, cq_rdy, cq_item, taken and next_instr < n_instr and lane[min(next_instr, n_instr - 1)] == LANE_COMPUTE,
            next_instr, cq_r_en, p_cq_depth)
        # DRAM lane state.
        accept_cmd = dq_rdy and not busy_d
        new_cmd = dq_item
        if busy_d and not started:
            started = True
            generating = True
            span_addr = dram_addr[cmd]
            span_base = dram_addr[cmd]
            if dram_stride[cmd] == 0:
                span_left = count * bpv
                spans_left = 0
            else:
                span_left = bpv
                spans_left = count_m1[cmd]
            start_t[cmd] = c
        if fire:
            issued += 1
            # The DRAM model accepts the address.
            if arvalid:
                t = rq_tail[port] % QM
                ready = c + p_latency
                if next_read_free[port] > ready:
                    ready = next_read_free[port]
                rq_ready[port, t] = ready
                rq_beats[port, t] = burst_len
                rq_tail[port] += 1
                next_read_free[port] = ready + burst_len * p_beat_cycles + p_gap
            else:
                t = wq_t[port] % QM
                wq_beats[port, t] = burst_len
                wq_t[port] += 1
            stride_bytes = p_vector_bytes << dram_stride[cmd]
            if burst_len == span_left:
                if spans_left == 0:
                    generating = False
                else:
                    spans_left -= 1
                    span_base += stride_bytes
                    span_addr = span_base
                    span_left = bpv
            else:
                span_addr += burst_len * p_bus_bytes
                span_left -= burst_len
        if rvalid:
            busy[U_D0 + port] += 1
            next_beat_at[port] = c + p_beat_cycles
            read_beat[port] += 1
            if read_beat[port] == rq_beats[port, rq_head[port] % QM]:
                rq_head[port] += 1
                read_beat[port] = 0
            beat = 0 if beat == bpv - 1 else beat + 1
            if rlast:
                completed += 1
        if local_write or local_read:
            vectors += 1
            busy[U_PB] += 1
        # Write path: queue of vectors read from local memory, W beats, responses.
        wq_r_en = False
        wl_r_en = False
        if w_fire:
            busy[U_D0 + port] += 1
            if not in_burst:
                wl_r_en = True
            burst_left = (burst_left if in_burst else wl_item) - 1
            in_burst = not wlast
            if out_beat == bpv - 1:
                out_beat = 0
                wq_r_en = True
            else:
                out_beat += 1
            next_write_at[port] = c + p_beat_cycles
            write_beat[port] += 1
            h = wq_h[port] % QM
            if write_beat[port] == wq_beats[port, h]:
                resp[port, resp_t[port] % QM] = c + p_write_latency
                resp_t[port] += 1
                wq_h[port] += 1
                write_beat[port] = 0
        if bvalid:
            resp_h[port] += 1
            completed += 1
        wq_head, wq_level, wq_rdy, wq_item, _w = _fifo_step(wq_inner, wq_head, wq_level, wq_rdy, wq_item,
                                                            reading, 0, wq_r_en, 4)
        reading = local_read
        wl_head, wl_level, wl_rdy, wl_item, _w = _fifo_step(wl_inner, wl_head, wl_level, wl_rdy, wl_item,
                                                            awvalid, burst_len, wl_r_en, p_outstanding)
        if finished:
            end_t[cmd] = c
            done_t[cmd] = c
            busy_d = False
            started = False
            vectors = 0
            issued = 0
            completed = 0
        if accept_cmd:
            cmd = new_cmd
            busy_d = True
        dq_head, dq_level, dq_rdy, dq_item, _w = _fifo_step(
            dq_inner, dq_head, dq_level, dq_rdy, dq_item, taken and next_instr < n_instr and lane[min(next_instr, n_instr - 1)] == LANE_DRAM,
            next_instr, dq_r_en, p_dq_depth)
        # Stream and decoder.
        if taken:
            next_instr += 1
        fill = kept + (p_bus_bytes if arriving else 0)
        if arriving:
            sent += p_bus_bytes
        c += 1
        # Idle after this edge?
        compute_idle = (not cq_rdy) and in_flight == 0
        dram_idle = (not busy_d) and (not dq_rdy)
        if sent >= padded and not (fill >= p_instr_bytes and next_instr < total_instr) and cq_level == 0 and \
                (not cq_rdy) and dq_level == 0 and (not dq_rdy) and compute_idle and dram_idle:
            break
    return issue_t, start_t, end_t, done_t, busy, c, stalls


#: The DRAM model of the co-simulation (``systolix.rtl.cosim.DramModel``'s defaults).
RTL_DRAM_LATENCY = 32
RTL_DRAM_WRITE_LATENCY = 32
RTL_DRAM_BEAT_CYCLES = 1
RTL_DRAM_GAP = 0


def simulate_rtl(program: DecodedProgram, arch: Architecture, config=None, dram=None,
                 max_cycles: int = 10**10) -> Timeline:
    """Clock the RTL's control path through ``program``; a ``Timeline`` like the Tensil model's."""
    from systolix.rtl.config import RtlConfig
    from systolix.rtl.cosim.machine import DramModel

    cfg = config or RtlConfig(arch)
    dram = dram or DramModel()
    columns = decode_for_rtl(program, arch, cfg.lock_region, cfg.local_locks)
    issue, start, end, done, busy, cycles, stalls = _simulate_rtl(
        *columns, len(program), cfg.layout.instruction_bytes, cfg.axi_data_bytes, cfg.vector_bytes, cfg.n,
        cfg.compute_queue_depth, cfg.dram_queue_depth, cfg.max_outstanding_bursts,
        dram.latency, dram.write_latency, dram.beat_cycles, dram.gap, cfg.local_locks, max_cycles,
    )
    params = TimingParameters(array_size=cfg.n, fill_cycles=float(cfg.array_latency), vector_bytes=cfg.vector_bytes,
                              bytes_per_cycle=cfg.axi_data_bytes / dram.beat_cycles, request_cycles=0.0,
                              latency_cycles=float(dram.latency), burst_vectors=max(1, 4096 // cfg.vector_bytes),
                              issue_cycles=1.0, local_half=cfg.lock_region, dram_queue_depth=cfg.dram_queue_depth,
                              compute_queue_depth=cfg.compute_queue_depth)
    return Timeline(issue=issue, start=start, end=end, done=done, busy=busy, cycles=float(cycles), params=params,
                    stalls=dict(zip(STALL_CAUSES, (int(v) for v in stalls))))
