"""Pack a few-channel input for the conv that reads it (typically the stem), so lanes are not wasted.

An NCHW input of C channels sits one pixel to a vector of N lanes: a 3-channel image on a 16x16
array makes the host write 16 scalars for 3 values, and the stem's every tap is a MatMul
vector of which 3 lanes do work. When an input is read by exactly one conv layer (dense weights,
no dilation) and C < N, the driver may pack it while converting it to fixed point
(``systolix.runtime.layout.pack_input``, ``docs/tmodel-extension.md``):

* ``space_to_depth`` by the stride (SH x SW blocks, C*SH*SW channels): a stride-2 stem's input
  takes a quarter of the vectors and its conv becomes a stride-1 conv of ceil((K - P)/S)-ish
  taps over the blocks;
* ``im2col``: each output pixel's KH*KW*C window values in ceil(KH*KW*C/N) vectors, the conv a
  1x1 layer (fewest MatMuls, but the host writes every overlapping value again);
* ``row_window``: ``k`` consecutive output pixels of a row share one vector holding their
  windows' columns (``(k - 1)*SW + KW`` pixels of one input row, all channels); the conv becomes
  KH x 1 over the packed grid with ``k`` output phases (``ConvLayer.phases``): phase i's
  weights pick the lanes of output pixel ``k*x + i``'s window and its MatMuls write every k-th
  accumulator (Tensil's accumulator stride, a power of two: so is ``k``). The host writes
  about 1/k of the plain layout's vectors and overlaps only ``KW - SW`` pixels a vector.

The choice minimises, under the latency model's terms, host scalars written x the fitted host
cost per scalar + MatMul vectors x one clock (at ``PACK_CLOCK_MHZ``); the plain layout wins ties.
With the fitted 23 ns a scalar, what the host writes dominates. Row windows write the fewest
scalars where they fit (a 3x3 stride-1 stem on 3 channels: k = 2 on 12 to 16 lanes, 8 on 32;
a stride-2 one ties with space-to-depth and takes fewer MatMuls); on 8 lanes a stride-2 stem
packs by space-to-depth and a stride-1 3x3 stem on 3 channels stays plain (im2col would write 3
times more); im2col can still win at a large stride (a 3x3 stride-3 stem on 32 lanes: one
vector and one MatMul an output pixel, where row windows write every input row).

The weights are rearranged, not changed: every product of the plain conv (the same rounded
weight times the same input value) is made again, plus products with zero weights or zero
padding, which add exact zeros. The emulator and the RTL add exactly and saturate after each
add, so the sums are the same integers unless a partial sum saturates (then the order of the
adds, which differs, decides where it clamps).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from systolix.arch.board import FITTED_HOST_NS_PER_SCALAR
from systolix.ir.hir import Activation, ConvInput, ConvLayer, HirProgram

#: The array clock the choice assumes (the boards run 100 to 300 MHz).
PACK_CLOCK_MHZ = 150.0


@dataclasses.dataclass(frozen=True)
class Packing:
    """One way to pack: the ``.tmodel`` field and the conv over the packed tensor."""

    pack: dict | None  # None: the plain layout
    channels: int
    grid: tuple[int, int]
    weights: np.ndarray  # [Cout, channels, KH', KW']
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]
    phases: int = 1

    def cost_ns(self, cout: int, out_pixels: int, n: int) -> float:
        """Host writes plus MatMul vectors (one clock each), in nanoseconds."""
        groups = -(-self.channels // n)
        host = self.grid[0] * self.grid[1] * groups * n * FITTED_HOST_NS_PER_SCALAR
        # One MatMul vector an output pixel a tap (with phases: each pixel's phase's KH taps).
        matmuls = out_pixels * self.kernel[0] * self.kernel[1] * groups * -(-cout // n)
        return host + matmuls * 1e3 / PACK_CLOCK_MHZ


def _plain(layer: ConvLayer, act: Activation) -> Packing:
    return Packing(None, act.C, (act.H, act.W), layer.inputs[0].weights, layer.kernel, layer.stride, layer.pads)


def _im2col(layer: ConvLayer, act: Activation) -> Packing:
    (kh, kw), (sh, sw), out = layer.kernel, layer.stride, layer.output
    w = layer.inputs[0].weights
    cout = w.shape[0]
    pack = {"kind": "im2col", "window": [kh, kw], "stride": [sh, sw], "pads": [layer.pads[0], layer.pads[1]],
            "grid": [out.H, out.W]}
    # Packed channel (c*KH + i)*KW + j is tap (i, j) of channel c: ONNX's weight order flattened.
    return Packing(pack, act.C * kh * kw, (out.H, out.W), w.reshape(cout, act.C * kh * kw, 1, 1), (1, 1), (1, 1),
                   (0, 0, 0, 0))


def _space_to_depth(layer: ConvLayer, act: Activation) -> Packing | None:
    """Blocks of stride x stride pixels; tap k of the kernel reads block ``o + floor((k - P)/S)``
    at phase ``(k - P) mod S``, so the conv over blocks has stride 1 and taps ``d_min..d_max``."""
    (kh, kw), (sh, sw), out = layer.kernel, layer.stride, layer.output
    if (sh, sw) == (1, 1):
        return None
    w = layer.inputs[0].weights
    cout = w.shape[0]
    geometry = []
    for k, s, p, size, n_out in ((kh, sh, layer.pads[0], act.H, out.H), (kw, sw, layer.pads[1], act.W, out.W)):
        d_min, d_max = math.floor(-p / s), math.floor((k - 1 - p) / s)
        grid = min(-(-size // s), n_out + d_max)
        if grid < 1:
            return None
        geometry.append((d_min, d_max, grid, n_out + d_max - grid))
    (dh0, dh1, gh, bottom), (dw0, dw1, gw, right) = geometry
    packed = np.zeros((cout, act.C * sh * sw, dh1 - dh0 + 1, dw1 - dw0 + 1), w.dtype)
    for i in range(kh):
        th, ph = divmod(i - layer.pads[0], sh)
        for j in range(kw):
            tw, pw = divmod(j - layer.pads[1], sw)
            channels = (np.arange(act.C) * sh + ph) * sw + pw
            packed[:, channels, th - dh0, tw - dw0] = w[:, :, i, j]
    pack = {"kind": "space_to_depth", "window": [sh, sw], "stride": [sh, sw], "pads": [0, 0], "grid": [gh, gw]}
    return Packing(pack, act.C * sh * sw, (gh, gw), packed, packed.shape[2:], (1, 1), (-dh0, -dw0, bottom, right))


def _row_window(layer: ConvLayer, act: Activation, k: int) -> Packing | None:
    """``k`` output pixels of a row a vector: packed pixel (y, x) holds input row y's pixels
    ``k*SW*x - PL ..`` (``(k - 1)*SW + KW`` of them), lane ``c*BW + j`` pixel j's channel c.
    Output pixel ``k*x + i`` (phase i) reads pixels ``i*SW .. i*SW + KW - 1`` of it."""
    (kh, kw), (sh, sw), out = layer.kernel, layer.stride, layer.output
    bw = (k - 1) * sw + kw
    if act.C * bw > act.N or k > out.W:
        return None
    w = layer.inputs[0].weights
    gw = -(-out.W // k)
    packed = np.zeros((w.shape[0], act.C * bw, kh, k), w.dtype)
    for i in range(k):
        for j in range(kw):
            for c in range(act.C):
                packed[:, c * bw + i * sw + j, :, i] = w[:, c, :, j]
    pack = {"kind": "row_window", "window": [1, bw], "stride": [1, k * sw], "pads": [0, layer.pads[1]],
            "grid": [act.H, gw]}
    pads = (layer.pads[0], 0, layer.pads[2], 0)
    return Packing(pack, act.C * bw, (act.H, gw), packed, (kh, 1), (sh, 1), pads, k)


def _row_windows(layer: ConvLayer, act: Activation, max_phases: int) -> list[Packing]:
    """Row windows of every power of two k from 2 that fits a vector (and the accumulator
    stride, at most ``max_phases``)."""
    found = []
    k = 2
    while k <= max_phases:
        choice = _row_window(layer, act, k)
        if choice is None:
            break
        found.append(choice)
        k *= 2
    return found


def packing_for(layer: ConvLayer, act: Activation, max_phases: int = 128) -> Packing:
    """The cheapest packing of ``act`` for ``layer`` (the plain layout on ties); row windows of at
    most ``max_phases`` phases (the largest accumulator stride; 0: none)."""
    out = layer.output
    candidates = [c for c in (_plain(layer, act), _space_to_depth(layer, act), _im2col(layer, act),
                              *_row_windows(layer, act, max_phases)) if c is not None]
    return min(candidates, key=lambda c: c.cost_ns(out.C, out.H * out.W, act.N))


def _readers(hir: HirProgram, act: Activation) -> list:
    return [layer for layer in hir.layers if any(a.root()[0] is act for a in layer.reads())]


def packable(hir: HirProgram, name: str) -> ConvLayer | None:
    """The conv layer that alone reads input ``name``, if the input can be packed for it."""
    act = hir.inputs[name]
    shape = tuple(hir.input_shapes[name])
    if name in hir.perms or len(shape) != 4 or act.C >= act.N or act in hir.outputs.values():
        return None
    readers = _readers(hir, act)
    if len(readers) != 1 or not isinstance(readers[0], ConvLayer):
        return None
    layer = readers[0]
    if (len(layer.inputs) != 1 or layer.inputs[0].act is not act or layer.inputs[0].weights is None
            or layer.dilation != (1, 1) or any(p.tensor is act for p in layer.post_ops)):
        return None
    return layer


def pack_inputs(hir: HirProgram, ctx=None) -> HirProgram:
    """The pass: each packable input packed as ``packing_for`` chooses (``ctx.pack_inputs``
    False: none)."""
    if ctx is not None and not getattr(ctx, "pack_inputs", True):
        return hir
    layers, inputs, packs = list(hir.layers), dict(hir.inputs), dict(hir.packs)
    # A phase's MatMuls write every k-th accumulator: k is at most the largest stride encoded.
    max_phases = 1 << (ctx.arch.stride1_depth - 1) if ctx is not None else 128
    for name in hir.inputs:
        layer = packable(hir, name)
        if layer is None:
            continue
        act = hir.inputs[name]
        choice = packing_for(layer, act, max_phases)
        if choice.pack is None:
            continue
        packed = Activation(act.name, choice.channels, choice.grid[0], choice.grid[1], act.N, order="pixel")
        inputs[name] = packed
        packs[name] = choice.pack
        layers[layers.index(layer)] = dataclasses.replace(
            layer, inputs=[ConvInput(packed, weights=choice.weights.astype(np.float32))], kernel=tuple(choice.kernel),
            stride=choice.stride, pads=choice.pads, phases=choice.phases)
    if not packs:
        return hir
    return dataclasses.replace(hir, layers=layers, inputs=inputs, packs=packs)
