"""Place constants: every layer's weight blocks, biases and post-op constants, rounded to the
data type, in one image (the ``.tdata``), layer by layer in program order.

A conv layer's constants are, per output channel group, its bias vector then its nonzero
N x N weight blocks (each ``block[in lane, out lane]``; a block equal to the one before it, as
every tap of an average pool, is stored once); then the tensors its post-ops add from the image;
then the vectors its post-ops load beside the accumulators. A pixel mix stores one diagonal
block per distinct coefficient, a shuffle one single-entry block per pair of lanes it moves.
The image is the same for every strategy: only where it lives differs (DRAM1, or local memory
from address 0 with local-consts).
"""

from __future__ import annotations

import numpy as np

from systolix.ir.hir import ConvLayer, HirProgram, PixelMixLayer, ShuffleLayer
from systolix.ir.plan import (
    ConstantImage,
    ConvConstants,
    LayerConstants,
    PixelMixConstants,
    Plan,
    ShuffleConstants,
)
from systolix.ir.postops import ConstantSink
from systolix.numerics import DataType, to_fixed
from systolix.ir.hir import TensorMatMulLayer
from systolix.planning.matmul_tensors import matmul_tensors_constants


class ImageBuilder:
    """Constants (raw vectors) appended in order; offsets in vectors."""

    def __init__(self, N: int, dtype: DataType):
        self.N, self.dtype = N, dtype
        self.chunks: list[np.ndarray] = []
        self.size = 0

    def add(self, vectors: np.ndarray) -> int:
        v = np.asarray(vectors, np.int64).reshape(-1, self.N)
        offset = self.size
        self.chunks.append(v)
        self.size += v.shape[0]
        return offset

    def q(self, values) -> np.ndarray:
        return to_fixed(np.asarray(values, np.float32), self.dtype)

    def image(self) -> np.ndarray:
        if not self.chunks:
            return np.zeros((0, self.N), np.int64)
        return np.concatenate(self.chunks, axis=0)


def conv_blocks(layer: ConvLayer, b: ImageBuilder):
    """Rounded weight blocks and bias vectors per output group:
    ``(per_go[go] = [(input, kh, kw, input group, block)], bias [G, N])``."""
    N = b.N
    out = layer.output
    Go = out.G
    # With output phases the weights' last axis is the phase: a block's ``kw`` is its phase.
    KH, KW = layer.kernel[0], layer.kernel[1] * layer.phases
    per_go: list[list[tuple[int, int, int, int, np.ndarray]]] = [[] for _ in range(Go)]
    for i, inp in enumerate(layer.inputs):
        Gi = inp.act.G
        if inp.diagonal is not None:
            # Output channel c reads input channel c: only the diagonal blocks exist.
            diag = np.zeros((Go * N, KH, KW), np.float32)
            diag[: inp.diagonal.shape[0]] = inp.diagonal
            qd = b.q(diag).reshape(Go, N, KH, KW)
            for go in range(min(Go, Gi)):
                for kh in range(KH):
                    for kw in range(KW):
                        lanes = qd[go, :, kh, kw]
                        if lanes.any():
                            per_go[go].append((i, kh, kw, go, np.diag(lanes)))
            continue
        dense = np.zeros((Go * N, Gi * N, KH, KW), np.float32)
        dense[: out.C, : inp.act.C] = inp.weights
        qw = b.q(dense).reshape(Go, N, Gi, N, KH, KW)
        # [go, kh, kw, gi, in lane, out lane]
        blocks = qw.transpose(0, 4, 5, 2, 3, 1)
        nonzero = blocks.any(axis=(4, 5))
        for go, kh, kw, gi in zip(*np.nonzero(nonzero)):
            per_go[go].append((i, int(kh), int(kw), int(gi), blocks[go, kh, kw, gi]))
    # A block whose tap reads real input for every output pixel goes first, next to the bias: the
    # emitter loads the two together and that block's MatMul writes the tile (systolix.codegen.conv),
    # in the order the weights stream in.
    (sh, sw), (dh, dw), (pt, pl) = layer.stride, layer.dilation, layer.pads[:2]

    def covers(i: int, kh: int, kw: int) -> bool:
        H, W = layer.inputs[i].act.H, layer.inputs[i].act.W
        rows = kh * dh >= pt and (out.H - 1) * sh + kh * dh - pt <= H - 1
        if layer.phases > 1:
            return rows  # a phase's block reads every packed pixel of its rows
        return rows and kw * dw >= pl and (out.W - 1) * sw + kw * dw - pl <= W - 1

    # A part summed apart (``postops.AddPart``) has its own blocks, after the layer's own, and its
    # own covering block first among them, to carry its bias.
    parts = [set(p.inputs) for p in layer.post_ops if p.kind == "add_part"]
    own = set(range(len(layer.inputs))) - set().union(*parts)
    for go, blocks in enumerate(per_go):
        if layer.phases > 1:
            # One covering block a phase, phase by phase: each writes its phase's outputs.
            firsts = [next((j for j, blk in enumerate(blocks) if blk[2] == i and covers(*blk[:3])), None)
                      for i in range(layer.phases)]
            if None not in firsts:
                front = [blocks[j] for j in firsts]
                blocks[:] = front + [blk for j, blk in enumerate(blocks) if j not in firsts]
            continue
        segments = [[blk for blk in blocks if blk[0] in inputs] for inputs in [own] + parts]
        for segment in segments:
            j = next((j for j, blk in enumerate(segment) if covers(*blk[:3])), None)
            if j:
                segment.insert(0, segment.pop(j))
        blocks[:] = [blk for segment in segments for blk in segment]
    return per_go, _group_vectors(layer.bias, Go, b)


def _group_vectors(values, groups: int, b: ImageBuilder) -> np.ndarray:
    """Per-channel values as ``groups`` rounded vectors (padding lanes zero)."""
    padded = np.zeros(groups * b.N, np.float32)
    padded[: len(values)] = values
    return b.q(padded).reshape(groups, b.N)


def conv_constants(layer: ConvLayer, b: ImageBuilder) -> ConvConstants:
    per_go, bias = conv_blocks(layer, b)
    # Each part summed apart stores its bias vector right before its first block (``conv_blocks``
    # put its blocks after the layer's own), so that a chunk of its weights starts with it.
    part_ops = [p for p in layer.post_ops if p.kind == "add_part"]
    part_of = {i: k for k, p in enumerate(part_ops) for i in p.inputs}
    part_bias = [_group_vectors(p.bias, layer.output.G, b) for p in part_ops]
    addresses = []
    part_addresses = []
    stored = 0
    for go, blocks in enumerate(per_go):
        vectors = [bias[go][None, :]]
        size = 1  # vectors so far
        addrs: list[int] = []
        at = [0] * len(part_ops)
        for j, block in enumerate(blocks):
            k = part_of.get(block[0])
            starts = k is not None and (j == 0 or part_of.get(blocks[j - 1][0]) != k)
            if starts:
                at[k] = size
                vectors.append(part_bias[k][go][None, :])
                size += 1
            if j and not starts and np.array_equal(block[4], blocks[j - 1][4]):
                addrs.append(addrs[-1])
            else:
                addrs.append(size)
                vectors.append(block[4])
                size += b.N
        # A part without a nonzero block in this group still has its bias (its sum here), after
        # the blocks: not the layer's own bias at the group's start (which it read before).
        started = {part_of[blk[0]] for blk in blocks if blk[0] in part_of}
        for k in range(len(part_ops)):
            if k not in started:
                at[k] = size
                vectors.append(part_bias[k][go][None, :])
                size += 1
        base = b.add(np.concatenate(vectors, axis=0))
        addresses.append((base, [base + a for a in addrs]))
        part_addresses.append([base + a for a in at])
        stored += size
    sink = ConstantSink(b.N, layer.output.G, b.q, b.add)
    slots = [p.constants(sink) for p in layer.post_ops]
    simd_offset = b.add(np.array(sink.vectors)) if sink.vectors else -1
    return ConvConstants([[blk[:4] for blk in blocks] for blocks in per_go], addresses, stored, slots, len(sink.vectors),
                         simd_offset, part_addresses if part_ops else [])


def pixelmix_constants(layer: PixelMixLayer, b: ImageBuilder) -> PixelMixConstants:
    q = b.q(layer.coefficient)
    keep = q != 0
    po, pi, q = layer.out_pixel[keep], layer.in_pixel[keep], q[keep]
    order = np.lexsort((pi, po))
    po, pi, q = po[order], pi[order], q[order]
    values = np.unique(q)
    blocks = np.concatenate([np.diag(np.full(b.N, v, np.int64)) for v in values]) if len(values) else np.zeros((0, b.N), np.int64)
    offset = b.add(blocks) if len(values) else 0
    return PixelMixConstants(po, pi, q, values, offset)


def shuffle_constants(layer: ShuffleLayer, b: ImageBuilder) -> ShuffleConstants:
    N = b.N
    x = layer.input
    C_out, P_out = layer.source.shape
    sc, sp = np.divmod(layer.source, x.P)
    co = np.broadcast_to(np.arange(C_out)[:, None], (C_out, P_out))
    ov = ((co // N) * P_out + np.arange(P_out)[None, :]).reshape(-1)
    ol = (co % N).reshape(-1)
    iv = ((sc // N) * x.P + sp).reshape(-1)
    il = (sc % N).reshape(-1)
    order = np.lexsort((iv, ov))
    ov, ol, iv, il = ov[order], ol[order], iv[order], il[order]
    pairs = np.unique(il * N + ol)
    blocks = np.zeros((len(pairs), N, N), np.int64)
    blocks[np.arange(len(pairs)), pairs // N, pairs % N] = b.dtype.one
    offset = b.add(blocks.reshape(-1, N))
    return ShuffleConstants(ov, iv, il * N + ol, pairs, offset)


CONSTANTS = {ConvLayer: conv_constants, PixelMixLayer: pixelmix_constants, ShuffleLayer: shuffle_constants}
CONSTANTS[TensorMatMulLayer] = matmul_tensors_constants


def place_constants(hir: HirProgram, ctx) -> Plan:
    """The pass: the constant image of ``hir`` and each layer's share, as a new ``Plan``."""
    b = ImageBuilder(hir.N, ctx.arch.data_type)
    layers = []
    for layer in hir.layers:
        start = b.size
        make = CONSTANTS.get(type(layer))
        data = make(layer, b) if make is not None else None
        layers.append(LayerConstants(b.size - start, data))
    return Plan(hir, ctx.strategy, ctx.arch.local_depth, ConstantImage(b.image(), layers))
