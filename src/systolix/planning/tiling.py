"""Tile layers: for each layer, the stages, partitions and buffers of its ``LayerPlan``.

A conv layer is cut into *stages* (bands of output rows whose input rows fit local memory) and
each stage into *partitions* (output channel groups whose results fit the accumulators): of the
plans that fit, for every number of groups the most rows, the one a rough cost model scores
lowest (``_choose``), possibly *pipelined*: double-buffered across the two lock halves of local
memory (``_pipelined_conv``). Within a partition the order is
weight-stationary: every nonzero N x N weight block is loaded into the array once and the whole
band streams through it. Local memory during a layer: ``[constants (local-consts) | activations
(local-vars) | weights (resident, or one chunk at a time) | input band | staging]``; the
accumulators: ``[tile | second tile (a product of two tensors) ... | broadcast operands | SIMD
constants]``. Max pools, pixel mixes, shuffles and remaps are cut into bands the same way.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from systolix.ir.hir import ConvLayer, MaxPoolLayer, PixelMixLayer, RemapLayer, ShuffleLayer
from systolix.ir.lir import Memory
from systolix.ir.plan import BANDS, PIPELINED, ROWS_THEN_GROUPS, Buffer, LayerPlan, Plan, Stage
from systolix.planning.errors import PoolWindowsDoNotFit, SchedulingError
from systolix.ir.hir import TensorMatMulLayer
from systolix.planning.matmul_tensors import matmul_tensors
from systolix.ir.hir import TokenTransposeLayer
from systolix.planning.transpose_tokens import transpose_tokens


@dataclass(eq=False)
class ConvTiling:
    """The numbers a conv layer's emitter reads: ``rows`` output rows and ``groups`` output
    channel groups per partition; local addresses of the weights (``resident``: all of them,
    loaded once; else one chunk of ``weights_size`` at a time), the input band and the staging
    area; accumulator addresses of the second tile, broadcast operands and SIMD constants."""

    rows: int
    groups: int
    band_rows: int
    diagonal: bool
    resident: bool
    weights_base: int
    weights_size: int
    band_base: int
    staging_base: int
    acc_scratch: int
    acc_bcast: int
    acc_const: int
    # Pipelined (double-buffered): one context per lock half of local memory, ``(weights,
    # band, staging)`` bases each; stage s (resident weights, a copy in each half) or weight
    # chunk j (streamed, the band copied into both halves) works in context s % 2 (j % 2) while
    # the DRAM moves of the next one fill the other. Empty: one context (the fields above).
    contexts: tuple[tuple[int, int, int], ...] = ()
    images: int = 1
    """Images of a batch program that stream through each weight tile together, each with its
    own input band (``band_size`` vectors apart) and tile (``rows * OW * groups`` apart); 1: the
    plan of one image, run image after image."""
    band_size: int = 0
    acc_tiles: int = 1
    """Accumulator buffers the partitions alternate between (2: tile p at ``(p % 2) * tile``, so
    the next tile's MatMuls need not wait for this one's post-ops: ``systolix.codegen.schedule``)."""
    by_group: bool = False
    """Emit each output group's post-ops and save right after its MatMuls (the schedule pass
    then overlaps them with the next group's weight loads), not the partition's after all."""


@dataclass(eq=False)
class PoolTiling:
    """A max pool's ``rows`` output rows and ``groups`` channel groups per partition, its band
    (then the outputs) from ``band_base``."""

    rows: int
    groups: int
    band_base: int


@dataclass(eq=False)
class MixTiling:
    """A pixel mix's or shuffle's weight blocks from ``weights_base`` (``weights_size``) and
    input band from ``band_base``."""

    weights_base: int
    weights_size: int
    band_base: int


@dataclass(eq=False)
class RemapTiling:
    """A remap's input rows per stage, in the order they sit in local memory from ``band_base``,
    and per partition the input channel groups loaded for them, in order."""

    rows: list[list[int]]
    band_base: int
    groups: list[list[int]]


def _buffer(name: str, base: int, size: int) -> Buffer:
    return Buffer(name, Memory.LOCAL, base, size)


def _acc(name: str, base: int, size: int) -> Buffer:
    return Buffer(name, Memory.ACCUMULATORS, base, size)


# Accumulator clocks a post-op takes per output vector (a read-and-write SIMD op is two).
POST_OP_CLOCKS = {"add": 1, "add_const": 1, "relu": 2, "mul": 2, "mul_bcast": 2, "add_bcast": 2, "mul_pixel": 2,
                  "clip": 4, "slope": 4, "scaled_slope": 5, "scaled_clip": 5, "mul_tensor": 4,
                  "add_channels": 2, "save": 1, "add_part": 2}


def _tail_clocks(layer) -> int:
    """Accumulator clocks of a tile's tail per output vector: its post-ops, then the save."""
    return sum(p.accumulator_clocks or POST_OP_CLOCKS.get(p.kind, 2) for p in layer.post_ops) + 1


def _whole_windows(layer, R: int) -> int:
    """``R`` rows, fewer if the tile must hold whole pool windows (a pooled copy saved from the
    tail, ``postops.Save.pool``): a multiple of the window unless it is the whole map."""
    k = max([getattr(p, "pool", 1) for p in layer.post_ops], default=1)
    if k == 1 or R >= layer.output.H or not R:
        return R
    if R < k:
        raise PoolWindowsDoNotFit(layer.name, k, R)
    return R - R % k


def _rows_of_whole_windows(layer, R: int) -> int:
    """``_whole_windows``, or 0 where not even one window's rows fit."""
    try:
        return _whole_windows(layer, R)
    except PoolWindowsDoNotFit:
        return 0


def _acc_tiles(schedule: bool, tile_copies: int, tile: int, acc_room: int) -> int:
    """2 when a second tile fits the accumulators (and the schedule pass will use it), else 1."""
    return 2 if schedule and tile_copies == 1 and 2 * tile <= acc_room else 1


# A tile of one image may give up groups or weight residency so that more images share it only if
# it streams at most this many weight loads' worth of vectors (``3N + 1`` clocks a block: its
# load and the array's drain) through each block: one image then spends at least a fifth of the
# array's time loading weights, four sharing it at most a sixteenth, a gain beyond the cost
# model's misses. Above it (the untuned DenseNet's 18x18 convs on the 12x12 pynq-z1, 2 images
# a tile -> 4 in tiles of one group with the weights streamed) the frame took 1.9% longer.
REGROUP_LOADS = 4


def _one_request_a_vector(act) -> bool:
    """Whether moving a channel group's rows of ``act`` takes a DRAM request a vector: a
    pixel-major tensor of more than one group (its groups interleave)."""
    root = act.root()[0]
    return root.order == "pixel" and root.G > 1


def _row_stages(OH: int, R: int, H: int, sh: int, pt: int, KH: int, dh: int) -> list[Stage]:
    """Output rows in stages of ``R``, each with the input rows its taps read."""
    stages = []
    for oh0 in range(0, OH, R):
        oh1 = min(OH, oh0 + R)
        ih_lo = max(0, oh0 * sh - pt)
        ih_hi = min(H, (oh1 - 1) * sh - pt + (KH - 1) * dh + 1)
        stages.append(Stage((oh0, oh1), (ih_lo, max(ih_lo, ih_hi))))
    return stages


def conv(layer: ConvLayer, consts, plan: Plan, arch, consts_local: bool, pipeline: bool = True,
         schedule: bool = True, serial: bool = False) -> LayerPlan:
    """The layer's plan; ``serial``: priced for a decoder that runs DRAM moves and the array's
    work one after another (Tensil's TCU, ``_conv_cost``)."""
    N = arch.array_size
    out = layer.output
    KH, KW = layer.kernel
    sh, _ = layer.stride
    dh, _ = layer.dilation
    pt = layer.pads[0]
    OH, OW, Go = out.H, out.W, out.G
    H, W = layer.inputs[0].act.H, layer.inputs[0].act.W
    for inp in layer.inputs:
        if (inp.act.H, inp.act.W) != (H, W):
            raise SchedulingError(f"layer {layer.name!r}: inputs have different spatial sizes")
    region0 = plan.memory.region0
    n_simd = consts.simd
    # Tensor operands of SIMD ops sit in the accumulators beside the tile: a whole tile for an
    # elementwise product, one vector per channel group for a broadcast one.
    tile_copies = max([p.tile_copies for p in layer.post_ops], default=1)
    n_bcast = Go if any(p.broadcast for p in layer.post_ops) else 0
    acc_room = arch.accumulator_depth - n_simd - n_bcast
    local_avail = arch.local_depth - region0
    total_w = consts.stored
    # A layer whose output channel c reads only input channel c (depthwise, pooling, scaling)
    # needs in local memory only the input groups of the partition it computes.
    diagonal = len(layer.inputs) == 1 and layer.inputs[0].diagonal is not None
    sum_gi = sum(inp.act.G for inp in layer.inputs)

    def rows_in(R: int) -> int:
        return min(H, (R - 1) * sh + (KH - 1) * dh + 1)

    if OW > acc_room // tile_copies:
        raise SchedulingError(
            f"layer {layer.name!r} needs {OW + n_simd} vectors of accumulators for one output row of one channel group "
            f"but the architecture has {arch.accumulator_depth}")

    # A batch program (``systolix compile --batch``) streams ``k`` images through each weight
    # tile: each image has its own input band and tile (the staging area is shared: images are
    # saved one after another), so a tile holds fewer rows; ``k`` is chosen below.
    def local_need(R: int, ng: int, k: int = 1) -> int:
        return k * rows_in(R) * W * (ng if diagonal else sum_gi) + R * OW * ng

    def search(extra: int, k: int):
        """The most output channel groups, then the most rows, that fit with ``extra`` vectors of weights."""
        acc_avail = acc_room // (k + tile_copies - 1)
        # A post-op across channels (softmax on the Tandem unit) needs every group in one tile.
        lowest = Go if any(p.all_groups for p in layer.post_ops) else 1
        for ng in range(min(Go, acc_avail // OW), lowest - 1, -1):
            for R in range(min(OH, acc_avail // (OW * ng)), 0, -1):
                if local_need(R, ng, k) + extra <= local_avail:
                    return R, ng
        return 0, 0

    def fit(k: int):
        resident = consts_local
        R, ng = (0, 0) if resident else search(total_w, k)
        if R:
            resident = True
        else:
            R, ng = search(0 if resident else 1 + N, k)
        return R, ng, resident

    images, (R, ng, resident) = 1, fit(1)
    R = _whole_windows(layer, R)
    # A batch program streams as many images through each weight tile as keep the rows of one
    # image's tile: each image then streams exactly what it would alone, and a weight tile loaded
    # once serves them all. Shrinking the rows to fit more images would load the weights as often
    # per image, in more, shorter stages (measured slower: more instructions, less overlap). Fewer
    # output groups a tile do not where the tile holds the whole map (one stage: each weight block
    # is loaded once a run), nor do weights streamed where one image kept them resident (a run
    # streams each weight once): where k images' tiles and bands leave no room otherwise (a late
    # stage's many weights and small maps), they share with those, if the map is small enough
    # (``REGROUP_LOADS``) that sharing gains more than the cost model misjudges. With more stages
    # it misjudges them badly (YOLOv4-tiny's 48x48 convs on the 8x8 arty-a7-35 in tiles of 2 rows
    # took 1.08 times as long). A diagonal layer keeps its one-image tile exactly (its images
    # run without the cost comparison below), and so does one moving a pixel-major tensor of
    # more than one group (a model's output): each vector of it is a DRAM request, which a run of
    # images exposes and the cost model does not count (YOLOv4-tiny's 255-channel head took 1.22
    # times as long). ``shares``: per number of images that fit, its groups and the weights'
    # residency.
    lowest = Go if any(p.all_groups for p in layer.post_ops) else 1
    regroup = (R >= OH and R * OW <= REGROUP_LOADS * (3 * N + 1) and not diagonal
               and not any(_one_request_a_vector(a) for a in [layer.output] + [i.act for i in layer.inputs]))

    # Images sharing a tile of a layer that sums merged parts (``postops.AddPart``) each take a
    # second tile for their parts' products; other second tiles (an operand of a post-op) serve
    # the images' tails one after another.
    scratches = (lambda k: k) if layer.part_inputs() else (lambda k: 1)

    def share(k: int) -> tuple[int, bool] | None:
        for g in (range(ng, lowest - 1, -1) if regroup else (ng,)):
            if R * OW * g > acc_room // (k + (tile_copies - 1) * scratches(k)):
                continue
            for res in ((resident, False) if resident and regroup else (resident,)):
                extra = (0 if consts_local else total_w) if res else 1 + N
                if local_need(R, g, k) + extra <= local_avail:
                    return (-(-Go // -(-Go // g)) if regroup else g), res  # as many tiles, their groups evened out
        return None

    shares: dict[int, tuple[int, bool]] = {}
    one = (R, ng, resident)
    if R:
        shares = {k: found for k in range(plan.memory.batch, 1, -1) if (found := share(k)) is not None}
        if shares:
            images = max(shares)
            ng, resident = shares[images]
    # The plan of one image: the tile and the double-buffering chosen by cost. A batch program
    # runs it image after image (``systolix.codegen.conv``), its resident weights and SIMD
    # constants loaded once, unless images sharing the first fit's weight tiles cost less by the
    # same model: sharing saves weight loads but gives up the chosen tile, the overlap across
    # lock halves and the second accumulator buffer, which cost more on the small arrays
    # (ResNet-20 v2's stage 3 and YOLOv4-tiny's 2x2-pooled convs on the 8x8 arty-a7-35).
    if R and not diagonal:
        may_overlap = schedule and tile_copies == 1
        chosen = _choose(layer, consts, arch, one, rows_in, local_need,
                         acc_room // tile_copies, local_avail,
                         pipeline and not consts_local and region0 == 0, consts_local, may_overlap, serial)
        if images > 1:
            tail = _tail_clocks(layer)
            w = 0 if consts_local else total_w
            batch = plan.memory.batch
            band = rows_in(R) * W * sum_gi

            def shared(k: int) -> float:
                """``k`` images a run (the last run the rest), each run one pass of the layer."""
                return sum(_conv_cost(consts, arch, R, OH, OW, band, w, shares[k][1], False, tail, images=n, runs=runs,
                                      serial=serial)
                           for n, runs in ((k, batch // k), (batch % k, 1)) if n and runs)

            cR, cg, cres, cpipe = chosen
            alone = _conv_cost(consts, arch, cR, OH, OW, rows_in(cR) * W * sum_gi, w, cres, cpipe, tail,
                               may_overlap and 2 * cR * OW * cg <= acc_room // tile_copies, runs=batch, serial=serial)
            # Fewer images a run than fit can cost less (4 images as 2 + 2 rather than 3 + 1).
            cost, best = min((shared(k), -k) for k in shares)
            images = 1 if alone < cost else -best
            if images > 1:
                ng, resident = shares[images]
        if images == 1:
            R, ng, resident, pipelined = chosen
            R = _whole_windows(layer, R)
            if pipelined:
                return _pipelined_conv(layer, consts, arch, R, ng, resident, rows_in, local_need, H, W, sum_gi,
                                       _acc_tiles(schedule, tile_copies, R * OW * ng, acc_room), schedule)
    if not R:
        raise SchedulingError(
            f"layer {layer.name!r} needs {local_need(1, 1) + (0 if resident else 1 + N)} vectors of local memory for one output row "
            f"({rows_in(1)} input rows x {W} pixels x {1 if diagonal else sum_gi} channel groups, {OW} staging, {N + 1} weights) "
            f"but the architecture has {local_avail}{' after the constants' if region0 else ''}")
    w_base = region0
    if resident:
        w_size = 0 if consts_local else total_w
    else:
        w_size = local_avail - local_need(R, ng, images)
    in_base = w_base + w_size
    band = rows_in(R) * W * (ng if diagonal else sum_gi)
    stage_base = in_base + images * band
    acc_const = arch.accumulator_depth - n_simd
    stages = _row_stages(OH, R, H, sh, pt, KH, dh)
    tile = R * OW * ng
    acc_tiles = _acc_tiles(schedule and (plan.memory.batch == 1 or (images == 1 and not diagonal)), tile_copies, tile, acc_room)
    tiles = images * tile * acc_tiles
    second = tile * (tile_copies - 1) * scratches(images)
    weights = "in place" if consts_local else "resident" if resident else "streamed"
    return LayerPlan(
        layer.name, "conv", ROWS_THEN_GROUPS, weights, stages, [(g, min(Go, g + ng)) for g in range(0, Go, ng)],
        [_buffer("weights", w_base, w_size), _buffer("input band", in_base, images * band), _buffer("staging", stage_base, tile)],
        [_acc("tile", 0, tiles), _acc("second tile", tiles, second), _acc("broadcast", acc_const - n_bcast, n_bcast),
         _acc("SIMD constants", acc_const, n_simd)],
        stage_base + tile, tiles + second + n_simd + n_bcast,
        ConvTiling(R, ng, rows_in(R), diagonal, resident, w_base, w_size, in_base, stage_base, tiles, acc_const - n_bcast, acc_const,
                   images=images, band_size=band, acc_tiles=acc_tiles, by_group=schedule))


def _conv_cost(consts, arch, R: int, OH: int, OW: int, band: int, total_w: int, resident: bool, pipelined: bool,
               tail: int = 0, overlap: bool = False, images: int = 1, runs: int = 1, serial: bool = False) -> float:
    """Clocks a conv plan takes, roughly: per stage the array's work (every weight block's load
    and drain, the band streaming through it, the bias) against the DRAM moves (band, weights,
    saves) at ``vector_bytes / 16`` clocks a vector (a 128-bit port); a pipelined plan overlaps
    the two, a plain one adds them. ``tail``: accumulator clocks of post-ops and save per output
    vector, after the array's work, or (``overlap``: two accumulator buffers, the schedule pass)
    hidden up to ``2N`` clocks a weight block behind the next tile's loads. ``images`` stream
    through each weight tile together (each its own band and tile), in ``runs`` runs of the layer
    (a batch program; resident weights are loaded once for all). ``serial``: the DRAM moves and
    the array's work add up whatever the plan, as on Tensil's TCU, whose decoder holds every
    instruction that uses a local-memory port until its last vector has passed
    (``systolix.perf.simulator``): there a pipelined plan only gives up half of local memory.
    Only the comparison between plans of one layer matters."""
    N = arch.array_size
    per_vector = arch.vector_bytes / 16
    n_go = len(consts.blocks)
    n_blocks = sum(len(b) for b in consts.blocks) + n_go  # the bias is a block too

    def stage(rows: int) -> float:
        vectors = images * rows * OW
        compute = n_blocks * (vectors + 3 * N + 1) + n_go * vectors
        after = n_go * vectors * tail
        compute += max(0, after - 2 * N * n_blocks) if overlap else after
        moved = images * band + n_go * vectors + (0 if resident else total_w)
        if serial:
            return compute + moved * per_vector
        if not pipelined:
            if images > 1:
                # Image 0's MatMuls wait for its own band only: the other images' bands load,
                # and the earlier images' saves drain, while the array works.
                return (band + n_go * rows * OW) * per_vector + max(compute, (moved - band - n_go * rows * OW) * per_vector)
            return compute + moved * per_vector
        if resident:  # the next band and the last saves behind the array
            return max(compute, moved * per_vector)
        # Streamed: the band into both halves first (the last stage's chunks read them), then
        # the chunks and saves behind the array.
        return 2 * band * per_vector + max(compute, (moved - band) * per_vector)

    cost = (OH // R) * stage(R) + (stage(OH % R) if OH % R else 0.0) + (band * per_vector if pipelined else 0)
    weights_once = total_w * (2 if pipelined else 1) if resident else 0
    return runs * cost + weights_once * per_vector / (1 if serial or not pipelined else 2)


def _choose(layer: ConvLayer, consts, arch, first: tuple[int, int, bool], rows_in, local_need, acc_avail: int, local_avail: int,
            may_pipeline: bool, consts_local: bool, may_overlap: bool = False, serial: bool = False) -> tuple[int, int, bool, bool]:
    """``(rows, groups, resident, pipelined)``: of the plans that fit (for every number of output
    groups a partition computes, the most rows with the weights resident or streamed, in all of
    local memory or, pipelined, in half of it), the one ``_conv_cost`` scores lowest. Fewer
    groups let more rows share each weight block's load: more vectors per weight tile. ``first``
    (the most groups, then the most rows) wins ties. ``may_overlap``: a tile that fits the
    accumulators twice has its post-ops overlapped (``systolix.codegen.schedule``), so tiles of
    half the accumulators are candidates too."""
    out = layer.output
    OH, OW, Go = out.H, out.W, out.G
    N = arch.array_size
    sum_gi = sum(inp.act.G for inp in layer.inputs)
    W = layer.inputs[0].act.W
    total_w = consts.stored
    half = arch.local_depth // 2

    tail = _tail_clocks(layer) if may_overlap else 0  # (without the schedule pass: the costs as before it)

    def most_rows(ng: int, extra: int, avail: int, acc: int = acc_avail) -> int:
        lo, hi = 0, min(OH, acc // (OW * ng))
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if local_need(mid, ng) + extra <= avail:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def cost(R, g, resident, pipelined):
        overlap = may_overlap and 2 * R * OW * g <= acc_avail
        return _conv_cost(consts, arch, R, OH, OW, rows_in(R) * W * sum_gi, 0 if consts_local else total_w, resident, pipelined,
                          tail, overlap, serial=serial)

    R, ng, resident = first
    best, choice = cost(R, ng, resident, False), (R, ng, resident, False)
    lowest = Go if any(p.all_groups for p in layer.post_ops) else 1
    options = []
    for g in range(min(Go, acc_avail // OW), lowest - 1, -1):
        if consts_local:  # the weights already sit in local memory: nothing to load or stream
            options.append((g, 0, True, local_avail, False))
            continue
        options.append((g, total_w, True, local_avail, False))
        options.append((g, 1 + N, False, local_avail, False))
        if may_pipeline:
            options.append((g, total_w, True, half - (arch.local_depth - local_avail), True))
            options.append((g, 1 + N, False, half - (arch.local_depth - local_avail), True))
    for g, extra, res, avail, pipe in options:
        for acc in ((acc_avail, acc_avail // 2) if may_overlap else (acc_avail,)):
            r = most_rows(g, extra, avail, acc)
            if not r or (pipe and res and r >= OH):
                continue
            c = cost(r, g, res, pipe)
            if c < best * (1 - 1e-9):
                best, choice = c, (r, g, res, pipe)
    return choice


def _pipelined_conv(layer: ConvLayer, consts, arch, R: int, ng: int, resident: bool, rows_in, local_need,
                    H: int, W: int, sum_gi: int, acc_tiles: int = 1, by_group: bool = False) -> LayerPlan:
    """The double-buffered plan of a conv layer: one context (weights, band, staging) in each
    lock half of local memory."""
    half = arch.local_depth // 2
    total_w = consts.stored
    out = layer.output
    OH, OW, Go = out.H, out.W, out.G
    band = rows_in(R) * W * sum_gi
    w_size = total_w if resident else half - local_need(R, ng)
    tile = R * OW * ng
    n_simd = consts.simd
    tile_copies = max([p.tile_copies for p in layer.post_ops], default=1)
    n_bcast = Go if any(p.broadcast for p in layer.post_ops) else 0
    acc_const = arch.accumulator_depth - n_simd
    contexts = tuple((k * half, k * half + w_size, k * half + w_size + band) for k in range(2))
    sh, pt, KH, dh = layer.stride[0], layer.pads[0], layer.kernel[0], layer.dilation[0]
    stages = _row_stages(OH, R, H, sh, pt, KH, dh)
    local = []
    for k, (wb, bb, sb) in enumerate(contexts):
        local += [_buffer(f"weights {k}", wb, w_size), _buffer(f"input band {k}", bb, band), _buffer(f"staging {k}", sb, tile)]
    return LayerPlan(
        layer.name, "conv", PIPELINED, "resident, a copy a half" if resident else "streamed, double-buffered", stages,
        [(g, min(Go, g + ng)) for g in range(0, Go, ng)], local,
        [_acc("tile", 0, tile * acc_tiles), _acc("second tile", tile * acc_tiles, tile * (tile_copies - 1)),
         _acc("broadcast", acc_const - n_bcast, n_bcast), _acc("SIMD constants", acc_const, n_simd)],
        contexts[1][2] + tile, (tile_copies - 1 + acc_tiles) * tile + n_simd + n_bcast,
        ConvTiling(R, ng, rows_in(R), False, resident, contexts[0][0], w_size, contexts[0][1], contexts[0][2], tile * acc_tiles,
                   acc_const - n_bcast, acc_const, contexts=contexts, acc_tiles=acc_tiles, by_group=by_group))


def maxpool(layer: MaxPoolLayer, consts, plan: Plan, arch, consts_local: bool) -> LayerPlan:
    x, out = layer.input, layer.output
    KH, _ = layer.kernel
    sh, _ = layer.stride
    dh, _ = layer.dilation
    pt = layer.pads[0]
    H, W, OH, OW, G = x.H, x.W, out.H, out.W, x.G
    region0 = plan.memory.region0

    def rows_in(R):
        return min(H, (R - 1) * sh + (KH - 1) * dh + 1)

    found = None
    for ng in range(G, 0, -1):
        for R in range(OH, 0, -1):
            acc = ng * (rows_in(R) * W + R * OW)
            loc = ng * max(rows_in(R) * W, R * OW)
            if acc <= arch.accumulator_depth and region0 + loc <= arch.local_depth:
                found = (ng, R)
                break
        if found:
            break
    if found is None:
        raise SchedulingError(
            f"layer {layer.name!r} needs {rows_in(1) * W + OW} vectors of accumulators and {region0 + max(rows_in(1) * W, OW)} of local memory "
            f"for one output row of one channel group; the architecture has {arch.accumulator_depth} and {arch.local_depth}")
    ng, R = found
    stages, acc_peak = [], 0
    for oh0 in range(0, OH, R):
        oh1 = min(OH, oh0 + R)
        ih_lo = max(0, oh0 * sh - pt)
        ih_hi = min(H, (oh1 - 1) * sh - pt + (KH - 1) * dh + 1)
        stages.append(Stage((oh0, oh1), (ih_lo, ih_hi)))
        for g0 in range(0, G, ng):
            g1 = min(G, g0 + ng)
            acc_peak = max(acc_peak, (g1 - g0) * (ih_hi - ih_lo) * W + (g1 - g0) * (oh1 - oh0) * OW)
    size = ng * max(rows_in(R) * W, R * OW)
    return LayerPlan(layer.name, "maxpool", ROWS_THEN_GROUPS, "none", stages, [(g, min(G, g + ng)) for g in range(0, G, ng)],
                     [_buffer("input band, then outputs", region0, size)],
                     [_acc("inputs", 0, ng * rows_in(R) * W), _acc("outputs", ng * rows_in(R) * W, ng * R * OW)],
                     region0 + size, acc_peak, PoolTiling(R, ng, region0))


def _bands(count: int, inputs_of: tuple[np.ndarray, np.ndarray], fits, refuse) -> list[Stage]:
    """Consecutive outputs ``[a, b)`` as long as ``fits(outputs, inputs)`` holds for them and the
    span of inputs they read (``inputs_of``: each output's first and last input, -1 for none);
    ``refuse(a)`` is the error when not even output ``a`` alone fits."""
    lo_of, hi_of = inputs_of
    stages = []
    a = 0
    while a < count:
        lo, hi, b = np.iinfo(np.int64).max, -1, a
        while b < count:
            nlo, nhi = (min(lo, lo_of[b]), max(hi, hi_of[b])) if hi_of[b] >= 0 else (lo, hi)
            if not fits(b + 1 - a, nhi - nlo + 1 if nhi >= 0 else 0):
                break
            lo, hi, b = nlo, nhi, b + 1
        if b == a:
            raise refuse(a)
        n_in = hi - lo + 1 if hi >= 0 else 0
        stages.append(Stage((a, b), (int(lo), int(lo) + int(n_in)) if n_in else (0, 0)))
        a = b
    return stages


def _input_spans(count: int, outputs: np.ndarray, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lo_of = np.full(count, np.iinfo(np.int64).max)
    hi_of = np.full(count, -1)
    np.minimum.at(lo_of, outputs, inputs)
    np.maximum.at(hi_of, outputs, inputs)
    return lo_of, hi_of


def pixelmix(layer: PixelMixLayer, consts, plan: Plan, arch, consts_local: bool) -> LayerPlan:
    N = arch.array_size
    G = layer.input.G
    region0 = plan.memory.region0
    w_size = 0 if consts_local else len(consts.values) * N
    in_base = region0 + w_size
    room = arch.local_depth - in_base
    spans = _input_spans(layer.output.P, consts.out_pixel, consts.in_pixel)

    def refuse(a):
        lo_of, hi_of = spans
        return SchedulingError(
            f"layer {layer.name!r} needs {w_size} vectors of local memory for its {len(consts.values)} distinct coefficients "
            f"plus {G * (max(0, hi_of[a] - lo_of[a]) + 2)} for one output pixel, but the architecture has {arch.local_depth - region0}")

    stages = _bands(layer.output.P, spans, lambda n_out, n_in: G * n_out <= arch.accumulator_depth and G * n_in + G * n_out <= room,
                    refuse)
    local_peak = max((in_base + G * (s.inputs[1] - s.inputs[0]) + G * (s.outputs[1] - s.outputs[0]) for s in stages), default=0)
    acc_peak = max((G * (s.outputs[1] - s.outputs[0]) for s in stages), default=0)
    return LayerPlan(layer.name, "pixelmix", BANDS, "in place" if consts_local else "resident", stages, [(0, G)],
                     [_buffer("weights", region0, w_size), _buffer("input band, then staging", in_base, local_peak - in_base)],
                     [_acc("tile", 0, acc_peak)], local_peak, acc_peak, MixTiling(region0, w_size, in_base))


def shuffle(layer: ShuffleLayer, consts, plan: Plan, arch, consts_local: bool) -> LayerPlan:
    N = arch.array_size
    out = layer.output
    region0 = plan.memory.region0
    in_base = region0 + (0 if consts_local else N)
    room = arch.local_depth - in_base
    count = out.G * out.P
    stages = _bands(count, _input_spans(count, consts.out_vector, consts.in_vector),
                    lambda n_out, n_in: n_out <= arch.accumulator_depth and n_in + n_out <= room,
                    lambda a: SchedulingError(f"layer {layer.name!r} needs more than {room} vectors of local memory for one output vector"))
    local_peak = max((in_base + (s.inputs[1] - s.inputs[0]) + (s.outputs[1] - s.outputs[0]) for s in stages), default=0)
    acc_peak = max((s.outputs[1] - s.outputs[0] for s in stages), default=0)
    return LayerPlan(layer.name, "shuffle", BANDS, "in place" if consts_local else "streamed", stages, [(0, out.G)],
                     [_buffer("weights", region0, in_base - region0), _buffer("input band, then staging", in_base, local_peak - in_base)],
                     [_acc("tile", 0, acc_peak)], local_peak, acc_peak, MixTiling(region0, in_base - region0, in_base))


def remap(layer: RemapLayer, consts, plan: Plan, arch, consts_local: bool) -> LayerPlan:
    x = layer.input
    src = layer.source
    OH = src.shape[0]
    W, G = x.W, x.G
    region0 = plan.memory.region0
    avail = arch.local_depth - region0
    if layer.group_offset is None:
        partitions, groups = [(0, G)], [list(range(G))]
    else:
        # Output groups read input groups shifted by the offsets (a transposed conv's phases):
        # as many output groups at a time as one row of their input groups fits.
        offsets = sorted(set(np.unique(layer.group_offset).tolist()))
        ng = max(1, min(layer.output.G, avail // max(1, W * len(offsets))))
        partitions = [(g, min(layer.output.G, g + ng)) for g in range(0, layer.output.G, ng)]
        groups = [sorted({g + o for g in range(a, b) for o in offsets}) for a, b in partitions]
    G = max(len(gs) for gs in groups)
    if W * G > avail:
        raise SchedulingError(f"layer {layer.name!r} needs {W * G} vectors of local memory for one input row; the architecture has {avail}")
    stages, rows, local_peak = [], [], 0
    oh = 0
    while oh < OH:
        # As many output rows as their distinct input rows fit local memory.
        needed: dict[int, int] = {}
        oh1 = oh
        while oh1 < OH:
            new = set(src[oh1, :, 0].tolist()) - set(needed)
            if (len(needed) + len(new)) * W * G > avail:
                break
            for r in sorted(new):
                needed[r] = len(needed)
            oh1 += 1
        if oh1 == oh:
            raise SchedulingError(
                f"layer {layer.name!r} needs more than {avail} vectors of local memory for the input rows of output row {oh}")
        stages.append(Stage((oh, oh1), (min(needed), max(needed) + 1)))
        rows.append(list(needed))
        local_peak = max(local_peak, region0 + len(needed) * W * G)
        oh = oh1
    return LayerPlan(layer.name, "remap", BANDS, "none", stages, partitions, [_buffer("input rows", region0, local_peak - region0)],
                     [], local_peak, 0, RemapTiling(rows, region0, groups))


TILERS = {ConvLayer: conv, MaxPoolLayer: maxpool, PixelMixLayer: pixelmix, ShuffleLayer: shuffle, RemapLayer: remap}
TILERS[TensorMatMulLayer] = matmul_tensors
TILERS[TokenTransposeLayer] = transpose_tokens


def tile_layers(plan: Plan, ctx) -> Plan:
    """The pass: a ``LayerPlan`` for every layer."""
    consts_local = plan.memory.consts_local
    pipeline = getattr(ctx, "pipeline", True)
    schedule = getattr(ctx, "schedule", True)
    serial = getattr(ctx, "tune", "tensil") == "tensil"
    layers = [conv(layer, c.data, plan, ctx.arch, consts_local, pipeline, schedule, serial) if isinstance(layer, ConvLayer) else
              TILERS[type(layer)](layer, c.data, plan, ctx.arch, consts_local)
              for layer, c in zip(plan.hir.layers, plan.constants.layers)]
    return dataclasses.replace(plan, layers=layers)
