"""The LIR builder the layer emitters share: instructions within the architecture's limits.

A count past what one instruction encodes becomes several instructions; a stride the
instruction cannot encode (not a power of two, or too large) becomes one instruction a vector.
Every address is a tagged LIR address (``systolix.ir.lir``).
"""

from __future__ import annotations

import numpy as np

from systolix.arch import Architecture
from systolix.ir.lir import TAG_SHIFT, ZEROES, LoadWeights, MatMul, Memory, Move, Simd
from systolix.isa import InstructionLayout, SimdOp

_LOCAL_TAG = int(Memory.LOCAL)


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


class Emitter:
    """Appends LIR instructions to ``out``."""

    pixel_runs = True
    """Save a pixel-major tile's groups interleaved, in runs of a pixel (``save_tile``)."""

    def __init__(self, arch: Architecture):
        self.arch = arch
        self.N = arch.array_size
        self.layout = InstructionLayout.of(arch)
        self.max_count = 1 << self.layout.operand2_bits_used
        self.max_stride0 = 1 << (arch.stride0_depth - 1)
        self.max_stride1 = 1 << (arch.stride1_depth - 1)
        self.out: list = []

    def ok_local(self, s: int) -> bool:
        """A stride operand 0 (local memory) encodes."""
        return _pow2(s) and s <= self.max_stride0

    def ok_far(self, s: int) -> bool:
        """A stride operand 1 (DRAM, accumulators) encodes."""
        return _pow2(s) and s <= self.max_stride1

    def move(self, source: int, target: int, count: int, source_stride: int = 1, target_stride: int = 1,
             accumulate: bool = False) -> None:
        """Move ``count`` vectors; strides that cannot be encoded become one move per vector."""
        if count <= 0:
            return
        # One end is local memory (or the constants kept there): its stride is operand 0's.
        if (target >> TAG_SHIFT) == _LOCAL_TAG:
            local_stride, far_stride = target_stride, source_stride
        else:
            local_stride, far_stride = source_stride, target_stride
        if count > 1 and not (self.ok_local(local_stride) and self.ok_far(far_stride)):
            for k in range(count):
                self.out.append(Move(source + k * source_stride, target + k * target_stride, 1, 1, 1, accumulate))
            return
        if count == 1:
            source_stride = target_stride = 1
        k = 0
        while k < count:
            n = min(self.max_count, count - k)
            self.out.append(Move(source + k * source_stride, target + k * target_stride, n, source_stride, target_stride, accumulate))
            k += n

    def move_rows(self, source: int, target: int, rows: int, width: int, row_stride: int, pixel_stride: int,
                  to_local: bool) -> None:
        """``rows`` rows of ``width`` pixels between consecutive local vectors and the far side
        (``row_stride`` and ``pixel_stride`` apart there): one move when the rows are contiguous,
        else one a row."""
        if pixel_stride == 1 and row_stride == width:
            self.move(source, target, rows * width)
            return
        for r in range(rows):
            if to_local:
                self.move(source + r * row_stride, target + r * width, width, pixel_stride, 1)
            else:
                self.move(source + r * width, target + r * row_stride, width, 1, pixel_stride)

    def load_rows(self, local: int, far: int, rows: int, width: int, row_stride: int, pixel_stride: int) -> None:
        """``move_rows`` from DRAM into local memory."""
        self.move_rows(far, local, rows, width, row_stride, pixel_stride, True)

    def save_rows(self, local: int, far: int, rows: int, width: int, row_stride: int, pixel_stride: int) -> None:
        """``move_rows`` from local memory out to DRAM."""
        self.move_rows(local, far, rows, width, row_stride, pixel_stride, False)

    def save_tile(self, acc: int, staging: int, on_chip: bool, strides, go0: int, go1: int, oh0: int, rows: int,
                  width: int) -> None:
        """Output groups ``go0..go1`` of a tile (rows ``oh0..oh0+rows``, ``width`` pixels each,
        group after group from ``acc``) into the tensor of ``strides`` ``(base, group, row,
        pixel)``: straight to local memory (local-vars), or through ``staging`` out to DRAM0."""
        base, gs, hs, ws = strides
        n = rows * width
        if on_chip:
            for go in range(go0, go1):
                self.move(acc + (go - go0) * n, base + go * gs + oh0 * hs, n)
            return
        ng = go1 - go0
        if self.pixel_runs and ng > 1 and gs == 1 and (n == 1 or self.ok_local(ng)):
            # A pixel-major tensor (a model's output): each pixel's groups lie together in DRAM.
            # Interleave them in staging as they lie there and save runs of pixels, where group by
            # group every vector would be a DRAM request of its own. (A tile saved a group at a
            # time, the schedule pass's tails, is not: each strided move into the shared staging
            # area held the next group's tail back on our RTL, a 4-group conv on pynqz1 24,238 ->
            # 43,910 clocks.)
            for go in range(go0, go1):
                self.move(acc + (go - go0) * n, staging + (go - go0), n, 1, ng)
            self._save_pixel_runs(staging, base + go0 + oh0 * hs, rows, width, ng, hs, ws)
            return
        self.move(acc, staging, (go1 - go0) * n)
        for go in range(go0, go1):
            self.save_rows(staging + (go - go0) * n, base + go * gs + oh0 * hs, rows, width, hs, ws)

    def _save_pixel_runs(self, local: int, far: int, rows: int, width: int, groups: int, row_stride: int,
                         pixel_stride: int) -> None:
        """``rows x width`` pixels of ``groups`` consecutive vectors each, from ``local`` out to
        ``far`` (pixels ``pixel_stride`` and rows ``row_stride`` apart there): one move when they
        are contiguous there, else one a row, else one a pixel."""
        run = width * groups
        if pixel_stride == groups and row_stride == run:
            self.move(local, far, rows * run)
        elif pixel_stride == groups:
            for r in range(rows):
                self.move(local + r * run, far + r * row_stride, run)
        else:
            for r in range(rows):
                for c in range(width):
                    self.move(local + r * run + c * groups, far + r * row_stride + c * pixel_stride, groups)

    def matmul(self, local: int, acc: int, count: int, local_stride: int = 1, accumulate: bool = True,
               acc_stride: int = 1) -> None:
        """``count`` vectors from ``local`` (``ZEROES``: zeros) through the array into ``acc``
        (every ``acc_stride``-th accumulator)."""
        if count <= 0:
            return
        if count == 1:
            self.out.append(MatMul(local, acc, 1, 1, 1, accumulate))
            return
        if not (self.ok_local(local_stride) and self.ok_far(acc_stride)):
            for k in range(count):
                self.out.append(MatMul(local + k * local_stride, acc + k * acc_stride, 1, 1, 1, accumulate))
            return
        if count <= self.max_count:
            self.out.append(MatMul(local, acc, count, local_stride, acc_stride, accumulate))
            return
        k = 0
        while k < count:
            n = min(self.max_count, count - k)
            self.out.append(MatMul(local + k * local_stride, acc + k * acc_stride, n, local_stride, acc_stride, accumulate))
            k += n

    def load_block(self, local: int, bias: int | None = None) -> None:
        """Weights rows 1..N from ``local[0..N)``, the bias row from ``bias`` (None: zeros)."""
        if bias is not None and bias + 1 == local:
            self.out.append(LoadWeights(bias, self.N + 1))  # row r from bias + r: one load
            return
        self.out.append(LoadWeights(local, self.N))
        self.out.append(LoadWeights(ZEROES if bias is None else bias, 1))

    def load_bias(self, local: int) -> None:
        """Zero weights, bias row from ``local``."""
        self.out.append(LoadWeights(ZEROES, self.N))
        self.out.append(LoadWeights(local, 1))

    def clear_weights(self) -> None:
        """Zero weights and bias: a MatMul then adds nothing (zeroes the accumulators it writes)."""
        self.out.append(LoadWeights(ZEROES, self.N + 1))

    def simd(self, op: SimdOp, left: int = 0, right: int = 0, dest: int = 0, read: int | None = None, write: int | None = None,
             accumulate: bool = False) -> None:
        self.out.append(Simd(op, left, right, dest, read, write, accumulate))

    def pairs(self, local: np.ndarray, far: np.ndarray, to_local: bool) -> None:
        """Moves of single vectors ``local[k] <-> far[k]``, grouped into strided runs."""
        n = len(local)
        k = 0
        while k < n:
            j = k + 1
            count, ls, fs = 1, 1, 1
            if j < n:
                dl, df = int(local[j] - local[k]), int(far[j] - far[k])
                if self.ok_local(dl) and self.ok_far(df):
                    while j + 1 < n and local[j + 1] - local[j] == dl and far[j + 1] - far[j] == df:
                        j += 1
                    count, ls, fs = j - k + 1, dl, df
            if to_local:
                self.move(int(far[k]), int(local[k]), count, fs, ls)
            else:
                self.move(int(local[k]), int(far[k]), count, ls, fs)
            k += count

