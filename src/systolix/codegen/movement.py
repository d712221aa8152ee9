"""Emit the layers that move or mix pixels rather than convolve: max pools (SIMD Max over each
window), pixel mixes (each distinct coefficient one diagonal block, every pixel pair using it
one MatMul), shuffles (each pair of lanes one single-entry block, every element one MatMul) and
remaps (input rows into local memory, each output pixel saved from where its source sits)."""

from __future__ import annotations

import numpy as np

from systolix.codegen.emitter import Emitter
from systolix.ir.hir import MaxPoolLayer, PixelMixLayer, RemapLayer, ShuffleLayer
from systolix.ir.lir import ACCUMULATORS, CONSTS, LOCAL, ZEROES, MatMul
from systolix.ir.plan import LayerPlan, MemoryMap, PixelMixConstants, ShuffleConstants
from systolix.isa import SimdOp


def emit_maxpool(layer: MaxPoolLayer, plan: LayerPlan, consts, memory: MemoryMap, e: Emitter) -> None:
    x, out = layer.input, layer.output
    KH, KW = layer.kernel
    sh, sw = layer.stride
    dh, dw = layer.dilation
    pt, pl = layer.pads[0], layer.pads[1]
    H, W, OW = x.H, x.W, out.W
    stage = LOCAL + plan.detail.band_base
    xb, xgs, xhs, xws = memory.strides(x)
    ob, ogs, ohs, ows = memory.strides(out)
    x_local, out_local = memory.on_chip(x), memory.on_chip(out)
    A = ACCUMULATORS
    for s in plan.stages:
        oh0, oh1 = s.outputs
        ih_lo, ih_hi = s.inputs
        rows = oh1 - oh0
        nrows = ih_hi - ih_lo
        for g0, g1 in plan.partitions:
            n_in = (g1 - g0) * nrows * W
            out_acc = A + n_in
            for g in range(g0, g1):
                if x_local:
                    e.move(xb + g * xgs + ih_lo * xhs, A + (g - g0) * nrows * W, nrows * W)
                    continue
                e.load_rows(stage + (g - g0) * nrows * W, xb + g * xgs + ih_lo * xhs, nrows, W, xhs, xws)
            if not x_local:
                e.move(stage, A, n_in)
            for g in range(g0, g1):
                gin = A + (g - g0) * nrows * W
                gout = out_acc + (g - g0) * rows * OW
                for oh in range(oh0, oh1):
                    ihs = [ih for ih in (oh * sh + k * dh - pt for k in range(KH)) if 0 <= ih < H]
                    for ow in range(OW):
                        iws = [ow * sw + k * dw - pl for k in range(KW)]
                        taps = [gin + (ih - ih_lo) * W + iw for ih in ihs for iw in iws if 0 <= iw < W]
                        dst = gout + (oh - oh0) * OW + ow
                        if layer.zero_pads and len(taps) < KH * KW:
                            # A window over the zero padding: the max starts from zero.
                            e.simd(SimdOp.ZERO, dest=1)
                            if not taps:
                                e.simd(SimdOp.MOVE, 1, 0, 0, write=dst)
                                continue
                            for tap in taps[:-1]:
                                e.simd(SimdOp.MAX, 0, 1, 1, read=tap)
                            e.simd(SimdOp.MAX, 0, 1, 0, read=taps[-1], write=dst)
                            continue
                        if len(taps) == 1:
                            e.simd(SimdOp.MOVE, 0, 0, 0, read=taps[0], write=dst)
                            continue
                        e.simd(SimdOp.MOVE, 0, 0, 1, read=taps[0])
                        for tap in taps[1:-1]:
                            e.simd(SimdOp.MAX, 0, 1, 1, read=tap)
                        e.simd(SimdOp.MAX, 0, 1, 0, read=taps[-1], write=dst)
            e.save_tile(out_acc, stage, out_local, (ob, ogs, ohs, ows), g0, g1, oh0, rows, OW)


def emit_pixelmix(layer: PixelMixLayer, plan: LayerPlan, consts: PixelMixConstants, memory: MemoryMap, e: Emitter) -> None:
    N = e.N
    x, out = layer.input, layer.output
    G = x.G
    po, pi, q, values, offset = consts.out_pixel, consts.in_pixel, consts.q, consts.values, consts.offset
    w_base, in_base = LOCAL + plan.detail.weights_base, LOCAL + plan.detail.band_base
    if not memory.consts_local and len(values):
        e.move(CONSTS + offset, w_base, plan.detail.weights_size)
    first_block = CONSTS + offset if memory.consts_local else w_base
    value_index = {int(v): k for k, v in enumerate(values)}
    xb, xgs, _, xws = memory.strides(x)
    ob, ogs, _, ows = memory.strides(out)
    starts = np.searchsorted(po, np.arange(out.P + 1))
    for s in plan.stages:
        a, b = s.outputs
        lo, hi = s.inputs
        n_in, n_out = hi - lo, b - a
        stage = in_base + G * n_in
        for g in range(G):
            e.move(xb + g * xgs + lo * xws, in_base + g * n_in, n_in, xws, 1)
        e.clear_weights()
        e.matmul(ZEROES, ACCUMULATORS, G * n_out, 1, accumulate=False)
        s0, s1 = starts[a], starts[b]
        bpo, bpi, bq = po[s0:s1], pi[s0:s1], q[s0:s1]
        for v in np.unique(bq):
            sel = bq == v
            e.load_block(first_block + value_index[int(v)] * N)
            for g in range(G):
                for o, i in zip((bpo[sel] - a + g * n_out + ACCUMULATORS).tolist(), (bpi[sel] - lo + in_base + g * n_in).tolist()):
                    e.out.append(MatMul(i, o, 1, 1, 1, True))
        e.move(ACCUMULATORS, stage, G * n_out)
        for g in range(G):
            e.move(stage + g * n_out, ob + g * ogs + a * ows, n_out, 1, ows)


def emit_shuffle(layer: ShuffleLayer, plan: LayerPlan, consts: ShuffleConstants, memory: MemoryMap, e: Emitter) -> None:
    N = e.N
    x, out = layer.input, layer.output
    ov, iv, pair, pairs, offset = consts.out_vector, consts.in_vector, consts.pair, consts.pairs, consts.offset
    w_base, in_base = LOCAL + plan.detail.weights_base, LOCAL + plan.detail.band_base
    starts = np.searchsorted(ov, np.arange(out.G * out.P + 1))
    block_of = {int(p): k for k, p in enumerate(pairs)}
    xb, xgs, _, xws = memory.strides(x)
    ob, ogs, _, ows = memory.strides(out)

    def addresses(vectors, base, gs, ws, P):
        g, p = np.divmod(vectors, P)
        return base + g * gs + p * ws

    for s in plan.stages:
        a, b = s.outputs
        lo, hi = s.inputs
        n_in = hi - lo
        stage = in_base + n_in
        if n_in:
            e.pairs(in_base + np.arange(n_in), addresses(np.arange(lo, hi), xb, xgs, xws, x.P), to_local=True)
        e.clear_weights()
        e.matmul(ZEROES, ACCUMULATORS, b - a, 1, accumulate=False)
        s0, s1 = starts[a], starts[b]
        band_pair, band_ov, band_iv = pair[s0:s1], ov[s0:s1], iv[s0:s1]
        for pr in np.unique(band_pair):
            sel = band_pair == pr
            k = block_of[int(pr)]
            if memory.consts_local:
                e.load_block(CONSTS + offset + k * N)
            else:
                e.move(CONSTS + offset + k * N, w_base, N)
                e.load_block(w_base)
            for o, i in zip((band_ov[sel] - a + ACCUMULATORS).tolist(), (band_iv[sel] - lo + in_base).tolist()):
                e.out.append(MatMul(i, o, 1, 1, 1, True))
        e.move(ACCUMULATORS, stage, b - a)
        e.pairs(stage + np.arange(b - a), addresses(np.arange(a, b), ob, ogs, ows, out.P), to_local=False)


def emit_remap(layer: RemapLayer, plan: LayerPlan, consts, memory: MemoryMap, e: Emitter) -> None:
    x, out = layer.input, layer.output
    src = layer.source
    OW = src.shape[1]
    W, G = x.W, x.G
    region0 = LOCAL + plan.detail.band_base
    xb, xgs, xhs, xws = memory.strides(x)
    ob, ogs, ohs, ows = memory.strides(out)
    for s, rows in zip(plan.stages, plan.detail.rows):
        oh, oh1 = s.outputs
        nr = len(rows)
        slot_of = {r: k for k, r in enumerate(rows)}
        for (g0, g1), groups in zip(plan.partitions, plan.detail.groups):
            index = np.zeros(G, np.int64)  # input group -> its place among the loaded ones
            index[groups] = np.arange(len(groups))
            for r, slot in slot_of.items():
                for k, gi in enumerate(groups):
                    e.move(xb + gi * xgs + r * xhs, region0 + (k * nr + slot) * W, W, xws, 1)
            for g in range(g0, min(g1, out.G)):
                for o in range(oh, oh1):
                    slots = np.array([slot_of[int(r)] for r in src[o, :, 0]])
                    k = index[g] if layer.group_offset is None else index[g + layer.group_offset[o]]
                    local = region0 + (k * nr + slots) * W + src[o, :, 1]
                    far = ob + g * ogs + o * ohs + np.arange(OW) * ows
                    e.pairs(local, far, to_local=False)
