"""Tiling of a ``TokenTransposeLayer``: no constants; stages are bands of the input's pixel
blocks (``N`` pixels, the output's channel groups): per band every input channel group's block of
pixels in local memory (padded with zero vectors to whole blocks), then the transposed tiles
beside them; in the accumulators only the zero vectors the padding is copied from."""

from __future__ import annotations

from dataclasses import dataclass

from systolix.ir.hir import TokenTransposeLayer
from systolix.ir.lir import Memory
from systolix.ir.plan import BANDS, Buffer, LayerPlan, Stage
from systolix.planning.errors import SchedulingError


@dataclass(eq=False)
class TokenTransposeTiling:
    """``blocks`` pixel blocks a stage; local addresses of the input tiles and of the transposed tiles."""

    blocks: int
    tiles_base: int
    transposed_base: int


def transpose_tokens(layer: TokenTransposeLayer, consts, plan, arch, consts_local: bool) -> LayerPlan:
    N = arch.array_size
    x, out = layer.input, layer.output
    region0 = plan.memory.region0
    per_block = 2 * x.G * N  # a block's tiles of every input group, before and after the transpose
    blocks = min(out.G, (arch.local_depth - region0) // per_block)
    if blocks < 1:
        raise SchedulingError(f"layer {layer.name!r} needs {per_block} vectors of local memory for one block of {N} tokens; "
                              f"the architecture has {arch.local_depth - region0}")
    stages = [Stage((b, min(out.G, b + blocks)), (b * N, min(x.P, (b + blocks) * N))) for b in range(0, out.G, blocks)]
    size = x.G * N * max(s.outputs[1] - s.outputs[0] for s in stages)
    zeros = -x.P % N
    return LayerPlan(layer.name, "transpose", BANDS, "none", stages, [(0, out.G)],
                     [Buffer("input tiles", Memory.LOCAL, region0, size), Buffer("transposed tiles", Memory.LOCAL, region0 + size, size)],
                     [Buffer("zeros", Memory.ACCUMULATORS, 0, zeros)], region0 + 2 * size, zeros,
                     TokenTransposeTiling(blocks, region0, region0 + size))
