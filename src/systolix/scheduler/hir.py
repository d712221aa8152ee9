"""High-level IR: layers on memory objects.

An ``Activation`` is a variable memory object (a Var, in DRAM0): a ``C x H x W`` tensor stored
as vectors of N channels. Constants (Consts, DRAM1) are the layers' weights and the SIMD
constants; temporaries (Temp) are the accumulator tiles the scheduler assigns per stage.

Every layer is one of three kinds, as in the seed: a ``ConvLayer`` (a matrix multiplication on
the systolic array, then accumulator operations, then a save), a ``MaxPoolLayer`` (SIMD only)
and a ``RemapLayer`` (pure data movement: nearest resize, edge/reflect padding, transposes).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(eq=False)
class Activation:
    """A variable tensor ``C x H x W`` (batch 1), N channels to a vector.

    ``order`` is ``planar`` (group-major: all pixels of channel group 0, then group 1...; how
    the compiler keeps intermediate tensors, so that a channel group's rows are contiguous) or
    ``pixel`` (pixel-major, the groups of one pixel consecutive: the layout of the model's
    inputs and outputs, ``perm`` to channels-last). ``parent`` makes this tensor a slice of
    channel groups of another tensor (an aligned Concat or Split costs no data movement).
    """

    name: str
    C: int
    H: int
    W: int
    N: int
    order: str = "planar"
    parent: tuple["Activation", int] | None = None
    base: int = -1
    memory: str = "dram0"

    @property
    def G(self) -> int:
        return -(-self.C // self.N)

    @property
    def P(self) -> int:
        return self.H * self.W

    @property
    def vectors(self) -> int:
        return self.G * self.P

    def root(self) -> tuple["Activation", int]:
        """The tensor that owns the memory and this tensor's first channel group in it."""
        act, offset = self, 0
        while act.parent is not None:
            parent, g0 = act.parent
            act, offset = parent, offset + g0
        return act, offset

    def strides(self) -> tuple[int, int, int, int]:
        """``(base, group stride, row stride, column stride)`` in vectors of the owning memory.

        A tensor relabelled from another (a Reshape that keeps channels and pixel order) has its
        own ``H x W`` split of the same pixels, so rows are counted with its own width.
        """
        root, offset = self.root()
        if root.base < 0:
            raise RuntimeError(f"activation {root.name!r} has no memory yet")
        if root.order == "pixel":
            gs, ps = 1, root.G
        else:
            gs, ps = root.P, 1
        return root.base + offset * gs, gs, self.W * ps, ps

    def address(self, g: int, h: int, w: int) -> int:
        base, gs, hs, ws = self.strides()
        return base + g * gs + h * hs + w * ws


@dataclass
class PostOp:
    """An accumulator operation after the matrix multiplication, in the order ONNX applies them.

    kinds: ``add`` (``tensor``: add another activation), ``relu``, ``clip`` (``lo``, ``hi``),
    ``slope`` (``values``: per-channel slopes of LeakyRelu/PRelu), ``mul`` (``values``:
    per-channel multipliers), ``mul_pixel`` (``values``: one multiplier per output pixel).
    """

    kind: str
    tensor: Activation | None = None
    lo: float = 0.0
    hi: float = 0.0
    values: np.ndarray | None = None
    node: str = ""


@dataclass
class ConvInput:
    """One input of a ``ConvLayer`` and its weights (float).

    Either ``weights``, dense ``[Cout, Cin, KH, KW]``, or ``diagonal``, ``[C, KH, KW]`` for a
    layer where output channel c reads only input channel c (depthwise, per-channel scaling,
    pooling, copies): a 2048-channel average pool would take a gigabyte as dense weights.
    """

    act: Activation
    weights: np.ndarray | None = None
    diagonal: np.ndarray | None = None

    def dense(self) -> np.ndarray:
        """The weights as ``[Cout, Cin, KH, KW]`` (for small layers and tests)."""
        if self.weights is not None:
            return self.weights
        C = self.diagonal.shape[0]
        out = np.zeros((C, C) + self.diagonal.shape[1:], np.float32)
        out[np.arange(C), np.arange(C)] = self.diagonal
        return out

    @property
    def coefficients(self) -> np.ndarray:
        """``weights`` or ``diagonal``, whichever this input has (output channel first in both)."""
        return self.weights if self.weights is not None else self.diagonal

    def scaled(self, scale: np.ndarray) -> None:
        """Multiply output channel o's weights by ``scale[o]``."""
        if self.weights is not None:
            self.weights = self.weights * scale[:, None, None, None]
        else:
            self.diagonal = self.diagonal * scale[:, None, None]


@dataclass
class ConvLayer:
    """``out = post_ops(sum_i conv(inputs[i], weights_i) + bias)``; every input shares the geometry."""

    name: str
    inputs: list[ConvInput]
    output: Activation
    bias: np.ndarray
    kernel: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, left, bottom, right
    post_ops: list[PostOp] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    macs: int = 0
    scaling_ops: int = 0  # leading post ops that scale the sum into the output's range (an
    # average pool's 1/count); a calibrated gain is undone after them, not before

    kind = "conv"

    def reads(self) -> list[Activation]:
        return [i.act for i in self.inputs] + [p.tensor for p in self.post_ops if p.tensor is not None]


@dataclass
class MaxPoolLayer:
    """Max over a window, computed with SIMD Max on the accumulators."""

    name: str
    input: Activation
    output: Activation
    kernel: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    ops: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    macs: int = 0

    kind = "maxpool"

    def reads(self) -> list[Activation]:
        return [self.input]


@dataclass
class RemapLayer:
    """Pure data movement: output pixel ``(h, w)`` is input pixel ``source[h, w]`` (all channels)."""

    name: str
    input: Activation
    output: Activation
    source: np.ndarray  # [OH, OW, 2] input (row, column)
    ops: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    macs: int = 0

    kind = "remap"

    def reads(self) -> list[Activation]:
        return [self.input]


@dataclass
class PixelMixLayer:
    """A linear map over pixels, the same for every channel: ``out[c, q] = sum_p M[q, p] in[c, p]``.

    ``M`` is sparse, as entries ``(out_pixel, in_pixel, coefficient)``; linear and cubic
    resizes are two of these (rows, then columns). Each distinct coefficient is one diagonal
    weight block; every pixel pair using it streams through the array while it is loaded.
    """

    name: str
    input: Activation
    output: Activation
    out_pixel: np.ndarray
    in_pixel: np.ndarray
    coefficient: np.ndarray
    ops: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    macs: int = 0

    kind = "pixelmix"

    def reads(self) -> list[Activation]:
        return [self.input]


@dataclass
class ShuffleLayer:
    """Any rearrangement of elements (a Reshape or Transpose that moves channels): element
    ``(c, p)`` of the output is element ``source[c, p]`` (a ``c * P + p`` id) of the input.

    Lanes move between vectors only through the array: each (input lane, output lane) pair is a
    one-entry weight block, and every element that moves that way is one exact MatMul.
    """

    name: str
    input: Activation
    output: Activation
    source: np.ndarray  # [C_out, P_out] element ids of the input
    ops: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    macs: int = 0

    kind = "shuffle"

    def reads(self) -> list[Activation]:
        return [self.input]


Layer = ConvLayer | MaxPoolLayer | RemapLayer | PixelMixLayer | ShuffleLayer


@dataclass
class HirProgram:
    """The model as layers, with the activations that are its inputs and outputs."""

    name: str
    N: int
    layers: list[Layer]
    inputs: dict[str, Activation]
    outputs: dict[str, Activation]
    input_shapes: dict[str, tuple[int, ...]]
    output_shapes: dict[str, tuple[int, ...]]
    node_placement: dict[str, str] = field(default_factory=dict)
    perms: dict[str, list[int]] = field(default_factory=dict)
    """Inputs/outputs whose DRAM layout is not the canonical one for their shape (NHWC tensors)."""
    gains: dict[str, np.ndarray] = field(default_factory=dict)
    """Calibrated compiles (``systolix.scheduler.precision``): per conv layer whose weights were
    amplified, each output channel's exponent."""
    rounded: list[str] = field(default_factory=list)
    """Calibrated compiles (``systolix.scheduler.rounding``): conv layers whose weights were rounded
    to keep their outputs on the samples close to the float ones."""
