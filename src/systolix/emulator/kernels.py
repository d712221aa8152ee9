"""The emulator's inner loop, compiled with numba.

One call executes a range of instructions for a whole batch: every instruction loops over the
batch inside, so the program is walked once whatever the batch size. Addresses are checked
before the call (``systolix.emulator.bounds``), so the loop itself does no bounds checks.

Arithmetic (``../shared/notes/tensil-formats.md``): each product is rounded half to even, every
add is exact and then saturated, in Tensil's order (MatMul: bias row first, then rows 1..N).
The generic helpers ``_product`` and ``_saturate`` pick the fixed-point or the FLOAT32 rule
from the memories' dtype when numba compiles, so one loop serves every data type.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import overload

# Why a run call returned.
STATUS_DONE = 0
STATUS_TRACEPOINT = 1
STATUS_LOADLUT = 2

# Saturation event kinds (columns of the counts array).
SAT_ARRAY = 0  # a partial sum inside the systolic array (MatMul)
SAT_ACCUMULATE = 1  # adding into the accumulators (MatMul accumulate, DataMove kind 15)
SAT_ALU = 2  # a SIMD ALU result (Add, Subtract, Multiply, Increment, Decrement, Abs)
SAT_SIMD_WRITE = 3  # a SIMD result accumulated into the accumulators
SAT_KINDS = ("array", "accumulate", "alu", "simd_accumulate")

# Configuration register numbers (Tensil's TCU).
REG_TRACEPOINT = 0x9
REG_PROGRAM_COUNTER = 0xA
PC_MASK = 0xFFFFFFFF


def _product(x, y, shift):  # pragma: no cover - replaced by the overload below inside numba
    raise NotImplementedError


def _saturate(s, lo, hi):  # pragma: no cover - replaced by the overload below inside numba
    raise NotImplementedError


@overload(_product, inline="always")
def _product_impl(x, y, shift):
    """``rne(x * y / 2^shift)`` for fixed point (shift >= 1); the plain product for floats."""
    if isinstance(x, types.Float):
        return lambda x, y, shift: x * y

    def fixed(x, y, shift):
        p = x * y
        # Round half to even with one add: the carry out of the low bits happens when the
        # remainder is above half, or exactly half with an odd quotient.
        return (p + ((1 << (shift - 1)) - 1) + ((p >> shift) & 1)) >> shift

    return fixed


@overload(_saturate, inline="always")
def _saturate_impl(s, lo, hi):
    """``(clamped value, 1 if it was clamped else 0)``; floats never saturate."""
    if isinstance(s, types.Float):
        return lambda s, lo, hi: (s, 0)

    def fixed(s, lo, hi):
        if s > hi:
            return hi, 1
        if s < lo:
            return lo, 1
        return s, 0

    return fixed


@njit(cache=True, inline="always")
def _truth(v):
    return 1 if v != 0 else 0


@njit(cache=True)
def _matmul(local, acc, weights, sat, la, ls, aa, as_, count, accumulate, zeroes, lo, hi, shift):
    batch = local.shape[0]
    n = local.shape[2]
    y = np.empty(n, dtype=acc.dtype)
    for b in range(batch):
        w = weights[b]
        clamps = 0
        acc_clamps = 0
        for v in range(count):
            # Row 0 is the bias row, fed with 1.0: its product is the weight itself.
            for j in range(n):
                y[j] = w[0, j]
            if not zeroes:
                src = la + v * ls
                for k in range(n):
                    xk = local[b, src, k]
                    if xk == 0:
                        continue  # adds exact zeros: nothing changes, saturated or not
                    row = w[k + 1]
                    for j in range(n):
                        s, c = _saturate(y[j] + _product(xk, row[j], shift), lo, hi)
                        y[j] = s
                        clamps += c
            dst = aa + v * as_
            if accumulate:
                for j in range(n):
                    s, c = _saturate(acc[b, dst, j] + y[j], lo, hi)
                    acc[b, dst, j] = s
                    acc_clamps += c
            else:
                for j in range(n):
                    acc[b, dst, j] = y[j]
        sat[b, SAT_ARRAY] += clamps
        sat[b, SAT_ACCUMULATE] += acc_clamps


@njit(cache=True)
def _matmul_narrow(local, acc, weights, sat, la, ls, aa, as_, count, accumulate, zeroes, lo, hi, shift):
    """``_matmul`` for data types of at most 16 bits, computed in int32 (about 1.7x faster).

    Exact: |x * w| <= 2^30 fits int32, the rounded product is below 2^23 and a partial sum
    is clamped back to 16 bits after every add. Clamps are counted per lane so that the inner
    loop stays branch-free and vectorises.
    """
    batch = local.shape[0]
    n = local.shape[2]
    lo32 = np.int32(lo)
    hi32 = np.int32(hi)
    sh = np.int32(shift)
    bias_round = np.int32((1 << (shift - 1)) - 1)
    one32 = np.int32(1)
    w32 = np.empty((n + 1, n), dtype=np.int32)
    x32 = np.empty(n, dtype=np.int32)
    y = np.empty(n, dtype=np.int32)
    lane_clamps = np.zeros(n, dtype=np.int32)
    for b in range(batch):
        for r in range(n + 1):
            for j in range(n):
                w32[r, j] = np.int32(weights[b, r, j])
        lane_clamps[:] = 0
        acc_clamps = 0
        for v in range(count):
            for j in range(n):
                y[j] = w32[0, j]
            if not zeroes:
                src = la + v * ls
                for k in range(n):
                    x32[k] = np.int32(local[b, src, k])
                for k in range(n):
                    xk = x32[k]
                    if xk == 0:
                        continue
                    row = w32[k + 1]
                    for j in range(n):
                        p = np.int32(xk * row[j])
                        p = np.int32((p + bias_round + ((p >> sh) & one32)) >> sh)
                        s = np.int32(y[j] + p)
                        c = min(max(s, lo32), hi32)
                        lane_clamps[j] += np.int32(s != c)
                        y[j] = c
            dst = aa + v * as_
            if accumulate:
                for j in range(n):
                    s, c = _saturate(acc[b, dst, j] + y[j], lo, hi)
                    acc[b, dst, j] = s
                    acc_clamps += c
            else:
                for j in range(n):
                    acc[b, dst, j] = y[j]
        sat[b, SAT_ARRAY] += lane_clamps.sum()
        sat[b, SAT_ACCUMULATE] += acc_clamps


@njit(cache=True)
def _load_weights(local, weights, la, ls, count, zeroes):
    batch = weights.shape[0]
    rows = weights.shape[1]  # N + 1
    n = weights.shape[2]
    # Loading `count` vectors last address first shifts the old rows down by `count` and
    # leaves local[la + r*ls] in row r.
    for b in range(batch):
        w = weights[b]
        for r in range(rows - 1, count - 1, -1):
            for j in range(n):
                w[r, j] = w[r - count, j]
        for r in range(min(count, rows)):
            if zeroes:
                for j in range(n):
                    w[r, j] = 0
            else:
                src = la + r * ls
                for j in range(n):
                    w[r, j] = local[b, src, j]


@njit(cache=True)
def _copy(src, sa, ss, dst, da, ds, count):
    batch = src.shape[0]
    n = src.shape[2]
    for b in range(batch):
        for v in range(count):
            s = sa + v * ss
            d = da + v * ds
            for j in range(n):
                dst[b, d, j] = src[b, s, j]


@njit(cache=True)
def _add_into(src, sa, ss, dst, da, ds, count, sat, lo, hi):
    batch = src.shape[0]
    n = src.shape[2]
    for b in range(batch):
        clamps = 0
        for v in range(count):
            s = sa + v * ss
            d = da + v * ds
            for j in range(n):
                r, c = _saturate(dst[b, d, j] + src[b, s, j], lo, hi)
                dst[b, d, j] = r
                clamps += c
        sat[b, SAT_ACCUMULATE] += clamps


@njit(cache=True)
def _simd(acc, regs, sat, alu_op, left, right, dest, write_addr, read_addr, read, write, accumulate, lo, hi, shift, one):
    batch = acc.shape[0]
    n = acc.shape[2]
    zero = one - one  # 0 in the memories' own type
    for b in range(batch):
        alu_clamps = 0
        write_clamps = 0
        for j in range(n):
            inp = acc[b, read_addr, j] if read else zero
            lv = inp if left == 0 else regs[b, left - 1, j]
            rv = inp if right == 0 else regs[b, right - 1, j]
            c = 0
            if alu_op == 0:  # NoOp: the input passes through
                r = inp
            elif alu_op == 1:  # Zero
                r = zero
            elif alu_op == 2:  # Move
                r = lv
            elif alu_op == 3:  # Not
                r = zero if lv != 0 else one
            elif alu_op == 4:  # And
                r = one if (_truth(lv) & _truth(rv)) else zero
            elif alu_op == 5:  # Or
                r = one if (_truth(lv) | _truth(rv)) else zero
            elif alu_op == 6:  # Increment
                r, c = _saturate(lv + one, lo, hi)
            elif alu_op == 7:  # Decrement
                r, c = _saturate(lv - one, lo, hi)
            elif alu_op == 8:  # Add
                r, c = _saturate(lv + rv, lo, hi)
            elif alu_op == 9:  # Subtract
                r, c = _saturate(lv - rv, lo, hi)
            elif alu_op == 10:  # Multiply
                r, c = _saturate(_product(lv, rv, shift), lo, hi)
            elif alu_op == 11:  # Abs
                r, c = _saturate(abs(lv), lo, hi)
            elif alu_op == 12:  # GreaterThan
                r = one if lv > rv else zero
            elif alu_op == 13:  # GreaterThanEqual
                r = one if lv >= rv else zero
            elif alu_op == 14:  # Min
                r = lv if lv < rv else rv
            else:  # Max
                r = lv if lv > rv else rv
            alu_clamps += c
            # The result always goes to the output; a non-zero destination also stores it in
            # that register (Tensil's ALU.scala; NoOp never touches the registers).
            if dest != 0 and alu_op != 0:
                regs[b, dest - 1, j] = r
            if write:
                if accumulate:
                    s, c2 = _saturate(acc[b, write_addr, j] + r, lo, hi)
                    acc[b, write_addr, j] = s
                    write_clamps += c2
                else:
                    acc[b, write_addr, j] = r
        sat[b, SAT_ALU] += alu_clamps
        sat[b, SAT_SIMD_WRITE] += write_clamps


@njit(cache=True, nogil=True)
def execute(
    opcode, flags, addr0, stride0, addr1, stride1, size, op0, op1, op2, config_register, config_value,
    start, stop,
    local, acc, dram0, dram1, weights, regs, config, sat, executed,
    lo, hi, shift, one, reg_bits, stop_at_tracepoint, narrow,
):
    """Run instructions ``start .. stop-1``; returns ``(next index, status)``.

    Stops early at a LoadLUT (``STATUS_LOADLUT``, the index is the LoadLUT's) or, when
    ``stop_at_tracepoint``, right after the program counter becomes equal to the
    tracepoint register (``STATUS_TRACEPOINT``). ``executed`` counts instructions by opcode.
    ``narrow`` (fixed point of at most 16 bits) selects the int32 MatMul.
    """
    reg_mask = (1 << reg_bits) - 1
    i = start
    while i < stop:
        o = opcode[i]
        f = flags[i]
        pc_written = False
        if o == 1:  # MatMul
            if narrow:
                _matmul_narrow(local, acc, weights, sat, addr0[i], 1 << stride0[i], addr1[i], 1 << stride1[i],
                               size[i] + 1, (f & 1) != 0, (f & 2) != 0, lo, hi, shift)
            else:
                _matmul(local, acc, weights, sat, addr0[i], 1 << stride0[i], addr1[i], 1 << stride1[i],
                        size[i] + 1, (f & 1) != 0, (f & 2) != 0, lo, hi, shift)
        elif o == 2:  # DataMove
            la = addr0[i]
            ls = 1 << stride0[i]
            fa = addr1[i]
            fs = 1 << stride1[i]
            count = size[i] + 1
            if f == 0:
                _copy(dram0, fa, fs, local, la, ls, count)
            elif f == 1:
                _copy(local, la, ls, dram0, fa, fs, count)
            elif f == 2:
                _copy(dram1, fa, fs, local, la, ls, count)
            elif f == 3:
                _copy(local, la, ls, dram1, fa, fs, count)
            elif f == 12:
                _copy(acc, fa, fs, local, la, ls, count)
            elif f == 13:
                _copy(local, la, ls, acc, fa, fs, count)
            else:  # 15: local -> accumulators, accumulating (the decoder rejects the rest)
                _add_into(local, la, ls, acc, fa, fs, count, sat, lo, hi)
        elif o == 3:  # LoadWeights: the size sits in operand 1's address field
            _load_weights(local, weights, addr0[i], 1 << stride0[i], size[i] + 1, (f & 1) != 0)
        elif o == 4:  # SIMD
            sub = op2[i]
            _simd(acc, regs, sat, (sub >> (3 * reg_bits)) & 0xF, (sub >> (2 * reg_bits)) & reg_mask,
                  (sub >> reg_bits) & reg_mask, sub & reg_mask, op0[i], op1[i],
                  (f & 1) != 0, (f & 2) != 0, (f & 4) != 0, lo, hi, shift, one)
        elif o == 5:  # LoadLUT: documented, but no hardware implements it
            return i, STATUS_LOADLUT
        elif o == 15:  # Configure (register and value unpacked before the run)
            reg = config_register[i]
            config[reg] = config_value[i]
            pc_written = reg == REG_PROGRAM_COUNTER
        executed[o] += 1
        # The program counter counts accepted instructions; writing it wins over the increment.
        if not pc_written:
            config[REG_PROGRAM_COUNTER] = (config[REG_PROGRAM_COUNTER] + 1) & PC_MASK
        i += 1
        if stop_at_tracepoint and config[REG_PROGRAM_COUNTER] == config[REG_TRACEPOINT]:
            return i, STATUS_TRACEPOINT
    return i, STATUS_DONE
