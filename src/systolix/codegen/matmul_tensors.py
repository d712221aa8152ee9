"""Emit a product of two computed tensors (``TensorMatMulLayer``, attention's ``Q x K^T`` and
``P x V``) from its plan.

Per head: ``b``'s vectors of the head into local memory; transposed (``Q x K^T``), its pixels
padded with zeros to whole tiles and each ``N x N`` tile transposed by the Tandem unit's permute
engine (``TPermute Transpose``, local to local, between ``TSync to_unit`` and ``TSync to_array``)
so that a tile's vector ``r`` is weight row ``r``. Then per band of query pixels: ``a``'s band into
local memory and, per output group, per contraction group, the block loaded from local memory
(rows past ``K`` zero: a partial LoadWeights after clearing the array) and the band streamed
through it; the Tandem softmax on the tile (``softmax_program``, the scale folded in); the save.
"""

from __future__ import annotations

from systolix.codegen.emitter import Emitter
from systolix.codegen.tandem_softmax import softmax_program
from systolix.ir.hir import TensorMatMulLayer
from systolix.ir.lir import ACCUMULATORS, CONSTS, LOCAL, ZEROES, LoadWeights, raw_of
from systolix.ir.plan import LayerPlan, MemoryMap
from systolix.isa.tandem import (
    Namespace, TAlu, TAluOp, TImm, TIterBase, TIterStride, TLoop, TOperand, TPermute, TPermuteOp, TSync, TSyncKind)
from systolix.planning.matmul_tensors import geometry, masked


def transpose_tiles(src: int, dst: int, tiles: int, N: int) -> list:
    """Tandem instructions: ``tiles`` consecutive ``N x N`` tiles of local memory from raw
    address ``src`` transposed to ``dst`` (tile ``k`` at ``+ k N`` on both sides)."""
    L = Namespace.LOCAL
    return [TSync(TSyncKind.TO_UNIT), TIterBase(L, 0, src), TIterStride(L, 0, 0, N), TIterBase(L, 1, dst),
            TIterStride(L, 1, 0, N), TLoop(0, tiles, 1), TPermute(TPermuteOp.TRANSPOSE, TOperand(L, 1), TOperand(L, 0)),
            TSync(TSyncKind.TO_ARRAY)]


def shift_right(acc: int, count: int, shift: int, frac_bits: int) -> list:
    """Tandem instructions: accumulators ``acc..acc+count`` divided by ``2^shift`` in place (exact
    in the wide type, one rounding half to even on the write)."""
    A = Namespace.ACC
    return [TSync(TSyncKind.TO_UNIT), TIterBase(A, 0, acc), TIterStride(A, 0, 0, 1), TIterStride(A, 0, 1, 0),
            TImm(0, -shift << (2 * frac_bits)), TLoop(0, count, 1),
            TAlu(TAluOp.SHIFT, TOperand(A, 0), TOperand(A, 0), TOperand(Namespace.IMM, 0)),
            TSync(TSyncKind.TO_ARRAY)]


def load_rows(e: Emitter, local: int, rows: int) -> None:
    """Weight rows 1..rows from ``local[0..rows)``, the rest and the bias zero."""
    if rows == e.N:
        e.load_block(local)
        return
    e.clear_weights()
    e.out.append(LoadWeights(local, rows))
    e.out.append(LoadWeights(ZEROES, 1))


def emit_matmul_tensors(layer: TensorMatMulLayer, plan: LayerPlan, consts, memory: MemoryMap, e: Emitter) -> None:
    N = e.N
    t = plan.detail
    Kg, Og, Op = geometry(layer, N)
    K, O = layer.K, layer.O
    ab, ags, _, aws = memory.strides(layer.a)
    bb, bgs, _, bws = memory.strides(layer.b)
    ob, ogs, _, ows = memory.strides(layer.output)
    b_local, bt_local, a_local, staging = (LOCAL + x for x in (t.b_base, t.bt_base, t.a_base, t.staging_base))
    zero = ACCUMULATORS + t.acc_zero
    mask = None
    if masked(layer, N):
        mask = t.acc_mask
        if memory.consts_local:
            e.move(CONSTS + consts, ACCUMULATORS + mask, 2)
        else:
            e.move(CONSTS + consts, staging, 2)
            e.move(staging, ACCUMULATORS + mask, 2)
    if layer.transposed and Op > O:
        e.clear_weights()
        e.matmul(ZEROES, zero, Op - O, 1, accumulate=False)
    frac = e.arch.data_type.binary_point
    for h in range(layer.heads):
        ga = (layer.a_offset + h * layer.a_stride) // N
        gb = (layer.b_offset + h * layer.b_stride) // N
        if layer.transposed:
            # b[k, o]: channel k, pixel o. Group i's pixels, padded to Op, then its tiles transposed.
            for i in range(Kg):
                e.move(bb + (gb + i) * bgs, b_local + i * Op, O, bws, 1)
                e.move(zero, b_local + i * Op + O, Op - O)
            e.out.extend(transpose_tiles(raw_of(b_local), raw_of(bt_local), Kg * Og, N))
        else:
            # b[k, o]: channel o, pixel k. Output group j's K pixels: rows k of its blocks.
            for j in range(Og):
                e.move(bb + (gb + j) * bgs, b_local + j * K, K, bws, 1)
        for stage in plan.stages:
            m0, m1 = stage.outputs
            R = m1 - m0
            for i in range(Kg):
                e.move(ab + (ga + i) * ags + m0 * aws, a_local + i * R, R, aws, 1)
            for j in range(Og):
                for i in range(Kg):
                    rows = min(N, K - i * N)
                    block = bt_local + (i * Og + j) * N if layer.transposed else b_local + j * K + i * N
                    load_rows(e, block, rows)
                    e.matmul(a_local + i * R, ACCUMULATORS + j * R, R, 1, accumulate=i > 0)
            if layer.softmax:
                e.out.extend(softmax_program(raw_of(ACCUMULATORS), Og, O, N, frac, mask, R, layer.scale, layer.out_shift))
            if layer.a_shift:
                e.out.extend(shift_right(raw_of(ACCUMULATORS), Og * R, layer.a_shift, frac))
            e.move(ACCUMULATORS, staging, Og * R)
            for j in range(Og):
                e.move(staging + j * R, ob + (h * Og + j) * ogs + m0 * ows, R, 1, ows)
