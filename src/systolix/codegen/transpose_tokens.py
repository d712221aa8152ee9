"""Emit a ``TokenTransposeLayer`` from its plan: channels and pixels swapped by the Tandem unit.

Input channel group ``g``, pixels ``bN .. bN + N`` is an ``N x N`` tile whose transpose is output
channel group ``b``, pixels ``gN .. gN + N``. Per stage (a band of pixel blocks): each input group's
pixels of the band into local memory, the last block padded with zero vectors (they become the
output's padding lanes); one hardware loop of ``TPermute Transpose`` over the tiles (groups at
level 1, blocks at level 0), writing block ``b``'s tiles of every group one after another, so that
output group ``b``'s pixels are consecutive; one move of them a group. The input's padding lanes
become tile rows past the output's pixels, which are never saved.
"""

from __future__ import annotations

from systolix.codegen.emitter import Emitter
from systolix.ir.hir import TokenTransposeLayer
from systolix.ir.lir import ACCUMULATORS, LOCAL, ZEROES, raw_of
from systolix.ir.plan import LayerPlan, MemoryMap
from systolix.isa.tandem import Namespace, TIterBase, TIterStride, TLoop, TOperand, TPermute, TPermuteOp, TSync, TSyncKind


def transpose_blocks(src: int, dst: int, groups: int, blocks: int, N: int) -> list:
    """Tandem instructions: the tile of group ``g``, block ``b`` at raw local address
    ``src + (g blocks + b) N`` transposed to ``dst + (b groups + g) N``."""
    L = Namespace.LOCAL
    return [TSync(TSyncKind.TO_UNIT),
            TIterBase(L, 0, src), TIterStride(L, 0, 1, blocks * N), TIterStride(L, 0, 0, N),
            TIterBase(L, 1, dst), TIterStride(L, 1, 1, N), TIterStride(L, 1, 0, groups * N),
            TLoop(1, groups, 2), TLoop(0, blocks, 1), TPermute(TPermuteOp.TRANSPOSE, TOperand(L, 1), TOperand(L, 0)),
            TSync(TSyncKind.TO_ARRAY)]


def emit_transpose_tokens(layer: TokenTransposeLayer, plan: LayerPlan, consts, memory: MemoryMap, e: Emitter) -> None:
    N = e.N
    x, out = layer.input, layer.output
    xb, xgs, _, xws = memory.strides(x)
    ob, ogs, _, ows = memory.strides(out)
    tiles, transposed = LOCAL + plan.detail.tiles_base, LOCAL + plan.detail.transposed_base
    if x.P % N:
        e.clear_weights()
        e.matmul(ZEROES, ACCUMULATORS, -x.P % N, 1, accumulate=False)
    for stage in plan.stages:
        b0, b1 = stage.outputs
        p0, p1 = stage.inputs
        span = (b1 - b0) * N
        for g in range(x.G):
            e.move(xb + g * xgs + p0 * xws, tiles + g * span, p1 - p0, xws, 1)
            e.move(ACCUMULATORS, tiles + g * span + p1 - p0, span - (p1 - p0))
        e.out.extend(transpose_blocks(raw_of(tiles), raw_of(transposed), x.G, b1 - b0, N))
        for b in range(b1 - b0):
            e.move(transposed + b * x.G * N, ob + (b0 + b) * ogs, out.P, 1, ows)
