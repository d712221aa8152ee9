"""Roll consecutive instructions into strided multi-vector ones.

Two MatMuls (or two DataMoves of the same kind) merge when the second continues the first on
both operands with the same power-of-two strides and the merged size still fits: the merged
instruction does the same work in the same order, one instruction instead of two.
"""

from __future__ import annotations

from systolix.isa import DataMove, MatMul


def _continue(addr: int, stride: int, count: int, next_addr: int, next_stride: int, next_count: int, max_stride: int):
    """The common stride if ``next`` continues ``(addr, stride, count)``, else None."""
    if count == 1:
        s = next_addr - addr
        if s <= 0 or s & (s - 1) or s > max_stride:
            return None
    else:
        s = stride
        if next_addr != addr + count * s:
            return None
    if next_count > 1 and next_stride != s:
        return None
    return s


def roll_up(instructions: list, max_count: int, max_stride0: int, max_stride1: int) -> list:
    """Merge runs of MatMul/DataMove instructions; other instructions are kept as they are."""
    out: list = []
    for ins in instructions:
        if out:
            prev = out[-1]
            if type(prev) is type(ins) and isinstance(ins, MatMul):
                if prev.accumulate == ins.accumulate and prev.zeroes == ins.zeroes:
                    n1, n2 = prev.size + 1, ins.size + 1
                    if n1 + n2 <= max_count:
                        s0 = _continue(prev.local_address, prev.local_stride, n1, ins.local_address, ins.local_stride, n2, max_stride0)
                        s1 = _continue(prev.acc_address, prev.acc_stride, n1, ins.acc_address, ins.acc_stride, n2, max_stride1)
                        if s0 is not None and s1 is not None:
                            out[-1] = MatMul(prev.local_address, prev.acc_address, n1 + n2 - 1, s0, s1, prev.accumulate, prev.zeroes)
                            continue
            elif type(prev) is type(ins) and isinstance(ins, DataMove):
                if prev.flow == ins.flow:
                    n1, n2 = prev.size + 1, ins.size + 1
                    if n1 + n2 <= max_count:
                        s0 = _continue(prev.local_address, prev.local_stride, n1, ins.local_address, ins.local_stride, n2, max_stride0)
                        s1 = _continue(prev.address, prev.stride, n1, ins.address, ins.stride, n2, max_stride1)
                        if s0 is not None and s1 is not None:
                            out[-1] = DataMove(prev.flow, prev.local_address, prev.address, n1 + n2 - 1, s0, s1)
                            continue
        out.append(ins)
    return out
