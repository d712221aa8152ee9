"""Long reductions in parts: a dense layer over many input channels becomes one layer per block
of channels, each with its own calibrated gain, summed exactly at the end.

A calibrated gain (``amplify_weights``) is as large as the layer's largest partial
or final sum allows. A classifier head sums 2,048 products into logits that reach 13 on the
samples and 35 on some inputs, so ResNet-50 v2's head gets a gain of 2, and the rounding of its
2,048 products (``rne`` each, about 1/12 LSB^2 at the gain's scale) was most of the error in
its top-2 logits' difference, which decides the class. A sum over 256 of the channels is several times
smaller, so each part takes more gain (there 2^4 to 2^5); its product rounding shrinks by that
factor squared, for one more rounding per part (the multiply that undoes its gain). On 1,000
inputs (``scripts/agreement.py --model resnet50v2 --arch ultra96v2 --samples 32``) the top-2
difference's error fell from 7.2 to 3.8 LSB RMS and the same class from 98.4% to 99.4%.

Every part but the last saves its partial result (rounded once); the last part adds them with
accumulator ``add`` operations, exact, after undoing its own gain and before the layer's own
activations. A one-pixel layer's partial results are stored, and summed, at the finest exponent
the whole sum's range allows (``tensor_exponents``: the parts' own tensors; a multiply then takes
the sum to the output's exponent), so a part's rounding costs ``1 / G^2`` of one at the
output's scale; a map's too where its ranges are measured (calibrated: that multiply costs a SIMD
operation per output vector), else at its output's (``tensor_exponents.maps_apart``). A one-pixel
layer's bias is added last the same way (in a part it would take some of its room for gain); a map's stays in the last part's bias row (added apart, it would be one more
pass over the map).

Maps are split too (issue 20: long reductions are most of a plain compile's error on YOLOv4-tiny
and ResNet-50 v2, whose 3x3 convolutions sum 576 to 4,608 products at gains of 4 to 8), but a
map's parts cost: each saves its partial map and the last adds it back, about two vectors moved
per output vector a part, against ``K / N`` MatMul vectors per output vector and the weight loads
between them. So a map takes no more parts than ``map_parts`` allows (``MAP_PART_COST`` of the
array's time on it), and only a long reduction takes any: on ``ultra96v2`` (16 lanes) a 3x3 conv
over a 48x48 map of 64 channels may take 2, over a 24x24 map of 256 channels 5 (4 in whole
vectors), over a 6x6 one 6 (the weight loads are much of its time), over ResNet-50's 7x7 maps of
512 channels 11; a 3x3 conv over 32 channels none. The loads were left out until 2026-11-28, when
6x6 over 256 channels took 4 parts and 7x7 over 512 8. On ``ultra96v2``, 64 random normal inputs
(16 for the two large models), ``benchmarks/bench_accuracy.py``'s plain compiles went from 3.85 to 2.98
times the format's limit (YOLOv4-tiny), 2.82 to 2.01 (ResNet-50 v2) and 2.03 to 1.84 (the
untuned VGG), for 4.8%, 4.0% and 1.3% more time on the ultra96-v2 (``systolix bench``). The
estimate that sizes a plain split (``_split_by_estimate``) gives a map's last part the range of
its own sum, and the layers after it the whole layer's output: a batch norm's statistics
describe the whole sum, not a part's.

How long a part: a part of ``K`` products at gain ``G_K`` rounds ``K / G_K^2`` products' worth
(``1/12 LSB^2`` each) and then once more, undoing its gain. A sum of ``K`` products with weights
of mean zero spreads as ``sqrt(K)``, so a part of ``K`` of the ``C`` takes ``G_K = G sqrt(C / K)``
(``G`` the whole layer's gain), and the ``C / K`` parts round ``K / G^2 + C / K`` in all, least at
``K = G sqrt(C)``: a part as long as its own gain squared. Plain compiles size their parts so, from the whole layer's
estimated gain (the median of its channels'). Calibrated ones sum a one-pixel layer's parts at
the whole sum's scale, about ``G``, where a part's rounding is ``G^2`` times smaller: ``C / K``
parts round ``K / G^2 + C / (K G^2)``, least at ``K = sqrt(C)``, but no shorter than
``MIN_PART_PRODUCTS`` (``measured_part_channels``: a short part's tail is heavier than its
samples show). On the unit test's 2,048-input head (seeds 0 to 3 and 5, ``ultra96v2``) the error
was 1.7-2.3 LSB RMS whole, 1.0-1.05 in 8 parts of 256 summed at the output's scale (the rule
before), 0.63-0.78 in the same 8 parts, 0.55-0.59 in 16 parts of 128 and 0.44-0.72 in 64 parts of
32 summed at the whole sum's. Estimated ranges are too wide to leave most plain heads that room
(ResNet-20 v2's logits: an estimated 77 for a real 10), so plain compiles keep their rule.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from systolix.hir_passes.amplify_weights import channel_gains
from systolix.hir_passes.estimate_ranges import RangeEstimate, one_blas_thread
from systolix.hir_passes.gain_payoff import PART_NODE
from systolix.hir_passes.measure_ranges import LayerRange
from systolix.ir.hir import Activation, ConvLayer, HirProgram
from systolix.ir.postops import AddConstant, AddTensor

# The shortest part of a calibrated compile's one-pixel layer, in products. A short sum of a few
# sparse features has a heavier tail than its samples' peaks show, and a one-pixel layer keeps
# ``amplify_weights``' fixed headrooms: ResNet-50 v2's head in 64 parts of 32 channels,
# calibrated on 32 image-like samples, took 13 parts of one of the 100 image-like inputs of
# ``tests/e2e/test_compile_networks.py`` past their range (up to 1.31x); in 32 parts of 64, one
# (1.05x); in 16 parts of 128, none (at most 0.81x of it).
MIN_PART_PRODUCTS = 128
# A split map's saves and adds may cost up to this share of the array's time on it (``map_parts``).
MAP_PART_COST = 0.06
# Clocks per lane a weight block costs the array besides its MatMuls: Tensil's array has no second
# weight buffer, so the last input leaves it (``2N - 1`` clocks) before ``N + 1`` vectors load.
WEIGHT_LOAD_CLOCKS = 3
# Images a weight block streams when the parts are priced: a batch program's small maps share
# their weight tiles, so there the loads are a smaller share of the time and the parts a larger
# one. A program's parts are the same at every batch (its outputs the batch-1 program's, bit for
# bit), so they are priced where they cost most, at the batch of four ``systolix bench`` runs (the
# DPU's): priced at one image, YOLOv4-tiny's batch-4 program on the ultra96-v2 took 2.3% more
# clocks (69.6% of its compute bound, against issue 19's 70%), at four 1.2% (70.3%).
PRICED_IMAGES = 4


def reduction_parts(layer, N: int, part_channels: int | None = None, maps: bool = True) -> list[tuple[int, int]] | None:
    """The ``(first, end)`` input channels of each part of ``layer``, or None to leave it whole:
    one dense input read in place (planar, or one pixel), no scaling of its own, and at least two
    parts' worth of input channels (``part_channels``, by default ``measured_part_channels``,
    rounded down to whole vectors, at least one). A layer of more than one output pixel
    takes no more parts than ``map_parts`` allows (none with ``maps=False``): its parts are then
    longer."""
    if not isinstance(layer, ConvLayer) or len(layer.inputs) != 1 or layer.scaling_ops or layer.phases != 1:
        return None
    (inp,) = layer.inputs
    if inp.weights is None:
        return None
    # A part reads its channel groups of the input in place: contiguous in a planar tensor, or at
    # one pixel in any order.
    if inp.act.P != 1 and inp.act.order != "planar":
        return None
    if part_channels is None:
        part_channels = measured_part_channels(layer)
    per_part = max(1, part_channels // N) * N
    C = inp.act.C
    if layer.output.P != 1:
        most = map_parts(layer, N) if maps else 1
        if most < 2 or not _dense(inp.weights):
            return None
        per_part = max(per_part, math.ceil(C / most / N) * N)
        if C <= per_part:
            return None
    elif C < 2 * per_part:
        return None
    return [(c0, min(C, c0 + per_part)) for c0 in range(0, C, per_part)]


def measured_part_channels(layer: ConvLayer) -> int:
    """Input channels a part for a calibrated compile: ``sqrt(C T) / T`` for ``T`` products a
    channel, at least ``MIN_PART_PRODUCTS`` (and one channel). The parts are summed at the whole
    sum's scale (``tensor_exponents``), about the whole layer's gain ``G``: a part's rounding
    there costs ``1 / G^2`` of one at the output's, and the module's note's optimum
    ``K = G sqrt(C T)`` shrinks by ``G`` to ``sqrt(C T)`` products."""
    T = taps(layer)
    return max(1, round(max(math.sqrt(layer.inputs[0].act.C * T), MIN_PART_PRODUCTS) / T))


def _dense(weights: np.ndarray) -> bool:
    """Whether some output reads every input channel. A grouped conv's outputs each read their
    own group (the other weights zero): parts of whole vectors would hold whole groups, so no
    output's sum would be any shorter, and every part would still save and add a whole map
    (RegNetX-400MF at 64x64: 24% more time, its error 4% larger)."""
    reads = np.any(weights != 0, axis=(2, 3)).sum(axis=1)
    return int(reads.max(initial=0)) == weights.shape[1]


def map_parts(layer: ConvLayer, N: int) -> int:
    """The most parts a layer of more than one output pixel takes: every part but the last saves
    its partial map and the last adds it back (about two vectors moved per output vector a part),
    against the array's time on the layer, which parts may cost up to ``MAP_PART_COST`` of: per
    output vector ``K / N`` MatMul vectors for ``K`` products, and per weight block it loads
    ``WEIGHT_LOAD_CLOCKS`` lanes' worth besides its ``PRICED_IMAGES`` images' vectors. On a large
    map that is the MatMuls alone; on a small one the loads are much of it (a 6x6 map streams 144
    vectors a block for four images against 48 clocks of load on 16 lanes), and its parts cost
    that much less of its time."""
    products = layer.inputs[0].act.C * taps(layer)
    vectors = layer.output.H * layer.output.W * PRICED_IMAGES  # a weight block's MatMul vectors
    array_share = (vectors + WEIGHT_LOAD_CLOCKS * N) / vectors  # the array's clocks per MatMul vector
    return 1 + int(MAP_PART_COST * products * array_share / (2 * N))


def taps(layer: ConvLayer) -> int:
    """Products a channel adds to each output: the kernel's size."""
    return layer.kernel[0] * layer.kernel[1]


def split_long_reductions(hir: HirProgram, ctx) -> HirProgram:
    """The pass: every layer ``reduction_parts`` splits becomes its parts, in order, the last one
    writing the layer's output. Runs before the ranges are measured or estimated, so each part
    gets its own gains; plain compiles too, in parts of ``plain_part_channels`` (the test's
    2,048-input head, plain, seeds 0, 1 and 5, ``ultra96v2``: 14.0, 8.1 and 9.9 LSB RMS whole;
    13.9, 3.4 and 3.2 in 8 parts of 256; 3.2, 2.5 and 2.1 in 43, 22 and 32 parts of ``G sqrt(C)``;
    ResNet-20 v2's 256-input head took the error of its logits from 3.4 to 2.2 times the format's
    limit, three estimate seeds, 64 random normal inputs). A float architecture rounds
    nothing, so its layers stay whole; without gains (a plain compile without ``estimate_gains``)
    the parts would only cost, so it stays whole too. A plain compile that splits leaves the
    estimate that sized the parts in ``HirProgram.ranges``, every layer's, parts included, for
    ``estimate_ranges`` to keep (one estimate rather than two: ResNet-50 v2's takes 8 to 11 s)."""
    if not ctx.arch.data_type.is_fixed or not (ctx.samples or ctx.estimate_gains):
        return hir
    maps = getattr(ctx, "split_maps", True)
    if not any(reduction_parts(layer, hir.N, hir.N, maps=maps) for layer in hir.layers):
        return hir
    if not ctx.samples:
        with one_blas_thread():
            return _split_by_estimate(hir, ctx.arch.data_type, maps)
    layers = []
    for layer in hir.layers:
        parts = reduction_parts(layer, hir.N, maps=maps)
        layers.extend([layer] if parts is None else _parts(layer, parts, hir.N))
    return dataclasses.replace(hir, layers=layers)


def _split_by_estimate(hir: HirProgram, dtype, maps: bool = True) -> HirProgram:
    """A plain compile's split: each layer that may be split is sized from its estimated range
    (``estimate_ranges.RangeEstimate.peek``) and its parts run in the estimate in its place, so the
    program leaves with the ranges of every layer (``HirProgram.ranges``) from one estimate."""
    run = RangeEstimate(hir)
    layers: list = []
    ranges: dict[int, LayerRange] = {}
    for layer in hir.layers:
        parts = whole = None
        if reduction_parts(layer, hir.N, hir.N, maps=maps):
            whole = run.peek(len(layers), layer)
            parts = reduction_parts(layer, hir.N, plain_part_channels(layer, whole, dtype, hir.N), maps=maps)
        pieces = [layer] if parts is None else _parts(layer, parts, hir.N)
        for piece in pieces:
            if piece is pieces[-1] and len(pieces) > 1 and layer.output.P != 1:
                # The statistics describe the whole sum: the last part's own range is its own
                # sum's, and the output the layers after it see is the whole layer's. Not for a
                # one-pixel layer: there the untuned MLP's dense layers with batch norms went from
                # 1.69 to 1.73 times the limit's error with it (not analysed).
                ranges[len(layers)] = run.peek(len(layers), piece)
                run.step(len(layers), layer)
            else:
                seen = run.step(len(layers), piece)
                if seen is not None:
                    ranges[len(layers)] = seen
            if piece is pieces[-1] and len(pieces) > 1:
                # Where the parts are summed: the whole layer's range (``tensor_exponents``).
                ranges[len(layers)] = dataclasses.replace(ranges[len(layers)], whole=whole)
            layers.append(piece)
    return dataclasses.replace(hir, layers=layers, ranges=ranges)


def plain_part_channels(layer: ConvLayer, seen: LayerRange, dtype, N: int) -> int:
    """Input channels a part for an estimated-gain compile: ``G sqrt(C T) / T`` for ``T`` products
    a channel (``G sqrt(C)`` products a part, the module's note, over ``C T``), ``G``
    the gain ``amplify_weights`` would give the whole layer (its channels' median), in whole
    vectors, at least one."""
    gain = 2.0 ** float(np.median(channel_gains(layer, seen, dtype)))
    T = taps(layer)
    return max(N, round(gain * math.sqrt(layer.inputs[0].act.C * T) / T / N) * N)


def _parts(layer: ConvLayer, parts: list[tuple[int, int]], N: int) -> list[ConvLayer]:
    (inp,) = layer.inputs
    out = layer.output
    C = inp.act.C
    result: list[ConvLayer] = []
    partials: list[Activation] = []
    macs_left = int(layer.macs)
    # A one-pixel layer's bias is added after the parts, at the output's scale (in a part it
    # would take some of that part's room for gain); a map's stays in the last part's bias row
    # (added apart, it would be one more pass over the map).
    no_bias = np.zeros_like(layer.bias)
    bias_apart = out.P == 1 and bool(np.any(layer.bias))
    for j, (c0, c1) in enumerate(parts):
        last = j == len(parts) - 1
        # c0 is a multiple of N: the part reads whole vectors of the input, where they are.
        piece = Activation(f"{inp.act.name}[{c0}:{c1}]", c1 - c0, inp.act.H, inp.act.W, N, parent=(inp.act, c0 // N))
        macs = macs_left if last else int(layer.macs) * (c1 - c0) // C
        macs_left -= macs
        name = f"{layer.name} [{c0}:{c1}]"  # its input channels, as a slice
        if last:
            target = out
            post = [AddTensor(p, node=PART_NODE) for p in partials]
            if bias_apart:
                post.append(AddConstant(np.asarray(layer.bias, np.float32).reshape(out.C, 1, 1), node=PART_NODE))
            post += layer.post_ops
        else:
            target = Activation(f"{out.name} part {j + 1}", out.C, out.H, out.W, N)
            partials.append(target)
            post = []
        result.append(dataclasses.replace(
            layer, name=name, inputs=[dataclasses.replace(inp, act=piece, weights=inp.weights[:, c0:c1])], output=target,
            bias=layer.bias if last and not bias_apart else no_bias,
            post_ops=post, ops=list(layer.ops), nodes=list(layer.nodes), macs=macs, statistics=None))
    return result
