"""Emit a conv layer from its plan: per stage the input band, per partition each output group's
bias and weight blocks with the band streaming through each (weight-stationary), then the
post-ops on the tile and the save.

Instructions are emitted one output row at a time (``roll_up`` merges the runs afterwards).
"""

from __future__ import annotations

from dataclasses import dataclass

from systolix.codegen.emitter import Emitter
from systolix.ir.hir import ConvLayer
from systolix.ir.lir import ACCUMULATORS, CONSTS, LOCAL, ZEROES
from systolix.ir.plan import ConvConstants, LayerPlan, MemoryMap


@dataclass
class Tile:
    """What a post-op's ``emit`` works on (``systolix.ir.postops``): output groups ``go0..go1``
    of output rows ``oh0..oh0+rows`` (``OW`` pixels each), group by group in the accumulators
    from ``acc``; tagged addresses of the staging area, the layer's SIMD constants, the second
    tile, the broadcast operands and the constant image."""

    e: Emitter
    memory: MemoryMap
    N: int
    go0: int
    go1: int
    oh0: int
    rows: int
    OW: int
    stage: int
    acc_const: int
    acc_scratch: int
    acc_bcast: int
    consts_local: bool
    acc: int = ACCUMULATORS
    consts: int = CONSTS

    @property
    def per_group(self) -> int:
        """Vectors of one channel group in the tile."""
        return self.rows * self.OW

    @property
    def n_vec(self) -> int:
        return (self.go1 - self.go0) * self.per_group

    def vectors(self) -> range:
        """Every accumulator address of the tile, in order."""
        return range(self.acc, self.acc + self.n_vec)

    def groups(self) -> range:
        return range(self.go0, self.go1)

    def group_base(self, go: int) -> int:
        """The accumulator address of output group ``go``'s first vector."""
        return self.acc + (go - self.go0) * self.per_group

    def group_vectors(self, go: int) -> range:
        return range(self.group_base(go), self.group_base(go) + self.per_group)

    def channel_constant(self, slot: tuple[int, bool], go: int) -> int:
        """Where group ``go``'s vector of per-channel constants is (``ConstantSink.per_channel``)."""
        first, uniform = slot
        return self.acc_const + first + (0 if uniform else go)


def _valid(n_out, size, k, s, d, p0):
    """The output range a kernel tap ``k`` reads real input for (padding contributes zeros)."""
    lo = max(0, -(-(p0 - k * d) // s))
    hi = min(n_out, (size - 1 - k * d + p0) // s + 1)
    return lo, max(lo, hi)


def emit_conv(layer: ConvLayer, plan: LayerPlan, consts: ConvConstants, memory: MemoryMap, e: Emitter) -> None:
    t = plan.detail
    N = e.N
    out = layer.output
    KH, KW = layer.kernel
    sh, sw = layer.stride
    dh, dw = layer.dilation
    pt, pl = layer.pads[0], layer.pads[1]
    OH, OW = out.H, out.W
    H, W = layer.inputs[0].act.H, layer.inputs[0].act.W
    per_go, offsets, n_simd = consts.blocks, consts.addresses, consts.simd
    consts_local = memory.consts_local
    w_base, in_base, stage_base = LOCAL + t.weights_base, LOCAL + t.band_base, LOCAL + t.staging_base
    acc_const = ACCUMULATORS + t.acc_const
    # Where each weight block and bias sits: local memory (resident, or the constants there) or
    # the constant image in DRAM1 (streamed, chunk by chunk).
    if t.resident and not consts_local:
        w_first = offsets[0][0] if offsets else 0
        e.move(CONSTS + w_first, w_base, t.weights_size)
        to_local = lambda a: w_base + (a - w_first)  # noqa: E731
    elif consts_local:
        to_local = lambda a: CONSTS + a  # noqa: E731
    else:
        to_local = None
    if n_simd:
        if consts_local:
            e.move(CONSTS + consts.simd_offset, acc_const, n_simd)
        else:
            # Through the (still empty) input band area, in pieces if it is small.
            room = max(1, e.arch.local_depth - t.band_base)
            for k in range(0, n_simd, room):
                n = min(room, n_simd - k)
                e.move(CONSTS + consts.simd_offset + k, in_base, n)
                e.move(in_base, acc_const + k, n)
    vh = [_valid(OH, H, k, sh, dh, pt) for k in range(KH)]
    vw = [_valid(OW, W, k, sw, dw, pl) for k in range(KW)]
    # A batch program: ``t.images`` images at a time stream through each weight tile, image j
    # with its band ``t.band_size`` vectors after image j-1's and its tile ``tile`` after.
    tile_size = t.rows * OW * t.groups
    for first in range(0, memory.batch, t.images):
        images = [memory.for_image(b) for b in range(first, min(memory.batch, first + t.images))]
        _emit_images(layer, plan, consts, images, e, to_local, vh, vw, tile_size)


def _emit_images(layer: ConvLayer, plan: LayerPlan, consts: ConvConstants, images: list[MemoryMap], e: Emitter, to_local,
                 vh, vw, tile_size: int) -> None:
    """The layer on the images ``images`` address (one map per image), each weight tile loaded
    once for all of them."""
    t = plan.detail
    N = e.N
    out = layer.output
    sh, sw = layer.stride
    dh, dw = layer.dilation
    pt, pl = layer.pads[0], layer.pads[1]
    OW = out.W
    W = layer.inputs[0].act.W
    per_go, offsets = consts.blocks, consts.addresses
    consts_local = images[0].consts_local
    w_base, in_base, stage_base = LOCAL + t.weights_base, LOCAL + t.band_base, LOCAL + t.staging_base
    acc_const = ACCUMULATORS + t.acc_const
    out_on_chip = images[0].on_chip(out)
    for stage in plan.stages:
        oh0, oh1 = stage.outputs
        ih_lo, ih_hi = stage.inputs
        rows = oh1 - oh0
        nrows = ih_hi - ih_lo
        bands: list[dict[tuple[int, int], int]] = [{} for _ in images]

        def load_band(groups):
            """Input rows ih_lo..ih_hi of the given (input, group) pairs, one after another, for
            each image; ``bands[j][(input, group)]`` is where image j's row ih_lo sits."""
            for j, memory in enumerate(images):
                for slot, (i, gi) in enumerate(groups):
                    act = layer.inputs[i].act
                    abase, ags, ahs, aws = memory.strides(act)
                    if memory.on_chip(act):
                        bands[j][(i, gi)] = abase + gi * ags + ih_lo * ahs  # already on chip (local-vars)
                        continue
                    lbase = in_base + j * t.band_size + slot * nrows * W
                    bands[j][(i, gi)] = lbase
                    e.load_rows(lbase, abase + gi * ags + ih_lo * ahs, nrows, W, ahs, aws)

        if not t.diagonal:
            # Input band: channel group by channel group, rows contiguous.
            load_band([(i, gi) for i, inp in enumerate(layer.inputs) for gi in range(inp.act.G)])
        for go0, go1 in plan.partitions:
            if t.diagonal:
                load_band([(0, g) for g in range(go0, min(go1, layer.inputs[0].act.G))])
            for go in range(go0, go1):
                acc_go = ACCUMULATORS + (go - go0) * rows * OW
                blocks = per_go[go]
                bias_addr, block_addrs = offsets[go]
                if to_local is None:
                    # Streamed: bias and as many blocks as fit, chunk by chunk.
                    per_chunk = max(1, (t.weights_size - 1) // N)
                    chunks = [list(range(c, min(len(blocks), c + per_chunk))) for c in range(0, max(1, len(blocks)), per_chunk)]
                else:
                    chunks = [list(range(len(blocks)))]
                for ci, chunk in enumerate(chunks):
                    if to_local is None:
                        first = bias_addr if ci == 0 else block_addrs[chunk[0]]
                        last = (block_addrs[chunk[-1]] + N) if chunk else bias_addr + 1
                        e.move(CONSTS + first, w_base, last - first)
                        loc = lambda a, first=first: w_base + (a - first)  # noqa: E731
                    else:
                        loc = to_local
                    if ci == 0:
                        e.load_bias(loc(bias_addr))
                        for j in range(len(images)):
                            e.matmul(ZEROES, acc_go + j * tile_size, rows * OW, 1, accumulate=False)
                        in_array = None  # the weights now in the array: the bias block
                    for jb in chunk:
                        i, kh, kw, gi = blocks[jb]
                        h0, h1 = vh[kh]
                        w0, w1 = vw[kw]
                        r0, r1 = max(h0, oh0), min(h1, oh1)
                        if r0 >= r1 or w0 >= w1:
                            continue
                        # The array keeps its weights until the next LoadWeights: a block equal
                        # to the one loaded last (pooling taps) is not loaded again.
                        if in_array is None or block_addrs[jb] != block_addrs[in_array]:
                            e.load_block(loc(block_addrs[jb]))
                            in_array = jb
                        for j in range(len(images)):
                            lbase = bands[j][(i, gi)]
                            for oh in range(r0, r1):
                                ih = oh * sh + kh * dh - pt
                                iw = w0 * sw + kw * dw - pl
                                e.matmul(lbase + (ih - ih_lo) * W + iw, acc_go + j * tile_size + (oh - oh0) * OW + w0, w1 - w0, sw)
            for j, memory in enumerate(images):
                acc = ACCUMULATORS + j * tile_size
                base, gs, hs, ws = memory.strides(out)
                tile = Tile(e, memory, N, go0, go1, oh0, rows, OW, stage_base, acc_const, ACCUMULATORS + t.acc_scratch,
                            ACCUMULATORS + t.acc_bcast, consts_local, acc)
                for post, slot in zip(layer.post_ops, consts.slots):
                    post.emit(tile, slot)
                # Save: accumulators to staging, staging to DRAM0 (or straight to local-vars).
                if out_on_chip:
                    for go in range(go0, go1):
                        e.move(acc + (go - go0) * rows * OW, base + go * gs + oh0 * hs, rows * OW)
                    continue
                e.move(acc, stage_base, tile.n_vec)
                for go in range(go0, go1):
                    e.save_rows(stage_base + (go - go0) * rows * OW, base + go * gs + oh0 * hs, rows, OW, hs, ws)
