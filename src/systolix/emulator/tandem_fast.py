"""The Tandem unit's instructions compiled with numba: the emulator's fast path.

``tandem.TandemUnit`` (plain NumPy, one Python call per instruction and loop iteration, about
0.1 ms each) is the definition; this file runs the same semantics over a decoded table of the
program, one numba call per stretch of Tandem instructions, looping over batch and lanes
inside. ``tests/unit/test_tandem_fast.py`` runs random programs on random states through both
and asserts every memory, the interim buffer and the saturation counts agree bit for bit (the
reference TCU keeps using the definition, so every Tandem test compares the two as well).

Numbers as in ``tandem.py``: wide values in int64, which holds every intermediate exactly only
while the wide type has at most 32 bits (``FAST_MAX_WIDE_BITS``); wider types use the definition.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from systolix.isa.instructions import Opcode
from systolix.isa.tandem import (
    TAlu,
    TCalc,
    TCast,
    TCmp,
    TImm,
    TIterBase,
    TIterStride,
    TLoop,
    TPermute,
    TSync,
)

FAST_MAX_WIDE_BITS = 32

# Table columns: kind, op, dst ns, dst index, src1 ns, src1 index, src2 ns, src2 index, a, b, c.
K_NONE, K_BASE, K_STRIDE, K_IMM, K_LOOP, K_ALU, K_CALC, K_CMP, K_PERMUTE, K_CAST, K_SYNC = range(11)
COLUMNS = 11
NS_ACC, NS_LOCAL, NS_INTERIM, NS_IMM = 0, 1, 2, 3


def decode_table(program) -> np.ndarray:
    """``[len(program), COLUMNS]`` int64: each Tandem instruction's fields (kind ``K_NONE`` for
    the TCU's own instructions)."""
    table = np.zeros((len(program), COLUMNS), np.int64)
    rows = np.flatnonzero((program.opcode >= int(Opcode.TCONFIG)) & (program.opcode <= int(Opcode.TSYNC)))
    for i in rows:
        ins = program.instruction(int(i))
        row = table[i]
        if isinstance(ins, TIterBase):
            row[0], row[2], row[3], row[8] = K_BASE, int(ins.ns), ins.index, ins.value
        elif isinstance(ins, TIterStride):
            row[0], row[2], row[3], row[8], row[9] = K_STRIDE, int(ins.ns), ins.index, ins.value, ins.level
        elif isinstance(ins, TImm):
            row[0], row[3], row[8] = K_IMM, ins.slot, ins.value
        elif isinstance(ins, TLoop):
            row[0], row[8], row[9], row[10] = K_LOOP, ins.iterations, ins.body, ins.level
        elif isinstance(ins, TSync):
            row[0] = K_SYNC
        else:
            kind = {TAlu: K_ALU, TCalc: K_CALC, TCmp: K_CMP, TPermute: K_PERMUTE, TCast: K_CAST}[type(ins)]
            src1 = ins.src1 if hasattr(ins, "src1") else ins.src
            src2 = getattr(ins, "src2", None)
            row[0] = kind
            row[1] = int(getattr(ins, "op", 0))
            row[2], row[3] = int(ins.dst.ns), ins.dst.index
            row[4], row[5] = int(src1.ns), src1.index
            if src2 is not None:
                row[6], row[7] = int(src2.ns), src2.index
            if isinstance(ins, TCast):
                row[8], row[9] = ins.width, ins.frac
    return table


@njit(cache=True, inline="always")
def _rne(v, s):
    """``v / 2^s`` rounded half to even (``s >= 0``)."""
    if s <= 0:
        return v
    q = v >> s
    r = v - (q << s)
    half = np.int64(1) << (s - 1)
    if r > half or (r == half and (q & 1) == 1):
        q += 1
    return q


@njit(cache=True, inline="always")
def _address(base, stride, index, ns, k):
    a = base[ns, k]
    for lv in range(index.shape[0]):
        a += stride[ns, k, lv] * index[lv]
    return a


@njit(cache=True, inline="always")
def _read(ns, k, a, b, lanes, imm, interim, acc, local, bp, out):
    if ns == NS_IMM:
        for l in range(lanes):
            out[l] = imm[k]
    elif ns == NS_INTERIM:
        for l in range(lanes):
            out[l] = interim[b, a, l]
    elif ns == NS_ACC:
        for l in range(lanes):
            out[l] = np.int64(acc[b, a, l]) << bp
    else:
        for l in range(lanes):
            out[l] = np.int64(local[b, a, l]) << bp


@njit(cache=True, inline="always")
def _write(ns, a, b, lanes, value, interim, acc, local, bp, lo, hi, saturations):
    if ns == NS_INTERIM:
        for l in range(lanes):
            interim[b, a, l] = value[l]
        return
    for l in range(lanes):
        v = _rne(value[l], bp)
        if v < lo:
            v = lo
            saturations[b] += 1
        elif v > hi:
            v = hi
            saturations[b] += 1
        if ns == NS_ACC:
            acc[b, a, l] = v
        else:
            local[b, a, l] = v


@njit(cache=True, inline="always")
def _sat(v, lo, hi, saturations, b):
    if v < lo:
        saturations[b] += 1
        return lo
    if v > hi:
        saturations[b] += 1
        return hi
    return v


@njit(cache=True, nogil=True)
def run_tandem(table, start, end, base, stride, imm, index, interim, acc, local, saturations,
               bp, wbits, wbp, lo, hi):
    """Run the Tandem instructions ``start`` .. ``end - 1`` of ``table`` (a loop with its whole
    body; ``end`` must not cut a loop). Returns ``end``."""
    batch, lanes = interim.shape[0], interim.shape[2]
    wlo = -(np.int64(1) << (wbits - 1))
    whi = (np.int64(1) << (wbits - 1)) - 1
    one = np.int64(1) << wbp
    x = np.empty(lanes, np.int64)
    y = np.empty(lanes, np.int64)
    z = np.empty(lanes, np.int64)
    out = np.empty(lanes, np.int64)
    tile = np.empty((lanes, lanes), np.int64)
    depth = index.shape[0] + 1
    loop_start = np.zeros(depth, np.int64)
    loop_end = np.zeros(depth, np.int64)
    loop_count = np.zeros(depth, np.int64)
    loop_k = np.zeros(depth, np.int64)
    loop_level = np.zeros(depth, np.int64)
    sp = 0
    pc = start
    while True:
        if sp > 0 and pc >= loop_end[sp - 1]:
            t = sp - 1
            loop_k[t] += 1
            if loop_k[t] < loop_count[t]:
                index[loop_level[t]] = loop_k[t]
                pc = loop_start[t] + 1
            else:
                index[loop_level[t]] = 0
                sp -= 1
            continue
        if pc >= end:
            break
        kind = table[pc, 0]
        op = table[pc, 1]
        if kind == K_LOOP:
            if table[pc, 8] == 0:
                index[table[pc, 10]] = 0
                pc += 1 + table[pc, 9]
                continue
            loop_start[sp] = pc
            loop_end[sp] = pc + 1 + table[pc, 9]
            loop_count[sp] = table[pc, 8]
            loop_k[sp] = 0
            loop_level[sp] = table[pc, 10]
            index[table[pc, 10]] = 0
            sp += 1
            pc += 1
            continue
        if kind == K_BASE:
            base[table[pc, 2], table[pc, 3]] = table[pc, 8]
        elif kind == K_STRIDE:
            stride[table[pc, 2], table[pc, 3], table[pc, 9]] = table[pc, 8]
        elif kind == K_IMM:
            imm[table[pc, 3]] = table[pc, 8]
        elif kind >= K_ALU and kind <= K_CAST:
            dns, dk = table[pc, 2], table[pc, 3]
            s1ns, s1k = table[pc, 4], table[pc, 5]
            s2ns, s2k = table[pc, 6], table[pc, 7]
            da = _address(base, stride, index, dns, dk) if dns != NS_IMM else 0
            a1 = _address(base, stride, index, s1ns, s1k) if s1ns != NS_IMM else 0
            a2 = _address(base, stride, index, s2ns, s2k) if s2ns != NS_IMM else 0
            if kind == K_PERMUTE and op == 3:  # transpose: read the whole tile first
                for b in range(batch):
                    for v in range(lanes):
                        _read(s1ns, s1k, a1 + v, b, lanes, imm, interim, acc, local, bp, x)
                        for l in range(lanes):
                            tile[l, v] = x[l]
                    for l in range(lanes):
                        _write(dns, da + l, b, lanes, tile[l], interim, acc, local, bp, lo, hi, saturations)
                pc += 1
                continue
            for b in range(batch):
                _read(s1ns, s1k, a1, b, lanes, imm, interim, acc, local, bp, x)
                if kind == K_ALU:
                    _read(s2ns, s2k, a2, b, lanes, imm, interim, acc, local, bp, y)
                    if op == 3 or op == 12:  # mac, cmove read dst
                        _read(dns, dk, da, b, lanes, imm, interim, acc, local, bp, z)
                    for l in range(lanes):
                        p = x[l]
                        q = y[l]
                        if op == 0:
                            r = _sat(p + q, wlo, whi, saturations, b)
                        elif op == 1:
                            r = _sat(p - q, wlo, whi, saturations, b)
                        elif op == 2:
                            r = _sat(_rne(p * q, wbp), wlo, whi, saturations, b)
                        elif op == 3:
                            r = _sat(z[l] + _rne(p * q, wbp), wlo, whi, saturations, b)
                        elif op == 4:
                            num = (p if p >= 0 else -p) << wbp
                            den = q if q >= 0 else -q
                            if den == 0:
                                r = whi if p > 0 else (wlo if p < 0 else 0)
                            else:
                                d = num // den
                                m = num - d * den
                                if 2 * m > den or (2 * m == den and (d & 1) == 1):
                                    d += 1
                                if (p < 0) != (q < 0) and p != 0:
                                    d = -d
                                r = _sat(d, wlo, whi, saturations, b)
                        elif op == 5:
                            r = p if p > q else q
                        elif op == 6:
                            r = p if p < q else q
                        elif op == 7:
                            k = q >> wbp
                            if k < -wbits:
                                k = -wbits
                            elif k > wbits - 1:
                                k = wbits - 1
                            if k > 0:
                                r = _sat(p << k, wlo, whi, saturations, b)
                            elif k < 0:
                                r = _rne(p, -k)
                            else:
                                r = p
                        elif op == 8:
                            r = one if p == 0 else 0
                        elif op == 9:
                            r = one if (p != 0 and q != 0) else 0
                        elif op == 10:
                            r = one if (p != 0 or q != 0) else 0
                        elif op == 11:
                            r = p
                        else:
                            r = p if q != 0 else z[l]
                        out[l] = r
                elif kind == K_CALC:
                    for l in range(lanes):
                        p = x[l]
                        if op == 0:
                            r = _sat(p if p >= 0 else -p, wlo, whi, saturations, b)
                        elif op == 1:
                            r = one if p > 0 else (-one if p < 0 else 0)
                        elif op == 2:
                            r = p & ~(one - 1)
                        else:
                            r = _sat(-p, wlo, whi, saturations, b)
                        out[l] = r
                elif kind == K_CMP:
                    _read(s2ns, s2k, a2, b, lanes, imm, interim, acc, local, bp, y)
                    for l in range(lanes):
                        p = x[l]
                        q = y[l]
                        if op == 0:
                            c = p == q
                        elif op == 1:
                            c = p != q
                        elif op == 2:
                            c = p > q
                        elif op == 3:
                            c = p >= q
                        elif op == 4:
                            c = p < q
                        else:
                            c = p <= q
                        out[l] = one if c else 0
                elif kind == K_PERMUTE:
                    r = x[0]
                    for l in range(1, lanes):
                        if op == 0:
                            r += x[l]
                        elif op == 1:
                            r = x[l] if x[l] > r else r
                        else:
                            r = x[l] if x[l] < r else r
                    if op == 0:
                        r = _sat(r, wlo, whi, saturations, b)
                    for l in range(lanes):
                        out[l] = r
                else:  # cast
                    width, frac = table[pc, 8], table[pc, 9]
                    drop = wbp - frac
                    clo = -(np.int64(1) << (width - 1))
                    chi = (np.int64(1) << (width - 1)) - 1
                    for l in range(lanes):
                        out[l] = _sat(_rne(x[l], drop), clo, chi, saturations, b) << drop
                _write(dns, da, b, lanes, out, interim, acc, local, bp, lo, hi, saturations)
        pc += 1
    return end


def stretch_end(table: np.ndarray, i: int, stop: int) -> int:
    """The end of the stretch of Tandem instructions from ``i`` (at most ``stop``), never cutting a loop."""
    j = i
    while j < stop and table[j, 0] != K_NONE:
        j = j + 1 + int(table[j, 9]) if table[j, 0] == K_LOOP else j + 1
    return max(j, i + 1) if j <= stop else stop
