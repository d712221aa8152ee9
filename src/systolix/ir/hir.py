"""HIR: the model as layers on memory objects.

An ``Activation`` is a variable memory object (a Var): a ``C x H x W`` tensor stored as vectors
of N channels. Where it lives (DRAM0, or local memory with local-vars) is decided later, by the
memory map of the plan (``systolix.ir.plan.MemoryMap``); the HIR says only what is computed.

Every layer is a ``Layer``: a ``ConvLayer`` (a matrix multiplication on the systolic array, then
accumulator operations, then a save, as in Tensil), a ``MaxPoolLayer`` (SIMD only), or pure data
movement and mixing (``RemapLayer``, ``PixelMixLayer``, ``ShuffleLayer``). A conv layer's
accumulator operations are post-ops (``systolix.ir.postops``), each of a registered kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from systolix.ir.postops import PostOp
from systolix.ir.structure import Structural, describe_array


@dataclass(eq=False)
class Activation:
    """A variable tensor ``C x H x W`` (batch 1), N channels to a vector.

    ``order`` is ``planar`` (group-major: all pixels of channel group 0, then group 1...; how
    the compiler keeps intermediate tensors, so that a channel group's rows are contiguous) or
    ``pixel`` (pixel-major, the groups of one pixel consecutive: the layout of the model's
    inputs and outputs). ``parent`` makes this tensor a slice of channel groups of another
    tensor (an aligned Concat or Split costs no data movement), or a relabelling of it with its
    own ``H x W`` split of the same pixels (a Reshape).
    """

    name: str
    C: int
    H: int
    W: int
    N: int
    order: str = "planar"
    parent: tuple["Activation", int] | None = None

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

    def groups(self) -> tuple["Activation", int, int]:
        """``(root, first, end)``: the channel groups of the root's memory this tensor covers."""
        root, g0 = self.root()
        return root, g0, g0 + self.G

    def overlaps(self, other: "Activation") -> bool:
        """Whether the two tensors share any vector of memory."""
        ra, a0, a1 = self.groups()
        rb, b0, b1 = other.groups()
        return ra is rb and a0 < b1 and b0 < a1

    def text(self) -> str:
        where = ""
        if self.parent is not None:
            where = f" in {self.parent[0].name}[group {self.parent[1]}]"
        return f"{self.name} {self.C}x{self.H}x{self.W}" + (" pixel-major" if self.order == "pixel" else "") + where


class Layer:
    """What every layer has: ``name``, ``output`` (an ``Activation``), the ONNX ``ops`` and
    ``nodes`` it computes, its useful ``macs``; ``reads()`` lists the activations it reads."""

    kind = "layer"
    name: str
    output: Activation
    ops: list[str]
    nodes: list[str]
    macs: int

    def reads(self) -> list[Activation]:
        raise NotImplementedError

    def writes(self) -> list[Activation]:
        """The activations it writes: its output, and for a conv layer whose tail saves a copy of
        its tile midway (``postops.Save``), that copy too."""
        return [self.output]

    def details(self) -> list[str]:
        """Lines of the printed form after the first (geometry, weights, post-ops)."""
        return []

    def text(self) -> str:
        reads = ", ".join(a.name for a in self.reads())
        writes = ", ".join(a.text() for a in self.writes())
        head = f"{self.kind} {self.name!r} ({'+'.join(self.ops)}): {reads} -> {writes}"
        if self.macs:
            head += f", {self.macs:,} MACs"
        return "\n".join([head] + ["    " + line for line in self.details()])


@dataclass(eq=False)
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

    def scaled(self, scale: np.ndarray) -> "ConvInput":
        """This input with output channel o's weights multiplied by ``scale[o]``."""
        if self.weights is not None:
            return ConvInput(self.act, weights=self.weights * scale[:, None, None, None])
        return ConvInput(self.act, diagonal=self.diagonal * scale[:, None, None])

    def is_identity(self) -> bool:
        """A 1x1 per-channel input of weight one: the layer passes this input through."""
        d = self.diagonal
        return d is not None and d.shape[1:] == (1, 1) and d.shape[0] == self.act.C and bool(np.all(d == 1.0))


@dataclass(eq=False)
class ConvLayer(Layer):
    """``out = post_ops(sum_i conv(inputs[i], weights_i) + bias)``; every input shares the geometry.

    ``open``: later element-wise ops may join this layer (fusion) and per-channel affine ones
    fold into its weights; the lowering closes the layers that implement data movement (Concat,
    Split, Pad) and pools, whose weights and post-ops have a fixed meaning.
    ``scaling_ops``: leading post-ops that scale the sum into the output's range (an average
    pool's 1/count); a calibrated gain is undone after them, not before.
    ``foldable``: the layer is an element-wise ``x * scale + shift`` per channel (a batch norm, an
    op with a constant) that ``fold_batch_norms`` may fold into the layer computing ``x``.
    ``statistics``: per output channel, the mean and standard deviation of the layer's sum
    (before its post-ops) that the model's own batch-norm statistics imply (a batch norm's output
    is ``beta`` plus ``gamma`` times its normalised input), kept when the batch norm folds;
    ``estimate_ranges`` sizes the layer's gains from them.
    """

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
    scaling_ops: int = 0
    open: bool = True
    foldable: bool = False
    statistics: tuple[np.ndarray, np.ndarray] | None = None
    phases: int = 1
    """Output phases (a row-window packed input, ``systolix.hir_passes.pack_inputs``): input
    pixel ``(y, x)`` makes output pixels ``(y', phases*x + i)``, one a phase, each with its own
    weights: the kernel is KH x 1 and the dense weights' last axis is the phase
    (``weights[:, :, kh, i]``)."""

    kind = "conv"

    def reads(self) -> list[Activation]:
        return [i.act for i in self.inputs] + [p.tensor for p in self.post_ops if p.tensor is not None]

    def writes(self) -> list[Activation]:
        return [self.output] + [p.written for p in self.post_ops if p.written is not None]

    def part_inputs(self) -> set[int]:
        """The inputs summed apart, each part in the tile's second copy with its own gain
        (``postops.AddPart``); the others make the layer's own sum."""
        return {i for p in self.post_ops if p.kind == "add_part" for i in p.inputs}

    def is_post_op_layer(self) -> bool:
        """One input passed through unchanged (1x1, weight one, no bias), then post-ops: the
        form an element-wise op takes before it joins the layer that computes its input."""
        return (len(self.inputs) == 1 and self.inputs[0].is_identity() and self.kernel == (1, 1) and self.stride == (1, 1)
                and self.dilation == (1, 1) and self.pads == (0, 0, 0, 0) and not np.any(self.bias) and not self.scaling_ops)

    def details(self) -> list[str]:
        geometry = f"kernel {self.kernel[0]}x{self.kernel[1]}"
        if self.stride != (1, 1):
            geometry += f", stride {self.stride[0]}x{self.stride[1]}"
        if self.dilation != (1, 1):
            geometry += f", dilation {self.dilation[0]}x{self.dilation[1]}"
        if any(self.pads):
            geometry += f", pads {'/'.join(map(str, self.pads))} (top/left/bottom/right)"
        if self.phases > 1:
            geometry += f", {self.phases} output phases (output x = {self.phases}*x + phase)"
        if not self.open:
            geometry += ", closed"
        if self.foldable:
            geometry += ", foldable"
        if self.statistics is not None:
            mean, std = self.statistics
            geometry += f", batch-norm statistics: mean {describe_array(mean)}, std {describe_array(std)}"
        lines = [geometry]
        for inp in self.inputs:
            kind = "dense" if inp.weights is not None else "per-channel"
            lines.append(f"{inp.act.name}: {kind} weights {describe_array(inp.coefficients)}")
        lines.append(f"bias {describe_array(self.bias)}")
        for k, p in enumerate(self.post_ops):
            mark = " (scaling)" if k < self.scaling_ops else ""
            lines.append(f"post {p.text()}{mark}")
        return lines


@dataclass(eq=False)
class MaxPoolLayer(Layer):
    """Max over a window, computed with SIMD Max on the accumulators.

    ``zero_pads``: the padding counts as zeros (a constant Pad before the pool taken in,
    ``systolix.hir_passes.fuse_pools``), not as minus infinity (ONNX MaxPool's own pads)."""

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
    zero_pads: bool = False

    kind = "maxpool"

    def reads(self) -> list[Activation]:
        return [self.input]

    def details(self) -> list[str]:
        return [f"kernel {self.kernel[0]}x{self.kernel[1]}, stride {self.stride[0]}x{self.stride[1]}, "
                f"dilation {self.dilation[0]}x{self.dilation[1]}, pads {'/'.join(map(str, self.pads))}"
                + (" (zeros)" if self.zero_pads else "")]


@dataclass(eq=False)
class RemapLayer(Layer):
    """Pure data movement: output pixel ``(h, w)`` is input pixel ``source[h, w]`` (all channels).

    ``group_offset`` (``[OH, OW]``, optional): output pixel ``(h, w)``'s channel group ``g`` comes
    from the input's group ``g + group_offset[h, w]``, for an input that stacks several tensors
    of the output's channels as channel groups (a transposed convolution's phases)."""

    name: str
    input: Activation
    output: Activation
    source: np.ndarray  # [OH, OW, 2] input (row, column)
    ops: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    macs: int = 0
    group_offset: np.ndarray | None = None

    kind = "remap"

    def reads(self) -> list[Activation]:
        return [self.input]

    def details(self) -> list[str]:
        lines = [f"source rows {describe_array(self.source[..., 0])}, columns {describe_array(self.source[..., 1])}"]
        if self.group_offset is not None:
            lines.append(f"source channel groups offset by {describe_array(self.group_offset)}")
        return lines


@dataclass(eq=False)
class PixelMixLayer(Layer):
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

    def details(self) -> list[str]:
        return [f"{len(self.coefficient)} entries, coefficients {describe_array(self.coefficient)}"]


@dataclass(eq=False)
class ShuffleLayer(Layer):
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

    def details(self) -> list[str]:
        return [f"source elements {describe_array(self.source)}"]


@dataclass(eq=False)
class HirProgram(Structural):
    """The model as layers, with the activations that are its inputs and outputs."""

    name: str
    N: int
    layers: list[Layer]
    inputs: dict[str, Activation]
    outputs: dict[str, Activation]
    input_shapes: dict[str, tuple[int, ...]]
    output_shapes: dict[str, tuple[int, ...]]
    perms: dict[str, list[int]] = field(default_factory=dict)
    """Inputs/outputs whose DRAM layout is not the canonical one for their shape (NHWC tensors)."""
    packs: dict[str, dict] = field(default_factory=dict)
    """Inputs the driver packs before laying them out (``systolix.hir_passes.pack_inputs``):
    the activation is the packed tensor; the ``.tmodel``'s ``pack`` field as a dict."""
    widths: dict[str, int] = field(default_factory=dict)
    """Tensors stored ``p`` pixels of a row a vector (``systolix.hir_passes.pack_width``), by name:
    the activation is the packed ``p*C x H x W/p`` tensor, lanes ``[i*C, (i+1)*C)`` of packed
    pixel ``(y, j)`` holding pixel ``(y, p*j + i)``."""
    gains: dict[str, np.ndarray] = field(default_factory=dict)
    """Calibrated compiles (``systolix.hir_passes.amplify``): per conv layer whose weights were
    amplified, each output channel's exponent."""
    rounded: list[str] = field(default_factory=list)
    """Calibrated compiles (``systolix.hir_passes.rounding``): conv layers whose weights were
    rounded to keep their outputs on the samples close to the float ones."""
    exponents: dict[str, int] = field(default_factory=dict)
    """Compiles with ranges (``systolix.hir_passes.tensor_exponents``): per root tensor stored at
    an exponent ``e`` (stored value ``real * 2^e``), by name; the others are at 0."""
    ranges: dict = field(default_factory=dict, compare=False)
    """Calibrated compiles (``systolix.hir_passes.ranges``): what the samples showed of each conv
    layer (by index into ``layers``), for the passes that follow."""

    def text(self) -> str:
        lines = [f"hir {self.name}: {len(self.layers)} layers, {self.N} lanes"]
        for name, act in self.inputs.items():
            packed = f" ({self.packs[name]['kind']} packed)" if name in self.packs else ""
            lines.append(f"  input {list(self.input_shapes[name])} as {act.text()}" + (" (channels-last)" if name in self.perms else "")
                         + packed)
        for name, act in self.outputs.items():
            lines.append(f"  output {list(self.output_shapes[name])} as {act.text()}" + (" (channels-last)" if name in self.perms else ""))
        for k, layer in enumerate(self.layers):
            text = layer.text()
            if layer.name in self.gains:
                g = self.gains[layer.name]
                text += f"\n    calibrated gain 2^{round(float(g.min()), 2):g}..2^{round(float(g.max()), 2):g}"
            if layer.output.root()[0].name in self.exponents and layer.output.parent is None:
                text += f"\n    output stored at exponent {self.exponents[layer.output.name]} (value x 2^{self.exponents[layer.output.name]})"
            if layer.output.name in self.widths:
                p, out = self.widths[layer.output.name], layer.output
                text += (f"\n    output packed {p} pixels a vector: {out.C // p}x{out.H}x{out.W * p}, pixel (y, {p}*x + i) in"
                         f" lanes i*{out.C // p}.. of vector (y, x)")
            if layer.name in self.rounded:
                text += "\n    weights rounded to the samples (GPTQ)"
            lines.append(f"{k:4d} {text}")
        return "\n".join(lines) + "\n"


@dataclass(eq=False)
class TensorMatMulLayer(Layer):
    """A batched product of two computed tensors, per head ``h < heads`` (attention's scores and
    context; ``systolix.lowering.ops.attention``): ``out_h = a_h @ b_h``, ``[M, K] @ [K, O]``.

    ``a_h[m, k]`` is channel ``a_offset + h a_stride + k`` of pixel ``m`` of ``a`` (streamed
    through the array); ``b_h[k, o]`` is channel ``b_offset + h b_stride + o`` of pixel ``k`` of
    ``b`` (its pixels are the weight rows: ``P x V``) or, ``transposed``, channel
    ``b_offset + h b_stride + k`` of pixel ``o`` (its tiles transposed by the Tandem unit's permute
    engine first: ``Q x K^T``). ``out_h[m, o]`` is channel ``h out_stride + o`` of pixel ``m``
    (``out_stride``: ``O`` rounded up to whole vectors; the padding channels hold zeros).
    ``softmax``: then ``softmax(scale out_h)`` over ``o`` on the Tandem unit, before the save,
    times ``2^out_shift`` (probabilities with more fraction bits); ``a_shift``: ``a`` holds such
    probabilities, the product is divided by ``2^a_shift`` (on the unit, one rounding) before the save.
    """

    name: str
    a: Activation
    b: Activation
    output: Activation
    heads: int
    K: int
    O: int
    a_offset: int
    a_stride: int
    b_offset: int
    b_stride: int
    transposed: bool
    out_stride: int
    softmax: bool = False
    scale: float = 1.0
    out_shift: int = 0
    a_shift: int = 0
    ops: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    macs: int = 0

    kind = "matmul_tensors"

    def reads(self) -> list[Activation]:
        return [self.a, self.b]

    def head_operands(self, a: np.ndarray, b: np.ndarray, h: int) -> tuple[np.ndarray, np.ndarray]:
        """``(a_h [M, K], b_h [K, O])`` from ``a`` and ``b`` as ``[C, P]`` arrays."""
        ca = self.a_offset + h * self.a_stride
        cb = self.b_offset + h * self.b_stride
        a_h = a[ca:ca + self.K].T
        b_h = b[cb:cb + self.K, :self.O] if self.transposed else b[cb:cb + self.O, :self.K].T
        return a_h, b_h

    def details(self) -> list[str]:
        b_kind = "b's tiles transposed (Tandem permute engine)" if self.transposed else "b's pixels as weight rows"
        line = f"{self.heads} heads of [{self.a.P}, {self.K}] x [{self.K}, {self.O}], {b_kind}"
        if self.softmax:
            line += f", then softmax of {self.scale:g} x over each row (Tandem unit)" + (f" x 2^{self.out_shift}" if self.out_shift else "")
        if self.a_shift:
            line += f", then / 2^{self.a_shift} (Tandem unit)"
        return [line]


@dataclass(eq=False)
class TokenTransposeLayer(ShuffleLayer):
    """A ``ShuffleLayer`` that swaps channels and pixels: output channel ``c`` of pixel ``p`` is
    input channel ``p`` of pixel ``c`` (a token tensor ``[1, T, D]`` transposed to ``[1, D, T]``
    and back; ``systolix.lowering.ops.transpose_tokens``). ``source`` says so for the passes that
    treat it as any shuffle; the emitter (``systolix.codegen.transpose_tokens``) transposes the
    ``N x N`` tiles with the Tandem unit's permute engine instead of moving elements through the array.
    """

    kind = "transpose"

    def details(self) -> list[str]:
        x = self.input
        return [f"[{x.P}, {x.C}] -> [{x.C}, {x.P}]: channels and pixels swapped, N x N tiles by the Tandem unit's permute engine"]
