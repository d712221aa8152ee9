"""Constants and tiling of a product of two computed tensors (``TensorMatMulLayer``).

Constants: only the softmax's mask of the last key group (two vectors, as ``SoftmaxOp``'s) when
the keys do not fill it. Tiling, per head: ``b``'s vectors of the head in local memory (and,
transposed, its ``N x N`` tiles after the permute engine), then bands of query pixels (stages):
``a``'s band, the staging of the outputs; in the accumulators the band's tile (every output
group of each pixel: the softmax needs them together), zeros for ``b``'s padding pixels, the mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from systolix.ir.hir import TensorMatMulLayer
from systolix.ir.lir import Memory
from systolix.ir.plan import BANDS, Buffer, LayerPlan, Stage
from systolix.planning.errors import SchedulingError


@dataclass(eq=False)
class TensorMatMulTiling:
    """Local addresses of ``b``'s head (``b_base``), its transposed tiles (``bt_base``), ``a``'s
    band and the staging; accumulator addresses of the zeros and the mask; ``rows`` query
    pixels a stage."""

    rows: int
    b_base: int
    bt_base: int
    a_base: int
    staging_base: int
    acc_zero: int
    acc_mask: int


def geometry(layer: TensorMatMulLayer, N: int) -> tuple[int, int, int]:
    """``(Kg, Og, Op)``: contraction groups, output groups of a head, padded outputs of a head."""
    return -(-layer.K // N), layer.out_stride // N, layer.out_stride


def masked(layer: TensorMatMulLayer, N: int) -> bool:
    return layer.softmax and layer.O % N != 0


def matmul_tensors_constants(layer: TensorMatMulLayer, b) -> int | None:
    """The mask's offset in the image, or None."""
    if not masked(layer, b.N):
        return None
    lanes = np.arange(b.N) < layer.O % b.N
    return b.add(np.stack([b.q(np.where(lanes, 1.0, 0.0)), b.q(np.where(lanes, 0.0, -128.0))]))


def matmul_tensors(layer: TensorMatMulLayer, consts, plan, arch, consts_local: bool) -> LayerPlan:
    N = arch.array_size
    Kg, Og, Op = geometry(layer, N)
    M = layer.a.P
    region0 = plan.memory.region0
    b_size = Kg * Op if layer.transposed else Og * layer.K
    bt_size = Kg * Op if layer.transposed else 0
    zeros = Op - layer.O if layer.transposed else 0
    mask = 2 if masked(layer, N) else 0
    a_base = region0 + b_size + bt_size
    room = arch.local_depth - a_base - mask
    rows = min(M, room // (Kg + Og), (arch.accumulator_depth - zeros - mask) // Og)
    if rows < 1:
        raise SchedulingError(f"layer {layer.name!r} needs {b_size + bt_size + Kg + Og + mask} vectors of local memory for one "
                              f"query token of a head; the architecture has {arch.local_depth - region0}")
    stages = [Stage((m, min(M, m + rows)), (m, min(M, m + rows))) for m in range(0, M, rows)]
    staging = a_base + Kg * rows
    local_peak = staging + max(Og * rows, mask)
    acc_zero = Og * rows
    acc_peak = acc_zero + zeros + mask
    return LayerPlan(layer.name, "matmul_tensors", BANDS, "computed (the right operand, from local memory)", stages,
                     [(0, layer.output.G)],
                     [Buffer("right operand of a head", Memory.LOCAL, region0, b_size),
                      Buffer("transposed tiles", Memory.LOCAL, region0 + b_size, bt_size),
                      Buffer("left operand band", Memory.LOCAL, a_base, Kg * rows),
                      Buffer("staging", Memory.LOCAL, staging, local_peak - staging)],
                     [Buffer("tile", Memory.ACCUMULATORS, 0, Og * rows), Buffer("zeros", Memory.ACCUMULATORS, acc_zero, zeros),
                      Buffer("softmax mask", Memory.ACCUMULATORS, acc_zero + zeros, mask)],
                     local_peak, acc_peak,
                     TensorMatMulTiling(rows, region0, region0 + b_size, a_base, staging, acc_zero, acc_zero + zeros))
