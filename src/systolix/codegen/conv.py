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


BIAS_IN_BLOCK = True
"""Load the bias with a block that covers the stage tile (False: a pass of zeros writes the bias
first, as before; kept so that tests can measure the difference)."""


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


def _bias_blocks(candidates: list[int], blocks, vh, vw, oh0: int, oh1: int, OW: int, phases: int) -> list[int]:
    """The first of ``candidates`` (block indices) whose tap reads real input for every output of
    rows ``oh0..oh1``: its MatMuls, loaded with the bias row, can write the whole tile. With
    output phases, the first such block of each phase (each writes its phase's outputs); none
    when a phase has none."""
    if not BIAS_IN_BLOCK:
        return []
    found = []
    for phase in range(phases):
        j = next((j for j in candidates if (phases == 1 or blocks[j][2] == phase)
                  and vh[blocks[j][1]][0] <= oh0 and vh[blocks[j][1]][1] >= oh1 and vw[blocks[j][2]] == (0, OW)), None)
        if j is None:
            return []
        found.append(j)
    return found


def _block_matmuls(e: Emitter, layer: ConvLayer, kh: int, kw: int, rows: range, w0: int, w1: int, oh0: int, ih_lo: int,
                   lbase: int, acc: int, accumulate: bool = True) -> None:
    """Tap ``(kh, kw)``'s MatMuls for output rows ``rows`` (columns ``w0..w1``): input row by
    row from the band at ``lbase`` (row ``ih_lo`` first) into the tile at ``acc`` (row ``oh0``
    first). With output phases ``kw`` is the phase: every packed pixel of the row, into every
    ``phases``-th accumulator from the phase's column."""
    W, OW = layer.inputs[0].act.W, layer.output.W
    sh, sw = layer.stride
    dh, dw = layer.dilation
    pt, pl = layer.pads[0], layer.pads[1]
    k = layer.phases
    for oh in rows:
        ih = oh * sh + kh * dh - pt
        if k > 1:
            e.matmul(lbase + (ih - ih_lo) * W, acc + (oh - oh0) * OW + kw, len(range(kw, OW, k)), 1, accumulate, k)
            continue
        iw = w0 * sw + kw * dw - pl
        e.matmul(lbase + (ih - ih_lo) * W + iw, acc + (oh - oh0) * OW + w0, w1 - w0, sw, accumulate)


def _stream_blocks(e: Emitter, layer: ConvLayer, blocks, block_addrs, order, with_bias, loc, bias_addr: int, vh, vw,
                   oh0: int, oh1: int, ih_lo: int, targets, in_array):
    """Blocks ``order`` (those in ``with_bias`` first, loaded with the bias row from
    ``bias_addr``: their MatMuls write the tile) with each of ``targets``' bands streaming
    through each, into its tile: ``targets`` is ``[(band, accumulator address)]``, an image's
    each. Returns the block now in the array."""
    for j in order:
        i, kh, kw, gi = blocks[j]
        h0, h1 = vh[kh]
        w0, w1 = vw[kw]
        r0, r1 = max(h0, oh0), min(h1, oh1)
        if r0 >= r1 or w0 >= w1:
            continue
        if j in with_bias:
            e.load_block(loc(block_addrs[j]), loc(bias_addr))
            in_array = None  # its bias row makes it unlike any other block
            for band, acc in targets:
                _block_matmuls(e, layer, kh, kw, range(r0, r1), w0, w1, oh0, ih_lo, band[(i, gi)], acc, accumulate=False)
            continue
        # The array keeps its weights until the next LoadWeights: a block equal to the one
        # loaded last (pooling taps) is not loaded again.
        if in_array is None or block_addrs[j] != block_addrs[in_array]:
            e.load_block(loc(block_addrs[j]))
            in_array = j
        for band, acc in targets:
            _block_matmuls(e, layer, kh, kw, range(r0, r1), w0, w1, oh0, ih_lo, band[(i, gi)], acc)
    return in_array


def _part_chunks(layer: ConvLayer, consts: ConvConstants, go: int, per_chunk: int | None):
    """Output group ``go``'s parts summed apart (``postops.AddPart``), in order:
    ``(post-op index, part number, chunks of block indices)``, each chunk what fits the weights
    buffer when streamed (``per_chunk`` blocks; None: resident, one chunk)."""
    out = []
    number = 0
    for index, post in enumerate(layer.post_ops):
        if post.kind != "add_part":
            continue
        js = [j for j, blk in enumerate(consts.blocks[go]) if blk[0] in post.inputs]
        chunks = [js] if per_chunk is None else [js[c:c + per_chunk] for c in range(0, max(1, len(js)), per_chunk)]
        out.append((index, number, chunks))
        number += 1
    return out


def _part_span(consts: ConvConstants, go: int, number: int, ci: int, chunk, N: int) -> tuple[int, int]:
    """``(first, end)`` in the constant image of a part's chunk (its first with the part's bias)."""
    block_addrs = consts.addresses[go][1]
    bias_addr = consts.part_bias[go][number]
    first = bias_addr if ci == 0 else block_addrs[chunk[0]]
    return first, (block_addrs[chunk[-1]] + N) if chunk else bias_addr + 1


def _part_chunk(e: Emitter, layer: ConvLayer, consts: ConvConstants, go: int, number: int, ci: int, chunk, loc, vh, vw,
                stage, targets: list[tuple[dict, int]]) -> None:
    """A part's chunk of output group ``go``'s blocks (its first: with the part's bias) through
    the array, each ``(band, scratch)`` of ``targets`` (an image's) streaming through each block
    into its scratch."""
    oh0, oh1 = stage.outputs
    OW = layer.output.W
    blocks = consts.blocks[go]
    bias_addr = consts.part_bias[go][number]
    with_bias, order = [], chunk
    if ci == 0:
        with_bias = _bias_blocks(chunk, blocks, vh, vw, oh0, oh1, OW, layer.phases)
        if not with_bias:
            e.load_bias(loc(bias_addr))
            for _, scratch in targets:
                e.matmul(ZEROES, scratch, (oh1 - oh0) * OW, 1, accumulate=False)
        else:
            order = with_bias + [j for j in chunk if j not in with_bias]
    _stream_blocks(e, layer, blocks, consts.addresses[go][1], order, with_bias, loc, bias_addr, vh, vw, oh0, oh1,
                   stage.inputs[0], targets, None)


def _own_blocks(layer: ConvLayer, blocks) -> int:
    """How many of an output group's blocks (the first ones) make the layer's own sum."""
    parts = layer.part_inputs()
    return next((j for j, blk in enumerate(blocks) if blk[0] in parts), len(blocks))


def _tail(layer: ConvLayer, consts: ConvConstants, tile: Tile, save, first: int = 0) -> None:
    """A tile's post-ops (from the ``first``-th: those before ran group by group with the parts
    summed apart, ``emit_conv``'s ``run_step``), then ``save()`` (None: the output nobody reads, only its copies), then
    the post-ops that work on the saved tile in place (a pooled copy: ``postops.Save`` with
    ``after_save``)."""
    after = []
    for post, slot in list(zip(layer.post_ops, consts.slots))[first:]:
        if getattr(post, "after_save", False):
            after.append((post, slot))
            continue
        post.emit(tile, slot)
    if save is not None:
        save()
    for post, slot in after:
        post.emit(tile, slot)


def emit_conv(layer: ConvLayer, plan: LayerPlan, consts: ConvConstants, memory: MemoryMap, e: Emitter,
              one_image: bool = False, loaded: bool = False, keep_output: bool = True) -> None:
    """The layer's instructions; in a batch program, for every image (``one_image``: only the
    image ``memory`` addresses; ``loaded``: its resident weights and SIMD constants are already
    where the plan puts them, from the image before; ``keep_output``: False when no layer reads
    the output itself, only the copies its post-ops save: the tiles are not saved)."""
    t = plan.detail
    if memory.batch > 1 and t.images == 1 and not t.diagonal and not one_image:
        # A plan of one image (no two images share a weight tile: ``systolix.planning.tiling.conv``)
        # runs image after image, as it would in B programs of one image.
        # Nothing else writes the plan's weight buffers and constant accumulators in between, so
        # the first image's loads serve the others.
        for b in range(memory.batch):
            emit_conv(layer, plan, consts, memory.for_image(b), e, one_image=True, loaded=b > 0, keep_output=keep_output)
        return
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
    # One context (weights, band, staging) a lock half when pipelined, else the one layout.
    pipelined = bool(t.contexts)
    ctx = [(LOCAL + w, LOCAL + b, LOCAL + s) for w, b, s in (t.contexts or ((t.weights_base, t.band_base, t.staging_base),))]
    in_base = ctx[0][1]
    acc_const = ACCUMULATORS + t.acc_const
    # Where each weight block and bias sits: local memory (resident, or the constants there) or
    # the constant image in DRAM1 (streamed, chunk by chunk).
    w_first = offsets[0][0] if offsets else 0
    if t.resident and not consts_local:
        if not loaded:
            e.move(CONSTS + w_first, ctx[0][0], t.weights_size)
        to_local = lambda a, k: ctx[k][0] + (a - w_first)  # noqa: E731
    elif consts_local:
        to_local = lambda a, k: CONSTS + a  # noqa: E731
    else:
        to_local = None
    if n_simd and not loaded:
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
    # With output phases a block's kw is its phase, which reads every packed pixel of its rows.
    vw = [(0, OW)] * layer.phases if layer.phases > 1 else [_valid(OW, W, k, sw, dw, pl) for k in range(KW)]
    if memory.batch > 1 and not one_image:
        # A batch program: ``t.images`` images at a time (a diagonal layer's: 1 or more) stream
        # through each weight tile, image j with its band ``t.band_size`` vectors after image
        # j-1's and its tile ``tile`` after (plans that share tiles are never pipelined:
        # ``systolix.planning.tiling.conv``).
        tile_size = t.rows * OW * t.groups
        local = None if to_local is None else (lambda a: to_local(a, 0))
        for first in range(0, memory.batch, t.images):
            images = [memory.for_image(b) for b in range(first, min(memory.batch, first + t.images))]
            _emit_images(layer, plan, consts, images, e, local, vh, vw, tile_size, keep_output)
        return
    base, gs, hs, ws = memory.strides(out)
    out_on_chip = memory.on_chip(out)
    # Streamed weights: per output group its bias and blocks in chunks that fit the buffer.
    per_chunk = max(1, (t.weights_size - 1) // N)
    # The layer's own blocks; then each part summed apart (``postops.AddPart``) runs its own, as
    # more steps of the group (``run_step``).
    own = [_own_blocks(layer, blocks) for blocks in per_go]
    chunks_of = [[list(range(c, min(n, c + per_chunk))) for c in range(0, max(1, n), per_chunk)]
                 if to_local is None else [list(range(n))] for n in own]
    parts_upto = max((k + 1 for k, p in enumerate(layer.post_ops) if p.kind == "add_part"), default=0)
    parts_of = [_part_chunks(layer, consts, go, per_chunk if to_local is None else None) if parts_upto else []
                for go in range(len(per_go))]

    def steps_of(go):
        """Output group ``go``'s weight chunks: its own, then its parts'."""
        return ([("own", ci) for ci in range(len(chunks_of[go]))]
                + [("part", index, number, ci, chunk) for index, number, chunks in parts_of[go] for ci, chunk in enumerate(chunks)])

    def load_band(stage, k, groups):
        """Input rows of the given (input, group) pairs, one after another, into context ``k``'s
        band; returns where row ``ih_lo`` of each sits in local memory."""
        ih_lo, ih_hi = stage.inputs
        nrows = ih_hi - ih_lo
        band: dict[tuple[int, int], int] = {}
        for slot, (i, gi) in enumerate(groups):
            act = layer.inputs[i].act
            abase, ags, ahs, aws = memory.strides(act)
            if memory.on_chip(act):
                band[(i, gi)] = abase + gi * ags + ih_lo * ahs  # already on chip (local-vars)
                continue
            lbase = ctx[k][1] + slot * nrows * W
            band[(i, gi)] = lbase
            e.load_rows(lbase, abase + gi * ags + ih_lo * ahs, nrows, W, ahs, aws)
        return band

    all_groups = [(i, gi) for i, inp in enumerate(layer.inputs) for gi in range(inp.act.G)]
    # Partitions alternate between ``t.acc_tiles`` accumulator buffers: with two, a tile's MatMuls
    # do not touch what the previous tile's post-ops and save still read (systolix.codegen.schedule).
    acc_slot = [0]

    def acc_base() -> int:
        return ACCUMULATORS + (acc_slot[0] % t.acc_tiles) * t.rows * OW * t.groups

    def fetch(go, step, k):
        """Streamed: move output group ``go``'s chunk ``step`` (``steps_of``; the first with its
        bias) into context ``k``'s weights buffer; resident: nothing. Returns the block address ->
        local address map."""
        if to_local is not None:
            return lambda a: to_local(a, k)
        if step[0] == "part":
            first, last = _part_span(consts, go, step[2], step[3], step[4], N)
        else:
            bias_addr, block_addrs = offsets[go]
            chunk = chunks_of[go][step[1]]
            first = bias_addr if step[1] == 0 else block_addrs[chunk[0]]
            last = (block_addrs[chunk[-1]] + N) if chunk else bias_addr + 1
        e.move(CONSTS + first, ctx[k][0], last - first)
        return lambda a, first=first: ctx[k][0] + (a - first)

    def group_tile(stage, p0, go, k) -> Tile:
        """Output group ``go`` of the partition from ``p0`` alone, as a tile."""
        oh0, oh1 = stage.outputs
        at = (go - p0) * (oh1 - oh0) * OW
        return Tile(e, memory, N, go, go + 1, oh0, oh1 - oh0, OW, ctx[k][2] + at, acc_const, ACCUMULATORS + t.acc_scratch + at,
                    ACCUMULATORS + t.acc_bcast + go - p0, consts_local, acc_base() + at)

    done_upto: dict[tuple, int] = {}  # per (stage, group): the post-ops emitted so far

    def run_step(stage, band, go, go0, step, loc, in_array, k):
        """Step ``step`` of output group ``go`` (``steps_of``). A part's: the post-ops before it
        on the group (its layer's gain undo) the first time, its chunk into the scratch, and
        after its last chunk the multiply that adds it into the tile (``postops.AddPart``)."""
        if step[0] == "own":
            return run_chunk(stage, band, go, go0, step[1], loc, in_array)
        _, index, number, ci, chunk = step
        tile = group_tile(stage, go0, go, k)
        key = (stage.outputs, go)
        if ci == 0:
            for post, slot in list(zip(layer.post_ops, consts.slots))[done_upto.get(key, 0):index]:
                post.emit(tile, slot)
            done_upto[key] = index
        _part_chunk(e, layer, consts, go, number, ci, chunk, loc, vh, vw, stage, [(band, tile.acc_scratch)])
        if ci + 1 == len(parts_of[go][number][2]):
            layer.post_ops[index].emit(tile, consts.slots[index])
            done_upto[key] = index + 1
        return None

    def run_chunk(stage, band, go, go0, ci, loc, in_array):
        """The bias (first chunk) and the chunk's blocks of output group ``go``, the band
        streaming through each; returns the block now in the array."""
        oh0, oh1 = stage.outputs
        ih_lo = stage.inputs[0]
        rows = oh1 - oh0
        acc_go = acc_base() + (go - go0) * rows * OW
        blocks = per_go[go]
        bias_addr, block_addrs = offsets[go]
        order = chunks_of[go][ci]
        with_bias = []
        if ci == 0:
            # The bias rides in the bias row of a block whose tap reads real input for every
            # output of the stage: that block's MatMul writes bias + products over the whole
            # tile and the others add to it, instead of a pass of zeros for the bias alone
            # (one accumulator and array clock a vector, and a weight load, saved).
            with_bias = _bias_blocks(order, blocks, vh, vw, oh0, oh1, OW, layer.phases)
            if not with_bias:
                e.load_bias(loc(bias_addr))
                e.matmul(ZEROES, acc_go, rows * OW, 1, accumulate=False)
            else:
                order = with_bias + [j for j in order if j not in with_bias]
            in_array = None  # the weights now in the array: the bias block
        return _stream_blocks(e, layer, blocks, block_addrs, order, with_bias, loc, bias_addr, vh, vw, oh0, oh1, ih_lo,
                              [(band, acc_go)], in_array)

    # Each output group's post-ops and save follow its own MatMuls (a post-op across channels:
    # the whole partition's, after the last group), so that the schedule pass can overlap them
    # with the next group's weight loads.
    by_group = t.by_group and not any(p.all_groups for p in layer.post_ops)

    def finish_group(stage, go0, go1, go, k):
        """After output group ``go`` of partition ``go0..go1`` (its last group: the partition is
        done, and the next one takes the other accumulator buffer)."""
        if by_group:
            finish_partition(stage, go0, go, go + 1, k)
        elif go + 1 == go1:
            finish_partition(stage, go0, go0, go1, k)
        if go + 1 == go1:
            acc_slot[0] += 1

    def finish_partition(stage, p0, go0, go1, k):
        """Post-ops on groups ``go0..go1`` of the partition from ``p0``, then their save:
        accumulators to context ``k``'s staging, staging to DRAM0 (or straight to local-vars)."""
        oh0, oh1 = stage.outputs
        rows = oh1 - oh0
        at = (go0 - p0) * rows * OW
        stage_base = ctx[k][2] + at
        acc = acc_base() + at
        tile = Tile(e, memory, N, go0, go1, oh0, rows, OW, stage_base, acc_const, ACCUMULATORS + t.acc_scratch + at,
                    ACCUMULATORS + t.acc_bcast + go0 - p0, consts_local, acc)
        _tail(layer, consts, tile, (lambda: e.save_tile(acc, stage_base, out_on_chip, (base, gs, hs, ws), go0, go1, oh0, rows, OW))
              if keep_output else None, first=parts_upto)

    stages = plan.stages
    if pipelined and to_local is not None:
        # Resident: stage s in context s % 2 (a copy of the weights in each); the band of stage
        # s + 1 loads before stage s computes, and the save of stage s drains behind stage s + 1.
        bands = {0: load_band(stages[0], 0, all_groups)}
        if len(stages) > 1 and not loaded:
            e.move(CONSTS + w_first, ctx[1][0], t.weights_size)
        for s, stage in enumerate(stages):
            k = s % 2
            if s + 1 < len(stages):
                bands[s + 1] = load_band(stages[s + 1], 1 - k, all_groups)
            band = bands.pop(s)
            for go0, go1 in plan.partitions:
                in_array = None
                for go in range(go0, go1):
                    for step in steps_of(go):
                        in_array = run_step(stage, band, go, go0, step, fetch(go, step, k), in_array, k)
                    finish_group(stage, go0, go1, go, k)
        return
    if pipelined:
        # Streamed: the band in both contexts; weight chunk j of the stage in context j % 2, the
        # next chunk's move ahead of the current chunk's MatMuls.
        for stage in stages:
            bands = [load_band(stage, k, all_groups) for k in range(2)]
            steps = [(p, go, step) for p, (go0, go1) in enumerate(plan.partitions) for go in range(go0, go1)
                     for step in steps_of(go)]
            loc = fetch(steps[0][1], steps[0][2], 0)
            in_array = None
            for j, (p, go, step) in enumerate(steps):
                k = j % 2
                nxt = fetch(steps[j + 1][1], steps[j + 1][2], 1 - k) if j + 1 < len(steps) else None
                go0, go1 = plan.partitions[p]
                in_array = run_step(stage, bands[k], go, go0, step, loc, in_array, k)
                if j + 1 == len(steps) or steps[j + 1][1] != go:
                    finish_group(stage, go0, go1, go, k)
                loc = nxt
        return
    for stage in stages:
        band = {} if t.diagonal else load_band(stage, 0, all_groups)
        for go0, go1 in plan.partitions:
            if t.diagonal:
                band = load_band(stage, 0, [(0, g) for g in range(go0, min(go1, layer.inputs[0].act.G))])
            for go in range(go0, go1):
                in_array = None
                for step in steps_of(go):
                    in_array = run_step(stage, band, go, go0, step, fetch(go, step, 0), in_array, 0)
                finish_group(stage, go0, go1, go, 0)


def _emit_images(layer: ConvLayer, plan: LayerPlan, consts: ConvConstants, images: list[MemoryMap], e: Emitter, to_local,
                 vh, vw, tile_size: int, keep_output: bool = True) -> None:
    """The layer on the images ``images`` address (one map per image), each weight tile loaded
    once for all of them."""
    t = plan.detail
    N = e.N
    out = layer.output
    OW = out.W
    W = layer.inputs[0].act.W
    per_go, offsets = consts.blocks, consts.addresses
    consts_local = images[0].consts_local
    w_base, in_base, stage_base = LOCAL + t.weights_base, LOCAL + t.band_base, LOCAL + t.staging_base
    acc_const = ACCUMULATORS + t.acc_const
    out_on_chip = images[0].on_chip(out)
    # Merged parts (``postops.AddPart``): each image's product of a part goes to its own second
    # tile (``t.acc_scratch`` + j tiles: ``systolix.planning.tiling``), then into its tile.
    parts_upto = max((k + 1 for k, p in enumerate(layer.post_ops) if p.kind == "add_part"), default=0)
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
                at = (go - go0) * rows * OW
                acc_go = ACCUMULATORS + at
                blocks = per_go[go]
                bias_addr, block_addrs = offsets[go]
                own = _own_blocks(layer, blocks)
                per_chunk = max(1, (t.weights_size - 1) // N) if to_local is None else None
                if to_local is None:
                    # Streamed: bias and as many blocks as fit, chunk by chunk.
                    chunks = [list(range(c, min(own, c + per_chunk))) for c in range(0, max(1, own), per_chunk)]
                else:
                    chunks = [list(range(own))]
                for ci, chunk in enumerate(chunks):
                    if to_local is None:
                        first = bias_addr if ci == 0 else block_addrs[chunk[0]]
                        last = (block_addrs[chunk[-1]] + N) if chunk else bias_addr + 1
                        e.move(CONSTS + first, w_base, last - first)
                        loc = lambda a, first=first: w_base + (a - first)  # noqa: E731
                    else:
                        loc = to_local
                    order, with_bias = chunk, []
                    if ci == 0:
                        # The bias in the bias row of a block covering the stage's tile, as in
                        # emit_conv: that block's MatMuls write each image's tile.
                        with_bias = _bias_blocks(chunk, blocks, vh, vw, oh0, oh1, OW, layer.phases)
                        if not with_bias:
                            e.load_bias(loc(bias_addr))
                            for j in range(len(images)):
                                e.matmul(ZEROES, acc_go + j * tile_size, rows * OW, 1, accumulate=False)
                        else:
                            order = with_bias + [jb for jb in chunk if jb not in with_bias]
                        in_array = None  # the weights now in the array: the bias block
                    in_array = _stream_blocks(e, layer, blocks, block_addrs, order, with_bias, loc, bias_addr, vh, vw, oh0, oh1,
                                              ih_lo, [(bands[j], acc_go + j * tile_size) for j in range(len(images))], in_array)
                if parts_upto:
                    group_tiles = [Tile(e, memory, N, go, go + 1, oh0, rows, OW, stage_base + at, acc_const,
                                        ACCUMULATORS + t.acc_scratch + j * tile_size + at, ACCUMULATORS + t.acc_bcast,
                                        consts_local, acc_go + j * tile_size) for j, memory in enumerate(images)]
                    done = 0
                    for index, number, part_chunks in _part_chunks(layer, consts, go, per_chunk):
                        # Each image's tile: the post-ops before the part (its layer's gain undo).
                        for tile in group_tiles:
                            for post, slot in list(zip(layer.post_ops, consts.slots))[done:index]:
                                post.emit(tile, slot)
                        done = index
                        for ci, chunk in enumerate(part_chunks):
                            if to_local is None:
                                first, last = _part_span(consts, go, number, ci, chunk, N)
                                e.move(CONSTS + first, w_base, last - first)
                                loc = lambda a, first=first: w_base + (a - first)  # noqa: E731
                            else:
                                loc = to_local
                            _part_chunk(e, layer, consts, go, number, ci, chunk, loc, vh, vw, stage,
                                        [(bands[j], tile.acc_scratch) for j, tile in enumerate(group_tiles)])
                        for tile in group_tiles:
                            layer.post_ops[index].emit(tile, consts.slots[index])
                        done = index + 1
                    in_array = None
            for j, memory in enumerate(images):
                acc = ACCUMULATORS + j * tile_size
                strides = memory.strides(out)
                tile = Tile(e, memory, N, go0, go1, oh0, rows, OW, stage_base, acc_const, ACCUMULATORS + t.acc_scratch,
                            ACCUMULATORS + t.acc_bcast, consts_local, acc)
                _tail(layer, consts, tile, (lambda: e.save_tile(acc, stage_base, out_on_chip, strides, go0, go1, oh0, rows, OW))
                      if keep_output else None, first=parts_upto)
